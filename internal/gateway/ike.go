package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/sa"
)

// ikeDaemon runs a gateway's IKE connections in its process: the IKE
// sockets (port 500 of each local address, and port 4500 shared with the
// ESP-in-UDP socket, whose non-ESP-marked datagrams it is given), one
// ike.Endpoint per connection as initiator and responder, and the timers
// of rekeys, lifetimes, liveness checks and re-establishment. Every
// negotiated CHILD_SA goes in force through Runtime.ApplyChange, the
// path of `espgw sa add`.
type ikeDaemon struct {
	rt    *Runtime
	cfg   *IKEConfig
	log   *slog.Logger
	conns []*ikeConn
	// sockets are the port-500 sockets by local address.
	sockets map[netip.Addr]*net.UDPConn
	in      chan ike.Datagram
	// queueFull counts IKE datagrams dropped because the daemon was
	// behind (the queue of in is full).
	queueFull atomic.Uint64

	// mu guards what follows, and the tracks of every connection.
	mu sync.Mutex
	// children are the CHILD_SAs in force, by the ike package's child.
	children map[*ike.Child]*childTrack
	// unknownPeer counts IKE datagrams from a peer no connection names.
	unknownPeer uint64
	// expired are the CHILD_SAs taken out of force at life_time whose
	// deletion with the peer is under way: not to be put in force again.
	expired map[*ike.Child]bool
	// changeMu serialises the daemon's changes of the SAs in force.
	changeMu sync.Mutex
	filesMu  sync.Mutex
	wg       sync.WaitGroup
}

// ikeConn is one connection: its endpoint and what the daemon tracks of
// its IKE SAs.
type ikeConn struct {
	d     *ikeDaemon
	cfg   *IKEConnection
	ep    *ike.Endpoint
	local netip.Addr
	sas   map[*ike.IKESA]*saTrack
	// policies are the protect policies in force for the connection's
	// child, naming policyOut.
	policies  []sa.Policy
	policyOut uint32
	// initiating is set while an initiation runs; nextTry is when the
	// next may start after failures.
	initiating bool
	failures   int
	nextTry    time.Time
	stats      ikeConnCounters
}

// ikeConnCounters are a connection's own counts, beside its endpoint's.
type ikeConnCounters struct {
	initiated, established, failed atomic.Uint64
	childRekeys, ikeRekeys         atomic.Uint64
	dpdFailures, expired           atomic.Uint64
	installFailures                atomic.Uint64
}

// saTrack is what the daemon keeps of one IKE SA.
type saTrack struct {
	established time.Time
	rekeyAt     time.Time
	lastCheck   time.Time
	busy        bool
}

// childTrack is a CHILD_SA in force.
type childTrack struct {
	conn              *ikeConn
	in, out           *sa.SA
	installed         time.Time
	rekeyAt, expireAt time.Time
	busy              bool
	owner             *ike.IKESA
}

// ikeQueue is the most IKE datagrams waiting for the daemon.
const ikeQueue = 256

// ikeTick is how often the daemon looks at its timers.
const ikeTick = 250 * time.Millisecond

// newIKEDaemon builds the daemon of cfg.IKE; the sockets are opened by
// open.
func newIKEDaemon(rt *Runtime, log *slog.Logger) (*ikeDaemon, error) {
	d := &ikeDaemon{rt: rt, cfg: rt.Config.IKE, log: log.With("part", "ike"), sockets: map[netip.Addr]*net.UDPConn{},
		in: make(chan ike.Datagram, ikeQueue), children: map[*ike.Child]*childTrack{}, expired: map[*ike.Child]bool{}}
	for _, cc := range d.cfg.Connections {
		c := &ikeConn{d: d, cfg: cc, local: cc.LocalAddrs[0], sas: map[*ike.IKESA]*saTrack{}}
		icfg := cc.ikeConfig()
		icfg.Log = d.log.With("connection", cc.Name)
		icfg.OnChild = func(s *ike.IKESA, ch *ike.Child) { c.install(s, ch, false) }
		icfg.OnRekey = func(s *ike.IKESA, _, ch *ike.Child) { c.install(s, ch, true) }
		icfg.OnPeerMoved = func(_ *ike.IKESA, chs []*ike.Child) { c.follow(chs) }
		ep, err := ike.NewEndpoint(icfg, c.local, d.send)
		if err != nil {
			return nil, fmt.Errorf("%s: ike connection %s: %w", rt.Config.File, cc.Name, err)
		}
		c.ep = ep
		d.conns = append(d.conns, c)
	}
	return d, nil
}

// nattKeys are the port-4500 sockets the daemon needs: one per family of
// its local addresses.
func (ic *IKEConfig) nattKeys() map[connKey]bool {
	need := map[connKey]bool{}
	for _, c := range ic.Connections {
		for _, a := range c.LocalAddrs {
			need[connKey{v6: a.Is6() && !a.Is4In6(), encap: sa.EncapUDP, port: sa.DefaultNATTPort}] = true
		}
	}
	return need
}

// open opens the port-500 sockets.
func (d *ikeDaemon) open() error {
	for _, c := range d.conns {
		for _, a := range c.cfg.LocalAddrs {
			if d.sockets[a] != nil {
				continue
			}
			u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, ike.Port)))
			if err != nil {
				d.close()
				return fmt.Errorf("%s: IKE socket on %s: %w", d.rt.Config.File, netip.AddrPortFrom(a, ike.Port), err)
			}
			d.sockets[a] = u
		}
	}
	return nil
}

func (d *ikeDaemon) close() {
	for _, u := range d.sockets {
		u.Close()
	}
}

// nonESP takes an IKE message that arrived on a port-4500 socket.
func (d *ikeDaemon) nonESP(v6 bool) func([]byte, netip.AddrPort) {
	return func(data []byte, from netip.AddrPort) {
		var local netip.Addr
		for _, c := range d.conns {
			if c.local.Is6() == v6 {
				local = c.local
				break
			}
		}
		d.queue(ike.Datagram{Data: append([]byte(nil), data...), Local: netip.AddrPortFrom(local, ike.NATTPort), Remote: from})
	}
}

func (d *ikeDaemon) queue(dg ike.Datagram) {
	select {
	case d.in <- dg:
	default:
		d.queueFull.Add(1)
	}
}

// send is the endpoints' way out: port 500 from the local address's
// socket, port 4500 behind the non-ESP marker from the ESP-in-UDP socket.
func (d *ikeDaemon) send(dg ike.Datagram) error {
	if dg.Local.Port() == ike.NATTPort {
		k := connKey{v6: dg.Remote.Addr().Is6(), encap: sa.EncapUDP, port: sa.DefaultNATTPort}
		w := (*d.rt.conns.Load())[k]
		if w == nil {
			return fmt.Errorf("send IKE message to %s: no port-4500 socket", dg.Remote)
		}
		return w.SendNonESP(dg.Data, dg.Remote)
	}
	u := d.sockets[dg.Local.Addr()]
	if u == nil {
		return fmt.Errorf("send IKE message from %s: no IKE socket there", dg.Local)
	}
	if _, err := u.WriteToUDPAddrPort(dg.Data, dg.Remote); err != nil {
		return fmt.Errorf("send IKE message to %s: %w", dg.Remote, err)
	}
	return nil
}

// run serves the sockets and the timers until ctx ends, then deletes the
// IKE SAs with their peers.
func (d *ikeDaemon) run(ctx context.Context) {
	for a, u := range d.sockets {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			buf := make([]byte, ike.MaxMessageLen)
			for {
				n, from, err := u.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
				d.queue(ike.Datagram{Data: append([]byte(nil), buf[:n]...), Local: netip.AddrPortFrom(a, ike.Port), Remote: from})
			}
		}()
	}
	tick := time.NewTicker(ikeTick)
	defer tick.Stop()
	d.tick(ctx, time.Now())
	for {
		select {
		case <-ctx.Done():
			d.shutdown()
			return
		case dg := <-d.in:
			if c := d.connFor(dg); c != nil {
				c.ep.Handle(dg)
				d.reconcile()
			}
		case now := <-tick.C:
			d.tick(ctx, now)
		}
	}
}

// shutdown deletes every IKE SA with its peer (a second at most) and
// closes the sockets.
func (d *ikeDaemon) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range d.conns {
		for _, s := range c.ep.SAs() {
			if s.State() == ike.StateEstablished {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.Delete(ctx)
				}()
			}
		}
	}
	// Answers to the deletes arrive through the queue.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for waiting := true; waiting; {
		select {
		case dg := <-d.in:
			if c := d.connFor(dg); c != nil {
				c.ep.Handle(dg)
			}
		case <-done:
			waiting = false
		}
	}
	d.close()
	d.wg.Wait()
}

// connFor is the connection a datagram belongs to: the first whose local
// address it arrived at and whose remote_addrs hold its source.
func (d *ikeDaemon) connFor(dg ike.Datagram) *ikeConn {
	for _, c := range d.conns {
		if !slices.Contains(c.cfg.LocalAddrs, dg.Local.Addr()) {
			continue
		}
		if len(c.cfg.RemoteAddrs) == 0 || slices.Contains(c.cfg.RemoteAddrs, dg.Remote.Addr()) {
			return c
		}
	}
	d.mu.Lock()
	d.unknownPeer++
	d.mu.Unlock()
	return nil
}

// jitter is d less a random part of up to spread.
func jitter(d, spread time.Duration) time.Duration {
	if spread <= 0 {
		return d
	}
	return d - rand.N(spread)
}

// tick runs what the timers say is due: new IKE SAs are noticed, CHILD_SAs
// and IKE SAs rekeyed or expired, peers checked, connections started.
func (d *ikeDaemon) tick(ctx context.Context, now time.Time) {
	d.reconcile()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		live := false
		for s, t := range c.sas {
			if t.busy {
				live = true
				continue
			}
			switch {
			case c.cfg.DPDDelay > 0 && now.Sub(t.lastCheck) >= c.cfg.DPDDelay:
				t.busy = true
				live = true
				go c.check(ctx, s, t)
			case c.cfg.RekeyTime > 0 && now.After(t.rekeyAt):
				t.busy = true
				live = true
				go c.rekeyIKE(ctx, s, t)
			default:
				live = true
			}
		}
		for ch, ct := range d.children {
			if ct.conn != c || ct.busy {
				continue
			}
			t := c.sas[ct.owner]
			switch {
			case ct.expireAt.After(ct.installed) && now.After(ct.expireAt):
				ct.busy = true
				c.stats.expired.Add(1)
				d.log.Warn("CHILD_SA reached its life_time unrekeyed: taken out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ch.InSPI))
				go c.expire(ctx, ct.owner, ch)
			case ct.rekeyAt.After(ct.installed) && now.After(ct.rekeyAt) && t != nil && !t.busy:
				ct.busy, t.busy = true, true
				go c.rekeyChild(ctx, ct.owner, t, ch, ct)
			}
		}
		if !live && !c.initiating && c.wantsStart() && !now.Before(c.nextTry) {
			c.initiating = true
			go c.initiate(ctx)
		}
	}
}

func (c *ikeConn) wantsStart() bool {
	return len(c.cfg.Children) > 0 && c.cfg.Children[0].StartAction == StartActionStart && len(c.cfg.RemoteAddrs) > 0
}

// initiate sets up the connection's IKE SA and CHILD_SA with the peer.
func (c *ikeConn) initiate(ctx context.Context) {
	d := c.d
	c.stats.initiated.Add(1)
	remote := netip.AddrPortFrom(c.cfg.RemoteAddrs[0], ike.Port)
	s, err := c.ep.Initiate(ctx, remote)
	d.mu.Lock()
	c.initiating = false
	if err != nil && s == nil {
		c.failures++
		c.stats.failed.Add(1)
		wait := min(time.Duration(1<<min(c.failures, 6))*time.Second, time.Minute)
		c.nextTry = time.Now().Add(wait)
		d.mu.Unlock()
		if ctx.Err() == nil {
			d.log.Warn("IKE connection not established", "connection", c.cfg.Name, "peer", remote, "err", err, "next-try", wait)
		}
		return
	}
	c.failures = 0
	d.mu.Unlock()
	if err != nil {
		d.log.Warn("IKE SA established without its CHILD_SA", "connection", c.cfg.Name, "err", err)
	}
	d.reconcile()
}

// check is a liveness check (dpd_delay): a peer that answers none of
// its retransmissions is gone, its IKE SA and CHILD_SAs with it.
func (c *ikeConn) check(ctx context.Context, s *ike.IKESA, t *saTrack) {
	err := s.Ping(ctx)
	c.d.mu.Lock()
	t.busy, t.lastCheck = false, time.Now()
	c.d.mu.Unlock()
	if err == nil || ctx.Err() != nil || s.State() == ike.StateDeleted {
		return // answered, or deleted meanwhile (a rekey, the peer's Delete)
	}
	c.stats.dpdFailures.Add(1)
	c.d.log.Warn("IKE peer does not answer its liveness check: IKE SA and CHILD_SAs gone", "connection", c.cfg.Name, "sa", s, "err", err)
	c.drop(s)
}

// drop forgets an IKE SA whose peer is gone: one Delete is sent, not
// waited for.
func (c *ikeConn) drop(s *ike.IKESA) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	s.Delete(gone)
	c.d.reconcile()
}

// rekeyIKE replaces the IKE SA (rekey_time of the connection).
func (c *ikeConn) rekeyIKE(ctx context.Context, s *ike.IKESA, t *saTrack) {
	n, err := s.Rekey(ctx)
	c.d.mu.Lock()
	t.busy = false
	if err != nil && n == nil {
		t.rekeyAt = time.Now().Add(retryIn(c.cfg.RekeyTime))
	}
	c.d.mu.Unlock()
	if err != nil {
		c.d.log.Warn("IKE SA rekey", "connection", c.cfg.Name, "err", err)
	}
	if n != nil {
		c.stats.ikeRekeys.Add(1)
	}
	c.d.reconcile()
}

// retryIn is when a failed rekey is tried again.
func retryIn(rekey time.Duration) time.Duration { return max(min(rekey/10, time.Minute), time.Second) }

// rekeyChild rekeys a CHILD_SA (the child's rekey_time): the new one goes
// in force (OnRekey) before the old one is deleted.
func (c *ikeConn) rekeyChild(ctx context.Context, s *ike.IKESA, t *saTrack, ch *ike.Child, ct *childTrack) {
	n, err := s.RekeyChild(ctx, ch)
	c.d.mu.Lock()
	t.busy, ct.busy = false, false
	if n == nil {
		ct.rekeyAt = time.Now().Add(retryIn(c.cfg.Children[0].RekeyTime))
	}
	c.d.mu.Unlock()
	if err != nil {
		c.d.log.Warn("CHILD_SA rekey", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ch.InSPI), "err", err)
	}
	if n != nil {
		c.stats.childRekeys.Add(1)
	}
	c.d.reconcile()
}

// expire deletes a CHILD_SA past its life_time; with start_action
// start, its IKE SA goes too, so that the connection starts afresh.
func (c *ikeConn) expire(ctx context.Context, s *ike.IKESA, ch *ike.Child) {
	c.d.mu.Lock()
	c.d.expired[ch] = true
	c.d.mu.Unlock()
	c.d.remove(ch)
	if s != nil {
		if err := s.DeleteChild(ctx, ch); err != nil {
			c.d.log.Warn("delete an expired CHILD_SA", "connection", c.cfg.Name, "err", err)
		}
		if c.wantsStart() {
			c.drop(s)
			return
		}
	}
	c.d.reconcile()
}

// install puts a negotiated CHILD_SA in force. A rekey this side made
// (ours) switches outbound to it at once: the peer answered, so its
// inbound is in force. One the peer made keeps outbound on the old
// CHILD_SA until the peer deletes it; a CHILD_SA of another IKE SA (the
// peer re-established) takes outbound at once.
func (c *ikeConn) install(s *ike.IKESA, ch *ike.Child, ours bool) {
	d := c.d
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	d.mu.Lock()
	if d.children[ch] != nil {
		d.mu.Unlock()
		return
	}
	var current *childTrack
	for _, ct := range d.children {
		if ct.conn == c && ct.out.SPI == c.policyOut {
			current = ct
		}
	}
	d.mu.Unlock()
	in, out, err := ch.SAs()
	if err != nil {
		c.stats.installFailures.Add(1)
		d.log.Error("negotiated CHILD_SA not put in force", "connection", c.cfg.Name, "err", err)
		return
	}
	change := Change{Add: []*sa.SA{in, out}}
	var policies []sa.Policy
	switch {
	case current == nil || len(c.policies) == 0:
		for _, l := range ch.LocalTS {
			for _, r := range ch.RemoteTS {
				lp, ok1 := l.Prefix()
				rp, ok2 := r.Prefix()
				if ok1 && ok2 && lp.Addr().Is4() == rp.Addr().Is4() {
					policies = append(policies, sa.Policy{Selector: sa.Selector{Src: lp, Dst: rp, Proto: l.Proto}, Action: sa.Protect, SPI: out.SPI})
				}
			}
		}
		for _, p := range c.policies {
			change.DelPolicies = append(change.DelPolicies, PolicyID{Index: -1, Policy: p})
		}
		change.AddPolicies = policies
	case ours || current.owner != s:
		change.Retarget = map[uint32]uint32{c.policyOut: out.SPI}
	}
	if err := d.rt.ApplyChange(change); err != nil {
		c.stats.installFailures.Add(1)
		d.log.Error("negotiated CHILD_SA not put in force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", in.SPI), "out", fmt.Sprintf("%#x", out.SPI), "err", err)
		return
	}
	now := time.Now()
	cc := c.cfg.Children[0]
	ct := &childTrack{conn: c, in: in, out: out, installed: now, owner: s}
	if cc.RekeyTime > 0 {
		ct.rekeyAt = now.Add(jitter(cc.RekeyTime, cc.RandTime))
	}
	if cc.LifeTime > 0 {
		ct.expireAt = now.Add(cc.LifeTime)
	}
	d.mu.Lock()
	d.children[ch] = ct
	switch {
	case policies != nil:
		c.policies, c.policyOut = policies, out.SPI
	case change.Retarget != nil:
		c.retarget(out.SPI)
	}
	d.mu.Unlock()
	d.log.Info("CHILD_SA in force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", in.SPI), "out", fmt.Sprintf("%#x", out.SPI),
		"outbound", out.SPI == c.policyOut, "suite", in.Suite, "udp", ch.UDP)
	d.writeESPSA(in, out)
}

// follow puts the CHILD_SAs of an IKE SA whose peer moved behind its NAT
// in force toward its new port: each SA updated in place, its sequence
// numbers and replay window kept. A move to another address is not
// followed (the outbound SA would be a new one under the same SPI): the
// CHILD_SAs stay until rekeyed or gone.
func (c *ikeConn) follow(chs []*ike.Child) {
	d := c.d
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	for _, ch := range chs {
		d.mu.Lock()
		ct := d.children[ch]
		d.mu.Unlock()
		if ct == nil {
			continue
		}
		in, out, err := ch.SAs()
		if err == nil && (in.Src != ct.in.Src || out.Dst != ct.out.Dst) {
			err = fmt.Errorf("the peer moved from %s to %s: only a new port is followed", ct.out.Dst, out.Dst)
		}
		if err == nil {
			err = d.rt.ApplyChange(Change{Del: []SAID{{SPI: ct.in.SPI, Dst: ct.in.Dst}, {SPI: ct.out.SPI, Dst: ct.out.Dst}}, Add: []*sa.SA{in, out}})
		}
		if err != nil {
			c.stats.installFailures.Add(1)
			d.log.Warn("CHILD_SA not moved with its peer", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ct.in.SPI), "err", err)
			continue
		}
		d.mu.Lock()
		ct.in, ct.out = in, out
		d.mu.Unlock()
		d.log.Info("CHILD_SA follows its peer behind a NAT", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", in.SPI), "peer-port", out.DstPort)
	}
}

// inForce are the SAs and policies the daemon put in force; the caller
// holds d.changeMu.
func (d *ikeDaemon) inForce() ([]*sa.SA, []sa.Policy) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var sas []*sa.SA
	var spd []sa.Policy
	for _, ct := range d.children {
		sas = append(sas, ct.in, ct.out)
	}
	for _, c := range d.conns {
		spd = append(spd, c.policies...)
	}
	return sas, spd
}

// retarget records that the connection's policies name spi now; d.mu is
// held.
func (c *ikeConn) retarget(spi uint32) {
	for i := range c.policies {
		c.policies[i].SPI = spi
	}
	c.policyOut = spi
}

// remove takes a CHILD_SA out of force: outbound moves to a newer
// CHILD_SA of the connection when there is one, the policies go with the
// last.
func (d *ikeDaemon) remove(ch *ike.Child) {
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	d.mu.Lock()
	ct := d.children[ch]
	if ct == nil {
		d.mu.Unlock()
		return
	}
	c := ct.conn
	var next *childTrack
	for other, o := range d.children {
		if other != ch && o.conn == c && (next == nil || o.installed.After(next.installed)) {
			next = o
		}
	}
	d.mu.Unlock()
	change := Change{Del: []SAID{{SPI: ct.in.SPI, Dst: ct.in.Dst}, {SPI: ct.out.SPI, Dst: ct.out.Dst}}}
	// Replaced by a newer CHILD_SA (a rekey): the peer may still send a
	// moment on the old one, whose packets are in flight or sealed before
	// it switched, so the old inbound SA stays in force a while.
	lingering := next != nil
	if lingering {
		change.Del = change.Del[1:]
	}
	switch {
	case c.policyOut != ct.out.SPI:
	case next != nil:
		change.Retarget = map[uint32]uint32{ct.out.SPI: next.out.SPI}
	default:
		for _, p := range c.policies {
			change.DelPolicies = append(change.DelPolicies, PolicyID{Index: -1, Policy: p})
		}
	}
	if err := d.rt.ApplyChange(change); err != nil {
		d.log.Error("CHILD_SA not taken out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ct.in.SPI), "err", err)
		return
	}
	d.mu.Lock()
	delete(d.children, ch)
	switch {
	case change.Retarget != nil:
		c.retarget(next.out.SPI)
	case change.DelPolicies != nil:
		c.policies, c.policyOut = nil, 0
	}
	d.mu.Unlock()
	d.log.Info("CHILD_SA out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ct.in.SPI), "out", fmt.Sprintf("%#x", ct.out.SPI), "inbound-grace", lingering)
	if lingering {
		in := SAID{SPI: ct.in.SPI, Dst: ct.in.Dst}
		time.AfterFunc(rekeyInboundGrace, func() {
			d.changeMu.Lock()
			defer d.changeMu.Unlock()
			if err := d.rt.ApplyChange(Change{Del: []SAID{in}}); err != nil {
				d.log.Debug("old inbound SA of a rekeyed CHILD_SA not taken out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", in.SPI), "err", err)
			}
		})
	}
}

// rekeyInboundGrace is how long the inbound SA of a CHILD_SA replaced by
// a rekey stays in force after the CHILD_SA is deleted.
const rekeyInboundGrace = time.Second

// reconcile brings the SAs in force in line with the endpoints: a
// CHILD_SA the peer deleted (or whose IKE SA went) goes out of force, one
// not yet in force goes in, a new IKE SA is tracked (and written to the
// decryption table), and an older IKE SA with CHILD_SAs that a newer one
// of the same connection replaced is dropped.
func (d *ikeDaemon) reconcile() {
	// What the endpoints hold is read before d.mu is taken: an endpoint
	// calls install (which takes d.mu) with its own lock held. A CHILD_SA
	// put in force after this snapshot is not judged by it.
	began := time.Now()
	type saView struct {
		s    *ike.IKESA
		kids []*ike.Child
	}
	views := make([][]saView, len(d.conns))
	for i, c := range d.conns {
		for _, s := range c.ep.SAs() {
			if s.State() == ike.StateEstablished {
				views[i] = append(views[i], saView{s, s.Children()})
			}
		}
	}
	live := map[*ike.Child]bool{}
	type fresh struct {
		c *ikeConn
		s *ike.IKESA
	}
	var added, stale, missing []fresh
	var missingChild []*ike.Child
	d.mu.Lock()
	for i, c := range d.conns {
		seen := map[*ike.IKESA]bool{}
		var newest *ike.IKESA
		for _, v := range views[i] {
			seen[v.s] = true
			t := c.sas[v.s]
			if t == nil {
				now := time.Now()
				t = &saTrack{established: now, lastCheck: now}
				if c.cfg.RekeyTime > 0 {
					t.rekeyAt = now.Add(jitter(c.cfg.RekeyTime, c.cfg.RekeyTime/10))
				}
				c.sas[v.s] = t
				c.stats.established.Add(1)
				added = append(added, fresh{c, v.s})
			}
			for _, ch := range v.kids {
				live[ch] = true
				if ct := d.children[ch]; ct != nil {
					ct.owner = v.s
				} else if !d.expired[ch] {
					missing = append(missing, fresh{c, v.s})
					missingChild = append(missingChild, ch)
				}
			}
			if len(v.kids) > 0 && (newest == nil || t.established.After(c.sas[newest].established)) {
				newest = v.s
			}
		}
		for s := range c.sas {
			if !seen[s] {
				delete(c.sas, s)
			}
		}
		for _, v := range views[i] {
			if newest != nil && v.s != newest && len(v.kids) > 0 && !c.sas[v.s].busy {
				c.sas[v.s].busy = true
				stale = append(stale, fresh{c, v.s})
			}
		}
	}
	for ch := range d.expired {
		if !live[ch] {
			delete(d.expired, ch)
		}
	}
	var gone []*ike.Child
	for ch, ct := range d.children {
		if !live[ch] && ct.installed.Before(began) {
			gone = append(gone, ch)
		}
	}
	d.mu.Unlock()
	for _, f := range added {
		d.log.Info("IKE SA established", "connection", f.c.cfg.Name, "sa", f.s)
		d.writeIKETable(f.s)
	}
	for i, f := range missing {
		f.c.install(f.s, missingChild[i], false)
	}
	for _, ch := range gone {
		d.remove(ch)
	}
	for _, f := range stale {
		d.log.Info("IKE SA replaced by a newer one with the same peer: deleted", "connection", f.c.cfg.Name, "sa", f.s)
		// Not on the caller's goroutine: a request of ours on the SA may
		// hold it until its retransmissions end.
		go f.c.drop(f.s)
	}
}

// writeIKETable appends the IKE SA's keys to Wireshark's
// ikev2_decryption_table, when the configuration names one.
func (d *ikeDaemon) writeIKETable(s *ike.IKESA) {
	if d.cfg.DecryptionTable == "" {
		return
	}
	line, err := s.WiresharkLine()
	if err == nil {
		err = d.appendLine(d.cfg.DecryptionTable, line)
	}
	if err != nil {
		d.log.Warn("IKE SA not written to the decryption table", "sa", s, "err", err)
	}
}

// writeESPSA appends a CHILD_SA's two SAs to Wireshark's esp_sa table,
// when the configuration names one.
func (d *ikeDaemon) writeESPSA(in, out *sa.SA) {
	if d.cfg.ESPSAFile == "" {
		return
	}
	for _, s := range []*sa.SA{in, out} {
		line, err := sa.EspSALine(s)
		if err == nil {
			err = d.appendLine(d.cfg.ESPSAFile, line)
		}
		if err != nil {
			d.log.Warn("SA not written to the esp_sa table", "spi", fmt.Sprintf("%#x", s.SPI), "err", err)
		}
	}
}

func (d *ikeDaemon) appendLine(path, line string) error {
	d.filesMu.Lock()
	defer d.filesMu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// A file made by someone else with wider rights is narrowed: it holds keys.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	_, err = f.WriteString(line + "\n")
	return errors.Join(err, f.Close())
}

// IKEStats are the gateway's IKE connections, their IKE SAs and counts.
type IKEStats struct {
	Connections []IKEConnStats `json:"connections"`
	// QueueFull counts IKE datagrams dropped while the daemon was behind;
	// UnknownPeer those of a peer no connection names.
	QueueFull   uint64 `json:"queue_full"`
	UnknownPeer uint64 `json:"unknown_peer"`
}

// IKEConnStats is one connection.
type IKEConnStats struct {
	Name string       `json:"name"`
	SAs  []IKESAStats `json:"sas"` // the established ones
	// HalfOpen counts the IKE SAs between IKE_SA_INIT and IKE_AUTH.
	HalfOpen uint64 `json:"half_open"`
	// Initiated, Established and Failed count initiations and IKE SAs;
	// ChildRekeys and IKERekeys the rekeys this side made; DPDFailures
	// the peers found gone; Expired the CHILD_SAs that reached life_time.
	Initiated       uint64 `json:"initiated"`
	Established     uint64 `json:"established"`
	Failed          uint64 `json:"failed"`
	ChildRekeys     uint64 `json:"child_rekeys"`
	IKERekeys       uint64 `json:"ike_rekeys"`
	DPDFailures     uint64 `json:"dpd_failures"`
	Expired         uint64 `json:"expired"`
	InstallFailures uint64 `json:"install_failures"`
	// Events are the endpoint's counts by reason: retransmissions,
	// rekeys by the peer, messages dropped and why.
	Events map[string]uint64 `json:"events"`
}

// IKESAStats is one IKE SA.
type IKESAStats struct {
	SPIi        uint64          `json:"spi_i"`
	SPIr        uint64          `json:"spi_r"`
	State       string          `json:"state"`
	Age         time.Duration   `json:"age"`
	RekeyIn     time.Duration   `json:"rekey_in"` // 0: no rekey due
	NAT         bool            `json:"nat"`
	ChildSAs    []IKEChildStats `json:"child_sas"`
	Established time.Time       `json:"established"`
}

// IKEChildStats is one CHILD_SA in force.
type IKEChildStats struct {
	InSPI     uint32        `json:"in_spi"`
	OutSPI    uint32        `json:"out_spi"`
	Outbound  bool          `json:"outbound"` // the policies send through it
	Age       time.Duration `json:"age"`
	RekeyIn   time.Duration `json:"rekey_in"`
	ExpiresIn time.Duration `json:"expires_in"`
}

// Retransmits is the requests this connection sent again.
func (c IKEConnStats) Retransmits() uint64 { return c.Events["retransmitted request"] }

// stats reads the daemon's state (what the endpoints hold first, for the
// lock order reconcile explains).
func (d *ikeDaemon) stats() *IKEStats {
	type saView struct {
		s     *ike.IKESA
		state string
		kids  []*ike.Child
	}
	views := make([][]saView, len(d.conns))
	halfOpen := make([]uint64, len(d.conns))
	events := make([]map[string]uint64, len(d.conns))
	for i, c := range d.conns {
		for _, s := range c.ep.SAs() {
			st := s.State()
			if st == ike.StateHalfOpen {
				halfOpen[i]++
			}
			views[i] = append(views[i], saView{s, st.String(), s.Children()})
		}
		events[i] = c.ep.Counts()
	}
	now := time.Now()
	st := &IKEStats{QueueFull: d.queueFull.Load()}
	d.mu.Lock()
	defer d.mu.Unlock()
	st.UnknownPeer = d.unknownPeer
	for i, c := range d.conns {
		cs := IKEConnStats{Name: c.cfg.Name, HalfOpen: halfOpen[i], Initiated: c.stats.initiated.Load(), Established: c.stats.established.Load(),
			Failed: c.stats.failed.Load(), ChildRekeys: c.stats.childRekeys.Load(), IKERekeys: c.stats.ikeRekeys.Load(),
			DPDFailures: c.stats.dpdFailures.Load(), Expired: c.stats.expired.Load(), InstallFailures: c.stats.installFailures.Load(),
			Events: events[i]}
		for _, v := range views[i] {
			t := c.sas[v.s]
			if t == nil {
				continue // half-open, or not yet seen
			}
			spii, spir := v.s.SPIs()
			ss := IKESAStats{SPIi: spii, SPIr: spir, State: v.state, Age: now.Sub(t.established), NAT: v.s.NAT(), Established: t.established}
			if c.cfg.RekeyTime > 0 {
				ss.RekeyIn = max(t.rekeyAt.Sub(now), 0)
			}
			for _, ch := range v.kids {
				ct := d.children[ch]
				if ct == nil {
					continue
				}
				cst := IKEChildStats{InSPI: ct.in.SPI, OutSPI: ct.out.SPI, Outbound: ct.out.SPI == c.policyOut, Age: now.Sub(ct.installed)}
				if ct.rekeyAt.After(ct.installed) {
					cst.RekeyIn = max(ct.rekeyAt.Sub(now), 0)
				}
				if ct.expireAt.After(ct.installed) {
					cst.ExpiresIn = max(ct.expireAt.Sub(now), 0)
				}
				ss.ChildSAs = append(ss.ChildSAs, cst)
			}
			cs.SAs = append(cs.SAs, ss)
		}
		slices.SortFunc(cs.SAs, func(a, b IKESAStats) int { return a.Established.Compare(b.Established) })
		st.Connections = append(st.Connections, cs)
	}
	return st
}
