// Package gateway is the espgw data path, its configuration and its metrics.
//
// It owns the espgw data path: TUN packets out through the SPD, sequential
// numbering, parallel crypto on an offload engine and in-order transmit; ESP
// packets in through the SAD, replay check, crypto, inbound policy and TUN
// write. Every packet that does not come out is counted under a reason, on
// its SA when it has one and on the gateway otherwise. With an ike: section
// its IKE daemon (ike.go) negotiates the SAs and puts them in force itself.
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// Options configure a gateway's data path.
type Options struct {
	// Local are this gateway's outer addresses: SAs whose Src is local are
	// outbound, SAs whose Dst is local are inbound.
	Local []netip.Addr
	// InnerMTU is the largest inner packet the tunnel carries without
	// fragmenting the outer path; larger packets get ICMP back.
	InnerMTU int
	// OuterMTU is the outer path's MTU until ICMP says otherwise: where
	// IPv4 outer packets without DF are fragmented (default InnerMTU plus
	// 100).
	OuterMTU int
	// PMTUExpiry is how long a path MTU learned from ICMP holds (default
	// DefaultPMTUExpiry).
	PMTUExpiry time.Duration
	// Workers is the number of crypto goroutines (default: 2).
	Workers int
	// Batch is the number of packets per pipeline batch (default: the
	// device's batch size, at least 32).
	Batch int
	// Inline is the largest batch that the goroutine which read it seals or
	// opens and sends itself, when nothing else is in flight and the engine
	// works inline (default: every batch on a machine of SmallMachine
	// CPUs or fewer, else DefaultInline; negative: never, every batch
	// goes through the workers).
	Inline int
	// StateDir, when set, is where outbound sequence numbers are reserved
	// so a restarted gateway resumes above them (see seqStore); packets
	// above what it could record are dropped (seq-unpersisted). Without
	// it a restarted gateway starts its SAs at 0, and a peer that kept
	// its window drops them as outside-window until the old highest is
	// passed: Start always sets it unless the config says state-dir: off.
	StateDir string
	// SequenceSkip is what a gateway does when the journal in StateDir
	// does not prove itself (missing, emptied, cut, changed, unreadable):
	// 0 refuses to load outbound SAs from it; N resumes every outbound SA
	// N above the highest bound the journal still shows (or its initial
	// sequence) and replaces the journal.
	SequenceSkip uint64
	// RetireAfter is how long the engine session of an SA taken out of
	// force stays open for packets in flight (default DefaultRetireAfter).
	RetireAfter time.Duration
	// ICMPSource are the addresses an ICMP too-big error written into the
	// TUN may come from, in order of preference (Start gives the TUN's
	// addresses, then the local outer ones, then the TUN's link-local
	// ones); the local outer addresses serve when it is empty.
	ICMPSource []netip.Addr
	// NATKeepalive says which UDP-encapsulated outbound SAs send RFC 3948
	// NAT keepalives, and how often (the zero value: none).
	NATKeepalive NATKeepalive
	Log          *slog.Logger
}

// DefaultInline is Options.Inline's default on a machine of more than
// SmallMachine CPUs: the batches a TUN read gives for anything but TCP
// (one packet each) and the short trains of a slow TCP flow run to
// completion on their reader; GSO trains of bulk TCP use the workers.
const DefaultInline = 8

// SmallMachine is the most CPUs (GOMAXPROCS) on which a gateway runs every
// batch on its reader by default, bulk TCP's GSO trains included. The
// workers spread the crypto of large batches over idle CPUs. On two CPUs
// there are none: the kernel's share of every packet keeps the other one
// busy. There, each batch's two hand-offs (reader to worker to writer)
// cost 10–25% of the gateways' CPU per byte of bulk TCP and buy no
// parallel crypto.
const SmallMachine = 2

// defaultInline is Options.Inline's default on a machine of procs CPUs.
func defaultInline(procs int) int {
	if procs <= SmallMachine {
		return math.MaxInt32
	}
	return DefaultInline
}

// Gateway is one espgw gateway: a device, outer connections, an engine and
// the SAs and policies in force.
type Gateway struct {
	opts   Options
	log    *slog.Logger
	dev    Device
	pick   func(*sa.SA) Conn
	engine offload.Engine

	// mu serialises changes (Load, Apply); tables guards st against the
	// data path (see state).
	mu     sync.Mutex
	tables sync.RWMutex
	st     *state

	// innerMTU is the largest inner packet sent without ICMP too-big; a
	// reload may lower it (never above Options.InnerMTU, which sized the
	// buffers).
	innerMTU atomic.Int64

	// connMu guards conns and run: outer connections come and go with
	// the SAs that need them.
	connMu sync.Mutex
	conns  map[Conn]*connRun
	run    *runner

	retired retiredSAs

	// held keeps inbound ESP for CHILD_SAs being negotiated (held.go).
	held heldESP

	// traps are the selectors whose outbound packets, when no policy
	// matches, start IKE (start_action: trap); set by the IKE daemon.
	traps atomic.Pointer[[]Trap]
	// onPeerPort is told of ESP from a peer's new NAT port
	// (SetOnPeerPort); set by the IKE daemon.
	onPeerPort atomic.Pointer[func(*sa.SA, netip.AddrPort)]

	// seq records outbound sequence reservations (Options.StateDir).
	seq *seqStore
	// ivKey makes the CBC IVs of all the gateway's SAs; onSoftExpire and
	// reserveSeq are g.softExpired and g.seq.reserve, made once rather
	// than a closure per SA.
	ivKey        *esp.IVKey
	onSoftExpire func(*esp.SA)
	reserveSeq   func(*esp.SA, uint64) error
	// frags remembers outbound initial fragments' ports, for the SPD
	// lookup of the fragments after them.
	frags esp.Fragments

	counters Counters
	pmtu     PMTUCounters
	// ikeStats reads the IKE daemon's state for Stats, when there is one.
	ikeStats atomic.Pointer[func() *IKEStats]
	// icmpConns are raw ICMP sockets whose path MTU reports HandleICMP
	// applies (opened by Start; owned by Run once it starts).
	icmpConns []icmpConn
	icmpAddr  net.IPAddr // the outbound reader's scratch for sendICMP
	icmpDst   [16]byte
	icmp      [][]byte // scratch for ICMP errors, used by the outbound reader only
}

// connRun is an outer connection's receiving goroutine, while Run runs.
type connRun struct{ stop context.CancelFunc }

// runner is what Run started, so connections added later join it.
type runner struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errc   chan error
}

// Counters are the gateway's own traffic counts and the drops no SA owns.
type Counters struct {
	TunIn, TunOut, WireIn, WireOut atomic.Uint64
	Drops                          [NumReasons]atomic.Uint64
	// Sealed and Opened are the sizes of the batches the engine was
	// handed, per direction.
	Sealed, Opened BatchSizes
}

// New builds a gateway. pick chooses the outer connection for an outbound
// SA (raw ESP or UDP, IPv4 or IPv6), nil when there is none; conns are the
// connections to receive on (AddConn and RemoveConn change them).
func New(dev Device, conns []Conn, pick func(*sa.SA) Conn, engine offload.Engine, opts Options) *Gateway {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Batch <= 0 {
		opts.Batch = max(dev.BatchSize(), 32)
	}
	switch {
	case opts.Inline == 0:
		opts.Inline = defaultInline(runtime.GOMAXPROCS(0))
	case opts.Inline < 0:
		opts.Inline = 0
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.InnerMTU <= 0 {
		opts.InnerMTU = 1400
	}
	if opts.OuterMTU <= 0 {
		opts.OuterMTU = opts.InnerMTU + 100
	}
	if opts.PMTUExpiry <= 0 {
		opts.PMTUExpiry = DefaultPMTUExpiry
	}
	g := &Gateway{opts: opts, log: opts.Log, dev: dev, pick: pick, engine: engine, ivKey: esp.NewIVKey(),
		icmp: [][]byte{make([]byte, tunOffset+1500)}, conns: map[Conn]*connRun{}, st: newState(),
		retired: retiredSAs{live: map[*esp.SA]string{}, totals: map[string]*esp.Snapshot{}, pending: map[*retirement]struct{}{}}}
	if opts.StateDir != "" {
		// Opened when the first outbound SA is built, where an error
		// can be returned.
		g.seq = newSeqStore(opts.StateDir, opts.Log)
		g.seq.askedSkip = opts.SequenceSkip
		g.reserveSeq = g.seq.reserve
	}
	g.onSoftExpire = g.softExpired
	g.innerMTU.Store(int64(opts.InnerMTU))
	for _, c := range conns {
		g.conns[c] = &connRun{}
	}
	return g
}

// Close ends what the gateway does in the background once Run has
// returned (or was never called): the retirements still waiting are
// finished at once (their sessions closed), and the sequence journal is
// closed after the write under way. Reservations asked for after it fail,
// so nothing more is sent on its SAs. It leaves the device, the
// connections and the engine to their owners, and no goroutine behind.
func (g *Gateway) Close() error {
	g.retired.mu.Lock()
	var waiting []*retirement
	for r := range g.retired.pending {
		r.timer.Stop()
		waiting = append(waiting, r)
	}
	g.retired.mu.Unlock()
	for _, r := range waiting {
		g.finishRetire(r)
	}
	if g.seq != nil {
		return g.seq.close()
	}
	return nil
}

// InnerMTU is the largest inner packet the gateway sends through the tunnel.
func (g *Gateway) InnerMTU() int { return int(g.innerMTU.Load()) }

// SetInnerMTU changes the largest inner packet sent through the tunnel, as
// when a reload brings an SA with more overhead. It cannot exceed the
// Options.InnerMTU the gateway was built with.
func (g *Gateway) SetInnerMTU(mtu int) error {
	if mtu > g.opts.InnerMTU || mtu < 68 {
		return fmt.Errorf("inner MTU %d: want 68…%d (the MTU the gateway started with)", mtu, g.opts.InnerMTU)
	}
	g.innerMTU.Store(int64(mtu))
	return nil
}

// AddConn starts receiving on another outer connection (at once if the
// gateway runs).
func (g *Gateway) AddConn(c Conn) {
	g.connMu.Lock()
	defer g.connMu.Unlock()
	if _, ok := g.conns[c]; ok {
		return
	}
	r := &connRun{}
	g.conns[c] = r
	if g.run != nil {
		g.startConn(c, r)
	}
}

// RemoveConn stops receiving on c and closes it. Sends to it fail from now
// on (counted as send errors), so it is removed only once no SA in force
// uses it.
func (g *Gateway) RemoveConn(c Conn) {
	g.connMu.Lock()
	r, ok := g.conns[c]
	delete(g.conns, c)
	g.connMu.Unlock()
	if !ok {
		return
	}
	if r.stop != nil {
		r.stop()
	}
	c.Close()
}

// startConn runs the inbound pipeline of c; connMu is held.
func (g *Gateway) startConn(c Conn, r *connRun) {
	ctx, stop := context.WithCancel(g.run.ctx)
	r.stop = stop
	run := g.run
	run.wg.Add(1)
	go func() {
		defer run.wg.Done()
		// Both contexts: a cancelled parent is seen before its children
		// are cancelled, and Run closes the connections on the parent.
		if err := g.inbound(ctx, c); err != nil && ctx.Err() == nil && run.ctx.Err() == nil {
			select {
			case run.errc <- err:
			default:
			}
			run.cancel()
		}
	}()
}

// Conns returns the outer connections received on.
func (g *Gateway) Conns() []Conn {
	g.connMu.Lock()
	defer g.connMu.Unlock()
	out := make([]Conn, 0, len(g.conns))
	for c := range g.conns {
		out = append(out, c)
	}
	return out
}

func (g *Gateway) isLocal(a netip.Addr) bool {
	for _, l := range g.opts.Local {
		if l == a {
			return true
		}
	}
	return false
}

func (g *Gateway) softExpired(s *esp.SA) {
	g.log.Warn("SA passed its soft lifetime", "spi", fmt.Sprintf("%#x", s.SPI()))
}

// Counters returns the gateway's own counters.
func (g *Gateway) Counters() *Counters { return &g.counters }

func (g *Gateway) drop(r Reason) { g.counters.Drops[r].Add(1) }

// Run moves packets until ctx ends or a device or connection fails. It owns
// the device and connections from then on and closes them when it returns.
func (g *Gateway) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &runner{ctx: ctx, cancel: cancel, errc: make(chan error, 1)}
	start := func(f func(context.Context) error) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				select {
				case r.errc <- err:
				default:
				}
				cancel()
			}
		}()
	}
	start(g.outbound)
	start(g.lifetimes)
	if g.opts.NATKeepalive.Every > 0 {
		start(g.keepalives)
	}
	for _, c := range g.icmpConns {
		if c.watch {
			start(func(ctx context.Context) error { g.readICMP(c); return nil })
		}
	}
	g.connMu.Lock()
	g.run = r
	for c, cr := range g.conns {
		g.startConn(c, cr)
	}
	g.connMu.Unlock()
	<-ctx.Done()
	// Closing the device and sockets is what unblocks the readers.
	g.dev.Close()
	g.connMu.Lock()
	g.run = nil
	for c := range g.conns {
		c.Close()
	}
	g.connMu.Unlock()
	for _, c := range g.icmpConns {
		c.pc.Close()
	}
	r.wg.Wait()
	select {
	case err := <-r.errc:
		return err
	default:
		return nil
	}
}

// lifetimes applies time-based lifetimes once a second rather than reading
// the clock per packet.
func (g *Gateway) lifetimes(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			st := g.view()
			for _, s := range st.all {
				s.CheckTime(now)
			}
			g.expirePMTU(st, now)
			g.release()
		}
	}
}
