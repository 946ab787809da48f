// Package impair is espgw's own netem: a deterministic impairment stage over
// a stream of packets. It drops (independently or in Gilbert–Elliott bursts),
// rewrites the SPI, corrupts bytes of the ESP part, truncates, duplicates,
// replays earlier packets, reorders with a fixed depth and delays with
// jitter — only the packets its filter matches (ESP and ESP in UDP/4500 by
// default) — and counts exactly what it did, so a scenario can check a
// receiver's drop counters against it (replay drops == Replayed, ICV failures
// == Corrupted).
//
// A Stage is a pure state machine driven by the caller's clock: Push a
// packet, Pop what is due, ask Next when to come back. It owns a bounded pool
// of packet buffers and allocates nothing per packet once warm. The WAN relay
// (internal/lab/wanrelay) runs one Stage per direction.
package impair

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Packet is a buffer owned by a Stage. Bytes is valid until the packet is
// given back with Release.
type Packet struct {
	buf    []byte
	n      int
	at     time.Time // due time (delay, replay) or start of its reorder hold
	passed int       // later packets that left while it was held
	ike    bool      // an IKE message (match: ike)
}

// Bytes returns the packet's contents.
func (p *Packet) Bytes() []byte { return p.buf[:p.n] }

// Counters are what a Stage did, packet by packet. At any moment
//
//	Received + Duplicated + Replayed == Emitted + Dropped() + InFlight
//
// where InFlight is Stage.InFlight.
type Counters struct {
	Received       uint64 `json:"received"`         // packets pushed
	Matched        uint64 `json:"matched"`          // of those, matched by the filter
	Emitted        uint64 `json:"emitted"`          // packets popped (originals, duplicates, replays)
	Lost           uint64 `json:"lost"`             // dropped by Loss
	BurstLost      uint64 `json:"burst_lost"`       // dropped by Burst
	Overflow       uint64 `json:"overflow"`         // dropped: no room under Limit
	Oversize       uint64 `json:"oversize"`         // dropped: longer than the stage's buffers
	Rewritten      uint64 `json:"rewritten"`        // SPI rewritten
	Corrupted      uint64 `json:"corrupted"`        // packets corrupted
	CorruptedBytes uint64 `json:"corrupted_bytes"`  // bytes flipped in them
	Truncated      uint64 `json:"truncated"`        // packets truncated
	Duplicated     uint64 `json:"duplicated"`       // extra copies made
	Replayed       uint64 `json:"replayed"`         // replay copies sent
	ReplaySkipped  uint64 `json:"replay_skipped"`   // picked for replay while the history was full
	Reordered      uint64 `json:"reordered"`        // held packets released behind later ones
	ReorderExpired uint64 `json:"reorder_expired"`  // held packets released by MaxHold with none passing
	Delayed        uint64 `json:"delayed"`          // packets that went through the delay queue
	CEMarked       uint64 `json:"ce_marked"`        // outer ECN set to CE (ecn-ce)
	TooBig         uint64 `json:"too_big"`          // dropped: over pmtu with DF (or IPv6)
	TooBigReported uint64 `json:"too_big_reported"` // ICMP errors about them queued for PopBack
	// IKE messages (match: ike) among the matched, the dropped by loss or
	// burst, and the duplicated: what no gateway's ESP counters see.
	IKEMatched    uint64 `json:"ike_matched"`
	IKEDropped    uint64 `json:"ike_dropped"`
	IKEDuplicated uint64 `json:"ike_duplicated"`
}

// Dropped is the number of packets the stage dropped, for every reason.
func (c Counters) Dropped() uint64 {
	return c.Lost + c.BurstLost + c.Overflow + c.Oversize + c.TooBig
}

// Random streams, one per impairment (see Config).
const (
	streamLoss = iota + 1
	streamBurst
	streamSPI
	streamCorrupt
	streamTruncate
	streamDuplicate
	streamReplay
	streamReorder
	streamDelay
	streamECN
)

// Stage applies a Config to a stream of packets. It is not safe for
// concurrent use.
type Stage struct {
	cfg   Config
	link  LinkType
	match matcher
	size  int

	free  []*Packet
	inUse int

	rnd [streamECN + 1]*rand.Rand
	bad bool // Gilbert–Elliott state

	ready, delayed, replays fifo
	back                    fifo      // ICMP errors toward the sender (header.go)
	held                    []*Packet // in arrival order
	lastDue                 time.Time
	offsets                 []int // scratch for Corrupt

	c Counters
}

// New returns a Stage applying cfg to packets of the given link type and at
// most maxPacket bytes.
func New(cfg Config, link LinkType, maxPacket int) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("impairments: %w", err)
	}
	if maxPacket < 64 {
		return nil, fmt.Errorf("impairments: maximum packet size %d is below 64 bytes", maxPacket)
	}
	m, _ := parseMatch(cfg.Match)
	s := &Stage{cfg: cfg, link: link, match: m, size: maxPacket,
		held: make([]*Packet, 0, MaxHeld), offsets: make([]int, 0, cfg.Corrupt.Bytes)}
	for i := range s.rnd {
		s.rnd[i] = rand.New(rand.NewPCG(cfg.Seed, uint64(i)*0x9e3779b97f4a7c15))
	}
	return s, nil
}

// Counters returns what the stage has done so far.
func (s *Stage) Counters() Counters { return s.c }

// InFlight is the number of packets the stage holds that came in through
// Push (waiting in the delay queue, a reorder hold or for Pop); replay copies
// not yet sent are not among them.
func (s *Stage) InFlight() int { return s.ready.len() + s.delayed.len() + len(s.held) }

// IKEInFlight is how many of the packets in flight are IKE messages
// (match: ike).
func (s *Stage) IKEInFlight() int {
	isIKE := func(p *Packet) bool { return p.ike }
	n := s.ready.count(isIKE) + s.delayed.count(isIKE)
	for _, p := range s.held {
		if p.ike {
			n++
		}
	}
	return n
}

// Matches reports whether the stage's filter matches pkt.
func (s *Stage) Matches(pkt []byte) bool {
	_, ok := s.match.locate(pkt, s.link)
	return ok
}

func (s *Stage) chance(stream int, pct float64) bool {
	return pct > 0 && s.rnd[stream].Float64()*100 < pct
}

// get returns a free packet holding a copy of b, or nil at the Limit.
func (s *Stage) get(b []byte) *Packet {
	if s.inUse >= s.cfg.Limit {
		return nil
	}
	s.inUse++
	var p *Packet
	if n := len(s.free); n > 0 {
		p, s.free = s.free[n-1], s.free[:n-1]
	} else {
		p = &Packet{buf: make([]byte, s.size)}
	}
	p.n = copy(p.buf, b)
	p.passed, p.ike = 0, false
	return p
}

// getSized returns a free packet of n bytes (contents undefined), or nil.
func (s *Stage) getSized(n int) *Packet {
	p := s.get(nil)
	if p != nil {
		p.n = n
	}
	return p
}

func (s *Stage) countIKEDrop(l *layout) {
	if l.ike {
		s.c.IKEDropped++
	}
}

// Release gives a popped packet back to the stage's pool.
func (s *Stage) Release(p *Packet) {
	s.inUse--
	s.free = append(s.free, p)
}

// Push hands the stage one packet at time now. The stage copies it: pkt may
// be reused as soon as Push returns.
func (s *Stage) Push(now time.Time, pkt []byte) {
	s.c.Received++
	if len(pkt) > s.size {
		s.c.Oversize++
		return
	}
	l, ok := s.match.locate(pkt, s.link)
	if !ok {
		if p := s.get(pkt); p != nil {
			s.ready.push(p)
		} else {
			s.c.Overflow++
		}
		return
	}
	s.c.Matched++
	if l.ike {
		s.c.IKEMatched++
	}
	if s.tooBig(pkt, &l) {
		s.c.TooBig++
		s.reportTooBig(pkt, &l)
		return
	}
	if s.chance(streamLoss, s.cfg.Loss) {
		s.c.Lost++
		s.countIKEDrop(&l)
		return
	}
	if s.cfg.Burst.P > 0 && s.burstLoses() {
		s.c.BurstLost++
		s.countIKEDrop(&l)
		return
	}
	p := s.get(pkt)
	if p == nil {
		s.c.Overflow++
		s.countIKEDrop(&l)
		return
	}
	p.ike = l.ike
	intact := true
	if s.chance(streamECN, s.cfg.ECNCE) {
		markCE(p.buf, &l)
		s.c.CEMarked++
	}
	if s.chance(streamSPI, s.cfg.RewriteSPI.Percent) && s.cfg.RewriteSPI.SPI != 0 {
		binary.BigEndian.PutUint32(p.buf[l.esp:], s.cfg.RewriteSPI.SPI)
		l.fixUDP(p.buf)
		s.c.Rewritten++
		intact = false
	}
	if s.chance(streamCorrupt, s.cfg.Corrupt.Percent) && s.corrupt(p, &l) {
		intact = false
	}
	if s.chance(streamTruncate, s.cfg.Truncate.Percent) && s.truncate(p, &l) {
		intact = false
	}
	var dup *Packet
	if s.chance(streamDuplicate, s.cfg.Duplicate) {
		s.c.Duplicated++
		if l.ike {
			s.c.IKEDuplicated++
		}
		if dup = s.get(p.Bytes()); dup == nil {
			s.c.Overflow++
			s.countIKEDrop(&l)
		} else {
			dup.ike = l.ike
		}
	}
	if intact && s.chance(streamReplay, s.cfg.Replay.Percent) {
		var c *Packet
		if s.replays.len() < s.cfg.Replay.History {
			c = s.get(p.Bytes())
		}
		if c == nil {
			s.c.ReplaySkipped++
		} else {
			c.at = now.Add(s.cfg.Replay.After)
			s.replays.push(c)
		}
	}
	s.reorder(now, p)
	if dup != nil {
		s.reorder(now, dup)
	}
}

// burstLoses steps the Gilbert–Elliott chain and draws the loss.
func (s *Stage) burstLoses() bool {
	r := s.rnd[streamBurst]
	if s.bad {
		s.bad = !(r.Float64()*100 < s.cfg.Burst.R)
	} else {
		s.bad = r.Float64()*100 < s.cfg.Burst.P
	}
	if s.bad {
		return r.Float64()*100 < s.cfg.Burst.LossBad
	}
	return r.Float64()*100 < s.cfg.Burst.LossGood
}

// corrupt flips Corrupt.Bytes distinct bytes in the configured range.
func (s *Stage) corrupt(p *Packet, l *layout) bool {
	cc := s.cfg.Corrupt
	lo := l.esp + cc.From
	hi := l.ipEnd + cc.To
	if cc.To > 0 {
		hi = min(l.esp+cc.To, l.ipEnd)
	}
	if hi <= lo {
		return false
	}
	n, k := hi-lo, min(cc.Bytes, hi-lo)
	r := s.rnd[streamCorrupt]
	// Floyd's sampling: k distinct offsets in [0, n) with k draws.
	s.offsets = s.offsets[:0]
	for j := n - k; j < n; j++ {
		t := r.IntN(j + 1)
		if slices.Contains(s.offsets, t) {
			t = j
		}
		s.offsets = append(s.offsets, t)
	}
	for _, o := range s.offsets {
		p.buf[lo+o] ^= byte(r.IntN(255) + 1)
	}
	l.fixUDP(p.buf)
	s.c.Corrupted++
	s.c.CorruptedBytes += uint64(k)
	return true
}

// truncate shortens the ESP part as Truncate says.
func (s *Stage) truncate(p *Packet, l *layout) bool {
	have := l.ipEnd - l.esp
	keep := s.cfg.Truncate.To
	if s.cfg.Truncate.By > 0 {
		keep = max(have-s.cfg.Truncate.By, 0)
	}
	if keep >= have {
		return false
	}
	p.n = l.setLength(p.buf, l.esp+keep)
	s.c.Truncated++
	return true
}

// reorder holds p back or sends it on, releasing the holds it completes.
func (s *Stage) reorder(now time.Time, p *Packet) {
	if len(s.held) < MaxHeld && s.chance(streamReorder, s.cfg.Reorder.Percent) {
		p.at = now
		s.held = append(s.held, p)
		return
	}
	s.delay(now, p)
	for i := range s.held {
		s.held[i].passed++
	}
	// Holds are in arrival order, so the oldest has been passed the most.
	for len(s.held) > 0 && s.held[0].passed >= s.cfg.Reorder.Depth {
		s.releaseHeld(now)
	}
}

func (s *Stage) releaseHeld(now time.Time) {
	h := s.held[0]
	copy(s.held, s.held[1:])
	s.held[len(s.held)-1] = nil
	s.held = s.held[:len(s.held)-1]
	if h.passed > 0 {
		s.c.Reordered++
	} else {
		s.c.ReorderExpired++
	}
	s.delay(now, h)
}

// delay queues p for its delay, or makes it ready at once.
func (s *Stage) delay(now time.Time, p *Packet) {
	d := s.cfg.Delay
	if d.Time == 0 && d.Jitter == 0 {
		s.ready.push(p)
		return
	}
	t := d.Time
	if d.Jitter > 0 {
		t += time.Duration(s.rnd[streamDelay].Int64N(2*int64(d.Jitter)+1)) - d.Jitter
	}
	p.at = now.Add(max(t, 0))
	if p.at.Before(s.lastDue) {
		p.at = s.lastDue
	}
	s.lastDue = p.at
	s.c.Delayed++
	s.delayed.push(p)
}

// Pop returns the next packet due at now, or nil. Give it back with Release
// once sent.
func (s *Stage) Pop(now time.Time) *Packet {
	for len(s.held) > 0 && !now.Before(s.held[0].at.Add(s.cfg.Reorder.MaxHold)) {
		s.releaseHeld(now)
	}
	s.due(now)
	if s.ready.len() == 0 {
		return nil
	}
	s.c.Emitted++
	return s.ready.pop()
}

// due moves the delayed packets and replay copies due at now to the ready
// queue, in time order.
func (s *Stage) due(now time.Time) {
	for {
		var q *fifo
		switch {
		case s.delayed.len() > 0 && s.replays.len() > 0:
			q = &s.delayed
			if s.replays.peek().at.Before(s.delayed.peek().at) {
				q = &s.replays
			}
		case s.delayed.len() > 0:
			q = &s.delayed
		case s.replays.len() > 0:
			q = &s.replays
		default:
			return
		}
		if now.Before(q.peek().at) {
			return
		}
		if q == &s.replays {
			s.c.Replayed++
		}
		s.ready.push(q.pop())
	}
}

// Next returns the earliest time at which Pop will have something that is
// not ready now, and false when nothing is waiting for a time.
func (s *Stage) Next() (time.Time, bool) {
	var t time.Time
	ok := false
	consider := func(u time.Time) {
		if !ok || u.Before(t) {
			t, ok = u, true
		}
	}
	if s.ready.len() > 0 {
		return time.Time{}, true
	}
	if len(s.held) > 0 {
		consider(s.held[0].at.Add(s.cfg.Reorder.MaxHold))
	}
	if s.delayed.len() > 0 {
		consider(s.delayed.peek().at)
	}
	if s.replays.len() > 0 {
		consider(s.replays.peek().at)
	}
	return t, ok
}
