package cryptoguest

import (
	"context"
	"fmt"
	"slices"
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
// (ESPGW_SPEED_SECONDS per size, default 1 here; 2 for the recorded run).
func BenchmarkAFALGSpeed(b *testing.B) {
	g := benchGuest(b)
	rounds := 3
	software := []benchConfig{
		{"openssl speed -engine afalg", "openssl"},
		{"afalg, 1 socket", "-engine afalg -workers 1"},
		{"afalg, 4 sockets, batch 16", "-engine afalg -workers 4 -batch 16"},
		{"cpu", "-engine cpu"},
		{"aesni", "-engine aesni"},
	}
	runConfigs(b, g, "kernel software driver (cbc(aes-generic))", software, rounds)
	ctx := context.Background()
	if err := g.LoadModules(ctx, "virtio_crypto"); err != nil {
		b.Fatal(err)
	}
	device := []benchConfig{
		{"openssl speed -engine afalg", "openssl"},
		{"afalg:virtio_crypto_aes_cbc, 1 socket", "-engine afalg:virtio_crypto_aes_cbc -workers 1"},
		{"afalg:virtio_crypto_aes_cbc, 4 sockets, batch 16", "-engine afalg:virtio_crypto_aes_cbc -workers 4 -batch 16"},
		{"afalg:virtio_crypto_aes_cbc, 8 sockets, batch 32", "-engine afalg:virtio_crypto_aes_cbc -workers 8 -batch 32"},
	}
	runConfigs(b, g, "virtio-crypto device (virtio_crypto_aes_cbc)", device, rounds)
}

type benchConfig struct{ name, args string }

func benchGuest(b *testing.B) *Guest {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g, err := Boot(ctx, Options{CryptoDevice: true, OpenSSL: true, Prefix: "cgb", BootTimeout: 5 * time.Minute, Logger: logger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return g
}

// runConfigs times every configuration rounds times, interleaved, and
// prints the medians per size and their ratio to the first (openssl).
func runConfigs(b *testing.B, g *Guest, title string, cfgs []benchConfig, rounds int) {
	ctx := context.Background()
	secs := speedSeconds()
	results := make([][][]float64, len(cfgs)) // config → round → size
	for range rounds {
		for i, c := range cfgs {
			var kbps []float64
			if c.args == "openssl" {
				out, err := g.RunFor(ctx, 10*time.Minute, "openssl speed -elapsed -engine afalg -evp aes-128-cbc -seconds "+secs+" 2>/dev/null")
				if err != nil {
					b.Fatalf("openssl: %v\n%s", err, out)
				}
				row, err := speed.ParseOpenSSL([]byte(out), "AES-128-CBC", len(speed.Sizes))
				if err != nil {
					b.Fatalf("openssl: %v\n%s", err, out)
				}
				kbps = row.KBps
			} else {
				out, err := g.RunFor(ctx, 10*time.Minute, Espgw+" speed -elapsed -evp aes-128-cbc -seconds "+secs+" "+c.args+" 2>/dev/null")
				if err != nil {
					b.Fatalf("%s: %v\n%s", c.args, err, out)
				}
				row, err := speed.ParseOpenSSL([]byte(out), "AES-128-CBC", len(speed.Sizes))
				if err != nil {
					b.Fatalf("%s: %v\n%s", c.args, err, out)
				}
				kbps = row.KBps
			}
			results[i] = append(results[i], kbps)
		}
	}
	var md strings.Builder
	fmt.Fprintf(&md, "\n%s — aes-128-cbc, 1000s of bytes per second by the wall clock, median of %d interleaved runs of %s s per size; ratio to openssl's afalg engine:\n\n", title, rounds, secs)
	md.WriteString("| engine |")
	for _, s := range speed.Sizes {
		fmt.Fprintf(&md, " %d B |", s)
	}
	md.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(speed.Sizes)) + "\n")
	base := medians(results[0])
	for i, c := range cfgs {
		m := medians(results[i])
		fmt.Fprintf(&md, "| %s |", c.name)
		for j, v := range m {
			if i == 0 || base[j] == 0 {
				fmt.Fprintf(&md, " %.0f |", v)
			} else {
				fmt.Fprintf(&md, " %.0f (%.2f×) |", v, v/base[j])
			}
		}
		md.WriteString("\n")
	}
	b.Log(md.String())
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
