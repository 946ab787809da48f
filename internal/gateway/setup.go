package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/transport"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
	"github.com/espgw/espgw/tun"
)

// Runtime is a gateway built from a Config: its TUN device, sockets and
// engine, ready to Run.
type Runtime struct {
	*Gateway
	Config *Config
	TUN    *tun.Device
	Engine offload.Engine
	// conns are the outer sockets by what they carry, replaced whole when
	// a change opens or closes one, so the data path reads them without
	// a lock.
	conns atomic.Pointer[map[connKey]*transport.Conn]
	// xdps are the AF_XDP connections that send raw ESP in place of the
	// raw socket of the same key (wan-io), replaced whole like conns.
	xdps  atomic.Pointer[map[connKey]*xdp.Conn]
	rules []*netlink.Rule
	// nsClaim and stateClaim keep a second gateway with any of these SAs
	// in this namespace, or outbound in this state directory, from
	// starting (stateClaim is nil without one).
	nsClaim, stateClaim *saClaim
	// mtu is the TUN MTU the gateway started with: the most a change can
	// give it back, as the buffers were sized for it.
	mtu int
	// changeMu serialises reloads and control-socket changes, which open
	// and close sockets around the gateway's own change; uses counts the
	// SAs in force on each socket, so one no SA uses is closed.
	changeMu sync.Mutex
	uses     map[connKey]int
	// ike is the IKE daemon of the ike: section, nil without one.
	ike *ikeDaemon
	// local is Config.Local, which no reload changes: what the data path
	// reads (pick) while a reload replaces Config.
	local []netip.Addr
}

// connKey is what an outer socket carries: a family, an encapsulation and,
// for UDP, its local port.
type connKey struct {
	v6    bool
	encap sa.Encap
	port  uint16
}

// keyFor is the socket an SA uses, seen from this gateway: an outbound SA
// sends from its source port, an inbound one arrives at its destination
// port.
func keyFor(local []netip.Addr, s *sa.SA) connKey {
	k := connKey{v6: s.Dst.Is6(), encap: s.Encap}
	if s.Encap == sa.EncapUDP {
		k.port = s.DstPort
		if containsAddr(local, s.Src) {
			k.port = s.SrcPort
		}
		if k.port == 0 {
			k.port = sa.DefaultNATTPort
		}
	}
	return k
}

// neededConns are the sockets a set of SAs uses.
func neededConns(local []netip.Addr, sas []*sa.SA) map[connKey]bool {
	need := map[connKey]bool{}
	for _, s := range sas {
		need[keyFor(local, s)] = true
	}
	return need
}

// Start builds everything a Config asks for in the current network
// namespace: the engine (opened from cfg.Catalog, or engines.Product when
// that is nil), one socket per outer family and encapsulation the
// SAs use, the TUN device with its MTU, addresses and routes.
func Start(cfg *Config, log *slog.Logger) (rt *Runtime, err error) {
	if log == nil {
		log = slog.Default()
	}
	rt = &Runtime{Config: cfg, local: cfg.Local}
	rt.conns.Store(&map[connKey]*transport.Conn{})
	rt.xdps.Store(&map[connKey]*xdp.Conn{})
	defer func() {
		if err != nil {
			rt.Close()
		}
	}()
	// Before anything is set up: a second gateway with any of these SAs
	// in this namespace stops here, having touched nothing of the first's.
	ns, err := namespaceName()
	if err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	if rt.nsClaim, err = claimSAs(filepath.Join(DefaultLockRoot, ns), "network namespace "+ns, cfg.SAs); err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	cat := cfg.Catalog
	if cat == nil {
		cat = engines.Product{}
	}
	rt.Engine, err = cat.Open(cfg.Engine, engines.Options{Workers: cfg.Workers})
	if err != nil {
		return rt, fmt.Errorf("%s: engine: %w", cfg.File, err)
	}
	conns := map[connKey]*transport.Conn{}
	xdps := map[connKey]*xdp.Conn{}
	need := neededConns(cfg.Local, cfg.SAs)
	if cfg.IKE != nil {
		if rt.ike, err = newIKEDaemon(rt, log); err != nil {
			return rt, err
		}
		maps.Copy(need, cfg.IKE.nattKeys())
	}
	for k := range need {
		w, err := rt.open(k, cfg)
		if err == nil {
			conns[k] = w
			var x *xdp.Conn
			if x, err = rt.openXDP(k, w, cfg, log, xdps); x != nil {
				xdps[k] = x
			}
		}
		if err != nil {
			for _, x := range xdps {
				x.Close()
			}
			for _, w := range conns {
				w.Close()
			}
			return rt, err
		}
	}
	rt.conns.Store(&conns)
	rt.xdps.Store(&xdps)
	mtu, err := tunMTU(cfg)
	if err != nil {
		return rt, err
	}
	rt.mtu = mtu
	mode := tun.OffloadAuto
	if !cfg.TUN.Offloads {
		mode = tun.OffloadOff
	}
	rt.TUN, err = tun.Create(cfg.TUN.Name, tun.Options{MTU: mtu, Offloads: mode, QueueLen: cfg.TUN.Queue, Log: log})
	if err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	for _, a := range cfg.TUN.Addresses {
		if err := rt.TUN.AddAddress(a); err != nil {
			return rt, fmt.Errorf("%s: tun address %s: %w", cfg.File, a, err)
		}
	}
	// No IPv6 link-local address on the TUN: the kernel would otherwise send
	// router solicitations and MLD reports into the tunnel. Routes need none.
	quiet := "/proc/sys/net/ipv6/conf/" + cfg.TUN.Name + "/addr_gen_mode"
	if err := os.WriteFile(quiet, []byte("1"), 0o644); err != nil && !os.IsNotExist(err) {
		log.Warn("could not turn off IPv6 link-local addressing on the TUN", "err", err)
	}
	if err := rt.TUN.Up(); err != nil {
		return rt, fmt.Errorf("%s: tun up: %w", cfg.File, err)
	}
	for _, r := range cfg.TUN.Routes {
		if err := rt.TUN.AddRoute(tun.Route{Dst: r}); err != nil {
			return rt, fmt.Errorf("%s: tun route %s: %w", cfg.File, r, err)
		}
	}
	if err := cfg.Reassembly.Apply(); err != nil {
		return rt, fmt.Errorf("%s: reassembly: %w", cfg.File, err)
	}
	rt.rules, err = routeTransportPeers(cfg.TUN.Name, transportPeers(cfg))
	if err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	stateDir, err := resolveStateDir(cfg, DefaultStateRoot)
	if err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return rt, fmt.Errorf("%s: state-dir: %w", cfg.File, err)
		}
		// Gateways sharing a state directory share its journal, which
		// knows an SA by SPI and destination: one sender per SA.
		claims, err := stateClaims(DefaultLockRoot, stateDir)
		if err != nil {
			return rt, fmt.Errorf("%s: state-dir: %w", cfg.File, err)
		}
		if rt.stateClaim, err = claimSAs(claims, "state directory "+stateDir, outboundOf(cfg.Local, cfg.SAs)); err != nil {
			return rt, fmt.Errorf("%s: %w", cfg.File, err)
		}
		log.Info("outbound sequence numbers are reserved in the state directory", "dir", stateDir)
		var fs unix.Statfs_t
		if unix.Statfs(stateDir, &fs) == nil && fs.Type == unix.TMPFS_MAGIC {
			log.Warn("the state directory is on a tmpfs: a reboot loses the sequence reservations, and a peer that kept its SAs then drops this gateway's packets as outside-window", "dir", stateDir)
		}
	} else {
		log.Warn("state-dir: off: sequence numbers are not persisted; after a crash the peer drops this gateway's packets as outside-window until its old highest is passed")
	}
	var list []Conn
	for _, w := range conns {
		list = append(list, w)
	}
	for _, x := range xdps {
		list = append(list, x)
	}
	// ICMP errors written into the TUN come from the TUN's addresses, else
	// the outer ones, else the TUN's link-local one (the gateway turns
	// those off, so there is one only where the host's settings gave it).
	sources := append(prefixAddrs(cfg.TUN.Addresses), cfg.Local...)
	if ll, err := rt.TUN.LinkLocal(); err != nil {
		log.Debug("read the TUN's link-local addresses", "err", err)
	} else {
		sources = append(sources, ll...)
	}
	rt.Gateway = New(rt.TUN, list, rt.pick, rt.Engine, Options{
		Local: cfg.Local, InnerMTU: mtu, OuterMTU: cfg.OuterMTU, PMTUExpiry: cfg.PMTUExpiry, ICMPSource: sources, NATKeepalive: cfg.NATKeepalive, StateDir: stateDir, SequenceSkip: cfg.SequenceSkip, Workers: cfg.Workers, Batch: cfg.Batch, Inline: cfg.Inline, Log: log,
	})
	if err := rt.Load(cfg.SAs, cfg.SPD); err != nil {
		return rt, fmt.Errorf("%s: %w", cfg.File, err)
	}
	if rt.ike != nil {
		if err := rt.ike.open(); err != nil {
			return rt, err
		}
		f := rt.ike.stats
		rt.Gateway.ikeStats.Store(&f)
	}
	rt.countUses(cfg.SAs)
	for _, s := range cfg.SAs {
		if err := rt.watchICMP(s.Dst.Is6()); err != nil {
			return rt, fmt.Errorf("%s: %w", cfg.File, err)
		}
	}
	// Too-big errors about inner packets of the other family (IPv6 in an
	// IPv4 tunnel) leave from the host too.
	for _, v6 := range []bool{false, true} {
		if err := rt.sendICMPFrom(v6); err != nil {
			log.Warn("ICMP too-big errors of this family go into the TUN instead of leaving from the host", "ipv6", v6, "err", err)
		}
	}
	// Reading and loading the SA file leaves its garbage in the heap, and
	// the runtime gives freed memory back to the kernel only over minutes:
	// the caller gives it back once the gateway runs (ReturnLoadMemory).
	log.Info("gateway ready", "tun", cfg.TUN.Name, "mtu", mtu, "offloads", rt.TUN.Offloads(), "engine", rt.Engine.Name(), "sockets", len(list))
	return rt, nil
}

// ReturnLoadMemory collects the garbage that reading and loading the SA
// file left in the heap and gives its memory back to the kernel, which the
// runtime would do only over minutes: a gateway of 100,000 SAs would hold
// twice what it uses. It is a full collection of the heap (seconds of CPU
// at 100,000 SAs on a loaded machine), so a gateway runs it beside its data
// path once that is up rather than before it, and logs when it is done.
func ReturnLoadMemory(log *slog.Logger) {
	start := time.Now()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	log.Info("start-up garbage returned to the kernel", "took", time.Since(start).Round(time.Millisecond), "heap-in-use", m.HeapInuse)
}

// tunMTU is the TUN MTU of a config: the one it gives, or the largest inner
// packet every SA — and every CHILD_SA its IKE connections can negotiate —
// carries in the outer MTU.
func tunMTU(cfg *Config) (int, error) {
	if cfg.TUN.MTU != 0 {
		return cfg.TUN.MTU, nil
	}
	mtu := 0
	for _, s := range append(slices.Clone(cfg.SAs), ikeChildShapes(cfg.IKE)...) {
		m, err := InnerMTU(cfg.OuterMTU, s)
		if err != nil {
			return 0, fmt.Errorf("%s: MTU for %s: %w", cfg.File, s, err)
		}
		if mtu == 0 || m < mtu {
			mtu = m
		}
	}
	if mtu == 0 {
		mtu = cfg.OuterMTU - 100
	}
	return mtu, nil
}

// ikeChildShapes are the outbound CHILD_SAs the IKE connections can
// negotiate, without keys: one per suite of the children's ESP proposals
// and peer address family, UDP-encapsulated since NAT-T may float them.
func ikeChildShapes(cfg *IKEConfig) []*sa.SA {
	if cfg == nil {
		return nil
	}
	var out []*sa.SA
	for _, c := range cfg.Connections {
		peers := c.RemoteAddrs
		if len(peers) == 0 {
			peers = c.LocalAddrs
		}
		for _, ch := range c.Children {
			for _, p := range ch.ESPProposals {
				for _, suite := range ike.ESPSuites(p) {
					for _, dst := range peers {
						out = append(out, &sa.SA{Mode: sa.Tunnel, Dst: dst, Suite: suite, Encap: sa.EncapUDP})
					}
				}
			}
		}
	}
	return out
}

func (rt *Runtime) open(k connKey, cfg *Config) (*transport.Conn, error) {
	local := netip.IPv4Unspecified()
	if k.v6 {
		local = netip.IPv6Unspecified()
	}
	kind := transport.RawESP
	if k.encap == sa.EncapUDP {
		kind = transport.UDPEncap
	}
	tc := transport.Config{Kind: kind, Local: netip.AddrPortFrom(local, k.port), GSO: kind == transport.UDPEncap, GRO: kind == transport.UDPEncap, Mark: fwMark}
	if rt.ike != nil && rt.ike.natt[k] {
		tc.NonESP = rt.ike.nonESP(k.v6)
	}
	c, err := transport.Open(tc)
	if err != nil {
		return nil, fmt.Errorf("%s: open %s socket: %w", cfg.File, kind, err)
	}
	return c, nil
}

// pick is the socket an outbound SA sends on — the AF_XDP connection where
// wan-io put raw ESP on one; nil (not a nil *transport.Conn) when there is
// none, so the gateway refuses the SA instead of crashing on it.
func (rt *Runtime) pick(s *sa.SA) Conn {
	k := keyFor(rt.local, s)
	if x := (*rt.xdps.Load())[k]; x != nil {
		return x
	}
	if w := (*rt.conns.Load())[k]; w != nil {
		return w
	}
	return nil
}

// Run runs the gateway, and its IKE daemon, until ctx ends.
func (rt *Runtime) Run(ctx context.Context) error {
	if rt.ike == nil {
		return rt.Gateway.Run(ctx)
	}
	ikeCtx, stopIKE := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		rt.ike.run(ikeCtx)
	}()
	// The IKE SAs are deleted with their peers before the gateway closes
	// its sockets.
	gwCtx, stopGW := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { stopIKE(); <-done; stopGW() })
	defer stop()
	err := rt.Gateway.Run(gwCtx)
	stopIKE()
	<-done
	stopGW()
	return err
}

// Reload reads the configuration again and puts its SAs, policies and
// routes in force, or refuses the whole of it with the reason: a change of
// anything else (the TUN, the engine, the local addresses…) needs a
// restart and is never silently ignored. Sockets are opened for what the
// new SAs need before they go in force, and closed once no SA uses them;
// the TUN MTU follows the SAs' overhead down (and back up to where it
// started).
func (rt *Runtime) Reload() error {
	next, err := rt.Config.Reload()
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	// The CHILD_SAs the IKE daemon put in force stay in force: they are
	// not in the file. No negotiation puts one in or out meanwhile.
	sas, spd := next.SAs, next.SPD
	if rt.ike != nil {
		rt.ike.changeMu.Lock()
		defer rt.ike.changeMu.Unlock()
		ikeSAs, ikeSPD := rt.ike.inForce()
		sas, spd = append(slices.Clone(sas), ikeSAs...), append(slices.Clone(spd), ikeSPD...)
	}
	rt.changeMu.Lock()
	defer rt.changeMu.Unlock()
	if err := rt.Config.restartOnly(next); err != nil {
		return fmt.Errorf("reload %s: %w", next.File, err)
	}
	mtu, err := tunMTU(next)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if mtu > rt.mtu {
		mtu = rt.mtu
	}
	if peers := transportPeers(next); !slices.Equal(peers, transportPeers(rt.Config)) {
		return fmt.Errorf("reload %s: the transport-mode peers change (%v to %v): restart the gateway to apply it", next.File, transportPeers(rt.Config), peers)
	}
	opened, err := rt.openFor(sas)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	oldMTU := rt.InnerMTU()
	// A smaller MTU goes in force before the SAs that need it, a larger
	// one after them: no packet is ever too big for the SA it meets.
	if mtu < oldMTU {
		if err := rt.setMTU(mtu); err != nil {
			rt.closeConns(opened)
			return fmt.Errorf("reload: %w", err)
		}
	}
	// The claims follow the SA set: an SA another gateway here runs is
	// refused like at start.
	err = rt.nsClaim.replace(sas, func() error {
		return rt.stateClaim.replace(outboundOf(rt.Config.Local, sas), func() error { return rt.Load(sas, spd) })
	})
	if err != nil {
		rt.closeConns(opened)
		if mtu < oldMTU {
			rt.setMTU(oldMTU)
		}
		return fmt.Errorf("reload %s: %w", next.File, err)
	}
	if mtu > oldMTU {
		if err := rt.setMTU(mtu); err != nil {
			rt.Gateway.log.Warn("reload: the TUN MTU stays lower than the SAs allow", "err", err)
		}
	}
	rt.countUses(sas)
	rt.closeUnused()
	if err := rt.syncRoutes(rt.Config.TUN.Routes, next.TUN.Routes); err != nil {
		return fmt.Errorf("reload %s: the SAs are in force, but: %w", next.File, err)
	}
	rt.Config = next
	debug.FreeOSMemory() // the new file's parse garbage, as at start
	return nil
}

// openFor opens the sockets sas need that are not open, and returns them.
func (rt *Runtime) openFor(sas []*sa.SA) ([]connKey, error) {
	cur := *rt.conns.Load()
	next := maps.Clone(cur)
	nextX := maps.Clone(*rt.xdps.Load())
	var opened []connKey
	for k := range neededConns(rt.Config.Local, sas) {
		if next[k] != nil {
			continue
		}
		w, err := rt.open(k, rt.Config)
		var x *xdp.Conn
		if err == nil {
			if x, err = rt.openXDP(k, w, rt.Config, rt.Gateway.log, nextX); err != nil {
				w.Close()
			}
		}
		if err != nil {
			for _, k := range opened {
				undoXDP(k, nextX[k], *rt.xdps.Load())
				next[k].Close()
			}
			return nil, err
		}
		next[k] = w
		if x != nil {
			nextX[k] = x
		}
		opened = append(opened, k)
	}
	if len(opened) == 0 {
		return nil, nil
	}
	rt.xdps.Store(&nextX)
	rt.conns.Store(&next)
	for _, k := range opened {
		rt.AddConn(next[k])
		if x := nextX[k]; x != nil {
			rt.AddConn(x)
		}
	}
	rt.Gateway.log.Info("outer sockets opened", "count", len(opened))
	return opened, nil
}

// closeConns closes sockets openFor opened for a change that failed.
func (rt *Runtime) closeConns(keys []connKey) {
	if len(keys) == 0 {
		return
	}
	next := maps.Clone(*rt.conns.Load())
	nextX := maps.Clone(*rt.xdps.Load())
	var gone []Conn
	dropped := map[*xdp.Conn][]bool{}
	for _, k := range keys {
		if x := nextX[k]; x != nil {
			delete(nextX, k)
			dropped[x] = append(dropped[x], k.v6)
		}
	}
	for x := range dropped {
		if sharedXDP(nextX, x) {
			continue
		}
		delete(dropped, x)
		gone = append(gone, x) // before the raw sockets it falls back on
	}
	for _, k := range keys {
		gone = append(gone, next[k])
		delete(next, k)
	}
	rt.xdps.Store(&nextX)
	rt.conns.Store(&next)
	// An AF_XDP connection another key still uses stops serving only the
	// families of the keys gone.
	for x, families := range dropped {
		for _, v6 := range families {
			if _, err := x.Drop(v6); err != nil {
				rt.Gateway.log.Warn("AF_XDP: stop steering a family no SA uses", "device", x.Device(), "ipv6", v6, "err", err)
			}
		}
	}
	for _, w := range gone {
		rt.RemoveConn(w)
	}
}

// countUses sets the SA count of every socket from the SAs in force.
func (rt *Runtime) countUses(sas []*sa.SA) {
	rt.uses = map[connKey]int{}
	for _, s := range sas {
		rt.uses[keyFor(rt.Config.Local, s)]++
	}
}

// closeUnused closes the sockets no SA in force uses (the IKE daemon's
// port-4500 sockets stay).
func (rt *Runtime) closeUnused() {
	var unused []connKey
	var pinned map[connKey]bool
	if rt.ike != nil {
		pinned = rt.ike.natt
	}
	for k := range *rt.conns.Load() {
		if rt.uses[k] == 0 && !pinned[k] {
			unused = append(unused, k)
		}
	}
	rt.closeConns(unused)
}

// ApplyChange makes one change of the SAs and policies in force (the
// control socket's), whole or not at all: the sockets the new SAs need are
// opened first, and those no SA uses any more closed after; the TUN MTU
// falls if a new SA carries less.
func (rt *Runtime) ApplyChange(c Change) error {
	rt.changeMu.Lock()
	defer rt.changeMu.Unlock()
	if err := rt.Config.CheckSAs(c.Add); err != nil {
		return err
	}
	var gone []*sa.SA
	for _, id := range c.Del {
		cfg, err := rt.Find(id)
		if err != nil {
			return fmt.Errorf("delete %s: %w", id, err)
		}
		gone = append(gone, cfg)
	}
	mtu := rt.InnerMTU()
	if rt.Config.TUN.MTU == 0 {
		for _, s := range c.Add {
			if m, err := InnerMTU(rt.Config.OuterMTU, s); err == nil && m < mtu {
				mtu = m
			}
		}
	}
	opened, err := rt.openFor(c.Add)
	if err != nil {
		return err
	}
	if mtu < rt.InnerMTU() {
		if err := rt.setMTU(mtu); err != nil {
			rt.closeConns(opened)
			return err
		}
	}
	var delKeys []saKey
	for _, s := range gone {
		delKeys = append(delKeys, keyOf(s))
	}
	err = rt.nsClaim.change(c.Add, delKeys, rt.inForce, func() error {
		return rt.stateClaim.change(outboundOf(rt.Config.Local, c.Add), delKeys, rt.outboundInForce, func() error { return rt.Apply(c) })
	})
	if err != nil {
		rt.closeConns(opened)
		return err
	}
	for _, s := range gone {
		rt.uses[keyFor(rt.Config.Local, s)]--
	}
	for _, s := range c.Add {
		rt.uses[keyFor(rt.Config.Local, s)]++
	}
	if len(gone) > 0 {
		rt.closeUnused()
	}
	return nil
}

// inForce reports whether the gateway has the SA k in force: what its
// network namespace's claim holds.
func (rt *Runtime) inForce(k saKey) bool {
	_, err := rt.Find(SAID{SPI: k.spi, Dst: k.dst})
	return err == nil
}

// outboundInForce reports whether the gateway sends under the SA k: what
// its state directory's claim holds.
func (rt *Runtime) outboundInForce(k saKey) bool {
	s, err := rt.Find(SAID{SPI: k.spi, Dst: k.dst})
	return err == nil && containsAddr(rt.Config.Local, s.Src)
}

// setMTU sets the TUN's MTU and the gateway's.
func (rt *Runtime) setMTU(mtu int) error {
	if rt.Config.TUN.MTU != 0 || mtu == rt.InnerMTU() {
		return nil
	}
	if err := rt.SetInnerMTU(mtu); err != nil {
		return err
	}
	if err := rt.TUN.SetMTU(mtu); err != nil {
		return fmt.Errorf("set TUN MTU %d: %w", mtu, err)
	}
	rt.Gateway.log.Info("TUN MTU changed for the SAs in force", "mtu", mtu)
	return nil
}

// syncRoutes adds the routes of want the TUN lacks and removes those of
// have no longer wanted.
func (rt *Runtime) syncRoutes(have, want []netip.Prefix) error {
	var errs []error
	for _, r := range want {
		if !slices.Contains(have, r) {
			if err := rt.TUN.AddRoute(tun.Route{Dst: r}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, r := range have {
		if !slices.Contains(want, r) {
			if err := rt.TUN.DelRoute(tun.Route{Dst: r}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Close releases what Start built and Run did not close.
func (rt *Runtime) Close() {
	if rt.ike != nil {
		rt.ike.close()
	}
	for _, r := range rt.rules {
		netlink.RuleDel(r)
	}
	if rt.Gateway == nil {
		if m := rt.xdps.Load(); m != nil {
			for _, x := range *m {
				x.Close()
			}
		}
		if m := rt.conns.Load(); m != nil {
			for _, c := range *m {
				c.Close()
			}
		}
		if rt.TUN != nil {
			rt.TUN.Close()
		}
	}
	if rt.Gateway != nil {
		if err := rt.Gateway.Close(); err != nil {
			rt.Gateway.log.Warn("close the sequence journal", "err", err)
		}
	}
	if rt.Engine != nil {
		rt.Engine.Close()
	}
	rt.stateClaim.release()
	rt.nsClaim.release()
}

// outboundOf are the SAs of sas that a gateway with the local addresses
// sends on.
func outboundOf(local []netip.Addr, sas []*sa.SA) []*sa.SA {
	var out []*sa.SA
	for _, s := range sas {
		if containsAddr(local, s.Src) {
			out = append(out, s)
		}
	}
	return out
}

// InnerMTU is the largest inner packet an SA carries in outerMTU bytes.
func InnerMTU(outerMTU int, s *sa.SA) (int, error) {
	o := tun.Overhead{OuterIP: 20, ESPHeader: esp.HeaderLen, IV: s.Suite.IVLen(), Block: s.Suite.BlockLen(), ICV: s.Suite.ICVLen()}
	if s.Dst.Is6() {
		o.OuterIP = 40
	}
	if s.Encap == sa.EncapUDP {
		o.UDP = 8
	}
	m, err := tun.InnerMTU(outerMTU, o)
	if s.Mode == sa.Transport {
		// The packet keeps its own header: no outer one is added.
		m += o.OuterIP
	}
	return m, err
}

func prefixAddrs(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		out = append(out, p.Addr())
	}
	return out
}

// watchICMP opens the raw ICMP socket of one family (once) whose
// fragmentation-needed or packet-too-big reports lower SAs' path MTUs.
func (rt *Runtime) watchICMP(v6 bool) error {
	for _, w := range rt.Gateway.icmpConns {
		if w.v6 == v6 && w.watch {
			return nil
		}
	}
	pc, err := openICMP(v6, true)
	if err != nil {
		return fmt.Errorf("open ICMP socket for path MTU reports: %w", err)
	}
	rt.Gateway.icmpConns = append(rt.Gateway.icmpConns, icmpConn{pc: pc, v6: v6, watch: true})
	return nil
}

// sendICMPFrom opens a raw ICMP socket of one family that only sends
// (too-big errors), unless one of the family is open already.
func (rt *Runtime) sendICMPFrom(v6 bool) error {
	if rt.Gateway.icmpSender(v6) != nil {
		return nil
	}
	pc, err := openICMP(v6, false)
	if err != nil {
		return fmt.Errorf("open ICMP socket to send too-big errors: %w", err)
	}
	rt.Gateway.icmpConns = append(rt.Gateway.icmpConns, icmpConn{pc: pc, v6: v6})
	return nil
}

// openICMP opens a raw ICMP socket of one family that receives only the
// path MTU reports (reports) or nothing: it would otherwise copy every
// ICMP message the host receives.
func openICMP(v6, reports bool) (net.PacketConn, error) {
	network, addr := "ip4:icmp", "0.0.0.0"
	if v6 {
		network, addr = "ip6:ipv6-icmp", "::"
	}
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		return nil, err
	}
	if v6 {
		var f ipv6.ICMPFilter
		f.SetAll(true)
		if reports {
			f.Accept(ipv6.ICMPTypePacketTooBig)
		}
		err = ipv6.NewPacketConn(pc).SetICMPFilter(&f)
	} else {
		var f ipv4.ICMPFilter
		f.SetAll(true)
		if reports {
			f.Accept(ipv4.ICMPTypeDestinationUnreachable)
		}
		err = ipv4.NewPacketConn(pc).SetICMPFilter(&f)
	}
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("filter: %w", err)
	}
	return pc, nil
}
