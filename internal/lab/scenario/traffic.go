package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/inetsum"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/pcaprewrite"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// StepResult is what one traffic step sent and what arrived.
type StepResult struct {
	Name       string    `json:"name"`
	Kind       string    `json:"kind"`
	Sent       int       `json:"sent"`       // packets sent (iperf3 TCP: 0)
	Received   int       `json:"received"`   // of them, arrived at the far end
	Mismatched int       `json:"mismatched"` // arrived but not byte-identical to what was sent
	Bytes      uint64    `json:"bytes,omitempty"`
	BPS        float64   `json:"bits_per_second,omitempty"`
	Retransmit int       `json:"retransmits,omitempty"`
	Latencies  []float64 `json:"-"` // one-way, seconds
	Detail     string    `json:"detail,omitempty"`
	Output     string    `json:"output,omitempty"` // what a tool said when packets went missing
	Error      string    `json:"error,omitempty"`
}

// host is one end of the traffic: its namespace and addresses.
type host struct {
	ns     *netns.Namespace
	v4, v6 netip.Addr
	ifname string // toward its gateway (hosts only)
}

func (r *runner) host(name string) host {
	t := r.bed.Topo
	a := t.Addr
	gw1, gw2 := r.bed.Outer()
	switch name {
	case "hostA":
		return host{ns: t.HostA, v4: a.HostA4.Addr(), v6: a.HostA6.Addr(), ifname: "eth0"}
	case "hostB":
		return host{ns: t.HostB, v4: a.HostB4.Addr(), v6: a.HostB6.Addr(), ifname: "eth0"}
	case "gw1":
		return host{ns: t.GW1, v4: gw1, v6: gw1}
	}
	return host{ns: t.GW2, v4: gw2, v6: gw2}
}

func families(f string) []string {
	if f == "mixed" {
		return []string{"ipv4", "ipv6"}
	}
	return []string{f}
}

func (h host) addr(family string) netip.Addr {
	if family == "ipv6" {
		return h.v6
	}
	return h.v4
}

func (r *runner) runStep(ctx context.Context, st *Step) StepResult {
	res := StepResult{Name: st.Name, Kind: st.kind()}
	var err error
	switch {
	case st.Ping != nil:
		err = r.ping(ctx, st.Ping, &res)
	case st.UDP != nil:
		err = r.udp(ctx, st.UDP, &res)
	case st.Pcap != nil:
		err = r.replay(ctx, st.Pcap, &res)
	case st.Iperf3 != nil:
		err = r.iperf(ctx, st.Iperf3, &res)
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res
}

func (r *runner) ping(ctx context.Context, p *PingStep, res *StepResult) error {
	from, to := r.host(p.From), r.host(p.To)
	var detail []string
	for _, fam := range families(p.Family) {
		for _, size := range p.Sizes {
			sent, received, out, err := ping(ctx, from.ns, to.addr(fam), size, p.Count, p.Interval, *p.DF)
			if err != nil {
				return err
			}
			res.Sent += sent
			res.Received += received
			detail = append(detail, fmt.Sprintf("%s/%d:%d/%d", fam, size, received, sent))
			if received < sent && !*p.DF || received < sent && size < 1400 {
				// Keep what ping said about a loss it should not have seen.
				res.Output += fmt.Sprintf("ping %s size %d:\n%s\n", to.addr(fam), size, out)
			}
		}
	}
	res.Detail = fmt.Sprint(detail)
	return nil
}

var pingReply = regexp.MustCompile(`(?m)^\d+ bytes from .* icmp_seq=(\d+) .*$`)

// ping sends count echo requests of size payload bytes, interval apart,
// and counts the replies to them. With df, IPv4 requests forbid
// fragmentation (IPv6 routers never fragment).
//
// ping's own summary cannot be used: with -W alone, once one reply came it
// waits only two round trips for the rest, and counts late replies on a
// loaded machine as lost; with a deadline (-w) it keeps sending until count
// replies came, and exits with the extra requests in flight. So ping runs
// with a deadline and the replies to sequence numbers 1..count are
// counted from its per-reply lines.
func ping(ctx context.Context, ns *netns.Namespace, dst netip.Addr, size, count int, interval time.Duration, df bool) (sent, received int, output string, err error) {
	deadline := time.Duration(count)*interval + 3*time.Second
	ctx, cancel := context.WithTimeout(ctx, deadline+5*time.Second)
	defer cancel()
	args := []string{"-n", "-c", strconv.Itoa(count), "-s", strconv.Itoa(size),
		"-i", strconv.FormatFloat(interval.Seconds(), 'f', 3, 64), "-W", "2", "-w", strconv.Itoa(int(deadline.Seconds() + 0.999))}
	if dst.Is4() {
		if df {
			args = append(args, "-M", "do")
		} else {
			args = append(args, "-M", "dont")
		}
	}
	out, _ := ns.Command(ctx, "ping", append(args, dst.String())...).CombinedOutput()
	if !bytes.Contains(out, []byte("packets transmitted")) {
		return 0, 0, string(out), fmt.Errorf("ping %s from %s: no summary in output:\n%s", dst, ns.Short(), out)
	}
	seen := map[int]bool{}
	for _, m := range pingReply.FindAllSubmatch(out, -1) {
		if bytes.Contains(m[0], []byte("(DUP!)")) {
			continue
		}
		if seq, _ := strconv.Atoi(string(m[1])); seq >= 1 && seq <= count {
			seen[seq] = true
		}
	}
	return count, len(seen), string(out), nil
}

// udp sends a paced flow of stamped datagrams and counts what arrives:
// each payload carries its sequence number and send time, the rest a
// pattern derived from the sequence, so every arrival is checked byte for
// byte and timed one way (both ends share the host clock).
func (r *runner) udp(ctx context.Context, u *UDPStep, res *StepResult) error {
	from, to := r.host(u.From), r.host(u.To)
	for _, fam := range families(u.Family) {
		if err := r.udpFlow(ctx, u, fam, from, to, res); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) udpFlow(ctx context.Context, u *UDPStep, fam string, from, to host, res *StepResult) error {
	hdr := 28
	if fam == "ipv6" {
		hdr = 48
	}
	payload := u.Size - hdr
	if payload < 16 {
		return fmt.Errorf("udp size %d leaves no room for the 16-byte stamp over %s", u.Size, fam)
	}
	dst := netip.AddrPortFrom(to.addr(fam), uint16(u.Port))
	var rx *net.UDPConn
	if err := to.ns.Do(func() error {
		var err error
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return fmt.Errorf("listen on %s in %s: %w", dst, to.ns.Short(), err)
	}
	defer rx.Close()
	rx.SetReadBuffer(4 << 20)
	var tx *net.UDPConn
	if err := from.ns.Do(func() error {
		var err error
		tx, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		return fmt.Errorf("dial %s from %s: %w", dst, from.ns.Short(), err)
	}
	defer tx.Close()

	seen := make([]bool, u.Packets)
	var mu sync.Mutex
	received, mismatched := 0, 0
	var lat []float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		want := make([]byte, payload)
		for {
			n, err := rx.Read(buf)
			if err != nil {
				return
			}
			now := time.Now().UnixNano()
			mu.Lock()
			if n != payload {
				mismatched++
				mu.Unlock()
				continue
			}
			seq := binary.BigEndian.Uint64(buf)
			sent := int64(binary.BigEndian.Uint64(buf[8:]))
			fill(want, seq, sent)
			switch {
			case seq >= uint64(len(seen)) || !bytes.Equal(buf[:n], want):
				mismatched++
			case !seen[seq]:
				seen[seq] = true
				received++
				lat = append(lat, float64(now-sent)/1e9)
			}
			mu.Unlock()
		}
	}()
	msg := make([]byte, payload)
	start := time.Now()
	gap := time.Duration(float64(time.Second) / u.Rate)
	sent := 0
	for i := 0; i < u.Packets; i++ {
		if ctx.Err() != nil {
			break
		}
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		fill(msg, uint64(i), time.Now().UnixNano())
		if _, err := tx.Write(msg); err != nil {
			continue // counted: sent stays short of Packets
		}
		sent++
	}
	r.settle()
	rx.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	res.Sent += sent
	res.Received += received
	res.Mismatched += mismatched
	res.Latencies = append(res.Latencies, lat...)
	if sent < u.Packets {
		res.Detail += fmt.Sprintf("%s: %d of %d datagrams could not be sent; ", fam, u.Packets-sent, u.Packets)
	}
	return nil
}

// fill writes the stamp and the sequence's pattern.
func fill(b []byte, seq uint64, sent int64) {
	binary.BigEndian.PutUint64(b, seq)
	binary.BigEndian.PutUint64(b[8:], uint64(sent))
	x := uint32(seq)*2654435761 + 1
	for i := 16; i < len(b); i++ {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
}

func (r *runner) iperf(ctx context.Context, p *IperfStep, res *StepResult) error {
	from, to := r.host(p.From), r.host(p.To)
	for _, fam := range families(p.Family) {
		ir, err := testbed.Iperf3(ctx, to.ns, from.ns, to.addr(fam), testbed.IperfOptions{
			Duration: p.Duration, Streams: p.Streams, UDP: p.Protocol == "udp", Bitrate: p.Bitrate, Length: p.Length, Window: p.Window})
		if err != nil {
			return err
		}
		res.Bytes += ir.Bytes
		res.BPS += ir.BitsPerSecond
		res.Retransmit += ir.Retransmits
		if p.Protocol == "udp" {
			res.Sent += ir.Packets
			res.Received += ir.Packets - ir.LostPackets
		}
	}
	return nil
}

// Phantom addresses: a replay's packets go between these, which no host
// owns. Each gateway has a permanent neighbour entry sending its phantom to
// its host's MAC, so the packets reach the host's interface (where the
// runner sees them) and the host's kernel drops them quietly instead of
// answering a replayed TCP segment with a reset or a DNS query with a port
// unreachable.
var (
	phantomA4 = netip.MustParseAddr("192.0.2.80")
	phantomA6 = netip.MustParseAddr("2001:db8:a::80")
	phantomB4 = netip.MustParseAddr("203.0.113.80")
	phantomB6 = netip.MustParseAddr("2001:db8:b::80")
)

func (r *runner) setupPhantoms() error {
	t := r.bed.Topo
	for _, p := range []struct {
		gw, host *netns.Namespace
		addrs    []netip.Addr
	}{{t.GW1, t.HostA, []netip.Addr{phantomA4, phantomA6}}, {t.GW2, t.HostB, []netip.Addr{phantomB4, phantomB6}}} {
		var mac net.HardwareAddr
		if err := p.host.Do(func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			mac = l.Attrs().HardwareAddr
			return nil
		}); err != nil {
			return fmt.Errorf("MAC of %s eth0: %w", p.host.Short(), err)
		}
		if p.gw == t.GW2 && r.kernel != nil {
			for _, a := range p.addrs {
				if err := r.kernel.neighbour(context.Background(), a, mac.String()); err != nil {
					return err
				}
			}
			continue
		}
		l, err := p.gw.Netlink().LinkByName("lan0")
		if err != nil {
			return fmt.Errorf("lan0 of %s: %w", p.gw.Short(), err)
		}
		for _, a := range p.addrs {
			fam := netlink.FAMILY_V4
			if a.Is6() {
				fam = netlink.FAMILY_V6
			}
			n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT,
				IP: net.IP(a.AsSlice()), HardwareAddr: mac}
			if err := p.gw.Netlink().NeighSet(n); err != nil {
				return fmt.Errorf("neighbour %s on %s: %w", a, p.gw.Short(), err)
			}
		}
	}
	return nil
}

// replay sends a capture's packets from the phantom addresses behind each
// gateway, at their due times, and checks that each arrives at the far
// host byte for byte (less the TTL or hop limit the two routers took, and
// the IPv4 header checksum that follows it).
func (r *runner) replay(ctx context.Context, p *PcapStep, res *StepResult) error {
	f, err := r.s.open(p.path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	timing := pcaprewrite.KeepTiming
	if p.Timing == "fast" {
		timing = pcaprewrite.AsFast
	}
	pkts, _, err := pcaprewrite.Load(f, p.path, pcaprewrite.Topology{
		A: pcaprewrite.Hosts{IPv4: phantomA4, IPv6: phantomA6},
		B: pcaprewrite.Hosts{IPv4: phantomB4, IPv6: phantomB6},
	}, pcaprewrite.Options{Timing: timing, Speed: p.Speed})
	if err != nil {
		return err
	}
	t := r.bed.Topo
	sides := [2]*netns.Namespace{t.HostA, t.HostB}
	var send [2]*rawSender
	var recv [2]*sniffer
	for i, ns := range sides {
		if send[i], err = newRawSender(ns); err != nil {
			return err
		}
		defer send[i].close()
		own, far := [2]netip.Addr{phantomA4, phantomA6}, [2]netip.Addr{phantomB4, phantomB6}
		if i == 1 {
			own, far = far, own
		}
		if recv[i], err = newSniffer(ns, "eth0", far, own); err != nil {
			return err
		}
		defer recv[i].close()
	}
	want := map[string]int{}
	start := time.Now()
	for _, pk := range pkts {
		if ctx.Err() != nil {
			break
		}
		if d := time.Until(start.Add(pk.At)); d > 0 {
			time.Sleep(d)
		}
		if err := send[pk.From].send(pk.Data); err != nil {
			res.Detail += err.Error() + "; "
			continue
		}
		res.Sent++
		want[string(normalize(pk.Data))]++
	}
	r.settle()
	for _, s := range recv {
		for _, got := range s.stop() {
			k := string(normalize(got))
			if want[k] > 0 {
				want[k]--
				res.Received++
			} else {
				res.Mismatched++
			}
		}
	}
	return nil
}

// normalize zeroes what routers change on the way: TTL and header checksum
// (IPv4), hop limit (IPv6).
func normalize(p []byte) []byte {
	q := bytes.Clone(p)
	if len(q) >= 20 && q[0]>>4 == 4 {
		q[8], q[10], q[11] = 0, 0, 0
	} else if len(q) >= 40 && q[0]>>4 == 6 {
		q[7] = 0
	}
	return q
}

// rawSender sends whole IP packets (header included) from a namespace.
type rawSender struct{ fd4, fd6 int }

func newRawSender(ns *netns.Namespace) (*rawSender, error) {
	s := &rawSender{fd4: -1, fd6: -1}
	err := ns.Do(func() error {
		var err error
		if s.fd4, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		if s.fd6, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			return err
		}
		return unix.SetsockoptInt(s.fd6, unix.IPPROTO_IPV6, unix.IPV6_HDRINCL, 1)
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("raw sockets in %s: %w", ns.Short(), err)
	}
	return s, nil
}

func (s *rawSender) send(p []byte) error {
	if len(p) >= 20 && p[0]>>4 == 4 {
		var sa unix.SockaddrInet4
		copy(sa.Addr[:], p[16:20])
		return unix.Sendto(s.fd4, p, 0, &sa)
	}
	if len(p) >= 40 && p[0]>>4 == 6 {
		var sa unix.SockaddrInet6
		copy(sa.Addr[:], p[24:40])
		return unix.Sendto(s.fd6, p, 0, &sa)
	}
	return errors.New("replay: not an IP packet")
}

func (s *rawSender) close() {
	for _, fd := range []int{s.fd4, s.fd6} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// sniffer collects the IP packets arriving on an interface for given
// destinations (an AF_PACKET socket: it sees them before the host's kernel
// drops them).
type sniffer struct {
	fd   int
	src  [2]netip.Addr
	dst  [2]netip.Addr
	mu   sync.Mutex
	got  [][]byte
	done chan struct{}
}

func newSniffer(ns *netns.Namespace, ifname string, src, dst [2]netip.Addr) (*sniffer, error) {
	s := &sniffer{fd: -1, src: src, dst: dst, done: make(chan struct{})}
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		if s.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
		// Auxiliary data says when a packet's transport checksum was
		// left to the (veth) hardware: the sniffer completes it.
		if err := unix.SetsockoptInt(s.fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return err
		}
		unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
		return unix.Bind(s.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: l.Attrs().Index})
	})
	if err != nil {
		if s.fd >= 0 {
			unix.Close(s.fd)
		}
		return nil, fmt.Errorf("packet socket on %s in %s: %w", ifname, ns.Short(), err)
	}
	go s.loop(s.fd)
	return s, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (s *sniffer) loop(fd int) {
	defer close(s.done)
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	for !s.closed() {
		n, oobn, _, from, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				if s.closed() {
					return
				}
				continue
			}
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		p := buf[:n]
		var src, dst netip.Addr
		if n >= 20 && p[0]>>4 == 4 {
			src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		} else if n >= 40 && p[0]>>4 == 6 {
			src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		}
		// Only the replay's own packets: not the ICMP errors routers
		// send the phantom source.
		if dst != s.dst[0] && dst != s.dst[1] || src != s.src[0] && src != s.src[1] {
			continue
		}
		q := bytes.Clone(p)
		if checksumNotReady(oob[:oobn]) {
			completeChecksum(q)
		}
		s.mu.Lock()
		s.got = append(s.got, q)
		s.mu.Unlock()
	}
}

// checksumNotReady reads TP_STATUS_CSUMNOTREADY from a packet's
// tpacket_auxdata.
func checksumNotReady(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data)&unix.TP_STATUS_CSUMNOTREADY != 0
		}
	}
	return false
}

// completeChecksum computes the TCP or UDP checksum of an IP packet (no
// extension headers: the replayed captures' IPv6 packets carry none).
func completeChecksum(p []byte) {
	var src, dst, seg []byte
	var proto uint8
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0xf) * 4
		if len(p) < ihl {
			return
		}
		src, dst, proto, seg = p[12:16], p[16:20], p[9], p[ihl:]
	case 6:
		if len(p) < 40 {
			return
		}
		src, dst, proto, seg = p[8:24], p[24:40], p[6], p[40:]
	}
	switch {
	case proto == 6 && len(seg) >= 20:
		inetsum.L4(seg, src, dst, proto, inetsum.OffsetTCP)
	case proto == 17 && len(seg) >= 8:
		inetsum.L4(seg, src, dst, proto, inetsum.OffsetUDP)
	}
}

func (s *sniffer) closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fd < 0
}

// stop ends the capture and returns what arrived.
func (s *sniffer) stop() [][]byte {
	s.mu.Lock()
	fd := s.fd
	s.fd = -1
	s.mu.Unlock()
	if fd >= 0 {
		<-s.done
		unix.Close(fd)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

func (s *sniffer) close() { s.stop() }

// percentile of sorted values, p in [0, 1].
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted)-1) + 0.5)
	return sorted[i]
}

func latencyMetricsOf(l []float64) map[string]float64 {
	if len(l) == 0 {
		return nil
	}
	s := append([]float64(nil), l...)
	sort.Float64s(s)
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return map[string]float64{
		"latency.p50": percentile(s, 0.5), "latency.p90": percentile(s, 0.9), "latency.p99": percentile(s, 0.99),
		"latency.max": s[len(s)-1], "latency.mean": sum / float64(len(s)),
	}
}
