package scenario

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// The kernel peer's taps: its WAN port (eth0 in the guest) and its LAN
// port (eth1), toward hostB.
const (
	kernelWANTap = "kpwan"
	kernelLANTap = "kplan"
)

// KernelPeer is the Linux kernel guest that `peer: linux-xfrm` scenarios
// put in gw2's place: Debian's kernel under QEMU (internal/lab/kernelpeer)
// with two NICs. It boots on first use and serves every linux-xfrm
// scenario of a run, one after another: between scenarios its taps wait in
// a namespace of its own; during one they are moved into the scenario's
// gw2 namespace and bridged to the WAN and LAN links there. Close stops it.
type KernelPeer struct {
	mu     sync.Mutex
	prefix string
	log    *slog.Logger
	bed    *netns.Bed
	home   *netns.Namespace
	peer   *kernelpeer.Peer
	err    error
	// Boots counts the guest's boots (one per KernelPeer, or an error).
	Boots int
	// BootTime is how long the boot took.
	BootTime time.Duration
}

// NewKernelPeer returns a kernel peer that boots when a scenario first
// needs it; prefix names its namespace.
func NewKernelPeer(prefix string, log *slog.Logger) *KernelPeer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &KernelPeer{prefix: prefix, log: log}
}

// get boots the guest on first use; a failed boot fails every later use
// with the same error.
func (k *KernelPeer) get(ctx context.Context) (*kernelpeer.Peer, error) {
	if k.peer != nil || k.err != nil {
		return k.peer, k.err
	}
	k.err = k.boot(ctx)
	return k.peer, k.err
}

func (k *KernelPeer) boot(ctx context.Context) error {
	var err error
	if k.bed, err = netns.New(k.prefix, k.log); err != nil {
		return fmt.Errorf("linux-xfrm peer: %w", err)
	}
	if k.home, err = k.bed.AddNamespace("kp"); err != nil {
		return fmt.Errorf("linux-xfrm peer: %w", err)
	}
	start := time.Now()
	k.peer, err = kernelpeer.Start(ctx, kernelpeer.Config{
		Netns: k.home.Name(), Tap: kernelWANTap, ExtraTaps: []string{kernelLANTap},
		// Placeholders until a scenario gives the guest its addresses.
		GuestAddrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.250/32")},
		MemoryMB:   256, BootTimeout: 5 * time.Minute, Logger: k.log,
	})
	if err != nil {
		return fmt.Errorf("linux-xfrm peer: %w", err)
	}
	k.Boots++
	k.BootTime = time.Since(start)
	return nil
}

// Close stops the guest and removes its namespace.
func (k *KernelPeer) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	if k.peer != nil {
		errs = append(errs, k.peer.Close())
		k.peer = nil
	}
	if k.bed != nil {
		errs = append(errs, k.bed.Close())
		k.bed = nil
	}
	if k.err == nil {
		k.err = errors.New("linux-xfrm peer closed")
	}
	return errors.Join(errs...)
}

// kernelGW2 is the kernel peer lent to one scenario as its gw2.
type kernelGW2 struct {
	k     *KernelPeer
	peer  *kernelpeer.Peer
	gw2   *netns.Namespace
	sas   [2]*sa.SA // gw1→gw2 (inbound to the guest), gw2→gw1 (outbound)
	moved bool
}

// attachKernel stops the bed's espgw gw2, turns its namespace into two
// bridges (WAN link to the guest's eth0, LAN link to its eth1), and gives
// the guest gw2's addresses, routes and the scenario's SAs, mirrored.
func (r *runner) attachKernel(ctx context.Context) (err error) {
	k := r.opts.Kernel
	k.mu.Lock()
	peer, err := k.get(ctx)
	if err != nil {
		k.mu.Unlock()
		return err
	}
	g := &kernelGW2{k: k, peer: peer, gw2: r.bed.Topo.GW2}
	r.kernel = g // detach unlocks k
	if _, err := r.bed.StopGateway(1, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop espgw's gw2: %w", err)
	}
	t := r.bed.Topo
	a := t.Addr
	mtu := r.s.Topology.WANMTU
	if mtu == 0 {
		mtu = 1500
	}
	// gw2's namespace becomes a bump in two wires (bridgeGW2), the
	// guest's taps bridged to the WAN and LAN links.
	for _, tap := range []string{kernelWANTap, kernelLANTap} {
		if out, err := k.home.Output(ctx, "ip", "link", "set", tap, "netns", g.gw2.Name()); err != nil {
			return fmt.Errorf("move the kernel peer's %s into gw2: %w: %s", tap, err, out)
		}
	}
	g.moved = true
	if err := bridgeGW2(ctx, g.gw2, "the kernel peer", kernelWANTap, kernelLANTap, mtu); err != nil {
		return err
	}
	// gw1's outer addresses are on-link through the bridge; the LAN
	// behind gw1 is routed out of eth0, where XFRM takes over.
	var routes []kernelpeer.Route
	for _, d := range []netip.Prefix{a.GW1WAN4, a.GW1WAN6} {
		routes = append(routes, kernelpeer.Route{Dst: netip.PrefixFrom(d.Addr(), d.Addr().BitLen())})
	}
	routes = append(routes, kernelpeer.Route{Dst: a.LANA4}, kernelpeer.Route{Dst: a.LANA6})
	for i, s := range r.bed.SAs {
		c := *s
		if c.Mode == sa.Tunnel {
			near, far := []netip.Prefix{a.LANA4, a.LANA6}, []netip.Prefix{a.LANB4, a.LANB6}
			if i == 1 {
				near, far = far, near
			}
			c.Selectors = []sa.Selector{{Src: near[0], Dst: far[0]}, {Src: near[1], Dst: far[1]}}
		}
		g.sas[i] = &c
	}
	return peer.ConfigureGateway(ctx, kernelpeer.Gateway{
		WAN: []netip.Prefix{a.GW2WAN4, a.GW2WAN6}, LAN: []netip.Prefix{a.GW2LAN4, a.GW2LAN6}, LANPort: true, MTU: mtu, Routes: routes,
		Near: t.GW1, NearIf: "wan0", NearAddrs: []netip.Addr{a.GW1WAN4.Addr(), a.GW1WAN6.Addr()}, ToGuest: g.sas[0], FromGuest: g.sas[1]})
}

// detach moves the guest's taps home again before the scenario's
// namespaces go, and hands the peer back.
func (r *runner) detachKernel() error {
	g := r.kernel
	if g == nil {
		return nil
	}
	defer g.k.mu.Unlock()
	r.kernel = nil
	if !g.moved {
		return nil
	}
	err := unbridgeGW2(g.gw2, g.k.home.Name(), []string{kernelWANTap, kernelLANTap})
	if err != nil {
		// The taps go with gw2's namespace: the guest is of no further use.
		g.k.err = err
	}
	return err
}

// kernelStats reads the guest's counters as a gateway.Stats, mapping the
// kernel's counters to espgw's names where they mean the same thing and
// keeping the rest under the kernel's names (see scenarios/README.md):
//
//	per inbound state:  opened = packets; replay, outside-window, bad-icv
//	per outbound state: sealed = packets; last_seq = oseq
//	XfrmInNoStates → unknown-spi, XfrmInTmplMismatch → policy,
//	XfrmIn/OutStateExpired → sa-expired, XfrmOutNoStates → no-sa,
//	XfrmOutPolBlock → policy-discard; XfrmInStateProtoError and
//	XfrmInStateSeqError beyond the states' own counts, and every other
//	counter, under its kernel name.
//
// WireIn is every ESP packet the kernel saw (opened, or dropped before
// or while opening), WireOut every packet it sealed: the kernel counts
// nothing else about its ESP, so the WAN equations check its counters
// against the relay's.
func (g *kernelGW2) stats(ctx context.Context) (gateway.Stats, kernelpeer.Counters, map[string]uint64, error) {
	c, err := g.peer.Counters(ctx)
	if err != nil {
		return gateway.Stats{}, c, nil, err
	}
	devs, err := g.interfaceCounters(ctx)
	if err != nil {
		return gateway.Stats{}, c, nil, err
	}
	st := kernelAsGateway(c, g.sas)
	// The guest's reassembly of outer fragments, as a gateway reports it.
	if out, err := g.peer.Run(ctx, "cat /proc/net/snmp; echo @@; cat /proc/net/snmp6 2>/dev/null"); err == nil {
		v4, v6, _ := strings.Cut(out, "@@")
		r := gateway.ParseReassembly([]byte(v4), []byte(v6))
		st.Reassembly = &r
	}
	return st, c, devs, nil
}

// espgwDrops are the kernel's counters that mean one of espgw's drop
// reasons.
var espgwDrops = map[string]string{
	"XfrmInNoStates": "unknown-spi", "XfrmInTmplMismatch": "policy", "XfrmInStateExpired": "sa-expired",
	"XfrmOutStateExpired": "sa-expired", "XfrmOutNoStates": "no-sa", "XfrmOutPolBlock": "policy-discard",
}

func kernelAsGateway(c kernelpeer.Counters, sas [2]*sa.SA) gateway.Stats {
	st := gateway.Stats{Drops: map[string]uint64{}}
	var icv, seqErrs uint64
	for i, s := range sas {
		if s == nil {
			continue
		}
		ks := c.State(s.Dst, s.SPI)
		if ks == nil {
			continue
		}
		ss := gateway.SAStats{SPI: "0x" + strconv.FormatUint(uint64(s.SPI), 16), Suite: s.Suite.NameWithBits(s.KeyBits()), Mode: s.Mode.String()}
		ss.Drops = map[string]uint64{}
		if i == 0 {
			ss.Direction = "in"
			ss.OpenedPackets, ss.OpenedBytes, ss.Highest = ks.Packets, ks.Bytes, ks.Seq
			for k, v := range map[string]uint64{"replay": ks.Replayed, "outside-window": ks.ReplayWindowDrops, "bad-icv": ks.IntegrityFailed} {
				if v > 0 {
					ss.Drops[k] = v
				}
			}
			icv += ks.IntegrityFailed
			seqErrs += ks.Replayed + ks.ReplayWindowDrops
			st.WireIn += ks.Packets + ks.Replayed + ks.ReplayWindowDrops + ks.IntegrityFailed
		} else {
			ss.Direction = "out"
			ss.SealedPackets, ss.SealedBytes, ss.LastSeq = ks.Packets, ks.Bytes, ks.OSeq
			st.WireOut += ks.Packets
		}
		st.SAs = append(st.SAs, ss)
	}
	mapped := map[string]uint64{}
	for k, v := range c.Stat {
		if n, ok := espgwDrops[k]; ok {
			mapped[n] += v
		} else {
			mapped[k] = v
		}
	}
	// The states' own drops are counted on them already.
	mapped["XfrmInStateProtoError"] -= min(icv, mapped["XfrmInStateProtoError"])
	mapped["XfrmInStateSeqError"] -= min(seqErrs, mapped["XfrmInStateSeqError"])
	// Dropped before or while opening: ESP that reached the kernel.
	for _, k := range []string{"unknown-spi", "XfrmInStateProtoError", "XfrmInStateSeqError", "XfrmInHdrError",
		"XfrmInError", "XfrmInBufferError", "XfrmInStateMismatch", "XfrmInStateInvalid", "XfrmInStateModeError"} {
		st.WireIn += mapped[k]
	}
	st.WireIn += c.Stat["XfrmInStateExpired"]
	for k, v := range mapped {
		if v > 0 {
			st.Drops[k] = v
		}
	}
	return st
}

// interfaceCounters reads the guest's /proc/net/dev as
// eth0.rx_packets, eth1.tx_dropped, ….
func (g *kernelGW2) interfaceCounters(ctx context.Context) (map[string]uint64, error) {
	out, err := g.peer.Run(ctx, "cat /proc/net/dev")
	if err != nil {
		return nil, fmt.Errorf("read the kernel peer's interface counters: %w", err)
	}
	names := []string{"rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_fifo", "rx_frame", "rx_compressed", "rx_multicast",
		"tx_bytes", "tx_packets", "tx_errors", "tx_dropped", "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed"}
	m := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		dev, rest, ok := strings.Cut(l, ":")
		dev = strings.TrimSpace(dev)
		if !ok || dev != "eth0" && dev != "eth1" {
			continue
		}
		for i, f := range strings.Fields(rest) {
			if i < len(names) {
				v, _ := strconv.ParseUint(f, 10, 64)
				m[dev+"."+names[i]] = v
			}
		}
	}
	return m, nil
}

// ping runs busybox ping in the guest and counts the replies.
func (g *kernelGW2) ping(ctx context.Context, dst netip.Addr) error {
	out, err := g.peer.Run(ctx, fmt.Sprintf("ping -c 1 -W 2 %s", dst))
	if err != nil {
		return fmt.Errorf("warm-up ping from the kernel peer to %s: %w: %s", dst, err, out)
	}
	return nil
}

// neighbour pins a permanent neighbour entry on the guest's LAN port.
func (g *kernelGW2) neighbour(ctx context.Context, a netip.Addr, mac string) error {
	if _, err := g.peer.Run(ctx, fmt.Sprintf("ip neigh replace %s lladdr %s dev eth1 nud permanent", a, mac)); err != nil {
		return fmt.Errorf("neighbour %s in the kernel peer: %w", a, err)
	}
	return nil
}
