package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv4"

	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/netns"
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
	Headers              // what the receiver saw of the IP headers (marks.go)
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
			pr, err := testbed.Ping(ctx, from.ns, to.addr(fam), testbed.PingOptions{Size: size, Count: p.Count, Interval: p.Interval,
				NoDF: !*p.DF, Settle: r.settle, Args: pingArgs(p.Marks)})
			if err != nil {
				return err
			}
			sent, received, out := pr.Sent, pr.Received, pr.Output
			res.Headers.add(pingErrors([]byte(out)))
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

// udp sends a paced flow of stamped datagrams and counts what arrives:
// each payload carries its sequence number and send time, the rest a
// pattern derived from the sequence, so every arrival is checked byte for
// byte and timed one way: both ends are this process, and the stamp is
// its monotonic clock (time since the flow began), so no step of the wall
// clock shows as latency.
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
	listen := dst
	var spread []*testbed.Tunnel
	if u.Spread {
		// Every tunnel's own addresses: the receiver takes them all.
		spread = r.spreadTargets()
		listen = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(u.Port))
	}
	var rx *net.UDPConn
	if err := to.ns.Do(func() error {
		var err error
		rx, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(listen))
		return err
	}); err != nil {
		return fmt.Errorf("listen on %s in %s: %w", dst, to.ns.Short(), err)
	}
	defer rx.Close()
	rx.SetReadBuffer(4 << 20)
	if err := recordHeaders(rx, fam == "ipv6"); err != nil {
		return fmt.Errorf("listen on %s in %s: %w", dst, to.ns.Short(), err)
	}
	var tx *net.UDPConn
	if err := from.ns.Do(func() error {
		var err error
		if spread != nil {
			tx, err = net.ListenUDP("udp4", &net.UDPAddr{})
		} else {
			tx, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		}
		return err
	}); err != nil {
		return fmt.Errorf("dial %s from %s: %w", dst, from.ns.Short(), err)
	}
	defer tx.Close()
	if err := markSender(tx, fam == "ipv6", u.Marks, u.DF, u.ExtHeaders); err != nil {
		return fmt.Errorf("dial %s from %s: %w", dst, from.ns.Short(), err)
	}
	var hdrs Headers
	send := func(_ int, msg []byte) error {
		_, err := tx.Write(msg)
		return err
	}
	if spread != nil {
		// Each datagram from and to its tunnel's addresses (IP_PKTINFO
		// picks the source per packet).
		pc := ipv4.NewPacketConn(tx)
		var cm ipv4.ControlMessage
		var to net.UDPAddr
		send = func(i int, msg []byte) error {
			src, dst := spreadAddr(spread, i)
			cm.Src = src.AsSlice()
			to.IP, to.Port = dst.AsSlice(), u.Port
			_, err := pc.WriteTo(msg, &cm, &to)
			return err
		}
	}

	base := time.Now() // the stamps' origin, on the monotonic clock
	seen := make([]bool, u.Packets)
	var mu sync.Mutex
	received, mismatched := 0, 0
	var lat []float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		oob := make([]byte, 256)
		want := make([]byte, payload)
		for {
			n, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
			if err != nil {
				return
			}
			now := int64(time.Since(base))
			mu.Lock()
			hdrs.see(oob[:oobn])
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
		fill(msg, uint64(i), int64(time.Since(base)))
		if err := send(i, msg); err != nil {
			if errors.Is(err, syscall.EMSGSIZE) {
				hdrs.TooBig++ // the sender learned a smaller path MTU
			}
			continue // counted: sent stays short of Packets
		}
		sent++
	}
	r.settle()
	hdrs.PathMTU = pathMTU(tx, fam == "ipv6")
	rx.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	res.Sent += sent
	res.Received += received
	res.Mismatched += mismatched
	res.Latencies = append(res.Latencies, lat...)
	res.Headers.add(hdrs)
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

// setupPhantoms makes the topology's phantom addresses, between which a
// replay's packets go and which no host owns, reach the hosts: each gateway
// gets a permanent neighbour entry sending its phantom to its host's MAC,
// so the packets reach the host's interface (where the runner sees them)
// and the host's kernel drops them quietly instead of answering a replayed
// TCP segment with a reset or a DNS query with a port unreachable.
func (r *runner) setupPhantoms() error {
	t := r.bed.Topo
	a := t.Addr
	for _, p := range []struct {
		gw, host *netns.Namespace
		addrs    []netip.Addr
	}{{t.GW1, t.HostA, []netip.Addr{a.PhantomA4, a.PhantomA6}}, {t.GW2, t.HostB, []netip.Addr{a.PhantomB4, a.PhantomB6}}} {
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
		if p.gw == t.GW2 && r.external != nil {
			continue // no replays against an external device
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
// host byte for byte (capture.Replay's rules).
func (r *runner) replay(ctx context.Context, p *PcapStep, res *StepResult) error {
	f, err := r.s.open(p.path)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	timing := capture.KeepTiming
	if p.Timing == "fast" {
		timing = capture.AsFast
	}
	pkts, _, err := capture.Load(f, p.path, capture.Topology{
		A: capture.Hosts{IPv4: r.bed.Topo.Addr.PhantomA4, IPv6: r.bed.Topo.Addr.PhantomA6},
		B: capture.Hosts{IPv4: r.bed.Topo.Addr.PhantomB4, IPv6: r.bed.Topo.Addr.PhantomB6},
	}, capture.RewriteOptions{Timing: timing, Speed: p.Speed})
	if err != nil {
		return err
	}
	t := r.bed.Topo
	rr, err := capture.Replay(ctx, pkts, [2]capture.ReplayHost{{NS: t.HostA, Interface: "eth0"}, {NS: t.HostB, Interface: "eth0"}},
		capture.ReplayOptions{Settle: r.settle})
	if err != nil {
		return err
	}
	for i := range 2 {
		res.Sent += rr.Sent[i] - rr.SendErrors[i]
		res.Received += rr.Delivered[i]
		res.Mismatched += rr.Unexpected[i]
	}
	if rr.LastSendError != "" {
		res.Detail += fmt.Sprintf("%d packets could not be sent (last: %s); ", rr.SendErrors[0]+rr.SendErrors[1], rr.LastSendError)
	}
	return nil
}

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
		"latency.min": s[0], "latency.max": s[len(s)-1], "latency.mean": sum / float64(len(s)),
	}
}
