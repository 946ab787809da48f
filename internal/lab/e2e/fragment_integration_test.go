package e2e_test

import (
	be "encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestFragmentedFlowsAndPortSelectors sends UDP datagrams larger than the
// path from hostA to hostB, so hostA's kernel fragments them, through a
// tunnel whose policy allows only UDP to port 5000 — the SPD of gw1, or the
// inbound selectors of gw2's SA (RFC 4301 §7). The datagrams to 5000 arrive
// whole; those to 6000, every non-initial fragment of which reads as port
// 5000 if its payload is taken for a header, never do, and are counted.
func TestFragmentedFlowsAndPortSelectors(t *testing.T) {
	needRoot(t)
	const allowed, forbidden = 5000, 6000
	only := sa.Selector{Proto: 17, DstPorts: sa.PortRange{Lo: allowed, Hi: allowed}}
	for _, side := range []string{"spd", "selectors"} {
		t.Run(side, func(t *testing.T) {
			b := startBed(t, testbed.Options{Prefix: "itfrag" + side[:2], Suite: sa.Suite{Cipher: sa.CipherAESGCM16},
				Customize: func(c *sa.Config) error {
					if side == "spd" {
						c.SPD = []sa.Policy{
							{Priority: 1, Selector: only, Action: sa.Protect, SPI: c.SAs[0].SPI},
							{Priority: 2, Action: sa.Discard},
						}
					} else {
						c.SAs[0].Selectors = []sa.Selector{only}
					}
					return nil
				}})
			hostB := b.Topo.Addr.HostB4.Addr()
			var listen [2]*net.UDPConn
			if err := b.Topo.HostB.Do(func() error {
				for i, port := range []int{allowed, forbidden} {
					c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: port})
					if err != nil {
						return err
					}
					listen[i] = c
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			defer listen[0].Close()
			defer listen[1].Close()
			send := func(port int, lure uint16) {
				var c *net.UDPConn
				if err := b.Topo.HostA.Do(func() (err error) {
					c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: hostB.AsSlice(), Port: port})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				payload := make([]byte, 3000)
				for i := 0; i+1 < len(payload); i += 2 {
					be.BigEndian.PutUint16(payload[i:], lure)
				}
				for range 5 {
					if _, err := c.Write(payload); err != nil {
						t.Fatal(err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			send(allowed, forbidden)
			send(forbidden, allowed)
			buf := make([]byte, 4000)
			listen[0].SetReadDeadline(time.Now().Add(5 * time.Second))
			for i := range 5 {
				n, err := listen[0].Read(buf)
				if err != nil || n != 3000 {
					t.Fatalf("datagram %d to the allowed port: %d bytes, %v", i, n, err)
				}
			}
			listen[1].SetReadDeadline(time.Now().Add(time.Second))
			if n, err := listen[1].Read(buf); err == nil {
				t.Fatalf("a %d-byte datagram to the forbidden port arrived", n)
			}
			var refused uint64
			if side == "spd" {
				st := gwStats(t, b, 0)
				refused = st.Drops["policy-discard"]
			} else {
				refused = saOf(t, b, 1, "in").Drops["policy"]
			}
			// At least three fragments of each of the five datagrams.
			if refused < 15 {
				t.Errorf("%d fragments of the forbidden flow counted as refused, want at least 15", refused)
			}
			t.Logf("%d fragments of the forbidden flow refused", refused)
		})
	}
}
