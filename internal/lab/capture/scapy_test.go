package capture

// scapy as an independent ESP peer in both directions, for every suite,
// IPv4 and IPv6, tunnel and transport, raw ESP and UDP encapsulation, and
// inner packets from the smallest to 1500 bytes: espgw seals and scapy
// opens (checking the ICV), scapy seals and espgw opens.

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// interopSizes are total inner packet sizes (0: a bare IP header); each
// combination takes three of them in turn so that every size meets every
// suite somewhere.
var interopSizes = []int{0, 21, 28, 47, 48, 100, 255, 256, 511, 1000, 1400, 1500}

type interopCase struct {
	name   string
	cfg    *sa.SA
	inners [][]byte
	seqs   []uint64 // ESN: the 64-bit numbers the packets carry
	// filled in by the test:
	goSealed [][]byte
}

func interopCases(t *testing.T) []*interopCase {
	var cases []*interopCase
	k := 0
	for _, sc := range scapySuites() {
		for _, v6 := range []bool{false, true} {
			for _, mode := range []sa.Mode{sa.Tunnel, sa.Transport} {
				for _, encap := range []sa.Encap{sa.EncapNone, sa.EncapUDP} {
					c := &interopCase{
						name: fmt.Sprintf("%s/%s/v6=%v/encap=%s", sc, mode, v6, encap),
						cfg:  randomSA(sc, mode, v6, encap),
					}
					// Tunnels over UDP carry the other family inside.
					innerV6 := v6 != (mode == sa.Tunnel && encap == sa.EncapUDP)
					if innerV6 != v6 {
						c.name += "/inner-v6=" + fmt.Sprint(innerV6)
					}
					for j := 0; j < 3; j++ {
						size := interopSizes[(k+j*5)%len(interopSizes)]
						c.inners = append(c.inners, udpPacket(innerV6, size, uint16(k*3+j)))
					}
					k++
					cases = append(cases, c)
				}
			}
		}
	}
	// ESN across 2^32: scapy honours ESN only for AES-GCM.
	for _, v6 := range []bool{false, true} {
		cfg := randomSA(suiteCase{sa.Suite{Cipher: sa.CipherAESGCM16}, 36}, sa.Tunnel, v6, sa.EncapNone)
		cfg.ESN = true
		cfg.InitialSeq = 1<<32 - 3
		c := &interopCase{name: fmt.Sprintf("aes-gcm-16-256/esn-across-2^32/v6=%v", v6), cfg: cfg}
		for j := 0; j < 6; j++ {
			c.inners = append(c.inners, udpPacket(v6, 60+j*200, uint16(j)))
			c.seqs = append(c.seqs, cfg.InitialSeq+1+uint64(j))
		}
		cases = append(cases, c)
	}
	return cases
}

func TestScapyInterop(t *testing.T) {
	ctx := context.Background()
	cases := interopCases(t)
	var jobs []peerJob
	for _, c := range cases {
		tx := newSAs(t, c.cfg)[0]
		z := NewSealer(tx)
		for _, in := range c.inners {
			out, err := z.Seal(ctx, in)
			if err != nil {
				t.Fatalf("%s: seal: %v", c.name, err)
			}
			c.goSealed = append(c.goSealed, append([]byte(nil), out...))
		}
		jobs = append(jobs,
			peerJob{Op: "open", SA: peerSA(c.cfg), Packets: hexes(c.goSealed), Seqs: c.seqs},
			peerJob{Op: "seal", SA: peerSA(c.cfg), Packets: hexes(c.inners), Seqs: c.seqs})
	}
	results := runPeer(t, jobs)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opened, sealed := results[2*i], results[2*i+1]
			// espgw → scapy
			for j, want := range c.inners {
				got := opened.packet(t, fmt.Sprintf("open espgw's packet %d (%d bytes inner)", j, len(want)), j)
				if !bytes.Equal(got, want) {
					t.Fatalf("scapy opened espgw's packet %d:\n got %x\nwant %x", j, got, want)
				}
			}
			// scapy → espgw
			cfg := *c.cfg
			cfg.InitialSeq = 0
			rx := newSAs(t, &cfg)[0]
			o, err := NewOpener([]*esp.SA{rx})
			if err != nil {
				t.Fatal(err)
			}
			for j, want := range c.inners {
				wire := sealed.packet(t, fmt.Sprintf("seal packet %d", j), j)
				res, err := o.Open(context.Background(), wire)
				if err != nil || res.Skip != NotSkipped || res.Reject != esp.OK {
					t.Fatalf("espgw opening scapy's packet %d: %v skip=%q reject=%v\n%x", j, err, res.Skip, res.Reject, wire)
				}
				if !bytes.Equal(res.Inner, want) {
					t.Fatalf("espgw opened scapy's packet %d:\n got %x\nwant %x", j, res.Inner, want)
				}
			}
			if snap := rx.Snapshot(); snap.OpenedPackets != uint64(len(c.inners)) || len(snap.Drops) != 0 {
				t.Fatalf("counters: %+v", snap)
			}
		})
	}
}
