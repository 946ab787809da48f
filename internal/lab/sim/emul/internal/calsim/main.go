// Command calsim simulates emul's ring profiles to fit their parameters.
//
// It is the discrete-event simulation emul's ring profiles (ubsec-2014,
// virtio-qemu-7.2) were fitted with. It runs a profile's timing model — N
// closed-loop streams, each submitting a batch of B ops: a host phase
// (jittered with Exponential, Host + HostPerOp·B + HostPerByte·bytes, first
// the share that is latency, then the CPU share on the first free of
// HostCores cores, plus Switch when it had to wait), then the card (the
// ring's feeding rule: a record is fed once its first op has arrived and the
// chip has one of Pipeline places free, and takes every op arrived by then,
// in order of arrival, up to Aggregation; records run one after another,
// each RecordSetup + Σ(PerOp + PerByte·n + FillPerByte·min(n, FillBytes)),
// an exponential draw around that with Exponential), then Latency, the
// batches delivered in order — without the ciphers or the clock, so a whole
// table takes a second, and prints each cell's deviation from the profile's
// published rows.
//
//	go run ./internal/lab/sim/emul/internal/calsim                     # ubsec-2014 as it is
//	go run ./internal/lab/sim/emul/internal/calsim -profile virtio-qemu-7.2
//	go run ./internal/lab/sim/emul/internal/calsim -fit host,perop    # refit some parameters
//
// With -fit, it searches the named parameters (host, hostop, hostpb,
// hostcpu, switch, latency, setup, perop, perbyte, fill) for the smallest
// largest relative error (-objective max) or root-mean-square log error
// (rms) over the cells of the profile's rows of its first cipher, from the
// profile's values, and prints the best set found. It re-implements the
// model: the engine itself is checked by emul's TestCalibration, through
// package speed.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/sim/emul"
)

// params are the model's parameters in nanoseconds and ns per byte.
type params struct {
	host, hostOp, hostPB, hostCPU, sw, latency float64
	setup, perOp, perByte, fill                float64
	fillBytes, cores, pipeline, agg            int
	exponential                                bool
}

func fromProfile(p emul.Profile, class string) params {
	ns := func(d time.Duration) float64 { return float64(d.Nanoseconds()) }
	return params{
		host: ns(p.Host), hostOp: ns(p.HostPerOp), hostPB: p.HostPerByte, hostCPU: p.HostCPU, sw: ns(p.Switch), latency: ns(p.Latency),
		setup: ns(p.RecordSetup), perOp: ns(p.PerOp), perByte: p.PerByte[class], fill: p.FillPerByte,
		fillBytes: p.FillBytes, cores: p.HostCores, pipeline: max(1, p.Pipeline), agg: p.Aggregation,
		exponential: p.Exponential,
	}
}

// names of the fittable parameters, in the order -fit prints them.
var names = []string{"host", "hostop", "hostpb", "hostcpu", "switch", "latency", "setup", "perop", "perbyte", "fill"}

// field names a fittable parameter.
func (p *params) field(name string) (*float64, error) {
	switch name {
	case "host":
		return &p.host, nil
	case "hostop":
		return &p.hostOp, nil
	case "hostpb":
		return &p.hostPB, nil
	case "hostcpu":
		return &p.hostCPU, nil
	case "switch":
		return &p.sw, nil
	case "latency":
		return &p.latency, nil
	case "setup":
		return &p.setup, nil
	case "perop":
		return &p.perOp, nil
	case "perbyte":
		return &p.perByte, nil
	case "fill":
		return &p.fill, nil
	}
	return nil, fmt.Errorf("no parameter %q (%s)", name, strings.Join(names, ", "))
}

// stream is one closed-loop submitter's batch on its way.
type stream struct {
	arrival float64 // when its batch reaches the card
	taken   int     // ops of it in records so far
}

// run simulates n streams of batches of b size-byte ops until ops ops have
// been delivered after a warm-up of a fifth as many, and returns the rate
// in 1000s of bytes per second of modelled time.
func run(p params, n, b, size, ops int, rng *rand.Rand) float64 {
	cores := make([]float64, p.cores)
	host := func(t float64) float64 { // arrival at the card of a batch submitted at t
		d := p.host + p.hostOp*float64(b) + p.hostPB*float64(b*size)
		if p.exponential {
			d *= 0.75 + 0.5*rng.Float64()
		}
		if p.cores == 0 {
			return t + d
		}
		work := d * p.hostCPU
		t += d - work
		i := 0
		for j := range cores {
			if cores[j] < cores[i] {
				i = j
			}
		}
		if cores[i] > t {
			work += p.sw
			t = cores[i]
		}
		cores[i] = t + work
		return t + work
	}
	ss := make([]stream, n)
	for i := range ss {
		ss[i].arrival = host(0)
	}
	slots := make([]float64, p.pipeline) // when the chip's last records finish
	opCost := p.perOp + p.perByte*float64(size) + p.fill*float64(min(size, p.fillBytes))
	var last, delivered, t0, t1 float64
	warm, count := ops/5, 0
	order := make([]int, n)
	for nrec := 0; count < warm+ops; nrec++ {
		// Streams with ops not yet in a record, in order of arrival.
		order = order[:0]
		for i := range ss {
			if ss[i].taken < b {
				order = append(order, i)
			}
		}
		sort.Slice(order, func(x, y int) bool { return ss[order[x]].arrival < ss[order[y]].arrival })
		feed := max(ss[order[0]].arrival, slots[nrec%len(slots)])
		k := 0
		var full []int // streams whose last op is in this record
		for _, i := range order {
			if ss[i].arrival > feed || k == p.agg {
				break
			}
			take := min(b-ss[i].taken, p.agg-k)
			ss[i].taken += take
			k += take
			if ss[i].taken == b {
				full = append(full, i)
			}
		}
		d := p.setup + float64(k)*opCost
		if p.exponential {
			d *= rng.ExpFloat64()
		}
		end := max(feed, last) + d
		slots[nrec%len(slots)], last = end, end
		// One unit works records in order of arrival, so batches finish
		// in the order they arrived and are delivered so.
		for _, i := range full {
			at := max(end+p.latency, delivered)
			delivered = at
			ss[i] = stream{arrival: host(at)}
			for range b {
				count++
				switch count {
				case warm:
					t0 = at
				case warm + ops:
					t1 = at
				}
			}
		}
	}
	return float64(ops) * float64(size) / (t1 - t0) * 1e9 / 1000
}

// rows are the published rows of a profile.
func rows(profile string) []emul.Published {
	var out []emul.Published
	for _, r := range emul.PublishedTables() {
		if r.Profile == profile {
			out = append(out, r)
		}
	}
	return out
}

// cipherClass is the profile's PerByte key for an openssl -evp name.
func cipherClass(alg string) string {
	if alg == "des-ede3-cbc" {
		return "3des"
	}
	return strings.TrimSuffix(alg, "-cbc")
}

// cell simulates one cell of a row, with the same random draws for every
// parameter set.
func cell(p params, row emul.Published, i, ops int) float64 {
	size, seed := row.Sizes[i], uint64(row.Multi)
	if row.Batch > 1 {
		seed |= uint64(row.Batch) << 16
	}
	return run(p, max(1, row.Multi), max(1, row.Batch), size, ops, rand.New(rand.NewPCG(seed, uint64(size))))
}

// score is the largest relative error (objective "max") or the
// root-mean-square log error ("rms") over the rows of alg.
func score(p params, rs []emul.Published, alg, objective string, ops int) float64 {
	w, sum, n := 0.0, 0.0, 0
	for _, row := range rs {
		if row.Alg != alg {
			continue
		}
		for i := range row.Sizes {
			if slices.Contains(row.Unfitted, row.Sizes[i]) {
				continue
			}
			r := cell(p, row, i, ops)
			w = max(w, math.Abs(r/row.KBps[i]-1))
			l := math.Log(r / row.KBps[i])
			sum += l * l
			n++
		}
	}
	if objective == "rms" {
		return math.Sqrt(sum / float64(n))
	}
	return w
}

func fit(p params, rs []emul.Published, fitNames []string, objective string, ops, iters int) (params, error) {
	for _, n := range fitNames {
		if _, err := p.field(n); err != nil {
			return p, err
		}
	}
	alg := rs[0].Alg
	rng := rand.New(rand.NewPCG(7, 7))
	best, step := score(p, rs, alg, objective, ops), 0.2
	for it := range iters {
		q := p
		for _, n := range fitNames {
			if rng.Float64() < 0.6 {
				f, _ := q.field(n)
				if *f == 0 {
					*f = 1 // a parameter at 0 can grow
				}
				*f *= math.Exp(step * rng.NormFloat64())
			}
		}
		q.hostCPU = min(q.hostCPU, 1)
		if w := score(q, rs, alg, objective, ops); w < best {
			best, p = w, q
			fmt.Fprintf(os.Stderr, "iteration %d: %s error %.1f%%\n", it, objective, 100*w)
		}
		if it%100 == 99 {
			step *= 0.7
		}
	}
	return p, nil
}

func main() {
	ops := flag.Int("ops", 100000, "ops per cell")
	profile := flag.String("profile", "ubsec-2014", "the ring profile to simulate")
	fitNames := flag.String("fit", "", "comma-separated parameters to fit on the rows of the profile's first cipher")
	objective := flag.String("objective", "max", "what -fit minimises: max (largest relative error) or rms (root-mean-square log error)")
	iters := flag.Int("iters", 300, "fit iterations")
	flag.Parse()
	prof, ok := emul.Profiles()[*profile]
	rs := rows(*profile)
	if !ok || prof.Inline || len(rs) == 0 {
		fmt.Fprintf(os.Stderr, "calsim: %q is not a ring profile with published rows\n", *profile)
		os.Exit(2)
	}
	if *objective != "max" && *objective != "rms" {
		fmt.Fprintf(os.Stderr, "calsim: -objective %q: want max or rms\n", *objective)
		os.Exit(2)
	}
	p := fromProfile(prof, cipherClass(rs[0].Alg))
	if *fitNames != "" {
		var err error
		if p, err = fit(p, rs, strings.Split(*fitNames, ","), *objective, *ops/4, *iters); err != nil {
			fmt.Fprintln(os.Stderr, "calsim:", err)
			os.Exit(2)
		}
		fmt.Print("fitted:")
		for _, n := range names {
			f, _ := p.field(n)
			fmt.Printf(" %s %.3f", n, *f)
		}
		fmt.Println()
	}
	largest := 0.0
	fmt.Printf("%-30s", *profile)
	for _, s := range rs[0].Sizes {
		fmt.Printf(" %15d", s)
	}
	fmt.Println()
	for _, row := range rs {
		q := p
		if c := cipherClass(row.Alg); c != cipherClass(rs[0].Alg) {
			q.perByte = prof.PerByte[c]
		}
		label := fmt.Sprintf("%s -multi %d", row.Alg, max(1, row.Multi))
		if row.Batch > 1 {
			label += fmt.Sprintf(" -batch %d", row.Batch)
		}
		fmt.Printf("%-30s", label)
		for i := range row.Sizes {
			r := cell(q, row, i, *ops)
			dev := r/row.KBps[i] - 1
			mark := " "
			if slices.Contains(row.Unfitted, row.Sizes[i]) {
				mark = "*" // not fitted, not counted
			} else {
				largest = max(largest, math.Abs(dev))
			}
			fmt.Printf(" %8.0fk %+5.1f%%%s", r, 100*dev, mark)
		}
		fmt.Println()
	}
	fmt.Printf("largest deviation %.1f%% (cells marked * are outside the model: not fitted, not counted)\n", 100*largest)
}
