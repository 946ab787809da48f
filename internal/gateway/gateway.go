// Package gateway owns the espgw data path: TUN packets out through the SPD,
// sequential numbering, parallel crypto on an offload engine and in-order
// transmit; ESP packets in through the SAD, replay check, crypto, inbound
// policy and TUN write. Every packet that does not come out is counted under
// a reason, on its SA when it has one and on the gateway otherwise.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
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
	// works inline (default DefaultInline; negative: never, every batch
	// goes through the workers).
	Inline int
	// StateDir, when set, is where outbound sequence numbers are reserved
	// so a restarted gateway resumes above them (see seqStore).
	StateDir string
	// ICMPSource are addresses ICMP too-big errors may come from (the TUN's
	// own addresses); the local outer addresses serve otherwise.
	ICMPSource []netip.Addr
	Log        *slog.Logger
}

// DefaultInline is Options.Inline's default: the batches a TUN read gives
// for anything but TCP (one packet each) and the short trains of a slow
// TCP flow run to completion on their reader; GSO trains of bulk TCP use
// the workers.
const DefaultInline = 8

// Gateway is one espgw gateway: a device, outer connections, an engine and
// the SAs and policies in force.
type Gateway struct {
	opts   Options
	log    *slog.Logger
	dev    Device
	conns  []Conn
	pick   func(*sa.SA) Conn
	engine offload.Engine

	state atomic.Pointer[state]
	mu    sync.Mutex // serialises Load

	counters Counters
	icmp     [][]byte // scratch for ICMP errors, used by the outbound reader only
}

// Counters are the gateway's own traffic counts and the drops no SA owns.
type Counters struct {
	TunIn, TunOut, WireIn, WireOut atomic.Uint64
	Drops                          [NumReasons]atomic.Uint64
}

// state is the SAs and policies in force, replaced whole on reload so the
// data path reads it without locks.
type state struct {
	spd *sa.SPD
	out map[uint32]*esp.SA // outbound SAs by SPI
	in  map[uint32]*esp.SA // inbound SAs by SPI
	all []*esp.SA
	// only is the outbound SA used when there is no SPD and exactly one
	// outbound tunnel SA: the common two-gateway test bed needs no policy.
	only *esp.SA
	// byPeer are the outbound transport-mode SAs by destination, which
	// without an SPD protect the gateway's own traffic to that peer.
	byPeer map[netip.Addr]*esp.SA
	// hdr are every SA's outer-header options and learned path MTU.
	hdr map[*esp.SA]*saHeader
}

// New builds a gateway. pick chooses the outer connection for an SA (raw
// ESP or UDP, IPv4 or IPv6); conns are all the connections to receive on.
func New(dev Device, conns []Conn, pick func(*sa.SA) Conn, engine offload.Engine, opts Options) *Gateway {
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Batch <= 0 {
		opts.Batch = max(dev.BatchSize(), 32)
	}
	switch {
	case opts.Inline == 0:
		opts.Inline = DefaultInline
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
	g := &Gateway{opts: opts, log: opts.Log, dev: dev, conns: conns, pick: pick, engine: engine,
		icmp: [][]byte{make([]byte, tunOffset+1500)}}
	g.state.Store(&state{out: map[uint32]*esp.SA{}, in: map[uint32]*esp.SA{}})
	return g
}

// Load puts a set of SAs and policies in force. SAs whose configuration is
// unchanged keep their working state — sequence numbers, replay windows,
// counters — so a reload does not drop the tunnel.
func (g *Gateway) Load(sas []*sa.SA, policies []sa.Policy) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.state.Load()
	next := &state{out: map[uint32]*esp.SA{}, in: map[uint32]*esp.SA{}, byPeer: map[netip.Addr]*esp.SA{}, hdr: map[*esp.SA]*saHeader{}}
	spd, err := sa.NewSPD(policies, sas)
	if err != nil {
		return fmt.Errorf("load policies: %w", err)
	}
	next.spd = spd
	var tunnels []*esp.SA
	for _, cfg := range sas {
		outbound, inbound := g.isLocal(cfg.Src), g.isLocal(cfg.Dst)
		if !outbound && !inbound {
			return fmt.Errorf("load %s: neither %s nor %s is a local address of this gateway", cfg, cfg.Src, cfg.Dst)
		}
		s := reuse(old, cfg)
		if s == nil {
			opts := esp.Options{OnSoftExpire: g.softExpired}
			run := cfg
			if outbound && g.opts.StateDir != "" {
				store := seqStore{dir: g.opts.StateDir}
				if run, err = store.resume(cfg); err != nil {
					return fmt.Errorf("load: %w", err)
				}
				if err := run.Validate(); err != nil {
					// A bound at the end of the sequence space (2^32-1 without
					// ESN) would make every packet seq-exhausted.
					return fmt.Errorf("load SA %#x resumed from %s: %w", cfg.SPI, store.path(cfg.SPI), err)
				}
				opts.Reserve = func(s *esp.SA, upTo uint64) error {
					err := store.reserve(s, upTo)
					if err != nil {
						g.log.Error("sequence numbers not persisted", "err", err)
					}
					return err
				}
			}
			s, err = esp.NewSA(run, g.engine, opts)
			if err != nil {
				return fmt.Errorf("load: %w", err)
			}
			if inbound && cfg.InitialSeq != 0 {
				// The peer's first packet is InitialSeq+1 (sa.SA): start
				// the window there, as the kernel's replay-seq does, so
				// that ESN high bits are inferred from it and not from 0.
				s.StartReceiveAfter(cfg.InitialSeq)
			}
		}
		next.all = append(next.all, s)
		// The options are read from the file just loaded, also for an SA
		// kept from before: a reload changes them without a new SA.
		var path *pathMTU
		if h := old.hdr[s]; h != nil {
			path = h.path
		}
		next.hdr[s] = newSAHeader(cfg, path)
		if outbound {
			next.out[cfg.SPI] = s
			if cfg.Mode == sa.Tunnel {
				tunnels = append(tunnels, s)
			} else if len(policies) == 0 {
				next.byPeer[cfg.Dst] = s
			}
		}
		if inbound {
			next.in[cfg.SPI] = s
		}
	}
	if len(policies) == 0 && len(tunnels) == 1 {
		next.only = tunnels[0]
	}
	g.state.Store(next)
	g.log.Info("SAs loaded", "sas", len(sas), "policies", len(policies), "outbound", len(next.out), "inbound", len(next.in))
	return nil
}

// reuse finds the working state of an SA whose configuration did not change.
func reuse(old *state, cfg *sa.SA) *esp.SA {
	for _, s := range old.all {
		if sameSA(s.Config, cfg) {
			return s
		}
	}
	return nil
}

func sameSA(a, b *sa.SA) bool {
	return a.SPI == b.SPI && a.Mode == b.Mode && a.Src == b.Src && a.Dst == b.Dst &&
		a.Encap == b.Encap && a.SrcPort == b.SrcPort && a.DstPort == b.DstPort &&
		a.Suite == b.Suite && string(a.EncKey) == string(b.EncKey) && string(a.AuthKey) == string(b.AuthKey) &&
		a.ESN == b.ESN && a.ReplayWindow == b.ReplayWindow
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

// SAs returns the working SAs in force.
func (g *Gateway) SAs() []*esp.SA { return g.state.Load().all }

// Counters returns the gateway's own counters.
func (g *Gateway) Counters() *Counters { return &g.counters }

func (g *Gateway) drop(r Reason) { g.counters.Drops[r].Add(1) }

// Run moves packets until ctx ends or a device or connection fails. It owns
// the device and connections from then on and closes them when it returns.
func (g *Gateway) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 1+len(g.conns))
	start := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errc <- err
				cancel()
			}
		}()
	}
	start(g.outbound)
	for _, c := range g.conns {
		start(func(ctx context.Context) error { return g.inbound(ctx, c) })
	}
	start(g.lifetimes)
	<-ctx.Done()
	// Closing the device and sockets is what unblocks the readers.
	g.dev.Close()
	for _, c := range g.conns {
		c.Close()
	}
	wg.Wait()
	select {
	case err := <-errc:
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
			st := g.state.Load()
			for _, s := range st.all {
				s.CheckTime(now)
			}
			g.expirePMTU(st, now)
		}
	}
}

// errClosed tells a pipeline stage its input is gone.
var errClosed = errors.New("gateway: closed")
