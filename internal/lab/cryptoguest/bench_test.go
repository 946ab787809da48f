package cryptoguest

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/speed"
)

// BenchmarkAFALGSpeed is the measurement in BENCHMARKS.md: in one guest,
// `espgw speed -elapsed -evp aes-128-cbc` on afalg (one socket, and four
// sockets with batches of 16) beside `openssl speed -elapsed -engine afalg`
// and espgw's cpu and aesni engines, first on the kernel's software
// driver, then on the virtio-crypto device; every configuration several
// times, interleaved, so that the machine's load falls on all alike; the
// medians and their ratios to openssl are printed as Markdown. Run it as
//
//	go test -run '^$' -bench AFALGSpeed -benchtime 1x ./internal/lab/cryptoguest/
//
// (ESPGW_SPEED_SECONDS per size, default 1 here; 2 for the recorded run;
// ESPGW_GUEST_CPUS vCPUs, default 1).
func BenchmarkAFALGSpeed(b *testing.B) {
	g := benchGuest(b)
	rounds := 3
	software := []benchConfig{
		{name: "openssl speed -engine afalg", args: "openssl"},
		{name: "afalg, 1 socket", args: "-engine afalg -workers 1"},
		{name: "afalg, 4 sockets, batch 16", args: "-engine afalg -workers 4 -batch 16"},
		{name: "cpu", args: "-engine cpu"},
		{name: "aesni", args: "-engine aesni"},
	}
	runConfigs(b, g, "kernel software driver (cbc(aes-generic))", software, rounds)
	ctx := context.Background()
	if err := g.LoadModules(ctx, "virtio_crypto"); err != nil {
		b.Fatal(err)
	}
	device := []benchConfig{
		{name: "openssl speed -engine afalg", args: "openssl"},
		{name: "afalg:virtio_crypto_aes_cbc, 1 socket", args: "-engine afalg:virtio_crypto_aes_cbc -workers 1"},
		{name: "afalg:virtio_crypto_aes_cbc, 4 sockets, batch 16", args: "-engine afalg:virtio_crypto_aes_cbc -workers 4 -batch 16"},
		{name: "afalg:virtio_crypto_aes_cbc, 8 sockets, batch 32", args: "-engine afalg:virtio_crypto_aes_cbc -workers 8 -batch 32"},
	}
	runConfigs(b, g, "virtio-crypto device (virtio_crypto_aes_cbc)", device, rounds)
}

// benchConfig is one row: a name, espgw speed's arguments (or "openssl"),
// a guest shell command run before each of its runs (e.g. handing the
// device back to the kernel after the virtio engine took it), and the
// -evp algorithm (aes-128-cbc if empty; espgw rows only).
type benchConfig struct{ name, args, setup, alg string }

func benchGuest(b *testing.B) *Guest {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cpus, _ := strconv.Atoi(os.Getenv("ESPGW_GUEST_CPUS"))
	g, err := Boot(ctx, Options{CryptoDevice: true, OpenSSL: true, CPUs: cpus, Prefix: "cgb", BootTimeout: 5 * time.Minute, Logger: logger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return g
}

// runConfigs times every configuration rounds times, interleaved, and
// prints the medians per size and their ratio to the first (openssl), and
// the guest's context switches per request (from /proc/stat, the guest's
// own few processes included): a count the host's load hardly changes,
// unlike the rates.
func runConfigs(b *testing.B, g *Guest, title string, cfgs []benchConfig, rounds int) {
	ctx := context.Background()
	secs := speedSeconds()
	nsecs, err := strconv.ParseFloat(secs, 64)
	if err != nil {
		b.Fatalf("ESPGW_SPEED_SECONDS=%q: %v", secs, err)
	}
	results := make([][][]float64, len(cfgs)) // config → round → size
	switches := make([][]float64, len(cfgs))  // config → round → per request
	for range rounds {
		for i, c := range cfgs {
			if c.setup != "" {
				if out, err := g.RunFor(ctx, 2*time.Minute, c.setup); err != nil {
					b.Fatalf("%s: setup: %v\n%s", c.name, err, out)
				}
			}
			alg := cmp.Or(c.alg, "aes-128-cbc")
			cmd := Espgw + " speed -elapsed -evp " + alg + " -seconds " + secs + " " + c.args
			if c.args == "openssl" {
				cmd = "openssl speed -elapsed -engine afalg -evp " + alg + " -seconds " + secs
			}
			const ctxt = "awk '/^ctxt/{print \"ctxt\", $2}' /proc/stat"
			out, err := g.RunFor(ctx, 10*time.Minute, ctxt+"; "+cmd+" 2>/dev/null; "+ctxt)
			if err != nil {
				b.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			row, err := speed.ParseOpenSSL([]byte(out), strings.ToUpper(alg), len(speed.Sizes))
			if err != nil {
				b.Fatalf("%s: %v\n%s", c.name, err, out)
			}
			results[i] = append(results[i], row.KBps)
			b.Logf("%s: %.0f", c.name, row.KBps)
			var counts []float64
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) == 2 && f[0] == "ctxt" {
					n, _ := strconv.ParseFloat(f[1], 64)
					counts = append(counts, n)
				}
			}
			requests := 0.0
			for j, size := range speed.Sizes {
				requests += row.KBps[j] * 1000 * nsecs / float64(size)
			}
			if len(counts) == 2 && requests > 0 {
				switches[i] = append(switches[i], (counts[1]-counts[0])/requests)
			}
		}
	}
	b.Log(table(fmt.Sprintf("%s — 1000s of bytes per second by the wall clock, median of %d interleaved runs of %s s per size; ratio to the first row; the guest's context switches per request (median):", title, rounds, secs), cfgs, results, medians, switches))
	if rounds > 1 {
		// Load on the machine only ever slows a run down: the fastest run
		// is the device's, and what emul's virtio profile is fitted to.
		b.Log(table(fmt.Sprintf("%s — the fastest of the %d runs:", title, rounds), cfgs, results, fastest, switches))
	}
}

// table prints one figure per configuration and size (pick reduces the
// runs) as Markdown, with ratios to the first configuration, and the
// median of each configuration's context switches per request.
func table(title string, cfgs []benchConfig, results [][][]float64, pick func([][]float64) []float64, switches [][]float64) string {
	var md strings.Builder
	fmt.Fprintf(&md, "\n%s\n\n| engine |", title)
	for _, s := range speed.Sizes {
		fmt.Fprintf(&md, " %d B |", s)
	}
	md.WriteString(" switches/request |\n| --- |" + strings.Repeat(" ---: |", len(speed.Sizes)+1) + "\n")
	base := pick(results[0])
	for i, c := range cfgs {
		fmt.Fprintf(&md, "| %s |", c.name)
		for j, v := range pick(results[i]) {
			if i == 0 || base[j] == 0 {
				fmt.Fprintf(&md, " %.0f |", v)
			} else {
				fmt.Fprintf(&md, " %.0f (%.2f×) |", v, v/base[j])
			}
		}
		if sw := slices.Sorted(slices.Values(switches[i])); len(sw) > 0 {
			fmt.Fprintf(&md, " %.2f |\n", sw[len(sw)/2])
		} else {
			md.WriteString(" – |\n")
		}
	}
	return md.String()
}

// fastest is the largest rate of every size over the runs.
func fastest(runs [][]float64) []float64 {
	if len(runs) == 0 {
		return nil
	}
	out := slices.Clone(runs[0])
	for _, r := range runs[1:] {
		for j, v := range r {
			out[j] = max(out[j], v)
		}
	}
	return out
}

func medians(runs [][]float64) []float64 {
	if len(runs) == 0 {
		return nil
	}
	out := make([]float64, len(runs[0]))
	for j := range out {
		var col []float64
		for _, r := range runs {
			col = append(col, r[j])
		}
		slices.Sort(col)
		out[j] = col[len(col)/2]
	}
	return out
}

// toKernel hands the virtio-crypto device back to the kernel's driver
// (virtio-pci, then virtio_crypto) after the virtio engine took it for
// VFIO, and waits until /proc/crypto lists the device's cbc(aes) again.
const toKernel = `a=$(for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor)" = 0x1af4 ] && [ "$(cat $d/device)" = 0x1054 ] && basename $d; done | head -1)
d=/sys/bus/pci/devices/$a
if [ "$(basename "$(readlink $d/driver 2>/dev/null)")" != virtio-pci ]; then
	echo > $d/driver_override
	[ -e $d/driver ] && echo $a > $d/driver/unbind
	echo $a > /sys/bus/pci/drivers_probe
fi
i=0; until grep -q '^driver *: virtio_crypto_aes_cbc' /proc/crypto; do i=$((i+1)); [ $i -gt 100 ] && exit 1; sleep 0.1; done`

// BenchmarkVirtioSpeed: the virtio engine (espgw's own driver of the
// device's rings, over VFIO) beside the kernel's driver of the same device
// through AF_ALG, espgw's afalg engine and openssl's, in one guest (q35,
// the device behind an emulated IOMMU), interleaved; then the virtio
// engine's throughput against requests in flight (batch × streams), the
// real counterpart of the ring engine's aggregation settings and the table
// emul's virtio-qemu-7.2 profile is fitted to (emul.PublishedTables).
//
//	ESPGW_SPEED_SECONDS=2 go test -run '^$' -bench VirtioSpeed -benchtime 1x ./internal/lab/cryptoguest/
//
// ESPGW_VIRTIO_BENCH picks the parts (comma-separated; default all):
// compare (the kernel's driver beside virtio), curve (requests in flight),
// ciphers (aes-192, aes-256 and 3DES at one point of the curve, for the
// profile's costs by cipher). ESPGW_BENCH_ROUNDS sets the curve's and the
// ciphers' runs per row (default 3; the median is printed, and every run).
func BenchmarkVirtioSpeed(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g, err := Boot(ctx, Options{CryptoDevice: true, IOMMU: true, OpenSSL: true, Prefix: "cgvb", BootTimeout: 5 * time.Minute, Logger: logger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	if err := g.LoadModules(ctx, "virtio_crypto"); err != nil {
		b.Fatal(err)
	}
	parts := os.Getenv("ESPGW_VIRTIO_BENCH")
	part := func(name string) bool { return parts == "" || slices.Contains(strings.Split(parts, ","), name) }
	if part("compare") {
		runConfigs(b, g, "one virtio-crypto device: the kernel's driver through AF_ALG, and espgw's own (virtio)", []benchConfig{
			{name: "openssl speed -engine afalg", args: "openssl", setup: toKernel},
			{name: "afalg:virtio_crypto_aes_cbc, 4 sockets, batch 16", args: "-engine afalg:virtio_crypto_aes_cbc -workers 4 -batch 16", setup: toKernel},
			{name: "virtio, batch 1", args: "-engine virtio"},
			{name: "virtio, batch 16, 4 streams", args: "-engine virtio -batch 16 -multi 4"},
			{name: "virtio, batch 32, 4 streams", args: "-engine virtio -batch 32 -multi 4"},
		}, 3)
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("ESPGW_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	if part("curve") {
		var curve []benchConfig
		for _, bm := range VirtioCurve {
			curve = append(curve, benchConfig{name: fmt.Sprintf("virtio, batch %d, %d streams (%d in flight)", bm[0], bm[1], bm[0]*bm[1]),
				args: fmt.Sprintf("-engine virtio -batch %d -multi %d", bm[0], bm[1])})
		}
		runConfigs(b, g, "the virtio engine against requests in flight", curve, rounds)
	}
	if part("ciphers") {
		var ciphers []benchConfig
		for _, alg := range []string{"aes-128-cbc", "aes-192-cbc", "aes-256-cbc", "des-ede3-cbc"} {
			ciphers = append(ciphers, benchConfig{name: "virtio " + alg + ", batch 16, 4 streams", alg: alg, args: "-engine virtio -batch 16 -multi 4"})
		}
		runConfigs(b, g, "the virtio engine by cipher (ratio to aes-128-cbc)", ciphers, rounds)
	}
}

// VirtioCurve is the curve's rows, {batch, streams}: the batch alone (one
// doorbell per batch, the device working a kick's requests one after
// another), then four streams, whose batches share doorbells and overlap
// the guest's copying with the device's work.
var VirtioCurve = [][2]int{{1, 1}, {2, 1}, {4, 1}, {8, 1}, {16, 1}, {32, 1}, {1, 4}, {4, 4}, {16, 4}, {32, 4}}
