// Package wanrelay is the test bed's WAN middlebox that applies impairments.
//
// It is the WAN middlebox of the espgw test bed: inside the "wan" network
// namespace it joins two interfaces (one toward each gateway) with AF_PACKET
// sockets and passes every frame through an impairment stage
// (internal/lab/impair), one per direction. In Bridge mode it forwards
// frames unchanged, a bump in the wire between gateways on one subnet; in
// Route mode it takes over the forwarding of a wan namespace that routes
// between two subnets (the standard topology), so impairments need no change
// of addresses. ESP and ESP in UDP/4500 get the impairments; ARP, neighbour
// discovery and all other traffic cross untouched. It counts what it read,
// impaired and sent, and can capture what it forwarded to a pcap. Run runs
// it until its context ends; Start runs it in the background of a test bed.
//
// The frames carry virtio-net headers (PACKET_VNET_HDR): a frame whose
// checksum its sender's kernel left to the (veth) hardware gets it computed
// before it is impaired, and a UDP GSO super-packet of ESP is cut into its
// datagrams, so each ESP packet is impaired on its own. Other GSO frames (TCP
// across the WAN) are forwarded whole, header and all.
package wanrelay

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/espgw/espgw/internal/lab/impair"
)

// Config says where the relay runs and what it does to the traffic.
type Config struct {
	// Netns is the network namespace holding both interfaces ("" for the
	// caller's own).
	Netns string
	// A and B name the interfaces toward the two gateways.
	A string
	B string
	// Mode is Bridge (the default) or Route.
	Mode Mode
	// AToB and BToA are the impairments of each direction; a zero value
	// impairs nothing (impair.DefaultConfig, with seeds 1 and 2).
	AToB impair.Config
	BToA impair.Config
	// Pcap, if set, is a file that receives every frame the relay sent, in
	// both directions, with Ethernet link type.
	Pcap string
	// Logger receives the relay's start, stop and error messages.
	Logger *slog.Logger
}

// Counters is what the relay did in each direction.
type Counters struct {
	AToB Direction `json:"a_to_b"`
	BToA Direction `json:"b_to_a"`
}

// Direction counts one direction of the relay. Every frame read is
// accounted for: Conserved checks
//
//	RxFrames + GSOSegments − GSOSegmented ==
//	    Impair.Received + GSOPassed + RxTruncated + RxMalformed
//	    + NotRouted + TTLExpired + NoRoute + NeighborUnresolved + NeighborOverflow + NeighborWaiting
//	TxFrames + TxErrors == Impair.Emitted + GSOPassed
//
// and the stage's own law holds over Impair (see impair.Counters), with
// InFlight the packets still in the stage.
type Direction struct {
	From string `json:"from"`
	To   string `json:"to"`

	RxFrames    uint64 `json:"rx_frames"` // every frame read, whatever became of it
	RxBytes     uint64 `json:"rx_bytes"`
	RxTruncated uint64 `json:"rx_truncated"` // frames longer than the receive buffer, dropped
	RxMalformed uint64 `json:"rx_malformed"` // frames too short or inconsistent to forward (runts, bad GSO or checksum offsets), dropped
	// RxKernelDrops are frames the kernel dropped before the relay could
	// read them (socket buffer full): the relay was overrun.
	RxKernelDrops uint64 `json:"rx_kernel_drops"`

	ChecksumsCompleted uint64 `json:"checksums_completed"` // checksums left to the hardware, computed here
	GSOSegmented       uint64 `json:"gso_segmented"`       // UDP GSO super-packets of ESP cut up
	GSOSegments        uint64 `json:"gso_segments"`        // datagrams made from them
	GSOPassed          uint64 `json:"gso_passed"`          // other GSO frames forwarded whole

	// Route mode: frames left to wan's own kernel (ARP, ND, packets for
	// wan), dropped for an expired TTL or hop limit or for want of a route
	// out of the other port, held while wan resolved a next hop, and
	// dropped when that took over a second or too many waited.
	NotRouted          uint64 `json:"not_routed,omitempty"`
	TTLExpired         uint64 `json:"ttl_expired,omitempty"`
	NoRoute            uint64 `json:"no_route,omitempty"`
	NeighborWaits      uint64 `json:"neighbor_waits,omitempty"`
	NeighborUnresolved uint64 `json:"neighbor_unresolved,omitempty"`
	NeighborOverflow   uint64 `json:"neighbor_overflow,omitempty"`
	NeighborWaiting    int    `json:"neighbor_waiting,omitempty"` // frames waiting now

	TxFrames    uint64 `json:"tx_frames"`
	TxBytes     uint64 `json:"tx_bytes"`
	TxErrors    uint64 `json:"tx_errors"` // frames the kernel refused, dropped
	LastTxError string `json:"last_tx_error,omitempty"`

	// ICMP errors the stage made (impair pmtu) sent back out of the port
	// the packet came in on, and those the kernel refused.
	BackFrames uint64 `json:"back_frames,omitempty"`
	BackErrors uint64 `json:"back_errors,omitempty"`

	InFlight int `json:"in_flight"` // packets held in the stage now
	// IKEInFlight are the IKE messages among them (impair match: ike).
	IKEInFlight int             `json:"ike_in_flight,omitempty"`
	Impair      impair.Counters `json:"impair"`
}

// Relay forwards frames between two interfaces through impairment stages.
type Relay struct {
	cfg  Config
	log  *slog.Logger
	a, b *link
	dirs [2]*direction
	pcap *capture
	// forwarding holds wan's forwarding switches as Route mode found them.
	forwarding []string
}

// maxFrame bounds what one read can return: a GSO super-packet of 64 KiB
// with its link header and virtio-net header.
const maxFrame = 65536 + 64

// New opens the relay's sockets on cfg.A and cfg.B in cfg.Netns.
func New(cfg Config) (*Relay, error) {
	if cfg.A == "" || cfg.B == "" || cfg.A == cfg.B {
		return nil, fmt.Errorf("wan relay: need two different interfaces, got a=%q b=%q", cfg.A, cfg.B)
	}
	if reflect.ValueOf(cfg.AToB).IsZero() {
		cfg.AToB = impair.DefaultConfig()
	}
	if reflect.ValueOf(cfg.BToA).IsZero() {
		cfg.BToA = impair.DefaultConfig()
		cfg.BToA.Seed = 2
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = Bridge
	case Bridge, Route:
	default:
		return nil, fmt.Errorf("wan relay: mode %q: want bridge or route", cfg.Mode)
	}
	r := &Relay{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default())}
	var local map[netip.Addr]bool
	err := withNetns(cfg.Netns, func() error {
		var err error
		if r.a, err = openLink(cfg.A); err != nil {
			return err
		}
		if r.b, err = openLink(cfg.B); err != nil {
			return err
		}
		if cfg.Mode != Route {
			return nil
		}
		if local, err = localAddrs(); err != nil {
			return err
		}
		r.forwarding, err = setForwarding([]string{"0", "0"})
		return err
	})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("wan relay in netns %q: %w", cfg.Netns, err)
	}
	// Room for the largest frame either side can carry, with three VLAN tags.
	size := max(r.a.mtu, r.b.mtu) + 14 + 12
	if cfg.Pcap != "" {
		if r.pcap, err = newCapture(cfg.Pcap); err != nil {
			r.Close()
			return nil, fmt.Errorf("wan relay: %w", err)
		}
	}
	for i, d := range []struct {
		from, to *link
		cfg      impair.Config
	}{{r.a, r.b, cfg.AToB}, {r.b, r.a, cfg.BToA}} {
		st, err := impair.New(d.cfg, impair.Ethernet, size)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("wan relay %s→%s: %w", d.from.name, d.to.name, err)
		}
		r.dirs[i] = newDirection(d.from, d.to, st, size, r.pcap)
		if cfg.Mode == Route {
			if r.dirs[i].router, err = newRouter(cfg.Netns, d.from, d.to, local); err != nil {
				r.Close()
				return nil, fmt.Errorf("wan relay: %w", err)
			}
		}
	}
	return r, nil
}

// Close closes the sockets and the capture file.
func (r *Relay) Close() error {
	var errs []error
	for _, l := range []*link{r.a, r.b} {
		if l != nil {
			errs = append(errs, l.close())
		}
	}
	if r.pcap != nil {
		errs = append(errs, r.pcap.close())
		r.pcap = nil
	}
	for _, d := range r.dirs {
		if d != nil && d.router != nil {
			d.router.close()
			d.router = nil
		}
	}
	if r.forwarding != nil {
		errs = append(errs, withNetns(r.cfg.Netns, func() error {
			_, err := setForwarding(r.forwarding)
			return err
		}))
		r.forwarding = nil
	}
	return errors.Join(errs...)
}

// Counters returns a snapshot of both directions' counters.
func (r *Relay) Counters() Counters {
	return Counters{AToB: r.dirs[0].counters(), BToA: r.dirs[1].counters()}
}

// Run forwards frames until ctx is done (then it returns nil) or a socket
// fails: a port that goes away with its peer's namespace ends it with an
// error wrapping ENETDOWN. Packets still held by the stages when it returns
// are not sent (Counters shows them as in flight).
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.log.Info("wan relay started", "netns", r.cfg.Netns, "a", r.cfg.A, "b", r.cfg.B)
	var wg sync.WaitGroup
	errs := make([]error, len(r.dirs))
	for i, d := range r.dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = d.run(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	// Wake the readers when ctx ends: a deadline in the past makes a
	// waiting read return at once.
	stop := context.AfterFunc(ctx, func() {
		for _, l := range []*link{r.a, r.b} {
			l.file.SetReadDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	wg.Wait()
	if r.pcap != nil {
		if err := r.pcap.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	r.log.Info("wan relay stopped", "err", err)
	return err
}

// capture writes forwarded frames to a pcap file; both directions share it.
type capture struct {
	mu   sync.Mutex
	f    *os.File
	bw   *bufio.Writer
	w    *pcapgo.Writer
	path string
	err  error
}

func newCapture(path string) (*capture, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create capture: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w := pcapgo.NewWriter(bw)
	if err := w.WriteFileHeader(maxFrame, layers.LinkTypeEthernet); err != nil {
		f.Close()
		return nil, fmt.Errorf("write capture header to %s: %w", path, err)
	}
	return &capture{f: f, bw: bw, w: w, path: path}, nil
}

func (c *capture) write(t time.Time, frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	ci := gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(frame), Length: len(frame)}
	if err := c.w.WritePacket(ci, frame); err != nil {
		c.err = fmt.Errorf("write capture %s: %w", c.path, err)
	}
}

func (c *capture) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if err := c.bw.Flush(); err != nil {
		c.err = fmt.Errorf("write capture %s: %w", c.path, err)
	}
	return c.err
}

func (c *capture) close() error {
	err := c.flush()
	return errors.Join(err, c.f.Close())
}

// Conserved reports which accounting law of the direction does not hold, if
// any: a frame the relay lost track of is a bug.
func (c Direction) Conserved() error {
	in := c.RxFrames + c.GSOSegments - c.GSOSegmented
	out := c.Impair.Received + c.GSOPassed + c.RxTruncated + c.RxMalformed + c.NotRouted + c.TTLExpired +
		c.NoRoute + c.NeighborUnresolved + c.NeighborOverflow + uint64(c.NeighborWaiting)
	if in != out {
		return fmt.Errorf("relay %s→%s: %d frames in (with GSO segments), %d accounted for: %+v", c.From, c.To, in, out, c)
	}
	if tx, due := c.TxFrames+c.TxErrors, c.Impair.Emitted+c.GSOPassed; tx != due {
		return fmt.Errorf("relay %s→%s: %d frames sent or refused, %d due: %+v", c.From, c.To, tx, due, c)
	}
	i := c.Impair
	if i.Received+i.Duplicated+i.Replayed != i.Emitted+i.Dropped()+uint64(c.InFlight) {
		return fmt.Errorf("relay %s→%s: impairment stage does not add up: %+v in flight %d", c.From, c.To, i, c.InFlight)
	}
	return nil
}

// Running is a relay run in the background of this process, by Start.
type Running struct {
	*Relay
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// Start makes a relay (New) and runs it in the background until Close.
func Start(cfg Config) (*Running, error) {
	rl, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{Relay: rl, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- rl.Run(ctx) }()
	return r, nil
}

// Settle waits until the relay holds no packet (delays, reorders, replays
// all released) and its counters stopped moving for quiet, or until max.
func (r *Running) Settle(quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	last := r.Counters()
	stable := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		c := r.Counters()
		if c != last {
			last, stable = c, time.Now()
			continue
		}
		if c.AToB.InFlight == 0 && c.BToA.InFlight == 0 && time.Since(stable) >= quiet {
			return
		}
	}
}

// Close stops the relay (waiting up to 5 s) and releases its sockets; it
// flushes the relay's pcap, if any. The error is Run's, or the release's.
func (r *Running) Close() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil && !errors.Is(err, context.Canceled) {
				r.err = err
			}
		case <-time.After(5 * time.Second):
			r.err = errors.New("wan relay did not stop within 5s of its context ending")
		}
		if err := r.Relay.Close(); err != nil && r.err == nil {
			r.err = err
		}
	})
	return r.err
}
