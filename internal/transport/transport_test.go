package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/netns"
	"golang.org/x/sys/unix"
)

// pair is two namespaces joined by one veth: a (…::1, .1) and b (…::2, .2).
type pair struct {
	a, b   *netns.Namespace
	a4, b4 netip.Addr
	a6, b6 netip.Addr
}

func newPair(t testing.TB) *pair {
	t.Helper()
	if err := netns.CheckPrerequisites(); err != nil {
		t.Fatalf("transport tests need namespaces: %v", err)
	}
	bed, err := netns.New("ni-t-", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := bed.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	p := &pair{
		a4: netip.MustParseAddr("198.51.100.1"), b4: netip.MustParseAddr("198.51.100.2"),
		a6: netip.MustParseAddr("2001:db8:1::1"), b6: netip.MustParseAddr("2001:db8:1::2"),
	}
	if p.a, err = bed.AddNamespace("a"); err != nil {
		t.Fatal(err)
	}
	if p.b, err = bed.AddNamespace("b"); err != nil {
		t.Fatal(err)
	}
	if err := bed.Connect(p.a, "veth0", p.b, "veth0", netns.LinkOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		ns *netns.Namespace
		p  string
	}{{p.a, "198.51.100.1/24"}, {p.a, "2001:db8:1::1/64"}, {p.b, "198.51.100.2/24"}, {p.b, "2001:db8:1::2/64"}} {
		if err := x.ns.AddAddr("veth0", netip.MustParsePrefix(x.p)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// open opens a transport of kind in ns bound to addr; gso and gro (UDP
// only) say which offloads to ask for.
func open(t testing.TB, ns *netns.Namespace, kind Kind, addr netip.Addr, gso bool, gro ...bool) *Conn {
	t.Helper()
	c, err := Open(Config{Kind: kind, Local: netip.AddrPortFrom(addr, 0), Namespace: ns.Handle(), GSO: gso, GRO: len(gro) > 0 && gro[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// espPacket makes a recognisable fake ESP packet: SPI, sequence number,
// then bytes derived from the sequence number.
func espPacket(spi, seq uint32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[0:], spi)
	binary.BigEndian.PutUint32(b[4:], seq)
	for i := 8; i < size; i++ {
		b[i] = byte(int(seq) + i)
	}
	return b
}

// slots makes n packets with buffers of size bytes to receive into.
func slots(n, size int) []*esp.Packet {
	p := make([]*esp.Packet, n)
	for i := range p {
		p[i] = &esp.Packet{Buf: make([]byte, size)}
	}
	return p
}

// rewind points every slot back at the start of its buffer, as a receiver
// does before each Receive (which moves Off past an IPv4 header).
func rewind(pkts []*esp.Packet) {
	for _, p := range pkts {
		p.Off, p.Len = 0, 0
	}
}

// out makes a packet to send data to peer.
func out(data []byte, peer netip.AddrPort) *esp.Packet {
	return &esp.Packet{Buf: data, Len: len(data), Peer: peer}
}

// receiveN receives until want ESP packets arrived (or 5 s passed) and
// returns copies of their data and peers in arrival order.
func receiveN(t testing.TB, c *Conn, want int) ([][]byte, []netip.AddrPort) {
	data, peers, _ := receiveLocal(t, c, want)
	return data, peers
}

// receiveLocal is receiveN that also returns the destination address each
// packet arrived at.
func receiveLocal(t testing.TB, c *Conn, want int) ([][]byte, []netip.AddrPort, []netip.Addr) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	pkts := slots(c.BatchSize(), 2048)
	var data [][]byte
	var peers []netip.AddrPort
	var locals []netip.Addr
	for len(data) < want {
		rewind(pkts)
		n, err := c.Receive(pkts)
		if err != nil {
			t.Fatalf("receive after %d of %d packets: %v", len(data), want, err)
		}
		for _, p := range pkts[:n] {
			data = append(data, append([]byte(nil), p.Data()...))
			peers = append(peers, p.Peer)
			locals = append(locals, p.Local)
		}
	}
	return data, peers, locals
}

type family struct {
	name           string
	local, remote  func(*pair) netip.Addr
	ipHdr, udpPort int
}

var families = []family{
	{"ipv4", func(p *pair) netip.Addr { return p.a4 }, func(p *pair) netip.Addr { return p.b4 }, 20, 0},
	{"ipv6", func(p *pair) netip.Addr { return p.a6 }, func(p *pair) netip.Addr { return p.b6 }, 40, 0},
}

// offloads lists the GSO (sender) / GRO (receiver) combinations to test:
// none for raw ESP, all four for UDP.
func offloads(kind Kind) [][2]bool {
	if kind != UDPEncap {
		return [][2]bool{{false, false}}
	}
	return [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}}
}

func TestSendReceiveBatch(t *testing.T) {
	p := newPair(t)
	for _, kind := range []Kind{RawESP, UDPEncap} {
		for _, fam := range families {
			for _, off := range offloads(kind) {
				gso, gro := off[0], off[1]
				t.Run(fmt.Sprintf("%s/%s/gso=%v/gro=%v", kind, fam.name, gso, gro), func(t *testing.T) {
					a := open(t, p.a, kind, fam.local(p), gso)
					b := open(t, p.b, kind, fam.remote(p), false, gro)
					if gro && !b.GRO() {
						t.Fatalf("GRO asked for but not on (kernel ≥ 5.12 has it)")
					}
					peer := netip.AddrPortFrom(fam.remote(p), b.LocalAddr().Port())
					if kind == UDPEncap && peer.Port() != DefaultUDPPort {
						t.Fatalf("UDP transport bound port %d, want %d", peer.Port(), DefaultUDPPort)
					}
					// 300 packets: more than one batch; runs of equal sizes
					// (GSO candidates) broken by odd sizes.
					const total = 300
					var sent [][]byte
					pkts := make([]*esp.Packet, total)
					for i := range pkts {
						size := 1200
						if i%50 == 49 {
							size = 100 + i
						}
						sent = append(sent, espPacket(0x1001, uint32(i+1), size))
						pkts[i] = out(sent[i], peer)
					}
					n, err := a.Send(pkts)
					if err != nil || n != total {
						t.Fatalf("send: %d of %d, %v", n, total, err)
					}
					got, peers, locals := receiveLocal(t, b, total)
					for i := range total {
						if string(got[i]) != string(sent[i]) {
							t.Fatalf("packet %d: got %d bytes seq %d, want %d bytes seq %d", i, len(got[i]), binary.BigEndian.Uint32(got[i][4:]), len(sent[i]), i+1)
						}
						wantPeer := netip.AddrPortFrom(fam.local(p), a.LocalAddr().Port())
						if peers[i] != wantPeer {
							t.Fatalf("packet %d from %s, want %s", i, peers[i], wantPeer)
						}
						if locals[i] != fam.remote(p) {
							t.Fatalf("packet %d arrived at %v, want %s", i, locals[i], fam.remote(p))
						}
					}
					as, bs := a.Stats(), b.Stats()
					var bytes uint64
					for _, s := range sent {
						bytes += uint64(len(s))
					}
					if as.PacketsOut != total || as.BytesOut != bytes || bs.PacketsIn != total || bs.BytesIn != bytes {
						t.Errorf("counters: sender %+v, receiver %+v; want %d packets, %d bytes", as, bs, total, bytes)
					}
					if gso && a.GSO() && as.GSOBatches == 0 {
						t.Errorf("GSO on but no super-datagram sent: %+v", as)
					}
					if !gso && as.GSOBatches != 0 {
						t.Errorf("GSO off but %d super-datagrams sent", as.GSOBatches)
					}
					// A GSO super-datagram crosses the veth whole; a GRO
					// socket receives it whole.
					if gso && gro && bs.GROBatches == 0 {
						t.Errorf("GSO sender and GRO receiver but no super-datagram received: %+v", bs)
					}
					if !gro && bs.GROBatches != 0 {
						t.Errorf("GRO off but %d super-datagrams received", bs.GROBatches)
					}
					t.Logf("sender GSO batches %d, receiver GRO batches %d", as.GSOBatches, bs.GROBatches)
				})
			}
		}
	}
}

// TestUDPNonESP checks RFC 3948's demultiplexing: keepalives and
// non-ESP-marked datagrams are ignored and counted; runts are dropped and
// counted; the ESP packet among them comes through alone.
func TestUDPNonESP(t *testing.T) {
	p := newPair(t)
	for _, fam := range families {
		for _, gro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/gro=%v", fam.name, gro), func(t *testing.T) {
				a := open(t, p.a, UDPEncap, fam.local(p), false)
				// The non-ESP-marked datagrams go to the IKE daemon's hook.
				var mu sync.Mutex
				var ike []string
				var froms []netip.Addr
				b, err := Open(Config{Kind: UDPEncap, Local: netip.AddrPortFrom(fam.remote(p), 0), Namespace: p.b.Handle(), GRO: gro,
					NonESP: func(d []byte, from netip.AddrPort, _ netip.Addr) {
						mu.Lock()
						defer mu.Unlock()
						ike, froms = append(ike, string(d)), append(froms, from.Addr())
					}})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				to := netip.AddrPortFrom(fam.remote(p), DefaultUDPPort)
				if err := a.SendKeepalive(to); err != nil {
					t.Fatal(err)
				}
				if err := a.SendNonESP([]byte("IKE_AUTH..."), netip.Addr{}, to); err != nil {
					t.Fatal(err)
				}
				// IKE behind the non-ESP marker, and a 3-byte runt, from another socket.
				err = p.a.Do(func() error {
					u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.local(p), 0)))
					if err != nil {
						return err
					}
					defer u.Close()
					for _, d := range [][]byte{append([]byte{0, 0, 0, 0}, "IKE_SA_INIT..."...), {1, 2, 3}} {
						if _, err := u.WriteToUDPAddrPort(d, to); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				want := espPacket(0x2002, 7, 64)
				if _, err := a.Send([]*esp.Packet{out(want, to)}); err != nil {
					t.Fatal(err)
				}
				got, _ := receiveN(t, b, 1)
				if string(got[0]) != string(want) {
					t.Errorf("received % x, want the ESP packet", got[0])
				}
				s := b.Stats()
				if s.Keepalives != 1 || s.NonESP != 2 || s.Short != 1 || s.PacketsIn != 1 {
					t.Errorf("counters %+v: want 1 keepalive, 2 non-ESP, 1 short, 1 ESP", s)
				}
				mu.Lock()
				defer mu.Unlock()
				slices.Sort(ike)
				if !slices.Equal(ike, []string{"IKE_AUTH...", "IKE_SA_INIT..."}) || len(froms) != 2 || froms[0] != fam.local(p) || froms[1] != fam.local(p) {
					t.Errorf("the non-ESP hook got %q from %v, want the two IKE messages without their marker from %s", ike, froms, fam.local(p))
				}
			})
		}
	}
}

func TestRawShortAndTruncated(t *testing.T) {
	p := newPair(t)
	a := open(t, p.a, RawESP, p.a4, false)
	b := open(t, p.b, RawESP, p.b4, false)
	to := netip.AddrPortFrom(p.b4, 0)
	pkts := []*esp.Packet{
		out([]byte{1, 2, 3, 4}, to),    // shorter than SPI+seq
		out(espPacket(9, 1, 3000), to), // longer than the receiver's buffer (fragmented on the wire, reassembled)
		out(espPacket(9, 2, 500), to),
	}
	if n, err := a.Send(pkts); n != 2 || err == nil || !errors.Is(err, unix.EMSGSIZE) {
		// PMTUDISC_DO: the 3000-byte packet is refused, not fragmented.
		t.Fatalf("send: %d, %v; want 2 sent and EMSGSIZE for the 3000-byte packet", n, err)
	}
	if s := a.Stats(); s.SendErrors != 1 {
		t.Errorf("sender SendErrors = %d, want 1", s.SendErrors)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	slot := slots(4, 100) // too small for 500 bytes + IP header
	if _, err := a.Send([]*esp.Packet{out(espPacket(9, 3, 80), to)}); err != nil {
		t.Fatal(err)
	}
	n, err := b.Receive(slot)
	if err != nil || n != 1 || binary.BigEndian.Uint32(slot[0].Data()[4:]) != 3 || slot[0].HdrLen != 20 {
		t.Fatalf("receive: %d, %v", n, err)
	}
	if s := b.Stats(); s.Short != 1 || s.Truncated != 1 {
		t.Errorf("receiver counters %+v: want 1 short, 1 truncated", s)
	}
}

func TestSendBadInput(t *testing.T) {
	p := newPair(t)
	a := open(t, p.a, UDPEncap, p.a4, false)
	b := open(t, p.b, UDPEncap, p.b4, false)
	good := netip.AddrPortFrom(p.b4, DefaultUDPPort)
	bad := []struct {
		pkt  *esp.Packet
		want error
	}{
		{out(espPacket(1, 1, 40), netip.AddrPortFrom(p.b6, 4500)), ErrAddressFamily},
		{out(espPacket(1, 2, 40), netip.AddrPortFrom(p.b4, 0)), ErrNoPort},
		{out(nil, good), ErrEmptyPacket},
		{out(espPacket(1, 3, 40), netip.AddrPort{}), ErrNoPeer},
	}
	for _, c := range bad {
		if n, err := a.Send([]*esp.Packet{c.pkt}); n != 0 || !errors.Is(err, c.want) {
			t.Errorf("send %v: %d, %v; want 0 sent and %v", c.pkt.Peer, n, err, c.want)
		}
	}
	pkts := []*esp.Packet{bad[0].pkt, bad[1].pkt, bad[2].pkt, bad[3].pkt, out(espPacket(1, 4, 40), good)}
	n, err := a.Send(pkts)
	if n != 1 || !errors.Is(err, ErrAddressFamily) || !strings.Contains(err.Error(), "2001:db8:1::2") {
		t.Errorf("send: %d, %v; want 1 sent and the family error first", n, err)
	}
	if s := a.Stats(); s.SendErrors != 8 || s.PacketsOut != 1 {
		t.Errorf("counters %+v: want 8 errors, 1 out", s)
	}
	got, _ := receiveN(t, b, 1)
	if binary.BigEndian.Uint32(got[0][4:]) != 4 {
		t.Errorf("received seq %d, want 4", binary.BigEndian.Uint32(got[0][4:]))
	}
	if _, err := b.Receive(nil); err == nil {
		t.Error("Receive with no slots accepted")
	}
	if _, err := b.Receive([]*esp.Packet{{}}); err == nil {
		t.Error("Receive with an empty buffer accepted")
	}
	if _, err := b.Receive([]*esp.Packet{{Buf: make([]byte, 64), Off: 64}}); err == nil {
		t.Error("Receive with no room after the offset accepted")
	}
	for _, cfg := range []Config{
		{Kind: UDPEncap},
		{Kind: Kind(7), Local: good},
		{Kind: RawESP, Local: good, GSO: true},
		{Kind: UDPEncap, Local: good, BatchSize: -1},
		{Kind: UDPEncap, Local: good, SocketBuffer: 10},
	} {
		if c, err := Open(cfg); err == nil {
			c.Close()
			t.Errorf("Open(%+v) accepted", cfg)
		}
	}
	if err := a.SendKeepalive(netip.AddrPortFrom(p.b6, 4500)); err == nil {
		t.Error("keepalive to the other family accepted")
	}
}

func TestCloseUnblocksReceive(t *testing.T) {
	p := newPair(t)
	b := open(t, p.b, RawESP, p.b6, false)
	done := make(chan error, 1)
	go func() {
		_, err := b.Receive(slots(4, 2048))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Receive after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Receive still blocked 5 s after Close")
	}
}

func TestSocketBuffers(t *testing.T) {
	p := newPair(t)
	c, err := Open(Config{Kind: UDPEncap, Local: netip.AddrPortFrom(p.a4, 0), Namespace: p.a.Handle(), SocketBuffer: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// As root SO_*BUFFORCE passes rmem_max; the kernel reports double.
	if r, s := c.SocketBuffers(); r < 8<<20 || s < 8<<20 {
		t.Errorf("socket buffers %d/%d, want ≥ 8 MiB each", r, s)
	}
	if ip, udp := c.HeaderLen(); ip != 20 || udp != 8 {
		t.Errorf("HeaderLen = %d, %d", ip, udp)
	}
}

// TestBatchPathsDoNotAllocate: a full send+receive round of a batch costs
// no allocation, for every transport.
func TestBatchPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector; run without -race")
	}
	p := newPair(t)
	for _, kind := range []Kind{RawESP, UDPEncap} {
		for _, fam := range families {
			for _, o := range markedOffloads(kind) {
				gso, gro, marked := o.gso, o.gro, o.marked
				t.Run(fmt.Sprintf("%s/%s/gso=%v/gro=%v/marked=%v", kind, fam.name, gso, gro, marked), func(t *testing.T) {
					a := open(t, p.a, kind, fam.local(p), gso)
					b := open(t, p.b, kind, fam.remote(p), false, gro)
					peer := netip.AddrPortFrom(fam.remote(p), b.LocalAddr().Port())
					const batch = 32
					pkts := make([]*esp.Packet, batch)
					for i := range pkts {
						pkts[i] = out(espPacket(3, uint32(i), 1000), peer)
						if marked {
							// The outer-header paths (header.go): TOS and TTL
							// control messages or own headers, and IPv4
							// packets without DF, some cut in fragments.
							pkts[i].TOS, pkts[i].TTL = 0xb9, 33
							if fam.name == "ipv4" && i%4 == 0 {
								pkts[i].Fragment = true
								pkts[i].FragMTU = 600 + 1000*(i%8/4)
							}
						}
					}
					in := slots(batch, 2048)
					b.SetReadDeadline(time.Now().Add(30 * time.Second))
					round := func() {
						if n, err := a.Send(pkts); err != nil || n != batch {
							t.Fatalf("send: %d, %v", n, err)
						}
						for got := 0; got < batch; {
							rewind(in)
							n, err := b.Receive(in)
							if err != nil {
								t.Fatalf("receive: %v", err)
							}
							got += n
						}
					}
					if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
						t.Errorf("%.1f allocations per batch of %d, want 0", allocs, batch)
					}
				})
			}
		}
	}
}

// markedOffloads is offloads with each combination also run with marked
// outer headers.
func markedOffloads(kind Kind) []struct{ gso, gro, marked bool } {
	var out []struct{ gso, gro, marked bool }
	for _, o := range offloads(kind) {
		for _, m := range []bool{false, true} {
			out = append(out, struct{ gso, gro, marked bool }{o[0], o[1], m})
		}
	}
	return out
}

// TestReceiveKeepsBuffers: Receive moves ignored datagrams' slots behind
// the ESP ones; every packet keeps its own buffer, and the ESP packets sit
// where they were read.
func TestReceiveKeepsBuffers(t *testing.T) {
	p := newPair(t)
	for _, gro := range []bool{false, true} {
		a := open(t, p.a, UDPEncap, p.a4, false)
		b := open(t, p.b, UDPEncap, p.b4, false, gro)
		to := netip.AddrPortFrom(p.b4, DefaultUDPPort)
		// keepalive, ESP 1, keepalive, ESP 2: slots 0 and 2 are ignored.
		for i, data := range [][]byte{{0xff}, espPacket(1, 1, 100), {0xff}, espPacket(1, 2, 100)} {
			var err error
			if len(data) == 1 {
				err = a.SendKeepalive(to)
			} else {
				_, err = a.Send([]*esp.Packet{out(data, to)})
			}
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		time.Sleep(50 * time.Millisecond) // all four queued, so one recvmmsg sees them
		pkts := slots(8, 2048)
		bufs := map[*esp.Packet]*byte{}
		for _, pk := range pkts {
			pk.Off = 64 // room the caller keeps in front
			bufs[pk] = &pk.Buf[0]
		}
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := 0
		for got < 2 {
			n, err := b.Receive(pkts[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		seen := map[*esp.Packet]bool{}
		for i, pk := range pkts {
			if &pk.Buf[0] != bufs[pk] || seen[pk] {
				t.Errorf("gro=%v: slot %d lost its buffer or appears twice", gro, i)
			}
			seen[pk] = true
		}
		for i := range 2 {
			if seq := binary.BigEndian.Uint32(pkts[i].Data()[4:]); seq != uint32(i+1) {
				t.Errorf("gro=%v: packet %d has seq %d", gro, i, seq)
			}
			if pkts[i].Off != 64 || pkts[i].HdrLen != 0 {
				t.Errorf("gro=%v: packet %d at offset %d (header %d), want 64 (0)", gro, i, pkts[i].Off, pkts[i].HdrLen)
			}
		}
		a.Close()
		b.Close()
	}
}

// TestFragment: with Config.Fragment a packet over the path MTU leaves in
// fragments and arrives reassembled, for both families.
func TestFragment(t *testing.T) {
	p := newPair(t)
	for _, fam := range families {
		for _, kind := range []Kind{RawESP, UDPEncap} {
			a, err := Open(Config{Kind: kind, Local: netip.AddrPortFrom(fam.local(p), 0), Namespace: p.a.Handle(), Fragment: true})
			if err != nil {
				t.Fatal(err)
			}
			b := open(t, p.b, kind, fam.remote(p), false)
			big := espPacket(7, 1, 3000)
			// IPv4 fragments per packet (header.go); IPv6 through the kernel.
			pkt := out(big, netip.AddrPortFrom(fam.remote(p), b.LocalAddr().Port()))
			pkt.Fragment, pkt.FragMTU = fam.name == "ipv4", 1500
			if _, err := a.Send([]*esp.Packet{pkt}); err != nil {
				t.Fatalf("%s/%s: send 3000 bytes with fragmentation allowed: %v", kind, fam.name, err)
			}
			b.SetReadDeadline(time.Now().Add(5 * time.Second))
			in := slots(1, 4096)
			if n, err := b.Receive(in); err != nil || n != 1 || string(in[0].Data()) != string(big) {
				t.Errorf("%s/%s: reassembled packet: n=%d err=%v len=%d", kind, fam.name, n, err, in[0].Len)
			}
			a.Close()
			b.Close()
		}
	}
}

// TestGROCarryOver: a 64-segment super-datagram received with only 5 slots
// per call comes out whole and in order over several calls.
func TestGROCarryOver(t *testing.T) {
	p := newPair(t)
	a := open(t, p.a, UDPEncap, p.a4, true)
	b := open(t, p.b, UDPEncap, p.b4, false, true)
	peer := netip.AddrPortFrom(p.b4, DefaultUDPPort)
	const total = 64
	pkts := make([]*esp.Packet, total)
	for i := range pkts {
		pkts[i] = out(espPacket(8, uint32(i+1), 1000), peer)
	}
	if n, err := a.Send(pkts); err != nil || n != total {
		t.Fatalf("send: %d, %v", n, err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	in := slots(5, 2048)
	next, calls := uint32(1), 0
	for next <= total {
		n, err := b.Receive(in)
		if err != nil {
			t.Fatalf("receive after seq %d: %v", next-1, err)
		}
		calls++
		for _, pk := range in[:n] {
			if seq := binary.BigEndian.Uint32(pk.Data()[4:]); seq != next || pk.Len != 1000 {
				t.Fatalf("got seq %d (%d bytes), want %d", seq, pk.Len, next)
			}
			next++
		}
	}
	if s := b.Stats(); s.GROBatches == 0 || calls < total/5 {
		t.Errorf("GRO batches %d over %d calls: want the super-datagram split across ≥ %d calls", s.GROBatches, calls, total/5)
	}
}

// TestReceiveLocalOnWildcard: a socket bound to every address (as the
// gateway's are) says which of them each packet was sent to, so the
// receiver's SAD can match SPI and destination.
func TestReceiveLocalOnWildcard(t *testing.T) {
	p := newPair(t)
	for _, kind := range []Kind{RawESP, UDPEncap} {
		for _, fam := range families {
			for _, gro := range []bool{false, true} {
				if gro && kind != UDPEncap {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/gro=%v", kind, fam.name, gro), func(t *testing.T) {
					any := netip.IPv4Unspecified()
					if fam.name == "ipv6" {
						any = netip.IPv6Unspecified()
					}
					a := open(t, p.a, kind, fam.local(p), false)
					b := open(t, p.b, kind, any, false, gro)
					peer := netip.AddrPortFrom(fam.remote(p), b.LocalAddr().Port())
					if _, err := a.Send([]*esp.Packet{out(espPacket(0x1001, 1, 200), peer)}); err != nil {
						t.Fatal(err)
					}
					_, _, locals := receiveLocal(t, b, 1)
					if locals[0] != fam.remote(p) {
						t.Errorf("arrived at %v, want %s", locals[0], fam.remote(p))
					}
				})
			}
		}
	}
}

// A packet with a source address leaves from it, not from the address the
// kernel's route prefers, on a socket bound to all addresses (also in a
// GSO super-datagram, which packets of another source do not join).
func TestSendFromLocalOnWildcard(t *testing.T) {
	p := newPair(t)
	second := map[string]netip.Addr{"ipv4": netip.MustParseAddr("198.51.100.11"), "ipv6": netip.MustParseAddr("2001:db8:1::11")}
	for _, pf := range []string{"198.51.100.11/24", "2001:db8:1::11/64"} {
		if err := p.a.AddAddr("veth0", netip.MustParsePrefix(pf)); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []Kind{RawESP, UDPEncap} {
		for _, fam := range families {
			for _, gso := range []bool{false, true} {
				if gso && kind != UDPEncap {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/gso=%v", kind, fam.name, gso), func(t *testing.T) {
					any := netip.IPv4Unspecified()
					if fam.name == "ipv6" {
						any = netip.IPv6Unspecified()
					}
					a := open(t, p.a, kind, any, gso)
					b := open(t, p.b, kind, fam.remote(p), false)
					peer := netip.AddrPortFrom(fam.remote(p), b.LocalAddr().Port())
					// Sources in turn: the second address, the first, the
					// second again.
					var pkts []*esp.Packet
					want := []netip.Addr{second[fam.name], second[fam.name], fam.local(p), second[fam.name], second[fam.name]}
					for i, src := range want {
						q := out(espPacket(0x1001, uint32(i+1), 200), peer)
						q.Local = src
						pkts = append(pkts, q)
					}
					if _, err := a.Send(pkts); err != nil {
						t.Fatal(err)
					}
					data, peers := receiveN(t, b, len(want))
					for i, d := range data {
						seq := binary.BigEndian.Uint32(d[4:])
						if seq < 1 || int(seq) > len(want) {
							t.Fatalf("packet %d: sequence number %d not sent", i, seq)
						}
						if got := peers[i].Addr(); got != want[seq-1] {
							t.Errorf("packet %d: from %s, want %s", seq, got, want[seq-1])
						}
					}
				})
			}
		}
	}
}

// On a socket bound to all addresses, an IKE message behind the non-ESP
// marker is handed over with the address it was sent to, and the answer
// leaves from that address, not the one the kernel's route prefers: a
// gateway with two addresses of a family answers each peer from the one
// it spoke to.
func TestNonESPOnWildcard(t *testing.T) {
	p := newPair(t)
	second := map[string]netip.Addr{"ipv4": netip.MustParseAddr("198.51.100.12"), "ipv6": netip.MustParseAddr("2001:db8:1::12")}
	for _, pf := range []string{"198.51.100.12/24", "2001:db8:1::12/64"} {
		if err := p.b.AddAddr("veth0", netip.MustParsePrefix(pf)); err != nil {
			t.Fatal(err)
		}
	}
	for _, fam := range families {
		t.Run(fam.name, func(t *testing.T) {
			any := netip.IPv4Unspecified()
			if fam.name == "ipv6" {
				any = netip.IPv6Unspecified()
			}
			type msg struct {
				from netip.AddrPort
				to   netip.Addr
			}
			got := make(chan msg, 4)
			b, err := Open(Config{Kind: UDPEncap, Local: netip.AddrPortFrom(any, 0), Namespace: p.b.Handle(),
				NonESP: func(_ []byte, from netip.AddrPort, to netip.Addr) { got <- msg{from, to} }})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var u *net.UDPConn
			if err := p.a.Do(func() (err error) {
				u, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.local(p), 0)))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			to := netip.AddrPortFrom(second[fam.name], b.LocalAddr().Port())
			if _, err := u.WriteToUDPAddrPort(append([]byte{0, 0, 0, 0}, "IKE_SA_INIT..."...), to); err != nil {
				t.Fatal(err)
			}
			// An ESP packet after it, so that the receive returns.
			a := open(t, p.a, UDPEncap, fam.local(p), false)
			if _, err := a.Send([]*esp.Packet{out(espPacket(0x2002, 1, 64), to)}); err != nil {
				t.Fatal(err)
			}
			receiveN(t, b, 1)
			m := <-got
			if m.to != second[fam.name] {
				t.Fatalf("the IKE message arrived at %v, want %s", m.to, second[fam.name])
			}
			if err := b.SendNonESP([]byte("answer"), m.to, m.from); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			u.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, from, err := u.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatal(err)
			}
			if from.Addr().Unmap() != second[fam.name] || string(buf[4:n]) != "answer" {
				t.Errorf("the answer %q came from %s, want from %s", buf[4:n], from, second[fam.name])
			}
		})
	}
}
