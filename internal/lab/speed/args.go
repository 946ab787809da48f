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
  -evp ALG        aes-128-cbc aes-192-cbc aes-256-cbc des-ede3-cbc aes-128-ctr aes-128-gcm aes-256-gcm …,
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
	f := &Flags{Config: Config{Engine: "cpu", Multi: 1, Seconds: 3 * time.Second, Batch: 1}}
	intArg := func(i *int, name string, min int) (int, error) {
		*i++
		if *i >= len(args) {
			return 0, fmt.Errorf("%s needs a value", name)
		}
		v, err := strconv.Atoi(args[*i])
		if err != nil || v < min {
			return 0, fmt.Errorf("%s %q: want a whole number ≥ %d", name, args[*i], min)
		}
		return v, nil
	}
	var algs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name := a
		if strings.HasPrefix(a, "-") {
			name = "-" + strings.TrimLeft(a, "-")
		}
		var err error
		switch name {
		case "-h", "-help":
			f.Help = true
		case "-evp":
			i++
			if i >= len(args) {
				return nil, fmt.Errorf("-evp needs an algorithm")
			}
			algs = append(algs, args[i])
		case "-engine":
			i++
			if i >= len(args) {
				return nil, fmt.Errorf("-engine needs a name")
			}
			f.Engine = args[i]
		case "-multi":
			f.Multi, err = intArg(&i, "-multi", 1)
		case "-seconds":
			var s int
			s, err = intArg(&i, "-seconds", 1)
			f.Seconds = time.Duration(s) * time.Second
		case "-bytes":
			var n int
			n, err = intArg(&i, "-bytes", 1)
			f.Sizes = []int{n}
		case "-batch":
			f.Batch, err = intArg(&i, "-batch", 1)
		case "-aggregation":
			f.Options.Aggregation, err = intArg(&i, "-aggregation", 1)
		case "-queue":
			f.Options.QueueDepth, err = intArg(&i, "-queue", 1)
		case "-workers":
			f.Options.Workers, err = intArg(&i, "-workers", 1)
		case "-elapsed":
			f.Elapsed = true
		case "-vs-openssl":
			f.VsOpenSSL = true
		case "-json":
			f.JSON = true
		default:
			if strings.HasPrefix(a, "-") {
				return nil, fmt.Errorf("unknown flag %q (see espgw speed -help)", a)
			}
			algs = append(algs, a)
		}
		if err != nil {
			return nil, err
		}
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
