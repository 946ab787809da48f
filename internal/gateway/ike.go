package gateway

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	// acquired takes the trapped children whose first packet came;
	// trapped are their traps, which run gives the gateway.
	acquired chan *trapChild
	trapped  []Trap
	// portMoved takes ESP that came from a peer's new NAT port
	// (Gateway.SetOnPeerPort).
	portMoved chan portMove

	// natt are the port-4500 sockets the connections need (nattKeys).
	natt map[connKey]bool
	// byAddrs finds a datagram's connection (connFor).
	byAddrs map[addrPair]int

	// mu guards what follows, and the tracks of every connection.
	mu sync.Mutex
	// unknownPeer counts IKE datagrams from a peer no connection names.
	unknownPeer uint64
	// expired are the CHILD_SAs taken out of force at life_time whose
	// deletion with the peer is under way: not to be put in force again.
	expired map[*ike.Child]bool
	// redundant are this side's CHILD_SAs of rekey collisions that the
	// peer's survived, being deleted: never put in force, never
	// outbound.
	redundant map[*ike.Child]bool
	// due are the connections' next timers, soonest first: a timer tick
	// walks the connections whose time came, not all of them.
	due dueHeap
	// wake fires at wakeAt, the next rekey or expiry due: a rekey runs
	// when rekey_time says, not up to ikeTick later at the next tick.
	wake   *time.Timer
	wakeAt time.Time
	// changeMu serialises the daemon's changes of the SAs in force.
	changeMu sync.Mutex
	// lingering are inbound SAs of CHILD_SAs out of force, kept for
	// inboundGrace.
	lingering map[*sa.SA]bool
	// stopped is set once the daemon has shut down.
	stopped atomic.Bool
	filesMu sync.Mutex
	wg      sync.WaitGroup
}

// ikeConn is one connection: its endpoint and what the daemon tracks of
// its IKE SAs.
type ikeConn struct {
	d     *ikeDaemon
	cfg   *IKEConnection
	ep    *ike.Endpoint
	local netip.Addr
	sas   map[*ike.IKESA]*saTrack
	// children are its CHILD_SAs in force, by the ike package's child.
	children map[*ike.Child]*childTrack
	// dueAt is when its timers are to be looked at next (zero: not
	// due), the time of its entry in the daemon's due heap.
	dueAt time.Time
	// pol are the protect policies in force for each of the
	// connection's children, by name.
	pol map[string]*childPolicy
	// creating marks the children (after the first) being set up by
	// CREATE_CHILD_SA; createAt is when one may be tried again.
	creating map[string]bool
	createAt map[string]time.Time
	// traps are the children of start_action trap, by name.
	traps map[string]*trapChild
	// initiating is set while an initiation runs; nextTry is when the
	// next may start after failures.
	initiating bool
	failures   int
	nextTry    time.Time
	stats      ikeConnCounters
}

// trapChild is a child of start_action trap: pending is set by the first
// packet its trap takes (Gateway.SetTraps) and stays set, so that later
// ones do not wake the daemon, until the child is in force or its
// negotiation failed.
type trapChild struct {
	conn    *ikeConn
	name    string
	pending atomic.Bool
}

// childPolicy is the protect policies in force for one child of a
// connection, naming the outbound SA out.
type childPolicy struct {
	policies []sa.Policy
	out      uint32
}

// retarget records that the policies name spi now; d.mu is held.
func (p *childPolicy) retarget(spi uint32) {
	for i := range p.policies {
		p.policies[i].SPI = spi
	}
	p.out = spi
}

// policy is the child's policies (none yet: an empty one); d.mu is held.
func (c *ikeConn) policy(name string) *childPolicy {
	p := c.pol[name]
	if p == nil {
		p = &childPolicy{}
		c.pol[name] = p
	}
	return p
}

// child is the configuration of the connection's child of the name (the
// first one for a name not configured).
func (c *ikeConn) child(name string) *IKEChild {
	for _, ch := range c.cfg.Children {
		if ch.Name == name {
			return ch
		}
	}
	return c.cfg.Children[0]
}

// ikeConnCounters are a connection's own counts, beside its endpoint's.
type ikeConnCounters struct {
	initiated, established, failed atomic.Uint64
	childRekeys                    atomic.Uint64
	dpdFailures, expired           atomic.Uint64
	installFailures                atomic.Uint64
	childrenCreated                atomic.Uint64
	acquires                       atomic.Uint64
	// redundant counts this side's CHILD_SAs of rekey collisions that
	// the peer's survived.
	redundant atomic.Uint64
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
	cfg               *IKEChild
	in, out           *sa.SA
	installed         time.Time
	rekeyAt, expireAt time.Time
	busy              bool
	owner             *ike.IKESA
	// redundant: this side's of a rekey collision the peer's survived.
	redundant bool
}

// traps are the gateway's traps of the children of start_action trap:
// each protect policy their selectors would make.
func (d *ikeDaemon) trapList() []Trap {
	var out []Trap
	for _, c := range d.conns {
		for _, cc := range c.cfg.Children {
			if cc.StartAction != StartActionTrap {
				continue
			}
			tc := &trapChild{conn: c, name: cc.Name}
			c.traps[cc.Name] = tc
			fire := func() {
				if tc.pending.CompareAndSwap(false, true) {
					select {
					case d.acquired <- tc:
					default:
						tc.pending.Store(false)
					}
				}
			}
			for _, l := range cc.LocalTS {
				for _, r := range cc.RemoteTS {
					if l.Addr().Is4() == r.Addr().Is4() {
						out = append(out, Trap{Selector: sa.Selector{Src: l.Masked(), Dst: r.Masked()}, Fire: fire})
					}
				}
			}
		}
	}
	return out
}

// ikeQueue is the most IKE datagrams waiting for the daemon's handlers:
// a burst of IKE_SA_INITs from thousands of peers starting at once waits
// here (and in the sockets' buffers) rather than being dropped.
const ikeQueue = 4096

// ikeTick is how often the daemon looks at its timers.
const ikeTick = 250 * time.Millisecond

// newIKEDaemon builds the daemon of cfg.IKE; the sockets are opened by
// open.
func newIKEDaemon(rt *Runtime, log *slog.Logger) (*ikeDaemon, error) {
	d := &ikeDaemon{rt: rt, cfg: rt.Config.IKE, log: log.With("part", "ike"), sockets: map[netip.Addr]*net.UDPConn{},
		in: make(chan ike.Datagram, ikeQueue), expired: map[*ike.Child]bool{}, natt: rt.Config.IKE.nattKeys(), byAddrs: map[addrPair]int{},
		acquired: make(chan *trapChild, 64), portMoved: make(chan portMove, 64), redundant: map[*ike.Child]bool{}, lingering: map[*sa.SA]bool{}, wake: time.NewTimer(time.Hour)}
	d.wake.Stop()
	for _, cc := range d.cfg.Connections {
		c := &ikeConn{d: d, cfg: cc, local: cc.LocalAddrs[0], sas: map[*ike.IKESA]*saTrack{}, children: map[*ike.Child]*childTrack{}, pol: map[string]*childPolicy{},
			creating: map[string]bool{}, createAt: map[string]time.Time{}, traps: map[string]*trapChild{}}
		icfg := cc.ikeConfig()
		icfg.Log = d.log.With("connection", cc.Name)
		icfg.OnChild = func(s *ike.IKESA, ch *ike.Child) { c.install(s, ch, false) }
		icfg.Expect = func(spi uint32) { rt.expect(spi) } // rt.Gateway is set after the daemon is made
		icfg.OnRekey = func(s *ike.IKESA, _, ch *ike.Child) {
			c.stats.childRekeys.Add(1)
			c.install(s, ch, true)
		}
		icfg.OnPeerMoved = func(_ *ike.IKESA, chs []*ike.Child) { c.follow(chs) }
		icfg.OnRedundant = c.redundant
		ep, err := ike.NewEndpoint(icfg, c.local, d.send)
		if err != nil {
			return nil, fmt.Errorf("%s: ike connection %s: %w", rt.Config.File, cc.Name, err)
		}
		c.ep = ep
		d.add(c)
	}
	d.trapped = d.trapList()
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
			u, err := listenIKE(netip.AddrPortFrom(a, ike.Port))
			if err != nil {
				d.close()
				return fmt.Errorf("%s: IKE socket on %s: %w", d.rt.Config.File, netip.AddrPortFrom(a, ike.Port), err)
			}
			d.sockets[a] = u
		}
	}
	return nil
}

// ikeSocketBuffer is the receive buffer of a port-500 socket: thousands
// of connections to one address answer at once when they all start or
// rekey together, and the kernel's default (about 200 kB) drops their
// datagrams (UdpRcvbufErrors), which then come again only after a
// retransmission timeout.
const ikeSocketBuffer = 4 << 20

// listenIKE opens a port-500 socket whose datagrams carry the gateway's
// mark, as its ESP sockets' do: a transport-mode peer's unmarked traffic
// is routed into the TUN, IKE must not be.
func listenIKE(at netip.AddrPort) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, fwMark)
			// Past net.core.rmem_max when privileged, else up to it.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, ikeSocketBuffer) != nil {
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, ikeSocketBuffer)
			}
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set SO_MARK: %w", serr)
		}
		return nil
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", at.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

func (d *ikeDaemon) close() {
	for _, u := range d.sockets {
		u.Close()
	}
}

// nonESP takes an IKE message that arrived on a port-4500 socket, at
// the address it was sent to (else the first connection's of the family).
func (d *ikeDaemon) nonESP(v6 bool) func([]byte, netip.AddrPort, netip.Addr) {
	return func(data []byte, from netip.AddrPort, to netip.Addr) {
		local := to
		for _, c := range d.conns {
			if !local.IsValid() && c.local.Is6() == v6 {
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
		return w.SendNonESP(dg.Data, dg.Local.Addr(), dg.Remote)
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
	if d.trapped != nil {
		d.rt.SetTraps(d.trapped)
		defer d.rt.SetTraps(nil)
	}
	d.rt.SetOnPeerPort(func(in *sa.SA, from netip.AddrPort) {
		select {
		case d.portMoved <- portMove{in, from}:
		default: // the daemon is behind; the peer's next packet tells again
		}
	})
	defer d.rt.SetOnPeerPort(nil)
	// One handler per CPU: the endpoints take datagrams concurrently (a
	// responder's Diffie-Hellman and AUTH run outside their locks).
	quit := make(chan struct{})
	var handlers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		handlers.Go(func() { d.handle(ctx, quit) })
	}
	tick := time.NewTicker(ikeTick)
	defer tick.Stop()
	d.tick(ctx, time.Now(), true)
	for {
		select {
		case <-ctx.Done():
			d.deleteAll()
			close(quit)
			handlers.Wait()
			d.changeMu.Lock()
			d.stopped.Store(true)
			d.changeMu.Unlock()
			d.close()
			d.wg.Wait()
			return
		case now := <-tick.C:
			d.tick(ctx, now, true)
		case tc := <-d.acquired:
			tc.conn.stats.acquires.Add(1)
			d.log.Info("a packet for a trapped child: negotiating", "connection", tc.conn.cfg.Name, "child", tc.name)
			tc.conn.reconcile()
			now := time.Now()
			d.mu.Lock()
			tc.conn.wakeBy(now)
			d.mu.Unlock()
			d.tick(ctx, now, false)
		case now := <-d.wake.C:
			d.mu.Lock()
			d.wakeAt = time.Time{}
			d.mu.Unlock()
			d.tick(ctx, now, false)
		case m := <-d.portMoved:
			d.followPort(m)
		}
	}
}

// portMove is an inbound SA's ESP from another port of its peer.
type portMove struct {
	in   *sa.SA
	from netip.AddrPort
}

// followPort has the IKE SA of the CHILD_SA whose inbound SA m names
// follow its peer to the new port (ike.IKESA.FollowPeerPort), which puts
// its CHILD_SAs in force toward it (follow). A notice about an SA no
// longer in force, or one already followed, is nothing.
func (d *ikeDaemon) followPort(m portMove) {
	var owner *ike.IKESA
	d.mu.Lock()
	for _, c := range d.conns {
		for _, ct := range c.children {
			if ct.in == m.in {
				owner = ct.owner
			}
		}
	}
	d.mu.Unlock()
	if owner != nil {
		owner.FollowPeerPort(m.from)
	}
}

// handle serves the datagrams the sockets queued until quit is closed:
// the connection's endpoint takes each, and the connection is reconciled
// with what it changed (not once ctx has ended: the IKE SAs are being
// deleted).
func (d *ikeDaemon) handle(ctx context.Context, quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case dg := <-d.in:
			c := d.connFor(dg)
			if c == nil {
				continue
			}
			c.ep.Handle(dg)
			if ctx.Err() == nil {
				c.reconcile()
			}
		}
	}
}

// deleteAll deletes every IKE SA with its peer, waiting a second at most
// for the answers (which the handlers take).
func (d *ikeDaemon) deleteAll() {
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
	wg.Wait()
}

// addrPair is a local address and a remote one, the remote one zero for
// a connection without remote_addrs (any peer).
type addrPair struct{ local, remote netip.Addr }

// add appends a connection, indexing its address pairs for connFor: a
// pair an earlier connection has stays that connection's.
func (d *ikeDaemon) add(c *ikeConn) {
	remotes := c.cfg.RemoteAddrs
	if len(remotes) == 0 {
		remotes = []netip.Addr{{}}
	}
	for _, l := range c.cfg.LocalAddrs {
		for _, r := range remotes {
			if _, ok := d.byAddrs[addrPair{l, r}]; !ok {
				d.byAddrs[addrPair{l, r}] = len(d.conns)
			}
		}
	}
	d.conns = append(d.conns, c)
}

// connFor is the connection a datagram belongs to: the first whose local
// address it arrived at and whose remote_addrs hold its source (or are
// none).
func (d *ikeDaemon) connFor(dg ike.Datagram) *ikeConn {
	named, ok1 := d.byAddrs[addrPair{dg.Local.Addr(), dg.Remote.Addr()}]
	anyPeer, ok2 := d.byAddrs[addrPair{dg.Local.Addr(), netip.Addr{}}]
	switch {
	case ok1 && (!ok2 || named < anyPeer):
		return d.conns[named]
	case ok2:
		return d.conns[anyPeer]
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

// wakeBy has the daemon look at the connection's timers at t at the
// latest; d.mu is held.
func (c *ikeConn) wakeBy(t time.Time) {
	if t.IsZero() || (!c.dueAt.IsZero() && !t.Before(c.dueAt)) {
		return
	}
	c.dueAt = t
	heap.Push(&c.d.due, dueConn{t, c})
	c.d.wakeBy(t)
}

// wakeBy has the daemon's timer fire at t at the latest; d.mu is held.
func (d *ikeDaemon) wakeBy(t time.Time) {
	if !d.wakeAt.IsZero() && !t.Before(d.wakeAt) {
		return
	}
	d.wakeAt = t
	d.wake.Reset(max(time.Until(t), 0))
}

// dueConn is a connection whose timers are to be looked at by at.
type dueConn struct {
	at   time.Time
	conn *ikeConn
}

// dueHeap is a min-heap of dueConn by time (container/heap). An entry
// whose time is no longer its connection's dueAt is stale: the
// connection was looked at since, or is due sooner.
type dueHeap []dueConn

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueConn)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// takeDue removes the connections due by now from the heap; d.mu is held.
func (d *ikeDaemon) takeDue(now time.Time) []*ikeConn {
	var due []*ikeConn
	for len(d.due) > 0 && !d.due[0].at.After(now) {
		x := heap.Pop(&d.due).(dueConn)
		if x.at.Equal(x.conn.dueAt) {
			x.conn.dueAt = time.Time{}
			due = append(due, x.conn)
		}
	}
	return due
}

// tick runs what the timers say is due: new IKE SAs are noticed, CHILD_SAs
// and IKE SAs rekeyed or expired, peers checked, connections started. A
// full tick (the periodic one) first reconciles every connection and
// walks them all; the others (a timer due, a trapped packet) walk the
// connections that are due, relying on each connection's own reconciles
// after its datagrams and exchanges.
func (d *ikeDaemon) tick(ctx context.Context, now time.Time, full bool) {
	if full {
		d.reconcile()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	conns := d.takeDue(now)
	if full {
		conns = d.conns
	}
	for _, c := range conns {
		c.tick(ctx, now)
	}
	for len(d.due) > 0 && !d.due[0].at.Equal(d.due[0].conn.dueAt) {
		heap.Pop(&d.due) // stale
	}
	if len(d.due) > 0 {
		d.wakeBy(d.due[0].at)
	}
}

// saDue is what an idle IKE SA's timers say to do now.
type saDue int

const (
	saWait  saDue = iota
	saRekey       // rekey_time
	saCheck       // dpd_delay
)

// saDue is what the idle IKE SA t is due for at now. An IKE SA or
// CHILD_SA rekey that is due (childRekeyDue: one of its CHILD_SAs') goes
// before a liveness check on the IKE SA, whose answer proves the peer
// alive as well: checks due every dpd_delay, each retransmitted on a lossy
// path, would otherwise keep the IKE SA busy past the rekey.
func (c *ikeConn) saDue(now time.Time, t *saTrack, childRekeyDue bool) saDue {
	switch {
	case c.cfg.RekeyTime > 0 && !now.Before(t.rekeyAt):
		return saRekey
	case c.cfg.DPDDelay > 0 && now.Sub(t.lastCheck) >= c.cfg.DPDDelay && !childRekeyDue:
		return saCheck
	}
	return saWait
}

// childRekeysDue are the IKE SAs one of whose idle CHILD_SAs is due for
// its rekey at now; d.mu is held.
func (c *ikeConn) childRekeysDue(now time.Time) map[*ike.IKESA]bool {
	var due map[*ike.IKESA]bool
	for _, ct := range c.children {
		if !ct.busy && !ct.redundant && ct.rekeyAt.After(ct.installed) && !now.Before(ct.rekeyAt) {
			if due == nil {
				due = map[*ike.IKESA]bool{}
			}
			due[ct.owner] = true
		}
	}
	return due
}

// tick runs what the connection's timers say is due, and has the daemon
// wake for the next; d.mu is held.
func (c *ikeConn) tick(ctx context.Context, now time.Time) {
	rekeyDue := c.childRekeysDue(now)
	for s, t := range c.sas {
		if t.busy {
			continue
		}
		switch c.saDue(now, t, rekeyDue[s]) {
		case saRekey:
			t.busy = true
			go c.rekeyIKE(ctx, s, t)
		case saCheck:
			t.busy = true
			go c.check(ctx, s, t)
		default:
			if c.cfg.DPDDelay > 0 {
				c.wakeBy(t.lastCheck.Add(c.cfg.DPDDelay))
			}
			if c.cfg.RekeyTime > 0 {
				c.wakeBy(t.rekeyAt)
			}
		}
	}
	for ch, ct := range c.children {
		if ct.busy {
			continue
		}
		t := c.sas[ct.owner]
		switch {
		case ct.expireAt.After(ct.installed) && now.After(ct.expireAt):
			ct.busy = true
			c.stats.expired.Add(1)
			c.d.log.Warn("CHILD_SA reached its life_time unrekeyed: taken out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ch.InSPI))
			go c.expire(ctx, ct.owner, ch)
		case ct.rekeyAt.After(ct.installed) && !now.Before(ct.rekeyAt) && t != nil && !t.busy && !ct.redundant:
			ct.busy, t.busy = true, true
			go c.rekeyChild(ctx, ct.owner, t, ch, ct)
		default:
			// What is due but waits (its IKE SA busy) comes with the
			// wake-up when that ends.
			if ct.rekeyAt.After(now) && !ct.redundant {
				c.wakeBy(ct.rekeyAt)
			}
			if ct.expireAt.After(now) {
				c.wakeBy(ct.expireAt)
			}
		}
	}
	if len(c.sas) == 0 && !c.initiating && c.wantsStart() && !now.Before(c.nextTry) {
		c.initiating = true
		go c.initiate(ctx)
	}
	c.startChildren(ctx, now)
}

// startChildren sets up, by CREATE_CHILD_SA on the newest IKE SA, a child
// not in force that is trapped (its packet came) or, after the first (the
// one IKE_AUTH sets up), has start_action start; one at a time. d.mu is
// held.
func (c *ikeConn) startChildren(ctx context.Context, now time.Time) {
	var s *ike.IKESA
	var t *saTrack
	for x, xt := range c.sas {
		if s == nil || xt.established.After(t.established) {
			s, t = x, xt
		}
	}
	if s == nil || t.busy || c.initiating {
		return
	}
	for i, cc := range c.cfg.Children {
		trapped := c.traps[cc.Name] != nil && c.traps[cc.Name].pending.Load()
		// The first child comes with IKE_AUTH, or by CREATE_CHILD_SA
		// when trapped while the IKE SA stayed.
		if ((i == 0 || cc.StartAction != StartActionStart) && !trapped) || c.creating[cc.Name] || now.Before(c.createAt[cc.Name]) || c.inForce(cc.Name) {
			continue
		}
		c.creating[cc.Name], t.busy = true, true
		go c.newChild(ctx, s, t, cc)
		return
	}
}

// inForce reports whether a CHILD_SA of the child is in force; d.mu is
// held.
func (c *ikeConn) inForce(name string) bool {
	for _, ct := range c.children {
		if ct.cfg.Name == name && !ct.redundant {
			return true
		}
	}
	return false
}

// newChild sets up one of the connection's children after the first on
// the IKE SA and puts it in force.
func (c *ikeConn) newChild(ctx context.Context, s *ike.IKESA, t *saTrack, cc *IKEChild) {
	ch, err := s.NewChild(ctx, cc.Name)
	c.d.mu.Lock()
	t.busy = false
	c.wakeBy(time.Now())
	if err != nil {
		c.creating[cc.Name] = false
		c.createAt[cc.Name] = time.Now().Add(retryIn(max(cc.RekeyTime, time.Minute)))
		c.untrap(cc.Name)
	}
	c.d.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			c.d.log.Warn("CHILD_SA not set up", "connection", c.cfg.Name, "child", cc.Name, "err", err)
		}
		return
	}
	c.stats.childrenCreated.Add(1)
	c.install(s, ch, true)
	// Still creating until it is in force: a tick meanwhile would set
	// up another.
	c.d.mu.Lock()
	c.creating[cc.Name] = false
	c.d.mu.Unlock()
	c.reconcile()
}

// wantsStart reports whether the connection initiates now: its first
// child's start_action is start, or a trapped child's packet came.
func (c *ikeConn) wantsStart() bool {
	if len(c.cfg.RemoteAddrs) == 0 {
		return false
	}
	if c.startsAlways() {
		return true
	}
	for _, tc := range c.traps {
		if tc.pending.Load() {
			return true
		}
	}
	return false
}

// startsAlways reports whether the first child's start_action is start.
func (c *ikeConn) startsAlways() bool {
	return c.cfg.Children[0].StartAction == StartActionStart && len(c.cfg.RemoteAddrs) > 0
}

// untrap lets the trap of a child fire again.
func (c *ikeConn) untrap(name string) {
	if tc := c.traps[name]; tc != nil {
		tc.pending.Store(false)
	}
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
		c.untrap(c.cfg.Children[0].Name)
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
	c.reconcile()
}

// check is a liveness check (dpd_delay): a peer that answers none of
// its retransmissions is gone, its IKE SA and CHILD_SAs with it.
func (c *ikeConn) check(ctx context.Context, s *ike.IKESA, t *saTrack) {
	err := s.Ping(ctx)
	c.d.mu.Lock()
	t.busy, t.lastCheck = false, time.Now()
	c.wakeBy(t.lastCheck)
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
	c.reconcile()
}

// rekeyIKE replaces the IKE SA (rekey_time of the connection).
func (c *ikeConn) rekeyIKE(ctx context.Context, s *ike.IKESA, t *saTrack) {
	n, err := s.Rekey(ctx)
	c.d.mu.Lock()
	t.busy = false
	c.wakeBy(time.Now())
	if err != nil && n == nil {
		t.rekeyAt = time.Now().Add(retryIn(c.cfg.RekeyTime))
	}
	c.d.mu.Unlock()
	if errors.Is(err, ike.ErrRekeyed) {
		// The peer's rekey came first: it deletes this IKE SA.
		c.d.log.Debug("IKE SA rekey: the peer rekeyed it first", "connection", c.cfg.Name, "sa", s)
	} else if err != nil {
		c.d.log.Warn("IKE SA rekey", "connection", c.cfg.Name, "err", err)
	}
	c.reconcile()
}

// retryIn is when a failed rekey is tried again.
func retryIn(rekey time.Duration) time.Duration { return max(min(rekey/10, time.Minute), time.Second) }

// rekeyChild rekeys a CHILD_SA (the child's rekey_time): the new one goes
// in force (OnRekey) before the old one is deleted.
func (c *ikeConn) rekeyChild(ctx context.Context, s *ike.IKESA, t *saTrack, ch *ike.Child, ct *childTrack) {
	n, err := s.RekeyChild(ctx, ch)
	c.d.mu.Lock()
	t.busy, ct.busy = false, false
	c.wakeBy(time.Now())
	if err == nil {
		t.lastCheck = time.Now() // answered: the peer is alive
	}
	if n == nil {
		ct.rekeyAt = time.Now().Add(retryIn(ct.cfg.RekeyTime))
	}
	c.d.mu.Unlock()
	if errors.Is(err, ike.ErrRekeyed) {
		// The peer's rekey came first: it deletes this CHILD_SA.
		c.d.log.Debug("CHILD_SA rekey: the peer rekeyed it first", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ch.InSPI))
	} else if err != nil {
		c.d.log.Warn("CHILD_SA rekey", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ch.InSPI), "err", err)
	}
	c.reconcile()
}

// expire deletes a CHILD_SA past its life_time; with start_action
// start, its IKE SA goes too, so that the connection starts afresh.
func (c *ikeConn) expire(ctx context.Context, s *ike.IKESA, ch *ike.Child) {
	c.d.mu.Lock()
	c.d.expired[ch] = true
	c.d.mu.Unlock()
	c.remove(ch)
	if s != nil {
		if err := s.DeleteChild(ctx, ch); err != nil {
			c.d.log.Warn("delete an expired CHILD_SA", "connection", c.cfg.Name, "err", err)
		}
		if c.startsAlways() && ch.Name == c.cfg.Children[0].Name {
			c.drop(s)
			return
		}
	}
	c.reconcile()
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
	pol := c.policy(ch.Name)
	if have := c.children[ch]; have != nil {
		// In force already (reconcile saw it first): a rekey of ours, or
		// the survivor of a collision, takes outbound now.
		from := pol.out
		d.mu.Unlock()
		if ours && from != have.out.SPI && from != 0 {
			c.switchOutbound(pol, from, have.out.SPI)
		}
		return
	}
	if d.redundant[ch] {
		d.mu.Unlock()
		return
	}
	var current *childTrack
	for _, ct := range c.children {
		if ct.cfg.Name == ch.Name && ct.out.SPI == pol.out {
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
	case current == nil || len(pol.policies) == 0:
		for _, l := range ch.LocalTS {
			for _, r := range ch.RemoteTS {
				lp, ok1 := l.Prefix()
				rp, ok2 := r.Prefix()
				if ok1 && ok2 && lp.Addr().Is4() == rp.Addr().Is4() {
					policies = append(policies, sa.Policy{Selector: sa.Selector{Src: lp, Dst: rp, Proto: l.Proto}, Action: sa.Protect, SPI: out.SPI})
				}
			}
		}
		for _, p := range pol.policies {
			change.DelPolicies = append(change.DelPolicies, PolicyID{Index: -1, Policy: p})
		}
		change.AddPolicies = policies
	case ours || current.owner != s:
		change.Retarget = map[uint32]uint32{pol.out: out.SPI}
	}
	if err := d.rt.ApplyChange(change); err != nil {
		c.stats.installFailures.Add(1)
		d.log.Error("negotiated CHILD_SA not put in force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", in.SPI), "out", fmt.Sprintf("%#x", out.SPI), "err", err)
		return
	}
	d.rt.releaseHeld(in.SPI)
	now := time.Now()
	cc := c.child(ch.Name)
	ct := &childTrack{conn: c, cfg: cc, in: in, out: out, installed: now, owner: s}
	if cc.RekeyTime > 0 {
		ct.rekeyAt = now.Add(jitter(cc.RekeyTime, cc.RandTime))
	}
	if cc.LifeTime > 0 {
		ct.expireAt = now.Add(cc.LifeTime)
	}
	d.mu.Lock()
	c.children[ch] = ct
	c.untrap(ch.Name)
	c.wakeBy(ct.rekeyAt)
	c.wakeBy(ct.expireAt)
	switch {
	case policies != nil:
		pol.policies, pol.out = policies, out.SPI
	case change.Retarget != nil:
		pol.retarget(out.SPI)
	}
	outbound := out.SPI == pol.out
	d.mu.Unlock()
	d.log.Info("CHILD_SA in force", "connection", c.cfg.Name, "child", ch.Name, "in", fmt.Sprintf("%#x", in.SPI), "out", fmt.Sprintf("%#x", out.SPI),
		"outbound", outbound, "suite", in.Suite, "udp", ch.UDP)
	d.writeESPSA(in, out)
}

// switchOutbound moves a child's policies from one outbound SA to
// another; d.changeMu is held.
func (c *ikeConn) switchOutbound(pol *childPolicy, from, to uint32) {
	d := c.d
	if err := d.rt.ApplyChange(Change{Retarget: map[uint32]uint32{from: to}}); err != nil {
		c.stats.installFailures.Add(1)
		d.log.Error("outbound not moved to the CHILD_SA", "connection", c.cfg.Name, "out", fmt.Sprintf("%#x", to), "err", err)
		return
	}
	d.mu.Lock()
	pol.retarget(to)
	d.mu.Unlock()
}

// redundant is told of this side's CHILD_SA of a rekey collision that the
// peer's survives (RFC 7296 §2.8.1) before it is deleted: it is never put
// in force, never chosen for outbound, and if outbound traffic goes
// through it, that moves to the survivor first.
func (c *ikeConn) redundant(s *ike.IKESA, red, survivor *ike.Child) {
	d := c.d
	c.stats.redundant.Add(1)
	d.changeMu.Lock()
	d.mu.Lock()
	d.redundant[red] = true
	ct := c.children[red]
	onIt := ct != nil && ct.out.SPI == c.policy(red.Name).out
	if ct != nil {
		ct.redundant = true
	}
	d.mu.Unlock()
	d.changeMu.Unlock()
	d.log.Info("simultaneous CHILD_SA rekey: the peer's survives, this side's is deleted", "connection", c.cfg.Name,
		"redundant", fmt.Sprintf("%#x", red.InSPI), "survivor", fmt.Sprintf("%#x", survivor.InSPI))
	if onIt {
		c.install(s, survivor, true)
	}
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
		ct := c.children[ch]
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
	for _, c := range d.conns {
		for _, ct := range c.children {
			sas = append(sas, ct.in, ct.out)
		}
	}
	for in := range d.lingering {
		sas = append(sas, in)
	}
	for _, c := range d.conns {
		for _, p := range c.pol {
			spd = append(spd, p.policies...)
		}
	}
	return sas, spd
}

// remove takes a CHILD_SA out of force: outbound moves to a newer
// CHILD_SA of the connection when there is one, the policies go with the
// last.
func (c *ikeConn) remove(ch *ike.Child) {
	d := c.d
	d.changeMu.Lock()
	defer d.changeMu.Unlock()
	d.mu.Lock()
	ct := c.children[ch]
	if ct == nil {
		d.mu.Unlock()
		return
	}
	pol := c.policy(ct.cfg.Name)
	var next *childTrack
	for other, o := range c.children {
		if other != ch && o.cfg.Name == ct.cfg.Name && !o.redundant && (next == nil || o.installed.After(next.installed)) {
			next = o
		}
	}
	d.mu.Unlock()
	// The inbound SA stays a little longer: ESP the peer sent just
	// before the Delete (or its answer) may be a moment behind it.
	change := Change{Del: []SAID{{SPI: ct.out.SPI, Dst: ct.out.Dst}}}
	switch {
	case pol.out != ct.out.SPI:
	case next != nil:
		change.Retarget = map[uint32]uint32{ct.out.SPI: next.out.SPI}
	default:
		for _, p := range pol.policies {
			change.DelPolicies = append(change.DelPolicies, PolicyID{Index: -1, Policy: p})
		}
	}
	if err := d.rt.ApplyChange(change); err != nil {
		d.log.Error("CHILD_SA not taken out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ct.in.SPI), "err", err)
		return
	}
	d.mu.Lock()
	delete(c.children, ch)
	switch {
	case change.Retarget != nil:
		pol.retarget(next.out.SPI)
	case change.DelPolicies != nil:
		pol.policies, pol.out = nil, 0
	}
	d.mu.Unlock()
	d.log.Info("CHILD_SA out of force", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", ct.in.SPI), "out", fmt.Sprintf("%#x", ct.out.SPI))
	in := SAID{SPI: ct.in.SPI, Dst: ct.in.Dst}
	d.mu.Lock()
	d.lingering[ct.in] = true
	d.mu.Unlock()
	time.AfterFunc(inboundGrace, func() {
		d.changeMu.Lock()
		defer d.changeMu.Unlock()
		d.mu.Lock()
		delete(d.lingering, ct.in)
		d.mu.Unlock()
		if d.stopped.Load() {
			return // the SA goes with the gateway
		}
		if err := d.rt.ApplyChange(Change{Del: []SAID{in}}); err != nil {
			d.log.Warn("inbound SA of a CHILD_SA out of force not removed", "connection", c.cfg.Name, "in", fmt.Sprintf("%#x", in.SPI), "err", err)
		}
	})
}

// inboundGrace is how long a CHILD_SA's inbound SA outlives its outbound
// one and its Delete, for the packets still on their way.
const inboundGrace = time.Second

// reconcile brings the SAs in force in line with the endpoints: a
// CHILD_SA the peer deleted (or whose IKE SA went) goes out of force, one
// not yet in force goes in, a new IKE SA is tracked (and written to the
// decryption table), and an older IKE SA with CHILD_SAs that a newer one
// of the same connection replaced is dropped.
func (d *ikeDaemon) reconcile() { d.reconcileConns(d.conns, true) }

// reconcile reconciles the connection alone: what its datagrams and
// exchanges changed.
func (c *ikeConn) reconcile() { c.d.reconcileConns([]*ikeConn{c}, false) }

// reconcileConns reconciles conns; all says they are every connection,
// and the records of CHILD_SAs gone from every endpoint are dropped.
func (d *ikeDaemon) reconcileConns(conns []*ikeConn, all bool) {
	// What the endpoints hold is read before d.mu is taken: an endpoint
	// calls install (which takes d.mu) with its own lock held. A CHILD_SA
	// put in force after this snapshot is not judged by it.
	began := time.Now()
	type saView struct {
		s    *ike.IKESA
		kids []*ike.Child
	}
	views := make([][]saView, len(conns))
	for i, c := range conns {
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
	for i, c := range conns {
		seen := map[*ike.IKESA]bool{}
		var newest *ike.IKESA
		for _, v := range views[i] {
			seen[v.s] = true
			t := c.sas[v.s]
			if t == nil {
				// Timed from when the ike package made it, as the peer
				// times its own: the two rekey when rekey_time says.
				made := v.s.Created()
				t = &saTrack{established: made, lastCheck: time.Now()}
				if c.cfg.RekeyTime > 0 {
					t.rekeyAt = made.Add(jitter(c.cfg.RekeyTime, c.cfg.RandTime))
					c.wakeBy(t.rekeyAt)
				}
				c.sas[v.s] = t
				c.stats.established.Add(1)
				added = append(added, fresh{c, v.s})
			}
			for _, ch := range v.kids {
				live[ch] = true
				if ct := c.children[ch]; ct != nil {
					ct.owner = v.s
				} else if !d.expired[ch] && !d.redundant[ch] {
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
	if all {
		for ch := range d.expired {
			if !live[ch] {
				delete(d.expired, ch)
			}
		}
		for ch := range d.redundant {
			if !live[ch] {
				delete(d.redundant, ch)
			}
		}
	}
	var gone []*childTrack
	var goneChild []*ike.Child
	for _, c := range conns {
		for ch, ct := range c.children {
			if !live[ch] && ct.installed.Before(began) {
				gone, goneChild = append(gone, ct), append(goneChild, ch)
			}
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
	for i, ct := range gone {
		ct.conn.remove(goneChild[i])
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
	// ChildRekeys the CHILD_SA rekeys this side made, counted when the
	// new CHILD_SA goes in force (a collision's survivor only), IKERekeys
	// the IKE SA rekeys this side made, counted when the new IKE SA is
	// up (before the old one's Delete); DPDFailures
	// the peers found gone; Expired the CHILD_SAs that reached life_time.
	Initiated       uint64 `json:"initiated"`
	Established     uint64 `json:"established"`
	Failed          uint64 `json:"failed"`
	ChildRekeys     uint64 `json:"child_rekeys"`
	IKERekeys       uint64 `json:"ike_rekeys"`
	DPDFailures     uint64 `json:"dpd_failures"`
	Expired         uint64 `json:"expired"`
	InstallFailures uint64 `json:"install_failures"`
	// Acquires counts the negotiations a trapped child's packet started
	// (start_action trap; the packets themselves are dropped and counted
	// as acquire among the gateway's drops).
	Acquires uint64 `json:"acquires"`
	// ChildrenCreated counts the CHILD_SAs after the first this side set
	// up with CREATE_CHILD_SA.
	ChildrenCreated uint64 `json:"children_created"`
	// RedundantChildSAs counts this side's CHILD_SAs of simultaneous
	// rekeys that the peer's survived (deleted by this side).
	RedundantChildSAs uint64 `json:"redundant_child_sas"`
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
	Name      string        `json:"name"` // the child's in the configuration
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
			Failed: c.stats.failed.Load(), ChildRekeys: c.stats.childRekeys.Load(), IKERekeys: events[i]["IKE SA rekeyed"],
			DPDFailures: c.stats.dpdFailures.Load(), Expired: c.stats.expired.Load(), InstallFailures: c.stats.installFailures.Load(),
			RedundantChildSAs: c.stats.redundant.Load(), ChildrenCreated: c.stats.childrenCreated.Load(), Acquires: c.stats.acquires.Load(), Events: events[i]}
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
				ct := c.children[ch]
				if ct == nil {
					continue
				}
				out := uint32(0)
				if p := c.pol[ct.cfg.Name]; p != nil {
					out = p.out
				}
				cst := IKEChildStats{Name: ct.cfg.Name, InSPI: ct.in.SPI, OutSPI: ct.out.SPI, Outbound: ct.out.SPI == out, Age: now.Sub(ct.installed)}
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
