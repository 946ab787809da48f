package sa

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// scaleYAML writes the SA file of a gateway with n tunnels to n peers as a
// user would write it from the README: per tunnel an outbound and an
// inbound SA (aes-cbc with hmac-sha1-96), each peer its own outer address,
// and a protect policy for the tunnel's inner prefix pair. block writes
// each SA as a block mapping, one field a line; otherwise one flow-style
// line per SA.
func scaleYAML(n int, block bool) []byte {
	var b bytes.Buffer
	b.WriteString("# SAs of a gateway with many tunnels\nsa:\n")
	peer := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", 64+i>>16, byte(i>>8), byte(i)) }
	for i := range n {
		for dir := range 2 {
			src, dst := "198.51.100.1", peer(i)
			if dir == 1 {
				src, dst = dst, src
			}
			spi := 0x100000 + 2*i + dir
			key := uint64(i)*0x9e3779b97f4a7c15 + uint64(dir)
			if block {
				fmt.Fprintf(&b, "  - spi: %#x\n    mode: tunnel\n    src: %s\n    dst: %s\n    enc: aes-cbc\n    enc-key: 0x%032x\n    auth: hmac-sha1-96\n    auth-key: 0x%040x\n    replay-window: 64\n",
					spi, src, dst, key, key)
				continue
			}
			fmt.Fprintf(&b, "  - {spi: %#x, mode: tunnel, src: %s, dst: %s, enc: aes-cbc, enc-key: 0x%032x, auth: hmac-sha1-96, auth-key: 0x%040x, replay-window: 64}\n",
				spi, src, dst, key, key)
		}
	}
	b.WriteString("spd:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {priority: 10, src: 172.16.%d.%d/32, dst: 172.%d.%d.%d/32, action: protect, sa: %#x}\n",
			byte(i>>8), byte(i), 20+i>>16, byte(i>>8), byte(i), 0x100000+2*i)
	}
	return b.Bytes()
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp reports the process's CPU time per iteration, which other
// processes on the machine do not inflate as they do the wall time.
func cpuPerOp(b *testing.B, start time.Duration) {
	b.ReportMetric((processCPU()-start).Seconds()/float64(b.N), "cpu-s/op")
}

// BenchmarkReadSAFile reads the SA file of 50,000 tunnels (100,000 SAs and
// 50,000 policies), flow and block style, beside the reference in the same
// run: yaml.v3 decoding the same file into a node tree, which is what any
// reader built on it does first. Read the ratios, not the times.
//
//	go test -run '^$' -bench ReadSAFile -benchtime 3x ./sa/
func BenchmarkReadSAFile(b *testing.B) {
	for _, style := range []string{"flow", "block"} {
		data := scaleYAML(50_000, style == "block")
		b.Run(style+"/yaml.v3-node-decode", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := processCPU()
			for b.Loop() {
				var doc yaml.Node
				if err := yaml.Unmarshal(data, &doc); err != nil {
					b.Fatal(err)
				}
			}
			cpuPerOp(b, cpu)
		})
		b.Run(style+"/ParseYAML", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := processCPU()
			defer cpuPerOp(b, cpu)
			for b.Loop() {
				c, err := ParseYAML("scale.yaml", data)
				if err != nil {
					b.Fatal(err)
				}
				if len(c.SAs) != 100_000 || len(c.SPD) != 50_000 {
					b.Fatalf("%d SAs, %d policies", len(c.SAs), len(c.SPD))
				}
			}
		})
	}
}
