package speed

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Flags is the parsed command line of `espgw speed`.
type Flags struct {
	Config
	VsOpenSSL bool
	JSON      bool
	Help      bool
}

// Usage describes the flags.
const Usage = `usage: espgw speed [-evp ALG]... [ALG...] [-engine NAME] [-multi N] [-seconds S] [-bytes N]
                   [-batch N] [-elapsed] [-aggregation N] [-queue N] [-workers N] [--vs-openssl] [--json]

Times an offload engine like 'openssl speed -evp ALG' and prints the same table.
  -evp ALG        aes-128-cbc aes-192-cbc aes-256-cbc des-ede3-cbc aes-128-ctr aes-128-gcm aes-256-gcm chacha20-poly1305 …,
                  aes-128-cbc-hmac-sha1 aes-256-cbc-hmac-sha256 … (the cipher and the ESP ICV's HMAC),
                  or esp:SUITE, a whole ESP seal per packet (esp:aes-128-cbc+hmac-sha1-96, esp:aes-128-gcm)
  -engine NAME    offload engine (cpu, ring, emul:ubsec-2014, emul:t4, emul:virtio-qemu-7.2, …; default cpu)
  -multi N        N concurrent submitters on the one engine (default 1)
  -seconds S      seconds per size (default 3)
  -bytes N        time only buffers of N bytes (default: 16 64 256 1024 8192 16384)
  -batch N        ops per submitted batch (default 1, like openssl's one call per buffer)
  -elapsed        rate over wall-clock time rather than CPU time (always so for emul: engines)
  -aggregation N  ops per command record for ring engines (1: lowest latency)
  -queue N        ring queue depth (default 60)
  -workers N      ring units (default GOMAXPROCS)
  --vs-openssl    also run 'openssl speed' with the same arguments and print the ratio
  --json          print JSON instead of the table
`

// ParseArgs reads openssl-style single-dash flags (double dashes work too).
func ParseArgs(args []string) (*Flags, error) {
	f := &Flags{Config: Config{Engine: "cpu", Multi: 1, Duration: 3 * time.Second, Batch: 1}}
	var seconds, size int
	bools := map[string]*bool{"-h": &f.Help, "-help": &f.Help, "-elapsed": &f.Elapsed, "-vs-openssl": &f.VsOpenSSL, "-json": &f.JSON}
	ints := map[string]*int{"-multi": &f.Multi, "-seconds": &seconds, "-bytes": &size, "-batch": &f.Batch,
		"-aggregation": &f.Options.Aggregation, "-queue": &f.Options.QueueDepth, "-workers": &f.Options.Workers}
	var algs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := "-" + strings.TrimLeft(a, "-")
		n, isInt := ints[name]
		switch b, isBool := bools[name]; {
		case !strings.HasPrefix(a, "-"):
			algs = append(algs, a)
			continue
		case isBool:
			*b = true
			continue
		case !isInt && name != "-evp" && name != "-engine":
			return nil, fmt.Errorf("unknown flag %q (see espgw speed -help)", a)
		case i+1 >= len(args):
			return nil, fmt.Errorf("%s needs a value", name)
		}
		i++
		switch v := args[i]; {
		case name == "-evp":
			algs = append(algs, v)
		case name == "-engine":
			f.Engine = v
		default:
			var err error
			if *n, err = strconv.Atoi(v); err != nil || *n < 1 {
				return nil, fmt.Errorf("%s %q: want a whole number ≥ 1", name, v)
			}
		}
	}
	if seconds > 0 {
		f.Duration = time.Duration(seconds) * time.Second
	}
	if size > 0 {
		f.Sizes = []int{size}
	}
	if f.Help {
		return f, nil
	}
	if len(algs) == 0 {
		return nil, fmt.Errorf("no algorithm: give -evp ALG (e.g. -evp aes-128-cbc)")
	}
	sizes := f.Sizes
	if len(sizes) == 0 {
		sizes = Sizes
	}
	bounded := f.Config
	bounded.Sizes = sizes
	if err := bounded.checkBounds(); err != nil {
		return nil, err
	}
	for _, a := range algs {
		alg, err := ParseAlg(a)
		if err != nil {
			return nil, err
		}
		f.Algs = append(f.Algs, alg)
	}
	return f, nil
}
