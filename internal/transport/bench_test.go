package transport

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
)

// BenchmarkTransport pushes 1400-byte ESP packets from one namespace to
// another over a veth, for each transport, with batches of 64 and — as the
// reference to compare against — one packet per call. Receive losses
// (socket buffer overflow) are reported, not hidden.
func BenchmarkTransport(b *testing.B) {
	p := newPair(b)
	type variant struct {
		kind  Kind
		fam   family
		gso   bool
		gro   bool
		batch int
	}
	var vs []variant
	for _, kind := range []Kind{RawESP, UDPEncap} {
		for _, fam := range families {
			for _, batch := range []int{1, 64} {
				vs = append(vs, variant{kind, fam, false, false, batch})
				if kind == UDPEncap && batch > 1 {
					vs = append(vs, variant{kind, fam, true, false, batch}, variant{kind, fam, true, true, batch})
				}
			}
		}
	}
	for _, v := range vs {
		b.Run(fmt.Sprintf("%s/%s/batch=%d/gso=%v/gro=%v", v.kind, v.fam.name, v.batch, v.gso, v.gro), func(b *testing.B) {
			a, err := Open(Config{Kind: v.kind, Local: netip.AddrPortFrom(v.fam.local(p), 0), Namespace: p.a.Handle(), GSO: v.gso, BatchSize: v.batch})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			r, err := Open(Config{Kind: v.kind, Local: netip.AddrPortFrom(v.fam.remote(p), 0), Namespace: p.b.Handle(), BatchSize: 128, GRO: v.gro})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			peer := netip.AddrPortFrom(v.fam.remote(p), r.LocalAddr().Port())
			const size = 1400
			pkts := make([]*esp.Packet, v.batch)
			for i := range pkts {
				pkts[i] = out(espPacket(5, uint32(i), size), peer)
			}
			done := make(chan int, 1)
			go func() {
				in := slots(128, 2048)
				got := 0
				for got < b.N {
					r.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
					rewind(in)
					n, err := r.Receive(in)
					if err != nil {
						break // deadline: the rest was lost
					}
					got += n
				}
				done <- got
			}()
			b.SetBytes(size)
			b.ResetTimer()
			start := time.Now()
			for sent := 0; sent < b.N; {
				chunk := pkts[:min(len(pkts), b.N-sent)]
				n, err := a.Send(chunk)
				if err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			got := <-done
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(got)/elapsed.Seconds(), "rx-pkts/s")
			b.ReportMetric(100*float64(b.N-got)/float64(b.N), "loss-%")
		})
	}
}
