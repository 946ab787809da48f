package xdp

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/transport"
	"golang.org/x/sys/unix"
)

// bed is two namespaces on one veth: a (198.51.100.1, 2001:db8:1::1) sends
// and receives with ordinary raw ESP sockets; b runs the Conn.
type bed struct {
	a, b   *netns.Namespace
	a4, b4 netip.Addr
	a6, b6 netip.Addr
}

func newBed(t testing.TB) *bed {
	t.Helper()
	if err := netns.CheckPrerequisites(); err != nil {
		t.Fatalf("xdp tests need namespaces: %v", err)
	}
	nb, err := netns.New("xdp-t-", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nb.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	p := &bed{
		a4: netip.MustParseAddr("198.51.100.1"), b4: netip.MustParseAddr("198.51.100.2"),
		a6: netip.MustParseAddr("2001:db8:1::1"), b6: netip.MustParseAddr("2001:db8:1::2"),
	}
	if p.a, err = nb.AddNamespace("a"); err != nil {
		t.Fatal(err)
	}
	if p.b, err = nb.AddNamespace("b"); err != nil {
		t.Fatal(err)
	}
	if err := nb.Connect(p.a, "veth0", p.b, "veth0", netns.LinkOptions{}); err != nil {
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

func rawConn(t testing.TB, ns *netns.Namespace, local netip.Addr) *transport.Conn {
	t.Helper()
	c, err := transport.Open(transport.Config{Kind: transport.RawESP, Local: netip.AddrPortFrom(local, 0), Namespace: ns.Handle()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// modes are the attach modes a veth offers, and what Conn.Mode says for
// each: auto takes generic on veth (for the peer's GSO), native attaches
// the veth driver's own XDP with copies (veth offers no zero copy).
var modes = []struct {
	mode Mode
	want string
}{{ModeAuto, "generic"}, {ModeNative, "native"}}

// openXDP opens the raw socket and the Conn in b for local.
func openXDP(t testing.TB, p *bed, local netip.Addr, mode Mode) (*Conn, *transport.Conn) {
	t.Helper()
	unspec := netip.IPv4Unspecified()
	if local.Is6() {
		unspec = netip.IPv6Unspecified()
	}
	raw := rawConn(t, p.b, unspec)
	var c *Conn
	err := p.b.Do(func() error {
		var err error
		c, err = Open(Config{Device: "veth0", Local: local, Fallback: raw, Mode: mode})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, raw
}

func espPacket(spi, seq uint32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[0:], spi)
	binary.BigEndian.PutUint32(b[4:], seq)
	for i := 8; i < size; i++ {
		b[i] = byte(int(seq) + i)
	}
	return b
}

func out(data []byte, peer netip.Addr) *esp.Packet {
	return &esp.Packet{Buf: data, Len: len(data), Peer: netip.AddrPortFrom(peer, 0)}
}

func slots(n int) []*esp.Packet {
	p := make([]*esp.Packet, n)
	for i := range p {
		p[i] = &esp.Packet{Buf: make([]byte, 2048), Off: 64}
	}
	return p
}

// receive receives until want packets arrived on r (a Conn or a raw
// socket) or the deadline passed, and returns copies of their data.
func receive(t testing.TB, r receiver, want int, timeout time.Duration) [][]byte {
	t.Helper()
	var data [][]byte
	for _, g := range receivePackets(t, r, want, timeout) {
		data = append(data, g.data)
	}
	return data
}

type receiver interface {
	Receive([]*esp.Packet) (int, error)
}

// received is a copy of a received packet's data and its source.
type received struct {
	data []byte
	from netip.Addr
}

// receivePackets is receive with each packet's source.
func receivePackets(t testing.TB, r receiver, want int, timeout time.Duration) []received {
	t.Helper()
	type result struct {
		got []received
		err error
	}
	done := make(chan result, 1)
	var count atomic.Int64
	go func() {
		var got []received
		in := slots(64)
		for len(got) < want {
			for _, p := range in {
				p.Off, p.Len = 64, 0
			}
			n, err := r.Receive(in)
			if err != nil {
				done <- result{got, err}
				return
			}
			for _, p := range in[:n] {
				got = append(got, received{append([]byte(nil), p.Data()...), p.Peer.Addr()})
			}
			count.Store(int64(len(got)))
		}
		done <- result{got, nil}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			t.Fatalf("receive after %d of %d: %v", len(res.got), want, res.err)
		}
		return res.got
	case <-time.After(timeout):
		t.Fatalf("received %d of %d packets in %v", count.Load(), want, timeout)
	}
	return nil
}

// TestSteerAndSend: ESP from a reaches the Conn in b, not b's raw socket;
// the Conn's batches reach a's raw socket with the header fields asked for;
// a packet to a peer not yet resolved goes out through the raw socket and
// the next ones through the ring.
func TestSteerAndSend(t *testing.T) {
	p := newBed(t)
	for _, m := range modes {
		for _, fam := range []struct {
			name        string
			local, peer netip.Addr
			unspecA     netip.Addr
		}{
			{"ipv4", p.b4, p.a4, netip.IPv4Unspecified()},
			{"ipv6", p.b6, p.a6, netip.IPv6Unspecified()},
		} {
			t.Run(string(m.mode)+"/"+fam.name, func(t *testing.T) { steerAndSend(t, p, m.mode, m.want, fam.local, fam.peer, fam.unspecA) })
		}
	}
}

func steerAndSend(t *testing.T, p *bed, mode Mode, wantMode string, local, peer, unspecA netip.Addr) {
	c, raw := openXDP(t, p, local, mode)
	if c.Mode() != wantMode {
		t.Errorf("mode %q on veth, want %s", c.Mode(), wantMode)
	}
	a := rawConn(t, p.a, unspecA)
	// a → b: steered to the Conn.
	var sent []*esp.Packet
	for i := range 100 {
		sent = append(sent, out(espPacket(0x1001, uint32(i+1), 60+i*10), local))
	}
	if n, err := a.Send(sent); err != nil || n != len(sent) {
		t.Fatalf("send to b: %d, %v", n, err)
	}
	got := receive(t, c, len(sent), 5*time.Second)
	for i, g := range got {
		if string(g) != string(sent[i].Data()) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if st := raw.Stats(); st.PacketsIn != 0 {
		t.Errorf("b's raw socket received %d steered packets", st.PacketsIn)
	}
	// b → a through the ring (the first packet may take the raw
	// socket while the next hop is looked up).
	var back []*esp.Packet
	for i := range 200 {
		q := out(espPacket(0x2002, uint32(i+1), 64+i), peer)
		q.TOS, q.TTL = 0x2e<<2|1, 33
		back = append(back, q)
	}
	if n, err := c.Send(back[:1]); err != nil || n != 1 {
		t.Fatalf("first send: %d, %v", n, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for c.Stats().Fallback > 0 && time.Now().Before(deadline) {
		if _, ok := (*c.hops.Load())[peer]; ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, err := c.Send(back[1:]); err != nil || n != len(back)-1 {
		t.Fatalf("send batch: %d, %v", n, err)
	}
	t.Logf("after sending: %+v", c.Stats())
	got = receive(t, a, len(back), 5*time.Second)
	for i, g := range got {
		if string(g) != string(back[i].Data()) {
			t.Fatalf("packet %d back differs", i)
		}
	}
	st := c.Stats()
	if st.PacketsOut < uint64(len(back)-1) || st.Fallback > 1 || st.PacketsIn != uint64(len(sent)) {
		t.Errorf("stats %+v: want ≥ %d out through the ring, ≤ 1 through the raw socket, %d in", st, len(back)-1, len(sent))
	}
	if st.Kicks == 0 || st.Kicks > 4 {
		t.Errorf("%d kicks for two batches", st.Kicks)
	}
	t.Logf("stats %+v", st)
}

// TestOthersUntouched: with the program attached, ping, UDP and fragmented
// ESP (which the kernel reassembles for the raw socket) still reach b's
// kernel, and ESP to b gets no ICMP protocol-unreachable back.
func TestOthersUntouched(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m.mode), func(t *testing.T) { othersUntouched(t, m.mode) })
	}
}

func othersUntouched(t *testing.T, mode Mode) {
	p := newBed(t)
	c, raw := openXDP(t, p, p.b4, mode)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := p.a.Output(ctx, "ping", "-c", "2", "-i", "0.2", "-W", "2", p.b4.String()); err != nil {
		t.Fatalf("ping through the XDP interface: %v\n%s", err, out)
	}
	err := p.b.Do(func() error {
		u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: p.b4.AsSlice(), Port: 7777})
		if err != nil {
			return err
		}
		defer u.Close()
		if err := p.a.Do(func() error {
			s, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: p.b4.AsSlice(), Port: 7777})
			if err != nil {
				return err
			}
			defer s.Close()
			_, err = s.Write([]byte("hello"))
			return err
		}); err != nil {
			return err
		}
		u.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		n, err := u.Read(buf)
		if err != nil || string(buf[:n]) != "hello" {
			return errors.Join(errors.New("UDP datagram did not arrive"), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// An 1800-byte ESP packet leaves a in fragments: the program passes
	// them on, the kernel reassembles, b's raw socket gets it.
	fa, err := transport.Open(transport.Config{Kind: transport.RawESP, Local: netip.AddrPortFrom(netip.IPv4Unspecified(), 0), Namespace: p.a.Handle(), Fragment: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	big := out(espPacket(0x3003, 1, 1800), p.b4)
	big.Fragment, big.FragMTU = true, 1000
	if n, err := fa.Send([]*esp.Packet{big}); err != nil || n != 1 {
		t.Fatalf("send fragments: %d, %v", n, err)
	}
	got := receive(t, raw, 1, 5*time.Second)
	if string(got[0]) != string(big.Data()) {
		t.Errorf("reassembled packet differs")
	}
	// No ICMP protocol-unreachable for steered ESP: a's kernel would count
	// one in its ICMP statistics.
	before := icmpIn(t, p.a)
	a := rawConn(t, p.a, netip.IPv4Unspecified())
	if _, err := a.Send([]*esp.Packet{out(espPacket(0x4004, 1, 100), p.b4)}); err != nil {
		t.Fatal(err)
	}
	receive(t, c, 1, 5*time.Second)
	time.Sleep(100 * time.Millisecond)
	if after := icmpIn(t, p.a); after != before {
		t.Errorf("a received %d ICMP messages after sending ESP to b", after-before)
	}
}

// icmpIn is the InDestUnreachs count of ns's kernel.
func icmpIn(t testing.TB, ns *netns.Namespace) int {
	t.Helper()
	out, err := ns.Output(context.Background(), "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Icmp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "InDestUnreachs" {
				var v int
				for _, ch := range f[i] {
					v = v*10 + int(ch-'0')
				}
				return v
			}
		}
	}
	t.Fatal("no InDestUnreachs in /proc/net/snmp")
	return 0
}

// TestBatchPathsDoNotAllocate: a send and receive round of a batch through
// the rings allocates nothing.
func TestBatchPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector; run without -race")
	}
	for _, m := range modes {
		t.Run(string(m.mode), func(t *testing.T) { batchPathsDoNotAllocate(t, m.mode) })
	}
}

func batchPathsDoNotAllocate(t *testing.T, mode Mode) {
	p := newBed(t)
	c, _ := openXDP(t, p, p.b4, mode)
	a := rawConn(t, p.a, netip.IPv4Unspecified())
	// Resolve a first.
	c.Send([]*esp.Packet{out(espPacket(1, 1, 100), p.a4)})
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := (*c.hops.Load())[p.a4]; ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	const batch = 32
	pkts := make([]*esp.Packet, batch)
	toB := make([]*esp.Packet, batch)
	for i := range pkts {
		pkts[i] = out(espPacket(3, uint32(i), 1000), p.a4)
		toB[i] = out(espPacket(4, uint32(i), 1000), p.b4)
	}
	in := slots(batch)
	rin := slots(batch)
	round := func() {
		if n, err := c.Send(pkts); err != nil || n != batch {
			t.Fatalf("send: %d, %v", n, err)
		}
		for got := 0; got < batch; {
			for _, q := range rin {
				q.Off = 64
			}
			n, err := a.Receive(rin)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if n, err := a.Send(toB); err != nil || n != batch {
			t.Fatalf("send to b: %d, %v", n, err)
		}
		for got := 0; got < batch; {
			for _, q := range in {
				q.Off = 64
			}
			n, err := c.Receive(in)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	a.SetReadDeadline(time.Now().Add(30 * time.Second))
	round()
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("%.1f allocations per round of %d each way, want 0", allocs, batch)
	}
	if st := c.Stats(); st.Fallback > 1 {
		t.Errorf("%d packets went through the raw socket", st.Fallback)
	}
}

// TestClosed: after Close, Send and Receive say so instead of touching the
// rings, and a Receive blocked in poll returns.
func TestClosed(t *testing.T) {
	p := newBed(t)
	c, _ := openXDP(t, p, p.b4, ModeAuto)
	done := make(chan error, 1)
	go func() {
		_, err := c.Receive(slots(4))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Receive after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Receive still blocked 5 s after Close")
	}
	if n, err := c.Send([]*esp.Packet{out(espPacket(1, 1, 100), p.a4)}); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close: %d, %v", n, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestTooBigForTheDevice: a packet larger than the device's MTU goes to the
// raw socket, which refuses it with EMSGSIZE (DF) as the kernel does, rather
// than into a frame the device would drop without a word.
func TestTooBigForTheDevice(t *testing.T) {
	p := newBed(t)
	if err := p.b.SetMTU("veth0", 1000); err != nil {
		t.Fatal(err)
	}
	c, raw := openXDP(t, p, p.b4, ModeAuto)
	c.Send([]*esp.Packet{out(espPacket(1, 1, 100), p.a4)}) // resolve a
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, ok := (*c.hops.Load())[p.a4]; ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := c.Stats().Fallback
	n, err := c.Send([]*esp.Packet{out(espPacket(1, 2, 1200), p.a4), out(espPacket(1, 3, 900), p.a4)})
	if n != 1 || err == nil || !errors.Is(err, unix.EMSGSIZE) {
		t.Errorf("send 1200 and 900 bytes over a 1000-byte MTU: %d sent, %v; want 1 and EMSGSIZE", n, err)
	}
	if st := c.Stats(); st.Fallback != before+1 || raw.Stats().SendErrors != 1 {
		t.Errorf("fallback %d → %d, raw socket send errors %d: want the big one refused by the raw socket", before, st.Fallback, raw.Stats().SendErrors)
	}
}

// TestNativeModeOnVethTurnsPeerGSOOff: what ModeAuto avoids on veth, shown:
// attached natively to b's veth, the program turns off UDP GSO
// (tx-udp-segmentation) on a's end, and detaching gives it back; generic
// mode leaves it alone.
func TestNativeModeOnVethTurnsPeerGSOOff(t *testing.T) {
	p := newBed(t)
	before := udpGSO(t, p.a)
	if !before {
		t.Fatal("a's veth has no UDP GSO to begin with")
	}
	for _, m := range modes {
		c, _ := openXDP(t, p, p.b4, m.mode)
		if got, want := udpGSO(t, p.a), m.mode != ModeNative; got != want {
			t.Errorf("%s mode (%s): a's UDP GSO %v, want %v", m.mode, c.Mode(), got, want)
		}
		c.Close()
		if !udpGSO(t, p.a) {
			t.Errorf("after closing the %s Conn, a's UDP GSO stays off", m.mode)
		}
	}
}

// udpGSO reports whether ns's veth0 has tx-udp-segmentation on, as
// ethtool -k says.
func udpGSO(t testing.TB, ns *netns.Namespace) bool {
	t.Helper()
	out, err := ns.Output(context.Background(), "ethtool", "-k", "veth0")
	if err != nil {
		t.Fatalf("ethtool -k veth0: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "tx-udp-segmentation:" {
			return f[1] == "on"
		}
	}
	t.Fatalf("no tx-udp-segmentation in ethtool -k:\n%s", out)
	return false
}
