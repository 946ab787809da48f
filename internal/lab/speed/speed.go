// Package speed is espgw speed: an offload engine timed like openssl speed.
//
// It is `espgw speed`: it times an offload engine the way `openssl speed
// -evp ALG` times a cipher, and prints the same table, so the two (and the
// published tables the project started from) can be laid side by side.
//
// A bulk cipher (aes-128-cbc, des-ede3-cbc, aes-128-ctr, aes-128-gcm, …) is
// timed as one engine op per buffer of the given size: the op is shaped like
// an ESP packet whose payload is the buffer — SPI and sequence number, the
// IV, the buffer — on a cipher-only session (offload.SessionConfig.CipherOnly:
// no ICV is computed or carried), so exactly the engine's cipher path is
// timed. GCM uses an ordinary ESP session: its tag over an 8-byte AAD is
// part of each op (openssl -evp times only the GCM update). The CBC with
// HMAC names (aes-128-cbc-hmac-sha1, …, openssl's stitched ciphers) use an
// ordinary ESP session too: each op is the CBC encryption and the ICV, the
// whole HMAC (HMAC-SHA1-96, HMAC-SHA256-128) over header, IV and
// ciphertext; openssl's stitched cipher, outside TLS, encrypts the buffer
// and runs the hash over it without the HMAC's final blocks. A CBC buffer
// that is not a whole number of blocks is rounded up; only the given size is
// counted. esp:SUITE times whole ESP seals (framing, IV, padding, cipher,
// ICV) through esp.Processor of an inner packet of the given size, tunnel
// mode.
//
// Like openssl, the rate is bytes over the CPU time the process used
// (getrusage: every goroutine, the Go runtime included), unless -elapsed
// asks for wall-clock time; with -multi N the N streams share one engine
// and the rate is N times bytes over the CPU time (openssl sums N
// processes' rates). An engine with a timing model (emul:…) is timed by its
// modelled clock (sim.Engines.ModelledTime), so that its table shows
// the card and not the load of the machine emulating it; the ciphers still
// run for real and the engine still waits whenever the model is ahead of
// the real clock. -elapsed times it by the wall clock instead, with the
// model following the real clock.
package speed

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

// Sizes are openssl speed's buffer sizes.
var Sizes = []int{16, 64, 256, 1024, 8192, 16384}

// Config is one `espgw speed` run.
type Config struct {
	Algs     []Alg
	Engine   string
	Options  engines.Options
	Multi    int           // concurrent streams (openssl -multi)
	Duration time.Duration // per size
	Sizes    []int         // Sizes, or the one -bytes size
	Batch    int           // ops per submitted batch
	Elapsed  bool          // wall clock rather than CPU time
}

// Row is one algorithm's results.
type Row struct {
	Alg   string    `json:"alg"`
	Label string    `json:"label"`
	KBps  []float64 `json:"kbps"` // 1000s of bytes per second, one per size
	Ops   []uint64  `json:"ops"`  // ops completed, one per size
	Secs  []float64 `json:"secs"` // the time the rate is over, one per size
}

// Result is a whole run.
type Result struct {
	Engine  string        `json:"engine"`
	Multi   int           `json:"multi"`
	Batch   int           `json:"batch"`
	Seconds float64       `json:"seconds"`
	Timing  string        `json:"timing"` // "cpu" or "elapsed"
	Sizes   []int         `json:"sizes"`
	Rows    []Row         `json:"rows"`
	Stats   offload.Stats `json:"stats"`
	// Drivers are the drivers that did the work, for engines that hand it
	// to the kernel's (afalg), as /proc/crypto names them.
	Drivers []offload.Driver `json:"drivers,omitempty"`
}

// Bounds of a run: every stream holds Batch buffers of the largest size,
// so their product is what the run allocates.
const (
	MaxBatch       = 4096
	MaxMulti       = 256
	MaxSize        = 65535
	MaxBufferBytes = 1 << 30
)

// checkBounds refuses a run whose buffers would not fit in memory, before
// any is allocated.
func (c Config) checkBounds() error {
	largest := 0
	for _, n := range c.Sizes {
		if n < 1 || n > MaxSize {
			return fmt.Errorf("buffer size %d: want 1..%d bytes", n, MaxSize)
		}
		largest = max(largest, n)
	}
	switch {
	case c.Batch > MaxBatch:
		return fmt.Errorf("-batch %d: at most %d ops per batch", c.Batch, MaxBatch)
	case c.Multi > MaxMulti:
		return fmt.Errorf("-multi %d: at most %d streams", c.Multi, MaxMulti)
	}
	// The ESP overhead and the engine's own copies at most double a buffer.
	if need := int64(c.Batch) * int64(c.Multi) * int64(largest) * 2; need > MaxBufferBytes {
		return fmt.Errorf("-batch %d × -multi %d × %d-byte buffers need about %d MiB; the bound is %d MiB (lower -batch, -multi or -bytes)",
			c.Batch, c.Multi, largest, need>>20, MaxBufferBytes>>20)
	}
	return nil
}

// modelled reports whether cfg is timed by the engine's model.
func (c Config) modelled() bool { return !c.Elapsed && strings.HasPrefix(c.Engine, "emul:") }

// modelClock is an engine with a timing model's clock.
type modelClock interface{ ModelClock() time.Duration }

// Run times every algorithm at every size. progress, if set, gets openssl's
// "Doing …" lines.
func Run(ctx context.Context, cfg Config, progress func(string)) (*Result, error) {
	cfg.Multi = max(cfg.Multi, 1)
	cfg.Batch = max(cfg.Batch, 1)
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = Sizes
	}
	if err := cfg.checkBounds(); err != nil {
		return nil, err
	}
	cat := sim.Engines{ModelledTime: cfg.modelled()}
	// A fresh engine for every measurement, as openssl starts afresh for
	// every size: nothing queued or modelled carries over.
	newEngine := func() (offload.Engine, error) {
		eng, err := cat.Open(cfg.Engine, cfg.Options)
		if err != nil {
			return nil, err
		}
		if _, ok := eng.(modelClock); cfg.modelled() && !ok {
			eng.Close()
			return nil, fmt.Errorf("engine %s has no model clock", eng.Name())
		}
		return eng, nil
	}
	eng, err := newEngine()
	if err != nil {
		return nil, err
	}
	eng.Close()
	res := &Result{Engine: eng.Name(), Multi: cfg.Multi, Batch: cfg.Batch, Seconds: cfg.Duration.Seconds(),
		Timing: "cpu", Sizes: cfg.Sizes}
	switch {
	case cfg.Elapsed:
		res.Timing = "elapsed"
	case cfg.modelled():
		res.Timing = "modelled"
	}
	for _, alg := range cfg.Algs {
		row := Row{Alg: alg.Name, Label: alg.Label()}
		for _, size := range cfg.Sizes {
			eng, err := newEngine()
			if err != nil {
				return nil, err
			}
			ops, secs, err := measure(ctx, eng, alg, size, cfg)
			res.Stats = res.Stats.Plus(eng.Stats())
			if d, ok := eng.(offload.DriverReporter); ok {
				res.Drivers = addDrivers(res.Drivers, d.Drivers())
			}
			eng.Close()
			if err != nil {
				return nil, fmt.Errorf("speed %s at %d bytes on %s: %w", alg.Name, size, eng.Name(), err)
			}
			rate := 0.0
			if secs > 0 {
				rate = float64(ops) * float64(size) / secs / 1000
			}
			if progress != nil {
				progress(fmt.Sprintf("Doing %s for %gs on %d size blocks: %d %s's in %.2fs",
					alg.Label(), cfg.Duration.Seconds(), size, ops, alg.Label(), secs))
			}
			row.KBps = append(row.KBps, rate)
			row.Ops = append(row.Ops, ops)
			row.Secs = append(row.Secs, secs)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// addDrivers adds the drivers of ds not in have yet.
func addDrivers(have, ds []offload.Driver) []offload.Driver {
	for _, d := range ds {
		if !slices.Contains(have, d) {
			have = append(have, d)
		}
	}
	return have
}

// stream is one submitter's ops, buffers and completion signal.
type stream struct {
	batch  offload.Batch
	inline offload.Inline // the engine, when it runs batches on the caller
	state  atomic.Int32   // 0 pending, 1 done, 2 waiter parked
	wake   chan struct{}
	bufs   [][]byte

	// ESP streams
	proc *esp.Processor
	pkts []*esp.Packet
	sa   *esp.SA
}

func (s *stream) done(*offload.Batch) {
	if !s.state.CompareAndSwap(0, 1) {
		s.wake <- struct{}{}
	}
}

// wait returns once the submitted batch is done; an inline engine has
// already called done, so it costs no channel operation.
func (s *stream) wait() {
	if s.state.CompareAndSwap(0, 2) {
		<-s.wake
	}
	s.state.Store(0)
}

func randomKey(n int) sa.Key {
	k := make(sa.Key, n)
	rand.Read(k)
	return k
}

// newStream sets up a session (or an SA) and Batch ops over fresh buffers.
func newStream(eng offload.Engine, alg Alg, size, batch int) (*stream, error) {
	s := &stream{wake: make(chan struct{}, 1)}
	s.batch.Done = s.done
	suite := alg.Suite
	if alg.ESP {
		cfg := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Suite: suite,
			Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
			EncKey: randomKey(alg.KeyLen), AuthKey: randomKey(suite.AuthKeyLen())}
		a, err := esp.NewSA(cfg, eng, esp.Options{})
		if err != nil {
			return nil, err
		}
		s.sa, s.proc = a, esp.NewProcessor(eng)
		for range batch {
			buf := make([]byte, esp.Headroom+size+esp.Tailroom)
			s.bufs = append(s.bufs, buf)
			s.pkts = append(s.pkts, new(esp.Packet))
		}
		return s, nil
	}
	encKey := randomKey(alg.KeyLen)
	sess, err := eng.NewSession(offload.SessionConfig{Suite: suite, EncKey: encKey,
		AuthKey: randomKey(suite.AuthKeyLen()), CipherOnly: alg.CipherOnly})
	if err != nil && alg.CipherOnly {
		return nil, fmt.Errorf("engine %s cannot make the cipher-only session a bulk %s needs (time esp:%s+AUTH instead): %w",
			eng.Name(), alg.Name, alg.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s session: %w", eng.Name(), err)
	}
	payload := size
	if bl := suite.BlockLen(); suite.Cipher == sa.CipherAESCBC || suite.Cipher == sa.Cipher3DES {
		payload = (size + bl - 1) / bl * bl
	}
	// The buffer is laid out as an ESP packet (header, IV, payload,
	// ICV), so a bulk op reads its IV and nonce as an ESP seal would.
	n := esp.HeaderLen + suite.IVLen() + payload + suite.ICVLen()
	layout := esp.NewLayout(suite, encKey, false)
	s.batch.Ops = make([]*offload.Op, batch)
	for i := range s.batch.Ops {
		buf := make([]byte, n)
		rand.Read(buf)
		s.bufs = append(s.bufs, buf)
		op := new(offload.Op)
		layout.Op(op, sess, offload.Seal, buf, 0)
		s.batch.Ops[i] = op
	}
	s.inline, _ = eng.(offload.Inline)
	return s, nil
}

// round submits one batch and waits for it; it returns the ops done.
func (s *stream) round(ctx context.Context, eng offload.Engine, size int) (int, error) {
	if s.proc != nil {
		for i, p := range s.pkts {
			*p = esp.Packet{Buf: s.bufs[i], Off: esp.Headroom, Len: size, SA: s.sa}
			s.bufs[i][esp.Headroom] = 0x45 // an IPv4 packet as far as tunnel mode cares
		}
		if err := s.proc.Seal(ctx, s.pkts); err != nil {
			return 0, err
		}
		for _, p := range s.pkts {
			if p.Drop != esp.OK {
				return 0, fmt.Errorf("seal dropped a packet: %v", p.Drop)
			}
		}
		return len(s.pkts), nil
	}
	// An inline engine is called once per batch, as openssl calls
	// EVP_EncryptUpdate once per buffer; the others get a Submit and a wait.
	if s.inline != nil {
		if err := s.inline.Run(s.batch.Ops); err != nil {
			return 0, err
		}
	} else {
		if err := eng.Submit(ctx, &s.batch); err != nil {
			return 0, err
		}
		s.wait()
	}
	for i, op := range s.batch.Ops {
		if st := op.Status; st != offload.OK {
			return 0, fmt.Errorf("op %d: %v", i, st)
		}
	}
	return len(s.batch.Ops), nil
}

// measure runs cfg.Multi streams on eng for cfg.Duration and returns the ops
// done and the seconds they took (CPU, wall or modelled; per stream). The
// streams run a warm-up first (a fifth of the time, at most 200 ms) that is
// not counted: pools, schedulers and a modelled card's queues settle.
func measure(ctx context.Context, eng offload.Engine, alg Alg, size int, cfg Config) (uint64, float64, error) {
	streams := make([]*stream, cfg.Multi)
	for i := range streams {
		s, err := newStream(eng, alg, size, cfg.Batch)
		if err != nil {
			return 0, 0, err
		}
		streams[i] = s
	}
	var stop atomic.Bool
	// Rounds of a few KiB or more take long enough that looking at the
	// context after each costs nothing.
	every := ctxEvery
	if size*max(cfg.Batch, 1) >= 4096 {
		every = 1
	}
	counts := make([]paddedCount, len(streams))
	errs := make([]error, len(streams))
	// want numbers the snapshots asked for; a stream answers one after the
	// round it sees it in.
	var want atomic.Uint64
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Like openssl's loop (a count and an alarm's flag), the only
			// per-round work besides the round is to read two flags: a
			// stream publishes its count (stores with a lock prefix on
			// amd64, which cost a 16-byte round a third of its time) only
			// when a snapshot asks, after the round it sees the request
			// in. The context (a lock) is looked at once every ctxEvery
			// rounds.
			var done, seen uint64
			for r := 1; !stop.Load(); r++ {
				k, err := s.round(ctx, eng, size)
				if err != nil {
					errs[i] = err
					stop.Store(true)
					break
				}
				done += uint64(k)
				if g := want.Load(); g != seen {
					counts[i].n.Store(done)
					counts[i].gen.Store(g)
					seen = g
				}
				if r == every { // a compare: r%every divides
					if ctx.Err() != nil {
						break
					}
					r = 0
				}
			}
			counts[i].n.Store(done)
			counts[i].gen.Store(math.MaxUint64) // a stopped stream answers every request
		}()
	}
	// total asks every stream for its count and adds up the answers. A
	// stream answers after the round in progress, so each end of the
	// window counts up to one round per stream that finishes after it:
	// the two ends' errors cancel.
	total := func() uint64 {
		g := want.Add(1)
		var n uint64
		for i := range counts {
			for counts[i].gen.Load() < g && ctx.Err() == nil {
				time.Sleep(50 * time.Microsecond)
			}
			n += counts[i].n.Load()
		}
		return n
	}
	clock, _ := eng.(modelClock)
	snapshot := func() (uint64, time.Duration, time.Duration, time.Time) {
		var model time.Duration
		if cfg.modelled() {
			model = clock.ModelClock()
		}
		cpu, now := cpuTime(), time.Now()
		return total(), model, cpu, now
	}
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	wait(min(200*time.Millisecond, cfg.Duration/5))
	ops0, model0, cpu0, t0 := snapshot()
	wait(cfg.Duration)
	ops1, model1, cpu1, t1 := snapshot()
	// An engine slower than one round per window (a device under a loaded
	// emulator) gets more time, up to ten windows, rather than a rate of 0.
	for ops1 == ops0 && t1.Sub(t0) < 10*cfg.Duration && ctx.Err() == nil {
		wait(cfg.Duration / 10)
		ops1, model1, cpu1, t1 = snapshot()
	}
	stop.Store(true)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	var secs float64
	switch {
	case cfg.Elapsed:
		secs = t1.Sub(t0).Seconds()
	case cfg.modelled():
		secs = (model1 - model0).Seconds()
	default:
		secs = (cpu1 - cpu0).Seconds() / float64(cfg.Multi) // the per-process CPU time openssl would see
	}
	return ops1 - ops0, secs, nil
}

// ctxEvery is how many rounds a stream runs between looking at its
// context.
const ctxEvery = 64

// paddedCount keeps each stream's published count, and the snapshot it
// answers, on its own cache line.
type paddedCount struct {
	n, gen atomic.Uint64
	_      [48]byte
}

// cpuTime is the user and system time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
