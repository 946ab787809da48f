// Command calsim is the discrete-event simulation that emul's ubsec-2014
// profile was fitted with. It runs the profile's timing model — N closed-loop
// streams, each a host phase (jittered latency, then CPU on the first free of
// HostCores cores, plus Switch when it had to wait) and then the card (the
// ring's feeding rule: a record is fed once its first op has arrived and the
// chip has one of Pipeline places free, and takes every op arrived by then up
// to Aggregation; records run one after another, each an exponential draw
// around RecordSetup + Σ(PerOp + PerByte·n + FillPerByte·min(n, FillBytes)))
// — without the ciphers or the clock, so a whole table takes a second, and
// prints each cell's deviation from the published NetBSD table.
//
//	go run ./offload/emul/internal/calsim                   # the profile as it is
//	go run ./offload/emul/internal/calsim -fit host,perop  # refit some parameters
//
// With -fit, it searches the named parameters (host, hostpb, hostcpu,
// switch, setup, perop, perbyte, fill) for the smallest largest relative
// error over the 20 cells of the four AES-128 rows, from the profile's
// values, and prints the best set found. It re-implements the model: the
// engine itself is checked by emul's TestCalibration, through package speed.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/espgw/espgw/offload/emul"
)

// params are the model's parameters in nanoseconds and ns per byte.
type params struct {
	host, hostPB, hostCPU, sw       float64
	setup, perOp, perByte, fill     float64
	fillBytes, cores, pipeline, agg int
}

func fromProfile(p emul.Profile, class string) params {
	ns := func(d time.Duration) float64 { return float64(d.Nanoseconds()) }
	return params{
		host: ns(p.Host), hostPB: p.HostPerByte, hostCPU: p.HostCPU, sw: ns(p.Switch),
		setup: ns(p.RecordSetup), perOp: ns(p.PerOp), perByte: p.PerByte[class], fill: p.FillPerByte,
		fillBytes: p.FillBytes, cores: p.HostCores, pipeline: max(1, p.Pipeline), agg: p.Aggregation,
	}
}

// field names a fittable parameter.
func (p *params) field(name string) (*float64, error) {
	switch name {
	case "host":
		return &p.host, nil
	case "hostpb":
		return &p.hostPB, nil
	case "hostcpu":
		return &p.hostCPU, nil
	case "switch":
		return &p.sw, nil
	case "setup":
		return &p.setup, nil
	case "perop":
		return &p.perOp, nil
	case "perbyte":
		return &p.perByte, nil
	case "fill":
		return &p.fill, nil
	}
	return nil, fmt.Errorf("no parameter %q (host, hostpb, hostcpu, switch, setup, perop, perbyte, fill)", name)
}

// run simulates n streams of size-byte ops until ops have completed after
// a warm-up of a fifth as many, and returns the rate in 1000s of bytes per
// second of modelled time.
func run(p params, n, size, ops int, rng *rand.Rand) float64 {
	cores := make([]float64, p.cores)
	host := func(t float64) float64 { // arrival at the card of a request submitted at t
		d := (p.host + p.hostPB*float64(size)) * (0.75 + 0.5*rng.Float64())
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
	next := make([]float64, n) // each stream's next arrival at the card
	for i := range next {
		next[i] = host(0)
	}
	slots := make([]float64, p.pipeline) // when the chip's last records finish
	opCost := p.perOp + p.perByte*float64(size) + p.fill*float64(min(size, p.fillBytes))
	var last, t0, t1 float64
	warm, done := ops/5, 0
	taken := make([]bool, n)
	rec := make([]int, 0, p.agg)
	for nrec := 0; done < warm+ops; nrec++ {
		feed := math.Inf(1)
		for _, a := range next {
			feed = min(feed, a)
		}
		feed = max(feed, slots[nrec%len(slots)])
		rec = rec[:0]
		for len(rec) < p.agg { // arrived by the feed, in arrival order
			best := -1
			for i, a := range next {
				if !taken[i] && a <= feed && (best < 0 || a < next[best]) {
					best = i
				}
			}
			if best < 0 {
				break
			}
			taken[best] = true
			rec = append(rec, best)
		}
		end := max(feed, last) + (p.setup+float64(len(rec))*opCost)*rng.ExpFloat64()
		slots[nrec%len(slots)], last = end, end
		for _, i := range rec {
			taken[i] = false
			next[i] = host(end)
			done++
			switch done {
			case warm:
				t0 = end
			case warm + ops:
				t1 = end
			}
		}
	}
	return float64(ops) * float64(size) / (t1 - t0) * 1e9 / 1000
}

// ubsecRows are the published rows of the ubsec-2014 profile.
func ubsecRows() []emul.Published {
	var out []emul.Published
	for _, r := range emul.PublishedTables() {
		if r.Profile == "ubsec-2014" {
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

// worst is the largest relative error over the AES-128 rows, with the same
// random draws for every parameter set.
func worst(p params, ops int) float64 {
	w := 0.0
	for _, row := range ubsecRows() {
		if row.Alg != "aes-128-cbc" {
			continue
		}
		for i, size := range emul.PublishedSizes() {
			r := run(p, row.Multi, size, ops, rand.New(rand.NewPCG(uint64(row.Multi), uint64(size))))
			w = max(w, math.Abs(r/row.KBps[i]-1))
		}
	}
	return w
}

func fit(p params, names []string, ops, iters int) (params, error) {
	for _, n := range names {
		if _, err := p.field(n); err != nil {
			return p, err
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	best, step := worst(p, ops), 0.2
	for it := range iters {
		q := p
		for _, n := range names {
			if rng.Float64() < 0.6 {
				f, _ := q.field(n)
				*f *= math.Exp(step * rng.NormFloat64())
			}
		}
		q.hostCPU = min(q.hostCPU, 1)
		if w := worst(q, ops); w < best {
			best, p = w, q
			fmt.Fprintf(os.Stderr, "iteration %d: largest error %.1f%%\n", it, 100*w)
		}
		if it%100 == 99 {
			step *= 0.7
		}
	}
	return p, nil
}

func main() {
	ops := flag.Int("ops", 100000, "ops per cell")
	fitNames := flag.String("fit", "", "comma-separated parameters to fit on the AES-128 rows")
	iters := flag.Int("iters", 300, "fit iterations")
	flag.Parse()
	prof := emul.Profiles()["ubsec-2014"]
	p := fromProfile(prof, "aes-128")
	if *fitNames != "" {
		var err error
		if p, err = fit(p, strings.Split(*fitNames, ","), *ops/4, *iters); err != nil {
			fmt.Fprintln(os.Stderr, "calsim:", err)
			os.Exit(2)
		}
		fmt.Printf("fitted: Host %.0f ns + %.3f ns/B, HostCPU %.3f, Switch %.0f ns, RecordSetup %.0f ns, PerOp %.0f ns, PerByte %.3f ns/B, FillPerByte %.3f ns/B\n",
			p.host, p.hostPB, p.hostCPU, p.sw, p.setup, p.perOp, p.perByte, p.fill)
	}
	largest := 0.0
	fmt.Printf("%-22s", "ubsec-2014")
	for _, s := range emul.PublishedSizes() {
		fmt.Printf(" %15d", s)
	}
	fmt.Println()
	for _, row := range ubsecRows() {
		q := p
		if c := cipherClass(row.Alg); c != "aes-128" {
			q.perByte = prof.PerByte[c]
		}
		fmt.Printf("%-22s", fmt.Sprintf("%s -multi %d", row.Alg, row.Multi))
		for i, size := range emul.PublishedSizes() {
			r := run(q, row.Multi, size, *ops, rand.New(rand.NewPCG(uint64(row.Multi), uint64(size))))
			dev := r/row.KBps[i] - 1
			largest = max(largest, math.Abs(dev))
			fmt.Printf(" %8.0fk %+5.1f%%", r, 100*dev)
		}
		fmt.Println()
	}
	fmt.Printf("largest deviation %.1f%%\n", 100*largest)
}
