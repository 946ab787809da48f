package xdp

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/transport"
)

// Config says where to steer ESP.
type Config struct {
	// Device is the WAN interface.
	Device string
	// Local is this gateway's address on it: the program steers ESP of its
	// family addressed to it, and the Conn sends from it. Serve adds the
	// other family's.
	Local netip.Addr
	// Fallback is the raw ESP socket of the same family (transport.RawESP),
	// kept open beside the Conn: the kernel then answers no ESP with ICMP
	// protocol-unreachable, it receives the fragments the program passes
	// on, and the Conn sends through it what it cannot send itself. The
	// Conn does not close it.
	Fallback *transport.Conn
	// Mode is how to attach: ModeAuto (the default) takes the best the
	// driver offers — native with zero copy, then native with copies,
	// then generic — except on veth, where it takes generic, because a
	// program attached natively to a veth turns off its peer's GSO (UDP's
	// included) for as long as it stays; ModeNative insists on the
	// driver's own XDP (zero copy where offered, copies where not, an
	// error where neither), veth included; ModeGeneric is generic (skb)
	// mode only.
	Mode Mode
	Log  *slog.Logger
}

// Mode is how the program is attached.
type Mode string

// The attach modes.
const (
	ModeAuto    Mode = "auto"
	ModeNative  Mode = "native"
	ModeGeneric Mode = "generic"
)

// Stats are a Conn's counters since Open.
type Stats struct {
	Mode       string `json:"mode"` // "generic", "native" or "native-zerocopy"
	Device     string `json:"device"`
	Queues     int    `json:"queues"`
	PacketsIn  uint64 `json:"packets_in"`
	BytesIn    uint64 `json:"bytes_in"`
	PacketsOut uint64 `json:"packets_out"` // through the TX ring
	BytesOut   uint64 `json:"bytes_out"`
	Kicks      uint64 `json:"kicks"`       // sendto calls that woke the kernel for a batch
	Fallback   uint64 `json:"fallback"`    // packets sent through the raw socket (no neighbour yet, fragments)
	NoNeighbor uint64 `json:"no_neighbor"` // of those, sent there because the next hop was not resolved
	Malformed  uint64 `json:"malformed"`   // steered frames that were not a whole IPv4 or IPv6 ESP packet, dropped
	Truncated  uint64 `json:"truncated"`   // steered packets larger than the caller's buffer, dropped
	// TXRingFull counts packets dropped because the TX ring (or the free
	// TX frames) stayed full through a kick: the kernel is not sending as
	// fast as the gateway seals.
	TXRingFull uint64 `json:"tx_ring_full"`
	SendErrors uint64 `json:"send_errors"` // kicks the kernel refused
	// KickRetries are the kicks made again, with a backoff, after a kick
	// left frames in the TX ring: those frames go out without waiting for
	// the next Send.
	KickRetries uint64 `json:"kick_retries"`
	// KickStalls are the times frames stayed in the TX ring through the
	// retries for stallAfter (each is logged).
	KickStalls uint64 `json:"kick_stalls"`
	// Local are the addresses ESP is steered for, one per family served.
	Local []string `json:"local"`
	// IPv4 and IPv6 are the packets of each family through the rings.
	IPv4 FamilyStats `json:"ipv4"`
	IPv6 FamilyStats `json:"ipv6"`
	// The kernel's XDP_STATISTICS, summed over the queues' sockets.
	RxDropped            uint64 `json:"rx_dropped"`
	RxInvalidDescs       uint64 `json:"rx_invalid_descs"`
	TxInvalidDescs       uint64 `json:"tx_invalid_descs"`
	RxRingFull           uint64 `json:"rx_ring_full"`             // frames dropped: the RX ring was full
	RxFillRingEmptyDescs uint64 `json:"rx_fill_ring_empty_descs"` // frames dropped: no frame in the fill ring
	TxRingEmptyDescs     uint64 `json:"tx_ring_empty_descs"`
}

// FamilyStats are one address family's packets through the rings.
type FamilyStats struct {
	PacketsIn  uint64 `json:"packets_in"`
	PacketsOut uint64 `json:"packets_out"`
}

type counters struct {
	in4, out4, in6, out6                            atomic.Uint64
	packetsIn, bytesIn, packetsOut, bytesOut, kicks atomic.Uint64
	fallback, noNeighbor, malformed, truncated      atomic.Uint64
	txRingFull, sendErrors, kickRetries, kickStalls atomic.Uint64
}

// hop is how to reach one peer: the Ethernet addresses and the source
// address the kernel's route and neighbour tables give.
type hop struct {
	dst, src [6]byte
	from     netip.Addr
}

// family is one address family a Conn serves: the local address ESP is
// steered for and sent from, and the raw socket of the family beside the
// rings.
type family struct {
	local    netip.Addr
	fallback *transport.Conn
}

// families are the families a Conn serves; a zero family is not served.
type families struct{ v4, v6 family }

func (f *families) of(v6 bool) *family {
	if v6 {
		return &f.v6
	}
	return &f.v4
}

// Conn is raw ESP over AF_XDP on one interface, for IPv4, IPv6 or both:
// one program and one socket per receive queue serve every family. It
// implements the gateway's Conn. Send and Receive may run concurrently;
// concurrent calls of the same method are serialised.
type Conn struct {
	cfg     Config
	nl      *netlink.Handle // of the namespace Open ran in, for the resolver
	ifindex int
	// fams are the families served, replaced whole by Serve and Drop
	// (under famMu, which also guards prog) so the data path reads them
	// without a lock.
	fams  atomic.Pointer[families]
	famMu sync.Mutex
	mac   [6]byte
	mode  string

	sockets []*socket
	xsks    *ebpf.Map
	prog    *ebpf.Program
	attach  link.Link

	recvMu sync.Mutex
	polls  []unix.PollFd
	next   int // the socket Receive looks at first
	wake   int // eventfd: Close wakes a blocked Receive

	sendMu   sync.Mutex
	fallback [2][]*esp.Packet // by family: IPv4, IPv6
	ipID     uint16

	// mtu is the device's MTU, looked up again with the next hops: a
	// packet larger goes through the raw socket, which refuses it (or
	// fragments it) as the kernel would, where the device would drop a
	// frame that size without a word.
	mtu     atomic.Int64
	hops    atomic.Pointer[map[netip.Addr]hop]
	resolve chan netip.Addr
	unsent  chan struct{} // a kick left frames in the TX ring: the flusher kicks again
	done    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool

	stats counters
}

// ErrUnsupported wraps every reason XDP cannot run on an interface (no
// such device, a driver or kernel without XDP or AF_XDP, an MTU larger
// than a frame), so a caller with a fallback can tell them from real
// failures.
var ErrUnsupported = errors.New("XDP unavailable")

// Open attaches the program to cfg.Device and opens a socket on each of its
// receive queues.
func Open(cfg Config) (c *Conn, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Fallback == nil || cfg.Fallback.Kind() != transport.RawESP {
		return nil, fmt.Errorf("xdp on %s: a raw ESP socket must stay open beside it", cfg.Device)
	}
	if !cfg.Local.IsValid() || cfg.Local.IsUnspecified() {
		return nil, fmt.Errorf("xdp on %s: a local address to steer ESP for is needed", cfg.Device)
	}
	nl, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("xdp on %s: netlink: %w", cfg.Device, err)
	}
	l, err := nl.LinkByName(cfg.Device)
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("xdp on %s: %w: %w", cfg.Device, ErrUnsupported, err)
	}
	attrs := l.Attrs()
	if len(attrs.HardwareAddr) != 6 {
		nl.Close()
		return nil, fmt.Errorf("xdp on %s: %w: not an Ethernet device", cfg.Device, ErrUnsupported)
	}
	if attrs.MTU+ethHeaderLen > maxPayload {
		nl.Close()
		return nil, fmt.Errorf("xdp on %s: %w: MTU %d does not fit a %d-byte frame", cfg.Device, ErrUnsupported, attrs.MTU, frameSize)
	}
	cfg.Local = cfg.Local.Unmap()
	cn := &Conn{cfg: cfg, nl: nl, ifindex: attrs.Index, wake: -1,
		resolve: make(chan netip.Addr, 64), unsent: make(chan struct{}, 1), done: make(chan struct{})}
	fams := &families{}
	*fams.of(cfg.Local.Is6()) = family{local: cfg.Local, fallback: cfg.Fallback}
	cn.fams.Store(fams)
	defer func() {
		if err != nil {
			cn.Close()
		}
	}()
	c = cn
	c.mtu.Store(int64(attrs.MTU))
	copy(c.mac[:], attrs.HardwareAddr)
	empty := map[netip.Addr]hop{}
	c.hops.Store(&empty)
	queues := rxQueues(cfg.Device)
	if c.xsks, err = newSocketMap(queues); err != nil {
		return nil, fmt.Errorf("xdp on %s: %w: %w", cfg.Device, ErrUnsupported, err)
	}
	if c.prog, err = newProgram(c.xsks, fams.v4.local, fams.v6.local); err != nil {
		return nil, fmt.Errorf("xdp on %s: %w: %w", cfg.Device, ErrUnsupported, err)
	}
	mode := cfg.Mode
	switch mode {
	case "", ModeAuto:
		mode = ModeAuto
		if l.Type() == "veth" {
			mode = ModeGeneric
		}
	case ModeNative, ModeGeneric:
	default:
		return nil, fmt.Errorf("xdp on %s: mode %q: want auto, native or generic", cfg.Device, cfg.Mode)
	}
	if err := c.attachAndBind(mode, queues); err != nil {
		return nil, fmt.Errorf("xdp on %s: %w: %w", cfg.Device, ErrUnsupported, err)
	}
	if c.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("xdp on %s: eventfd: %w", cfg.Device, err)
	}
	for _, s := range c.sockets {
		c.polls = append(c.polls, unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN})
	}
	c.polls = append(c.polls, unix.PollFd{Fd: int32(c.wake), Events: unix.POLLIN})
	for i := range c.fallback {
		c.fallback[i] = make([]*esp.Packet, 0, 256)
	}
	c.wg.Add(2)
	go c.resolver()
	go c.flusher()
	cfg.Log.Info("raw ESP over AF_XDP", "device", cfg.Device, "mode", c.mode, "queues", queues, "local", cfg.Local)
	return c, nil
}

// attachAndBind attaches the program and binds a socket to every queue:
// natively with zero copy, then natively with copies, then in generic mode
// (of these, only the native ones for ModeNative, only generic for
// ModeGeneric), keeping the first that works and logging why the better
// ones did not.
func (c *Conn) attachAndBind(mode Mode, queues int) error {
	type try struct {
		name  string
		flags link.XDPAttachFlags
		bind  bindMode
	}
	tries := []try{{"native-zerocopy", link.XDPDriverMode, bindZeroCopy}, {"native", link.XDPDriverMode, bindCopy}, {"generic", link.XDPGenericMode, bindCopy}}
	switch mode {
	case ModeGeneric:
		tries = tries[2:]
	case ModeNative:
		tries = tries[:2]
	}
	var errs []error
	for _, t := range tries {
		err := c.tryMode(t.flags, t.bind, queues)
		if err == nil {
			c.mode = t.name
			if len(errs) > 0 {
				c.cfg.Log.Info("xdp: the better modes did not attach", "device", c.cfg.Device, "mode", t.name, "why", errors.Join(errs...))
			}
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
		c.detach()
	}
	return errors.Join(errs...)
}

func (c *Conn) tryMode(flags link.XDPAttachFlags, bind bindMode, queues int) error {
	for q := range queues {
		s, err := openSocket(c.ifindex, q, bind)
		if err != nil {
			return err
		}
		c.sockets = append(c.sockets, s)
		if err := c.xsks.Put(uint32(q), uint32(s.fd)); err != nil {
			return fmt.Errorf("put queue %d's socket in the map: %w", q, err)
		}
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: c.prog, Interface: c.ifindex, Flags: flags})
	if err != nil {
		return fmt.Errorf("attach the program: %w", err)
	}
	c.attach = l
	return nil
}

// detach undoes a failed tryMode.
func (c *Conn) detach() {
	if c.attach != nil {
		c.attach.Close()
		c.attach = nil
	}
	for _, s := range c.sockets {
		c.xsks.Delete(uint32(s.queue))
		s.close()
	}
	c.sockets = nil
}

// rxQueues is how many receive queues the device has (1 when sysfs does not
// say).
func rxQueues(dev string) int {
	ents, err := os.ReadDir("/sys/class/net/" + dev + "/queues")
	if err != nil {
		return 1
	}
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "rx-") {
			if _, err := strconv.Atoi(e.Name()[3:]); err == nil {
				n++
			}
		}
	}
	return max(n, 1)
}

// Mode is how the program is attached: "generic", "native" or
// "native-zerocopy".
func (c *Conn) Mode() string { return c.mode }

// Device is the interface the Conn steers ESP on.
func (c *Conn) Device() string { return c.cfg.Device }

// Locals are the addresses ESP is steered for, IPv4's first.
func (c *Conn) Locals() []netip.Addr {
	f := c.fams.Load()
	var out []netip.Addr
	for _, a := range []netip.Addr{f.v4.local, f.v6.local} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	return out
}

// Serve has the Conn serve local's family too, on the sockets it has: the
// program is replaced by one that also steers ESP to local (atomically:
// no frame of the family already served goes astray), and packets of the
// family are sent from local, through fallback (the family's raw ESP
// socket, which the Conn does not close) where the rings cannot send
// them. A family served already is an error.
func (c *Conn) Serve(local netip.Addr, fallback *transport.Conn) error {
	local = local.Unmap()
	if !local.IsValid() || local.IsUnspecified() {
		return fmt.Errorf("xdp on %s: a local address to steer ESP for is needed", c.cfg.Device)
	}
	if fallback == nil || fallback.Kind() != transport.RawESP {
		return fmt.Errorf("xdp on %s: a raw ESP socket must stay open beside it", c.cfg.Device)
	}
	c.famMu.Lock()
	defer c.famMu.Unlock()
	if c.closed.Load() {
		return fmt.Errorf("xdp on %s: %w", c.cfg.Device, net.ErrClosed)
	}
	next := *c.fams.Load()
	f := next.of(local.Is6())
	if f.local.IsValid() {
		return fmt.Errorf("xdp on %s: ESP to %s is steered here already, %s can not be too", c.cfg.Device, f.local, local)
	}
	*f = family{local: local, fallback: fallback}
	if err := c.steer(&next); err != nil {
		return err
	}
	c.cfg.Log.Info("raw ESP over AF_XDP", "device", c.cfg.Device, "mode", c.mode, "local", local, "served", c.Locals())
	return nil
}

// Drop stops steering and sending the family v6 says (its ESP goes to the
// kernel's raw socket again), and reports how many families are still
// served; a Conn serving none still holds its sockets until Close.
func (c *Conn) Drop(v6 bool) (int, error) {
	c.famMu.Lock()
	defer c.famMu.Unlock()
	next := *c.fams.Load()
	*next.of(v6) = family{}
	left := 0
	if next.v4.local.IsValid() {
		left++
	}
	if next.v6.local.IsValid() {
		left++
	}
	if c.closed.Load() {
		return left, nil
	}
	return left, c.steer(&next)
}

// steer puts a program steering ESP to next's addresses in place of the
// one attached, then next in force; famMu is held.
func (c *Conn) steer(next *families) error {
	prog, err := newProgram(c.xsks, next.v4.local, next.v6.local)
	if err != nil {
		return fmt.Errorf("xdp on %s: %w", c.cfg.Device, err)
	}
	if err := c.attach.Update(prog); err != nil {
		prog.Close()
		return fmt.Errorf("xdp on %s: replace the program: %w", c.cfg.Device, err)
	}
	c.fams.Store(next)
	c.prog.Close()
	c.prog = prog
	return nil
}

// Receive waits for steered ESP packets and returns how many it put in
// pkts[:n], with the gateway Conn's contract: each packet is copied to its
// Buf at Off with its IP header in front (HdrLen: 20 for IPv4 without
// options, 40 for IPv6), Off and Len then point at the ESP packet, Peer is
// the source, Local the destination and TOS the outer TOS or traffic class. Frames that are not a
// whole ESP packet (a bad IPv4 checksum or length, say) are counted and
// dropped, as the kernel would.
func (c *Conn) Receive(pkts []*esp.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, fmt.Errorf("receive over xdp on %s: no packet slots", c.cfg.Device)
	}
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	for {
		if c.closed.Load() {
			return 0, fmt.Errorf("receive over xdp on %s: %w", c.cfg.Device, net.ErrClosed)
		}
		n, bytes := 0, 0
		for k := range c.sockets {
			s := c.sockets[(c.next+k)%len(c.sockets)]
			got := s.received(uint32(len(pkts) - n))
			cons := *s.rx.consumer
			for i := range got {
				d := s.rx.xdpDesc(cons + i)
				if c.deliver(s.frame(d.Addr, d.Len), pkts[n]) {
					bytes += pkts[n].Len
					n++
				}
			}
			s.release(got)
			if n == len(pkts) {
				break
			}
		}
		c.next = (c.next + 1) % len(c.sockets)
		if n > 0 {
			c.stats.packetsIn.Add(uint64(n))
			c.stats.bytesIn.Add(uint64(bytes))
			return n, nil
		}
		if _, err := unix.Poll(c.polls, -1); err != nil && err != unix.EINTR {
			return 0, fmt.Errorf("receive over xdp on %s: poll: %w", c.cfg.Device, err)
		}
	}
}

// deliver copies one steered frame's IP packet into p, or counts why not.
func (c *Conn) deliver(f []byte, p *esp.Packet) bool {
	if len(f) < ethHeaderLen {
		c.stats.malformed.Add(1)
		return false
	}
	ip := f[ethHeaderLen:]
	n, ok := header.PacketLength(ip)
	v6 := ok && ip[0]>>4 == 6
	if !ok {
		c.stats.malformed.Add(1)
		return false
	}
	hl, tos := ipv6HeaderLen, uint8(binary.BigEndian.Uint16(ip[0:2])>>4)
	var src, dst netip.Addr
	if v6 {
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	} else {
		hl, tos = int(ip[0]&0x0f)*4, ip[1]
		if !header.Valid(0, ip[:hl]) {
			c.stats.malformed.Add(1)
			return false
		}
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	}
	if n-hl < transport.MinPacketLen {
		c.stats.malformed.Add(1)
		return false
	}
	if n > len(p.Buf)-p.Off {
		c.stats.truncated.Add(1)
		return false
	}
	copy(p.Buf[p.Off:], ip[:n])
	p.Off, p.Len, p.HdrLen = p.Off+hl, n-hl, hl
	p.Peer, p.Local, p.TOS = netip.AddrPortFrom(src, 0), dst, tos
	if v6 {
		c.stats.in6.Add(1)
	} else {
		c.stats.in4.Add(1)
	}
	return true
}

// defaultTTL is the TTL or hop limit of a packet that asks for none: the
// kernel's default.
const defaultTTL = 64

// Send sends each packet's Data to its Peer, in order, with the outer
// header its fields ask for, and returns how many went out. The packets go
// into the TX ring of the first queue's socket, all of them before one kick
// of the kernel; frames the kick leaves in the ring (the kernel could not
// take them now) are kicked again from a timer, with a backoff, so none
// waits for the next Send. A packet for a peer whose next hop the kernel has not
// resolved yet, or one to be cut into fragments, goes out through its
// family's raw socket instead (and the next hop is looked up for the next
// packets); one of a family the Conn does not serve is not sent.
func (c *Conn) Send(pkts []*esp.Packet) (int, error) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.closed.Load() || len(c.sockets) == 0 {
		// A batch picked this Conn before a reload closed it: the gateway
		// counts these as send errors.
		return 0, fmt.Errorf("send over xdp on %s: %w", c.cfg.Device, net.ErrClosed)
	}
	s := c.sockets[0]
	s.reap()
	room := s.txRoom()
	prod := *s.tx.producer
	queued, sent, bytes := uint32(0), 0, 0
	out4, out6 := uint64(0), uint64(0)
	var firstErr error
	fb := [2][]*esp.Packet{c.fallback[0][:0], c.fallback[1][:0]}
	fams := c.fams.Load()
	hops := *c.hops.Load()
	mtu := int(c.mtu.Load())
	var lastPeer netip.Addr
	var lastHop hop
	lastOK := false
	unserved := 0
	for _, p := range pkts {
		peer := p.Peer.Addr().Unmap()
		v6 := peer.Is6()
		fam := 0
		if v6 {
			fam = 1
		}
		if !fams.of(v6).local.IsValid() {
			unserved++
			continue
		}
		if p.Len <= 0 || p.Off < 0 || p.Off+p.Len > len(p.Buf) || !peer.IsValid() {
			fb[fam] = append(fb[fam], p) // the raw socket refuses it with the reason
			continue
		}
		ipLen := ipv4HeaderLen
		if v6 {
			ipLen = ipv6HeaderLen
		}
		total := ethHeaderLen + ipLen + p.Len
		// A batch mostly goes to one peer: look its hop up once.
		if peer != lastPeer || !lastOK {
			lastPeer = peer
			lastHop, lastOK = hops[peer]
		}
		h, ok := lastHop, lastOK
		switch {
		case !ok:
			c.stats.noNeighbor.Add(1)
			select {
			case c.resolve <- peer:
			default:
			}
			fb[fam] = append(fb[fam], p)
			continue
		case p.Fragment && p.FragMTU > 0 && ipLen+p.Len > p.FragMTU, ipLen+p.Len > mtu, total > maxPayload:
			fb[fam] = append(fb[fam], p)
			continue
		}
		if room == 0 || len(s.txFree) == 0 {
			// Hand the kernel what is queued, take back what it sent.
			atomic.StoreUint32(s.tx.producer, prod)
			s.txOutstanding += queued
			sent += int(queued)
			queued = 0
			if err := c.kick(s); err != nil && firstErr == nil {
				firstErr = err
			}
			s.reap()
			if room = s.txRoom(); room == 0 || len(s.txFree) == 0 {
				c.stats.txRingFull.Add(1)
				continue
			}
		}
		addr := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		f := s.umem[addr : addr+uint64(total)]
		copy(f[0:6], h.dst[:])
		copy(f[6:12], h.src[:])
		f[12], f[13] = 0x08, 0x00
		if v6 {
			f[12], f[13] = 0x86, 0xdd
			out6++
		} else {
			out4++
		}
		c.writeIP(f[ethHeaderLen:], v6, &h, p)
		copy(f[ethHeaderLen+ipLen:], p.Data())
		d := s.tx.xdpDesc(prod)
		d.Addr, d.Len, d.Options = addr, uint32(total), 0
		prod++
		room--
		queued++
		bytes += p.Len
	}
	if queued > 0 {
		atomic.StoreUint32(s.tx.producer, prod)
		s.txOutstanding += queued
		sent += int(queued)
		if err := c.kick(s); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	c.stats.packetsOut.Add(uint64(sent))
	c.stats.bytesOut.Add(uint64(bytes))
	c.stats.out4.Add(out4)
	c.stats.out6.Add(out6)
	for i, list := range fb {
		if len(list) == 0 {
			continue
		}
		c.stats.fallback.Add(uint64(len(list)))
		n, err := fams.of(i == 1).fallback.Send(list)
		sent += n
		if err != nil && firstErr == nil {
			firstErr = err
		}
		clear(list)
		c.fallback[i] = list[:0]
	}
	if unserved > 0 && firstErr == nil {
		firstErr = fmt.Errorf("send over xdp on %s: %d packets of a family it does not serve", c.cfg.Device, unserved)
	}
	return sent, firstErr
}

// kick has the kernel send what s's TX ring holds. Frames a kick leaves
// in the ring are the flusher's to send.
func (c *Conn) kick(s *socket) error {
	c.stats.kicks.Add(1)
	if err := s.kick(); err != nil {
		c.stats.sendErrors.Add(1)
		select {
		case c.unsent <- struct{}{}:
		default:
		}
		return fmt.Errorf("send over xdp on %s: kick the TX ring: %w", c.cfg.Device, err)
	}
	return nil
}

// The flusher's backoff: the first retry after retryFirst, each wait twice
// the last up to retryMost; frames still in the ring after stallAfter are
// logged as a stall.
const (
	retryFirst = 50 * time.Microsecond
	retryMost  = 10 * time.Millisecond
	stallAfter = time.Second
)

// flusher kicks the TX ring again after a kick that left frames in it,
// with a growing wait between kicks, until the ring is empty: frames never
// wait for the next Send (which may not come). A ring the kernel takes
// nothing from for stallAfter is counted and logged, and retried every
// retryMost until it drains or the Conn is closed.
func (c *Conn) flusher() {
	defer c.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-c.unsent:
		}
		start, wait, stalled := time.Now(), retryFirst, false
		for {
			t.Reset(wait)
			select {
			case <-c.done:
				t.Stop()
				return
			case <-t.C:
			}
			left, err := c.kickAgain()
			if left == 0 {
				if stalled {
					c.cfg.Log.Info("xdp: the TX ring drains again", "device", c.cfg.Device, "after", time.Since(start).Round(time.Millisecond))
				}
				break
			}
			if !stalled && time.Since(start) >= stallAfter {
				stalled = true
				c.stats.kickStalls.Add(1)
				c.cfg.Log.Warn("xdp: the kernel takes no frames from the TX ring", "device", c.cfg.Device,
					"frames", left, "for", time.Since(start).Round(time.Millisecond), "err", err)
			}
			wait = min(2*wait, retryMost)
		}
	}
}

// kickAgain kicks the TX ring of the sending socket if frames are left in
// it, and returns how many are left after.
func (c *Conn) kickAgain() (uint32, error) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.closed.Load() || len(c.sockets) == 0 {
		return 0, nil
	}
	s := c.sockets[0]
	if s.txQueued() == 0 {
		return 0, nil
	}
	c.stats.kickRetries.Add(1)
	if err := s.kick(); err != nil {
		return max(s.txQueued(), 1), err
	}
	s.reap()
	return 0, nil
}

// writeIP writes the outer IPv4 or IPv6 header of p into b: DSCP/ECN from
// TOS, TTL or hop limit, DF unless p.Fragment (IPv4), and the addresses:
// the source is p.Local (its SA's) when it is of the family, else the
// route's.
func (c *Conn) writeIP(b []byte, v6 bool, h *hop, p *esp.Packet) {
	ttl := cmp.Or(p.TTL, defaultTTL)
	src := h.from
	if p.Local.IsValid() && p.Local.Is6() == v6 {
		src = p.Local
	}
	if v6 {
		ip := header.IPv6{TrafficClass: p.TOS, PayloadLen: uint16(p.Len), NextHeader: protocolESP, HopLimit: ttl, Src: src, Dst: p.Peer.Addr()}
		ip.Marshal(b)
		return
	}
	c.ipID++
	ip := header.IPv4{TOS: p.TOS, TotalLen: uint16(ipv4HeaderLen + p.Len), ID: c.ipID, DF: !p.Fragment, TTL: ttl, Protocol: protocolESP, Src: src, Dst: p.Peer.Addr()}
	ip.Marshal(b)
}

// refreshEvery is how often the known next hops are looked up again, so a
// changed route or neighbour is followed within it.
const refreshEvery = time.Second

// resolver keeps the next hops of the peers the Conn sends to, from the
// kernel's route and neighbour tables: at once for a peer Send did not
// know (whose packet went through the raw socket, which has the kernel
// resolve it), and again every refreshEvery.
func (c *Conn) resolver() {
	defer c.wg.Done()
	peers := map[netip.Addr]bool{}
	tick := time.NewTicker(refreshEvery / 10)
	defer tick.Stop()
	last := time.Time{}
	pending := false
	for {
		select {
		case <-c.done:
			return
		case a := <-c.resolve:
			if !peers[a] {
				peers[a] = true
				pending = true
			}
			continue
		case <-tick.C:
		}
		if !pending && time.Since(last) < refreshEvery {
			continue
		}
		if l, err := c.nl.LinkByIndex(c.ifindex); err == nil {
			c.mtu.Store(int64(l.Attrs().MTU))
		}
		next := map[netip.Addr]hop{}
		unresolved := false
		for a := range peers {
			h, err := c.lookup(a)
			if err != nil {
				unresolved = true
				c.cfg.Log.Debug("xdp next hop", "peer", a, "err", err)
				continue
			}
			next[a] = h
		}
		c.hops.Store(&next)
		last, pending = time.Now(), unresolved
	}
}

// lookup asks the kernel how it would send to peer: the route's device,
// gateway and source, and the neighbour entry of the next hop.
func (c *Conn) lookup(peer netip.Addr) (hop, error) {
	routes, err := c.nl.RouteGet(peer.AsSlice())
	if err != nil || len(routes) == 0 {
		return hop{}, fmt.Errorf("no route to %s: %v", peer, err)
	}
	r := routes[0]
	if r.LinkIndex != c.ifindex {
		return hop{}, fmt.Errorf("%s is reached through interface %d, not %s", peer, r.LinkIndex, c.cfg.Device)
	}
	next := peer
	if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.IsValid() && !gw.IsUnspecified() {
		next = gw.Unmap()
	}
	family := netlink.FAMILY_V4
	if peer.Is6() {
		family = netlink.FAMILY_V6
	}
	local := c.fams.Load().of(peer.Is6()).local
	if !local.IsValid() {
		return hop{}, fmt.Errorf("%s: its family is not served on %s", peer, c.cfg.Device)
	}
	neighs, err := c.nl.NeighList(c.ifindex, family)
	if err != nil {
		return hop{}, fmt.Errorf("read the neighbour table of %s: %w", c.cfg.Device, err)
	}
	usable := netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, n := range neighs {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || a.Unmap() != next || n.State&usable == 0 || len(n.HardwareAddr) != 6 {
			continue
		}
		h := hop{src: c.mac, from: local}
		copy(h.dst[:], n.HardwareAddr)
		return h, nil
	}
	return hop{}, fmt.Errorf("next hop %s of %s not resolved on %s", next, peer, c.cfg.Device)
}

// Stats returns the counters and the kernel's XDP statistics.
func (c *Conn) Stats() Stats {
	s := &c.stats
	out := Stats{
		Mode: c.mode, Device: c.cfg.Device,
		PacketsIn: s.packetsIn.Load(), BytesIn: s.bytesIn.Load(), PacketsOut: s.packetsOut.Load(), BytesOut: s.bytesOut.Load(),
		Kicks: s.kicks.Load(), Fallback: s.fallback.Load(), NoNeighbor: s.noNeighbor.Load(), Malformed: s.malformed.Load(),
		Truncated: s.truncated.Load(), TXRingFull: s.txRingFull.Load(), SendErrors: s.sendErrors.Load(),
		KickRetries: s.kickRetries.Load(), KickStalls: s.kickStalls.Load(),
		IPv4: FamilyStats{PacketsIn: s.in4.Load(), PacketsOut: s.out4.Load()},
		IPv6: FamilyStats{PacketsIn: s.in6.Load(), PacketsOut: s.out6.Load()},
	}
	for _, a := range c.Locals() {
		out.Local = append(out.Local, a.String())
	}
	c.sendMu.Lock() // Close takes the sockets away under it
	defer c.sendMu.Unlock()
	out.Queues = len(c.sockets)
	for _, sk := range c.sockets {
		st, err := sk.statistics()
		if err != nil {
			continue
		}
		out.RxDropped += st.Rx_dropped
		out.RxInvalidDescs += st.Rx_invalid_descs
		out.TxInvalidDescs += st.Tx_invalid_descs
		out.RxRingFull += st.Rx_ring_full
		out.RxFillRingEmptyDescs += st.Rx_fill_ring_empty_descs
		out.TxRingEmptyDescs += st.Tx_ring_empty_descs
	}
	return out
}

// Close detaches the program and closes the sockets; a blocked Receive
// returns net.ErrClosed. The fallback socket stays open (it is the
// caller's).
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.done)
	c.wg.Wait()
	if c.wake >= 0 {
		one := [8]byte{1}
		unix.Write(c.wake, one[:])
	}
	c.famMu.Lock()
	defer c.famMu.Unlock()
	c.recvMu.Lock()
	c.sendMu.Lock()
	c.detach()
	if c.xsks != nil {
		c.xsks.Close()
	}
	if c.prog != nil {
		c.prog.Close()
	}
	if c.wake >= 0 {
		unix.Close(c.wake)
		c.wake = -1
	}
	c.nl.Close()
	c.sendMu.Unlock()
	c.recvMu.Unlock()
	return nil
}
