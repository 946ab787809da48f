// Package esp is the ESP transform of RFC 4303.
//
// It owns the RFC 4303 transform: the ESP header, IV, padding and trailer,
// the ICV layout per suite, sealing and opening in place in a caller's
// buffer, sequence numbers and ESN, and the anti-replay window. The cipher
// and ICV work itself goes to an offload engine; esp frames the packet, lays
// out the engine's op (layout.go: the ranges, nonce and AAD, so that no
// engine parses ESP) and judges the result, giving every rejected packet a
// typed Reason. It also
// reads the selector fields of inner packets for policy, fragment-aware as
// RFC 4301 §7 asks (fragment.go), and keeps an SA's sequence numbers under
// the bound its owner could record (Options.Reserve).
package esp

import (
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

// HeaderLen is the ESP header: SPI and sequence number.
const HeaderLen = 8

// Headroom is the room a buffer needs in front of an inner packet: an outer
// IPv6 header, a UDP header, the ESP header and the largest IV.
const Headroom = 40 + 8 + HeaderLen + 16

// Tailroom is the room a buffer needs after an inner packet: the largest
// padding, pad length, next header and the largest ICV. TFC padding needs
// more, as much as it asks for.
const Tailroom = 255 + 2 + 32

// Counters are one SA's packet and drop counts. They are updated atomically
// and may be read at any time.
type Counters struct {
	SealedPackets, SealedBytes atomic.Uint64
	OpenedPackets, OpenedBytes atomic.Uint64
	// drops are the counts by reason, made at the SA's first drop: most
	// SAs of a large gateway never drop one, and the array is a quarter
	// of an SA.
	drops atomic.Pointer[[NumReasons]atomic.Uint64]
}

// Dropped returns the count of packets dropped under r.
func (c *Counters) Dropped(r Reason) uint64 {
	if d := c.drops.Load(); d != nil && r < NumReasons {
		return d[r].Load()
	}
	return 0
}

// drop counts a packet dropped under r.
func (c *Counters) drop(r Reason) {
	d := c.drops.Load()
	if d == nil {
		// Of two first drops at once, one array is kept.
		c.drops.CompareAndSwap(nil, new([NumReasons]atomic.Uint64))
		d = c.drops.Load()
	}
	d[r].Add(1)
}

// Snapshot is a plain copy of Counters.
type Snapshot struct {
	SealedPackets uint64            `json:"sealed_packets"`
	SealedBytes   uint64            `json:"sealed_bytes"`
	OpenedPackets uint64            `json:"opened_packets"`
	OpenedBytes   uint64            `json:"opened_bytes"`
	Drops         map[string]uint64 `json:"drops"` // only reasons with a count
}

// Add adds o's counters to s's (s.Drops must not be nil).
func (s *Snapshot) Add(o Snapshot) {
	s.SealedPackets += o.SealedPackets
	s.SealedBytes += o.SealedBytes
	s.OpenedPackets += o.OpenedPackets
	s.OpenedBytes += o.OpenedBytes
	for k, v := range o.Drops {
		s.Drops[k] += v
	}
}

// SA is the working state of one security association: its configuration,
// engine session, sequence counter, replay window, lifetimes and counters.
// Sealing and opening are safe for concurrent use.
//
// Its fields are laid out for the cache: with thousands of SAs taking
// turns, every line of an SA a packet touches is a cache miss. A packet
// reads line 0 (what both directions need, written only when the SA
// expires), then its direction's line of the history (sealing: the
// sequence counter and IV generator; opening: the replay window) and the
// line with the packet counters; nothing of Config, which is copied here
// where a packet needs it. The SA is 384 bytes, a size class whose objects
// start on a cache line (TestSALayout checks the offsets).
type SA struct {
	// Line 0.
	sess offload.Session
	// Aux is the owner's own data about the SA (the gateway's outer-header
	// state), set before the SA is in use; esp never reads it. It saves
	// the owner a lookup per packet.
	Aux any
	// history is what the SA has sent and seen: own, or that of the SA
	// it continues (Options.Continue).
	*history
	layout  Layout // also the IV and ICV lengths
	block   uint8  // what the payload is padded to: the cipher's block, or 4
	flags   saFlags
	expired atomic.Bool // a hard lifetime passed
	spi     uint32
	tfcPad  uint16 // Config.TFCPad, tunnel mode only

	// Lines 1 to 3: the history (its seal line, its open line and the
	// ring of a window over 192 packets), then the packet counters in the
	// last 32 bytes of line 3. Only the goroutine finishing packets writes
	// the counters; the one preparing them reads line 3 only for a window
	// over 192 packets (its ring) and for reserve, which it calls once per
	// ReserveBlock/2 packets (whether there is one is a flag in line 0).
	own     history
	reserve func(*SA, uint64) error

	// Counters start 32 bytes into line 3: its packet and byte counts
	// there, the drops in the cold lines after.
	Counters Counters

	// The cold fields, read when an SA is set up, changed or reported.
	Config *sa.SA
	engine offload.Engine
	ivFunc func(seq uint64, iv []byte) // Options.IV, known-answer tests only

	// framed and framedBytes count packets as they are framed for sealing,
	// so a hard lifetime holds exactly even with a batch in flight (only
	// with a hard packet or byte lifetime).
	framed, framedBytes atomic.Uint64

	created   time.Time
	onSoft    func(*SA)
	softFired atomic.Bool

	// frags remembers initial fragments' ports for the selector check of
	// the fragments after them (fragment.go).
	frags Fragments

	// The SA fills the 384-byte size class, whose objects (six cache
	// lines each) all start on a cache line; those of the 352-byte class
	// below it do not.
	_ [16]byte
}

// saFlags are the SA's configuration that packets test, kept in line 0.
type saFlags uint8

const (
	transportMode saFlags = 1 << iota // Config.Mode is sa.Transport
	antiReplay                        // Config.ReplayWindow > 0
	hasSelectors                      // len(Config.Selectors) > 0
	countLimits                       // a packet or byte lifetime, soft or hard
	hardCount                         // a hard packet or byte lifetime
	fixedIV                           // Options.IV writes the IVs
	reserves                          // Options.Reserve records the sequence bounds
	fixChecksums                      // transport mode in UDP: TCP/UDP checksums recomputed on open
)

func flagsOf(cfg *sa.SA, opts Options) saFlags {
	var f saFlags
	if cfg.Mode == sa.Transport {
		f |= transportMode
		if cfg.Encap == sa.EncapUDP {
			f |= fixChecksums
		}
	}
	if cfg.ReplayWindow > 0 {
		f |= antiReplay
	}
	if len(cfg.Selectors) > 0 {
		f |= hasSelectors
	}
	if cfg.Hard.Packets > 0 || cfg.Hard.Bytes > 0 {
		f |= hardCount | countLimits
	}
	if cfg.Soft.Packets > 0 || cfg.Soft.Bytes > 0 {
		f |= countLimits
	}
	if opts.IV != nil {
		f |= fixedIV
	}
	if opts.Reserve != nil {
		f |= reserves
	}
	return f
}

// history is what an SA has sent and seen: its sequence counter and
// reservation, its replay window and the IV generator the counter drives.
// An SA that continues another under a changed configuration shares it,
// so that across the change no number is sent twice and no packet is
// accepted twice, even one in flight on the old SA. Its first cache line
// is what sealing uses, the next what opening uses.
type history struct {
	seq      atomic.Uint64 // last sequence number assigned
	reserved atomic.Uint64 // the bound the last completed Reserve recorded
	// ivSalt makes CTR and GCM IVs unique across restarts with the same
	// keys: IV = seq XOR ivSalt, ivSalt random. For CBC, ivBlock is the
	// IVKey's cipher and ivSalt the history's number under it: IV =
	// E(seq ‖ ivSalt), unpredictable and never repeated (IVKey).
	ivSalt  uint64
	ivBlock cipher.Block
	// retryAt is when (unix ns) a failed reservation may be tried again
	// on the sealing goroutine: until then packets over the bound are
	// dropped at once, not each held up by a failing write.
	retryAt   atomic.Int64
	reserveMu sync.Mutex  // serialises Reserve calls
	reserving atomic.Bool // a reservation ahead of need is running
	_         [4]byte     // the seal line ends here

	mu     sync.Mutex // guards window
	window Window
}

// Options tune an SA beyond its configuration.
type Options struct {
	// OnSoftExpire is called once, from whichever goroutine crosses a soft
	// lifetime first.
	OnSoftExpire func(*SA)
	// Now overrides the clock for lifetimes (tests).
	Now func() time.Time
	// IV, when set, writes the IV of the packet with sequence number seq
	// instead of the SA's own generator. It exists for known-answer tests
	// that must reproduce a published packet; never set it in production,
	// where a fixed IV would break CBC's unpredictability and CTR/GCM's
	// uniqueness.
	IV func(seq uint64, iv []byte)
	// Reserve, when set, records a new upper bound of the sequence numbers
	// the SA may send (RFC 4303 §3.3.3 asks a sender never to reuse a
	// number under one key; a gateway that persists the bound resumes above
	// it after a crash instead of being refused as a replay). No packet is
	// numbered above a bound before the Reserve call recording it has
	// returned. The first call is made on the sealing goroutine; later ones
	// reserve the next ReserveBlock numbers on a goroutine of their own
	// once half the current block is used, so a slow Reserve (an fsync)
	// holds up the data path only if the traffic outruns it. Calls never
	// overlap. A failed call records nothing: packets above the last
	// bound recorded are dropped as SeqUnpersisted (a restart could
	// otherwise resume below numbers the peer saw), and the call is
	// retried, at most every ReserveRetry, until one succeeds. The caller
	// logs the error.
	Reserve func(s *SA, upTo uint64) error
	// IVKey makes the SA's CBC IVs. Nil gives the SA a key of its own;
	// a table of many SAs shares one to hold one key schedule, not one
	// per SA. It is not used by the other ciphers.
	IVKey *IVKey
	// Continue is the SA this one takes over from: the same SPI,
	// addresses, suite and keys under a changed configuration (a
	// lifetime, a selector, the window size…). The new SA shares its
	// sequence counter, reservation, replay window and IV generator:
	// numbering goes on where it was, packets it accepted stay refused,
	// and packets still in flight on it count in the same history (see
	// TakeOver). A configuration without ESN whose history is already
	// past 2^32-1 is refused: it needs new keys.
	Continue *SA
}

// ReserveBlock is how many sequence numbers one Reserve call covers.
const ReserveBlock = 1 << 16

// ReserveRetry is how long after a failed Reserve the sealing goroutine
// waits before trying again; packets over the bound meanwhile are dropped.
const ReserveRetry = 100 * time.Millisecond

// reserveFor makes sure seq is under a recorded reservation before its
// packet goes out, and starts the next reservation in the background once
// half of the current block is used. It reports false when seq is above
// every bound that could be recorded: the packet must not go out.
func (s *SA) reserveFor(seq uint64) bool {
	r := s.reserved.Load()
	if seq <= r {
		if seq > r-ReserveBlock/2 && s.reserving.CompareAndSwap(false, true) {
			go func() {
				defer s.reserving.Store(false)
				s.reserveUpTo(r + ReserveBlock)
			}()
		}
		return true
	}
	// The first packet, traffic faster than the reservations, or a
	// reservation that failed: wait for one, unless one failed just now.
	if at := s.retryAt.Load(); at != 0 && time.Now().UnixNano() < at {
		return false
	}
	s.reserveUpTo(seq + ReserveBlock)
	return seq <= s.reserved.Load()
}

// Reserved tells the SA that its owner recorded upTo durably by other
// means than Options.Reserve — one write covering many SAs' first
// reservations before they go in force — so that its first packets do not
// wait for a Reserve call of their own. The bound never goes down.
func (s *SA) Reserved(upTo uint64) {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if upTo > s.reserved.Load() {
		s.retryAt.Store(0)
		s.reserved.Store(upTo)
	}
}

// reserveUpTo records upTo, unless a reservation at least as high already
// completed (the bound never goes down). A failure records nothing.
func (s *SA) reserveUpTo(upTo uint64) {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if upTo <= s.reserved.Load() {
		return
	}
	if err := s.reserve(s, upTo); err != nil {
		s.retryAt.Store(time.Now().Add(ReserveRetry).UnixNano())
		return // the caller logs it
	}
	s.retryAt.Store(0)
	s.reserved.Store(upTo)
}

// NewSA builds the working state for cfg with a session on engine.
func NewSA(cfg *sa.SA, engine offload.Engine, opts Options) (*SA, error) {
	if err := cfg.Suite.ValidateKeys(cfg.EncKey, cfg.AuthKey); err != nil {
		return nil, fmt.Errorf("SA %#x: %w", cfg.SPI, err)
	}
	if cfg.TFCPad < 0 || cfg.TFCPad > math.MaxUint16 {
		return nil, fmt.Errorf("SA %#x: tfc-pad %d outside 0…%d", cfg.SPI, cfg.TFCPad, math.MaxUint16)
	}
	if cfg.ReplayWindow < 0 || cfg.ReplayWindow > sa.MaxReplayWindow {
		return nil, fmt.Errorf("SA %#x: replay window %d outside 0…%d", cfg.SPI, cfg.ReplayWindow, sa.MaxReplayWindow)
	}
	sess, err := engine.NewSession(offload.SessionConfig{Suite: cfg.Suite, EncKey: cfg.EncKey, AuthKey: cfg.AuthKey, ESN: cfg.ESN})
	if err != nil {
		return nil, fmt.Errorf("SA %#x: %s engine session: %w", cfg.SPI, engine.Name(), err)
	}
	s := &SA{
		Config: cfg, engine: engine, sess: sess,
		block:  uint8(cfg.Suite.BlockLen()),
		layout: NewLayout(cfg.Suite, cfg.EncKey, cfg.ESN),
		flags:  flagsOf(cfg, opts), spi: cfg.SPI,
		onSoft: opts.OnSoftExpire, reserve: opts.Reserve, ivFunc: opts.IV,
	}
	if cfg.Mode == sa.Tunnel {
		s.tfcPad = uint16(cfg.TFCPad)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	s.created = now()
	if prev := opts.Continue; prev != nil {
		if err := s.continueFrom(prev); err != nil {
			sess.Close()
			return nil, err
		}
		return s, nil
	}
	s.history = &s.own
	if c := cfg.Suite.Cipher; c == sa.CipherAESCBC || c == sa.Cipher3DES {
		// Only CBC IVs are encrypted (writeIV).
		k := opts.IVKey
		if k == nil {
			k = NewIVKey()
		}
		s.ivBlock, s.ivSalt = k.block, k.Number()
	} else {
		var salt [8]byte
		rand.Read(salt[:])
		s.ivSalt = binary.BigEndian.Uint64(salt[:])
	}
	s.seq.Store(cfg.InitialSeq)
	s.window.Reset(s.windowSize())
	return s, nil
}

// SameIdentity reports whether two SA configurations are one SA: the same
// SPI, addresses, suite and keys. Only such an SA may continue another's
// history (Options.Continue); any other change is a new SA.
func SameIdentity(a, b *sa.SA) bool {
	return a.SPI == b.SPI && a.Src == b.Src && a.Dst == b.Dst && a.Suite == b.Suite &&
		string(a.EncKey) == string(b.EncKey) && string(a.AuthKey) == string(b.AuthKey)
}

// continueFrom makes s share prev's history (Options.Continue).
func (s *SA) continueFrom(prev *SA) error {
	cfg := s.Config
	if !SameIdentity(cfg, prev.Config) {
		return fmt.Errorf("SA %#x: cannot continue %s: not the same SPI, addresses, suite and keys", cfg.SPI, prev.Config)
	}
	h := prev.history
	if !cfg.ESN && (h.seq.Load() >= math.MaxUint32 || h.highest() > math.MaxUint32) {
		return fmt.Errorf("SA %#x: without ESN it cannot go on from sequence number %d (sent) / %d (received), past 2^32-1: it needs new keys", cfg.SPI, h.seq.Load(), h.highest())
	}
	s.history = h
	return nil
}

// TakeOver applies what a continuing SA's configuration changes in the
// history it shares, once it is in force (a change refused before leaves
// the history as it was): its window size, and an InitialSeq above the
// numbers sent moves sending up to it. It does nothing for an SA of its
// own history.
func (s *SA) TakeOver() {
	if s.history == &s.own {
		return
	}
	h, cfg := s.history, s.Config
	for cur := h.seq.Load(); cur < cfg.InitialSeq && !h.seq.CompareAndSwap(cur, cfg.InitialSeq); cur = h.seq.Load() {
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if size := s.windowSize(); uint64(size) != h.window.size {
		h.window.Resize(size)
	}
}

func (h *history) highest() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.window.Last()
}

// windowSize is the configured window, or 64 when anti-replay is off (ESN
// inference still needs a window).
func (s *SA) windowSize() int {
	if s.Config.ReplayWindow == 0 {
		return 64
	}
	return s.Config.ReplayWindow
}

// SPI returns the SA's SPI.
func (s *SA) SPI() uint32 { return s.spi }

// Mode returns the SA's mode (Config.Mode), from the line a packet reads
// anyway.
func (s *SA) Mode() sa.Mode {
	if s.flags&transportMode != 0 {
		return sa.Transport
	}
	return sa.Tunnel
}

// Engine returns the offload engine the SA's crypto goes to.
func (s *SA) Engine() offload.Engine { return s.engine }

// Close releases the engine session.
func (s *SA) Close() error { return s.sess.Close() }

// Overhead is the most ESP adds to an inner packet of n bytes, not counting
// any outer IP or UDP header or TFC padding.
func (s *SA) Overhead(n int) int {
	block := int(s.block)
	padded := (n + 2 + block - 1) / block * block
	return HeaderLen + int(s.layout.ivLen) + padded - n + int(s.layout.icvLen)
}

// Expired reports whether the SA passed a hard lifetime.
func (s *SA) Expired() bool { return s.expired.Load() }

// CheckTime applies the time lifetimes at now; gateways call it on a ticker
// rather than reading the clock per packet.
func (s *SA) CheckTime(now time.Time) {
	age := now.Sub(s.created)
	if t := s.Config.Hard.Time; t > 0 && age >= t {
		s.expired.Store(true)
	}
	if t := s.Config.Soft.Time; t > 0 && age >= t {
		s.fireSoft()
	}
}

func (s *SA) fireSoft() {
	if s.softFired.CompareAndSwap(false, true) && s.onSoft != nil {
		s.onSoft(s)
	}
}

// account adds a processed packet to the lifetimes: it reports false when
// the SA is (now) past a hard lifetime.
func (s *SA) account(packets, bytes uint64) {
	if s.flags&countLimits == 0 {
		return
	}
	h, so := s.Config.Hard, s.Config.Soft
	if (h.Packets > 0 && packets >= h.Packets) || (h.Bytes > 0 && bytes >= h.Bytes) {
		s.expired.Store(true)
	}
	if (so.Packets > 0 && packets >= so.Packets) || (so.Bytes > 0 && bytes >= so.Bytes) {
		s.fireSoft()
	}
}

// Drop counts a packet dropped on this SA under r and returns r.
func (s *SA) Drop(r Reason) Reason {
	s.Counters.drop(r)
	return r
}

// Snapshot copies the counters.
func (s *SA) Snapshot() Snapshot {
	c := &s.Counters
	out := Snapshot{
		SealedPackets: c.SealedPackets.Load(), SealedBytes: c.SealedBytes.Load(),
		OpenedPackets: c.OpenedPackets.Load(), OpenedBytes: c.OpenedBytes.Load(),
		Drops: map[string]uint64{},
	}
	if d := c.drops.Load(); d != nil {
		for r := Reason(1); r < NumReasons; r++ {
			if n := d[r].Load(); n > 0 {
				out.Drops[r.String()] = n
			}
		}
	}
	return out
}

// LastSeq returns the last sequence number assigned on the sealing side.
func (s *SA) LastSeq() uint64 { return s.seq.Load() }

// HighestAccepted returns the highest sequence number accepted inbound.
func (s *SA) HighestAccepted() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.window.Last()
}
