// Package emul emulates crypto cards whose speed was published.
//
// It emulates crypto cards and instruction sets whose speed was published,
// so a user can ask "what would this card do to my tunnel": the engine
// emul:<profile> runs the real ciphers (the cpu engine's sessions) and only
// the time at which each batch completes is modelled.
//
// A ring profile is a ring engine (package ring: bounded queue, records of
// up to Aggregation ops, one interrupt per record, in-order completion) on
// the model's clock: this package's ring.Timing (clock.go), which keeps the
// modelled time and tells the ring when records are fed and finish and when
// batches are delivered. The model is made of these parameters:
//
//   - RecordSetup: time a card unit spends on each command record (MCR
//     fetch, DMA descriptor set-up), however many ops it carries.
//   - PerOp: time a unit spends per op in a record (context load, IV).
//   - PerByte: time per cipher byte, by cipher and key size: the slower of
//     the card's two streaming stages (DMA and the cipher core), which
//     overlap.
//   - FillBytes and FillPerByte: the first FillBytes bytes of an op do not
//     overlap (the cipher core waits for the first piece's DMA, the last
//     piece's DMA waits for the core) and cost FillPerByte more per byte.
//     An op's card time is PerOp + PerByte·n + FillPerByte·min(n, FillBytes).
//   - Units: card units working records in parallel.
//   - Host, HostPerOp and HostPerByte: the host's time per request (a
//     submitted batch), per op in it and per byte on the way in (the
//     cryptodev ioctl, copyin and copyout, openssl's EVP layer, the wake-up
//     after the interrupt; a driver's posting and reaping); a closed-loop
//     submitter's think time.
//   - HostCores, HostCPU and Switch: the host's processors. HostCPU is the
//     share of the host time that is CPU work; it runs on whichever of
//     HostCores cores is free first, after the rest (latency that holds no
//     core: interrupt delivery, wake-up). A request that finds every core
//     busy waits, and pays Switch more CPU time: with more processes than
//     cores, each request costs a context switch.
//   - Latency: time from a record's end to the host seeing it (interrupt
//     delivery).
//   - Pipeline: records a unit accepts at once (the chip's MCR FIFO): the
//     driver feeds queued ops as soon as it has room, so ops stack up in a
//     record only while the chip is full.
//   - Exponential: record times are drawn from an exponential distribution
//     around their mean, and host times jitter by ±25%. The 2014 rows show
//     the smooth knee of a queue whose times vary (scheduling, interrupt
//     coalescing); fixed times lock N streams into step and, once two
//     requests share a record, they share every record after.
//
// Time. By default the model follows the real clock: a batch arrives when
// it is submitted and completes when the model says, so a tunnel through an
// emulated card sees the card's latency (plus the host's own). On a busy
// machine the host's own delays (goroutine wake-ups: microseconds idle,
// milliseconds at load 20 on 2 cores) add to every modelled cycle. With
// Options.Virtual (what `espgw speed` uses unless -elapsed) the model runs
// on its own clock (ModelClock tells it): a caller that
// resubmits its batch is taken to do so at the modelled completion time,
// so the table shows the card and not the emulating machine's load; the
// ciphers still run for real.
//
// An inline profile (Inline) models crypto instructions rather than a card:
// ops run on the submitting goroutine and each costs PerOp plus PerByte per
// byte on one of Units cores; the caller returns when that modelled time is
// reached (waited once per batch, or accumulated while under 20 µs, since
// no timer is that fine).
//
// Calibration. Every time is charged on the cipher bytes of an op (its
// Cipher range: the ESP payload between IV and ICV), which for `espgw speed
// -evp` is the buffer size, so the published `openssl speed` tables
// translate directly:
//
// Parameters of ubsec-2014: card RecordSetup 0.2 µs, PerOp 3.08 µs,
// PerByte 6.58 ns/B (AES-128; AES-192 7.6, AES-256 9.0, 3DES 7.2),
// FillBytes 1024 at FillPerByte 3.8 ns/B, Pipeline 3, Aggregation 5, one
// unit, exponential; host 25.5 µs + 1.7 ns/B per request, 70% of it CPU on
// HostCores 4, Switch 1.05 µs.
//
// ubsec-2014 is NetBSD 6.1.4 on a Xeon X3430 (4 cores, no hyper-threading)
// with a Broadcom card through cryptodev, `openssl speed -engine cryptodev
// -evp ALG -elapsed [-multi N]` (2014): -multi N runs N processes, each one
// request at a time through /dev/crypto. The rows read as a closed queueing
// network: N streams, each a host phase (latency, then CPU on one of 4
// cores) then the card. The single-stream row gives the cycle (27.4 µs at
// 16 B, 102 µs at 8 KiB); -multi 4, 8 and 16 at 8 KiB (≈140 MB/s, flat)
// give the card's streaming cost per byte, and -multi 16 at 16 B (≈225k
// ops/s) bounds its per-op cost and the host's CPU per request (4 cores at
// 225k requests/s: under 18 µs each, so part of the 27 µs cycle is latency
// holding no core). -multi 4 scaling 3.65× at 16 B (mean-value analysis of
// this network with exponential card times gives exactly 133k ops/s) is
// why times are exponential.
//
// Two refinements came from the -multi rows at 1024 bytes, which saturate
// near 68-82 MB/s (-multi 8's 66.7 MB/s even below -multi 4's 68.0) while
// 8 KiB reaches 140 MB/s: a card cost linear in bytes that fits 16 B and 8
// KiB puts every -multi row near 87 MB/s at 1 KiB (-multi 8 +28%). The
// per-byte cost must be steeper below about 1 KiB than above: the card's
// DMA and cipher stages overlap only once a packet is longer than a piece
// (FillBytes), and 3.8 ns/B (≈260 MB/s) is the right order for the DMA of
// a PCI card. The host's 4 cores hold back -multi 8 and 16 at small sizes,
// where requests are many and mostly host time, just as -multi 4 (one
// process per core) runs free; this is the Switch and HostCPU share.
// No monotone model reaches -multi 8's 1024-byte cell below -multi 4's:
// the fit puts -multi 8 and 16 there at +9% and -9%.
//
// The parameters were fitted with a discrete-event simulation of this very
// model (the ring's feeding rule, Pipeline, Aggregation, exponential record
// times, jittered host times on 4 cores), minimising the largest relative
// error over the 20 cells of the four AES-128 rows; FillBytes was then
// rounded to 1024 and the rest refitted. The simulation is
// internal/calsim: `go run ./internal/lab/sim/emul/internal/calsim` prints every
// cell's deviation in a second, and -fit refits named parameters. The
// AES-192, AES-256 and 3DES per-byte costs follow from their single-stream
// rows. Every cell of every row is within about ±10% (the package's
// TestCalibration checks ±15%, through package speed, on short runs that
// add a few percent of noise).
//
// virtio-qemu-7.2 is QEMU 7.2's virtio-crypto-pci (cryptodev-backend-builtin)
// driven by espgw's own virtio engine in espgw's guest: one TCG vCPU, q35
// with an emulated Intel IOMMU (internal/lab/cryptoguest's
// BenchmarkVirtioSpeed, `espgw speed -elapsed -engine virtio -batch B -multi
// N`, 2026-12-01). The device is read as a ring: one doorbell per round of
// posting, and QEMU's device model (its main loop thread) works the
// requests of a kick one after another, so a record is everything posted
// by the time the device is free (Aggregation and QueueDepth 128, the
// engine's slots; Pipeline 1; one unit). The host is the guest's one vCPU
// (HostCores 1, HostCPU 1), which runs the submitter, the driver's posting
// and polling, and copies every payload into its DMA slot and back.
// Parameters: host 6.98 µs per batch + 1.01 µs per op + 0.44 ns/B; card
// RecordSetup 10.8 µs per kick, PerOp 1.64 µs, PerByte 1.78 ns/B (AES of
// every key size: the aes-192 and aes-256 rows measure the same as aes-128,
// the cost being the device model's copies through the emulated IOMMU
// rather than the cipher; 3DES 29 ns/B, QEMU's software 3DES); Latency 2.97
// µs; times fixed (not Exponential). One request at a time the cycle is
// about 23 µs + 2.2 ns/B; with 64 or more in flight the device's 1.6 µs +
// 1.8 ns/B per op is the limit.
//
// Those rows are noisy as no other table is: a TCG guest's round trip
// needs both of the machine's cores (the vCPU thread and QEMU's main loop),
// so any other runnable process makes a run several times slower, and the
// same cell's runs spread 2-10×. Load only ever slows a run down, so each
// cell is the fastest of 5-9 interleaved runs (3 for the other ciphers).
// The seven parameters were fitted with calsim (`-profile virtio-qemu-7.2
// -fit host,hostop,hostpb,latency,setup,perop,perbyte -objective rms`),
// minimising the root-mean-square log error over the AES-128 cells (a
// largest-error fit leaves every row near ±45%). Five cells are outside the
// model and neither fitted nor checked (Published.Unfitted): batch 16 at 8
// and 16 KiB, which fall below batch 8's and the same row's 1 KiB rate per
// op; batch 32 at 16 B and 4 × batch 4 at 16 B, slower than their own rows'
// 64-byte cells in ops per second; four streams of one at 8 KiB. Their runs
// were slow every time; nothing in a queue of host and device work makes a
// bigger batch or a smaller op slower, and the engine's driver was not
// instrumented to say why. The rows' tolerances are their fitted largest
// deviation rounded up, plus 5%: the default ±15% for batch 1 alone,
// batches of 16 and 32 from four streams and 3DES; ±25-35% for the rows
// between; ±45% for batch 32 alone (its 16 KiB cell); ±30% for the aes-192
// and aes-256 rows of three runs.
// So the profile says what the device does to within a third, on an idle
// host; it cannot say what it does on a loaded one.
//
// t4 is a SPARC T4's crypto instructions with `openssl speed -evp
// aes-128-cbc` (2012, "with the T4 instructions" row): op time = 24 ns +
// 0.9 ns/B reproduces all five cells within 3% (the 1024-byte cell is the
// worst); t4-software is the "before T4 support" row: 26 ns + 9.97 ns/B.
// Only AES-128 was published for the T4: other AES key sizes scale with
// their rounds (12/10, 14/10), 3DES is charged like software DES (3 × 16
// rounds against AES's 10, i.e. 4.8× AES-128).
package emul

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/sim/ring"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// Prefix is the catalog prefix: engines are named "emul:<profile>".
const Prefix = "emul"

// Profile is a card (or instruction set) timing model.
type Profile struct {
	Name   string
	About  string
	Inline bool // crypto instructions on the submitting core, no ring

	// Ring shape (ring profiles).
	QueueDepth, Aggregation, Pipeline int
	// Units are the card's units (ring) or the cores with crypto
	// instructions (inline).
	Units int

	RecordSetup time.Duration
	PerOp       time.Duration
	// Exponential draws each record's time from an exponential
	// distribution around the modelled mean rather than using the mean.
	Exponential bool
	// PerByte is nanoseconds per cipher byte by class (see Class).
	PerByte map[string]float64

	// FillBytes and FillPerByte: the card streams a packet through its
	// DMA engine and cipher core in pieces, so past its first FillBytes
	// bytes the two overlap and a byte costs PerByte (the slower stage);
	// the first FillBytes bytes are not overlapped and cost FillPerByte
	// (ns per byte) more.
	FillBytes   int
	FillPerByte float64

	// Ciphers are the ciphers the card serves (nil: every cipher of the
	// cpu engine); a suite is offered when its cipher is served and its
	// cost class has a PerByte entry.
	Ciphers []sa.Cipher

	Host        time.Duration // per submitted batch (one request for openssl)
	HostPerOp   time.Duration // per op in the batch
	HostPerByte float64       // ns per byte
	// HostCores, HostCPU and Switch model the host's processors: HostCPU
	// is the share of a request's host time that is CPU work (the ioctl,
	// copyin, copyout, the EVP layer), run on the first of HostCores cores
	// to come free; the rest is latency that holds no core (interrupt,
	// wake-up). A request that has to wait for a core (more processes than
	// cores) costs Switch more CPU: the context switch. HostCores 0: the
	// host time is all latency, with no limit on concurrent requests.
	HostCores int
	HostCPU   float64
	Switch    time.Duration
	Latency   time.Duration
}

// Profiles returns the known profiles by name.
func Profiles() map[string]Profile {
	aesRounds := func(ns128 float64) map[string]float64 {
		return map[string]float64{
			"aes-128": ns128, "aes-192": ns128 * 12 / 10, "aes-256": ns128 * 14 / 10,
			"3des": ns128 * 4.8, "null": 0,
		}
	}
	return map[string]Profile{
		"ubsec-2014": {
			Name:       "ubsec-2014",
			About:      "Broadcom ubsec(4) card via NetBSD 6.1.4 cryptodev on a Xeon X3430, 2014",
			QueueDepth: ring.DefaultQueueDepth, Aggregation: ring.DefaultAggregation, Units: 1,
			Pipeline: 3, Exponential: true,
			RecordSetup: 200 * time.Nanosecond, PerOp: 3080 * time.Nanosecond,
			PerByte:   map[string]float64{"aes-128": 6.58, "aes-192": 7.6, "aes-256": 9.0, "3des": 7.2, "null": 0},
			FillBytes: 1024, FillPerByte: 3.8,
			Host: 25500 * time.Nanosecond, HostPerByte: 1.7,
			HostCores: 4, HostCPU: 0.7, Switch: 1050 * time.Nanosecond,
		},
		"virtio-qemu-7.2": virtioProfile(),
		"t4": {
			Name: "t4", About: "SPARC T4 crypto instructions, openssl speed 2012", Inline: true, Units: 8,
			PerOp: 24 * time.Nanosecond, PerByte: aesRounds(0.9),
		},
		"t4-software": {
			Name: "t4-software", About: "SPARC T4 before T4 crypto support (software AES), openssl speed 2012", Inline: true, Units: 8,
			PerOp: 26 * time.Nanosecond, PerByte: aesRounds(9.97),
		},
	}
}

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string {
	var out []string
	for n := range Profiles() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Class names the cipher cost class of a suite and key: aes-128, aes-192,
// aes-256, 3des or null; chacha20-poly1305, aes-N-gmac and aes-N-ccm for
// the suites no published card measurement covers.
func Class(suite sa.Suite, encKeyLen int) string {
	bits := (encKeyLen - suite.Cipher.SaltLen()) * 8
	switch suite.Cipher {
	case sa.Cipher3DES:
		return "3des"
	case sa.CipherNull:
		return "null"
	case sa.CipherChaCha20Poly1305:
		return "chacha20-poly1305"
	case sa.CipherAESGMAC:
		return fmt.Sprintf("aes-%d-gmac", bits)
	case sa.CipherAESCCM8, sa.CipherAESCCM12, sa.CipherAESCCM16:
		return fmt.Sprintf("aes-%d-ccm", bits)
	}
	return fmt.Sprintf("aes-%d", bits)
}

// Options tune an emulated engine beyond its profile.
type Options struct {
	QueueDepth, Aggregation int // 0: the profile's
	// Virtual runs the model on its own clock (see the package doc): what
	// `espgw speed` uses so that the host's load does not show in a card's
	// table. The engines' ModelClock tells the modelled time.
	Virtual bool
}

// New builds emul:<profile>; name may carry the prefix or not.
func New(name string, opts Options) (offload.Engine, error) {
	prof, ok := Profiles()[strings.TrimPrefix(name, Prefix+":")]
	if !ok {
		return nil, fmt.Errorf("unknown emul profile %q (known: %s)", name, strings.Join(ProfileNames(), ", "))
	}
	return NewProfile(prof, opts), nil
}

// NewProfile builds an engine that follows prof.
func NewProfile(prof Profile, opts Options) offload.Engine {
	m := &model{prof: prof, cores: make([]time.Duration, prof.HostCores)}
	name := Prefix + ":" + prof.Name
	if prof.Inline {
		e := newInline(name, m, opts.Virtual)
		if opts.Virtual {
			return e
		}
		return runner{e}
	}
	c := newClock(m, max(1, prof.Units), opts.Virtual)
	cfg := ring.Config{
		Name: name, QueueDepth: prof.QueueDepth, Aggregation: prof.Aggregation, Units: max(1, prof.Units),
		Timing: c, NewSession: m.newSession,
	}
	if opts.QueueDepth > 0 {
		cfg.QueueDepth = opts.QueueDepth
	}
	if opts.Aggregation > 0 {
		cfg.Aggregation = opts.Aggregation
	}
	return card{ring.New(cfg), c}
}

// card is a ring profile's engine: the ring on the model's clock, offering
// the suites the profile times.
type card struct {
	*ring.Engine
	clock *clock
}

// ModelClock is the modelled time of the latest completion, as time since
// the engine started (see Options.Virtual).
func (c card) ModelClock() time.Duration { return c.clock.ModelClock() }

// session is a cpu session that knows its per-byte cost.
type session struct {
	*cpu.Session
	perByte float64
}

// model is a profile's costs: the host's, the card's records' and the
// inline engine's ops'. The clock calls Submit, Record and Complete with
// the ring locked.
type model struct {
	prof Profile
	// cores is the modelled time each host core is next free; Submit
	// keeps it.
	cores []time.Duration
}

func (m *model) newSession(cfg offload.SessionConfig) (offload.Session, error) {
	if m.prof.Ciphers != nil && !slices.Contains(m.prof.Ciphers, cfg.Suite.Cipher) {
		return nil, fmt.Errorf("the card has no %s (it serves %v)", cfg.Suite.Cipher, m.prof.Ciphers)
	}
	s, err := cpu.NewSession(cfg)
	if err != nil {
		return nil, err
	}
	class := Class(cfg.Suite, len(cfg.EncKey))
	pb, ok := m.prof.PerByte[class]
	if !ok {
		return nil, fmt.Errorf("emul:%s cannot do %s: its card has no timing for %s", m.prof.Name, cfg.Suite, class)
	}
	return &session{Session: s, perByte: pb}, nil
}

// cost is the modelled unit time of one op.
func (m *model) cost(op *offload.Op) (time.Duration, int) {
	s, ok := op.Session.(*session)
	if !ok {
		return m.prof.PerOp, 0
	}
	n := op.Cipher.Len
	ns := float64(n)*s.perByte + float64(min(n, m.prof.FillBytes))*m.prof.FillPerByte
	return m.prof.PerOp + time.Duration(ns), n
}

func (m *model) bytes(b *offload.Batch) int {
	n := 0
	for _, op := range b.Ops {
		if _, ok := op.Session.(*session); ok {
			n += op.Cipher.Len
		}
	}
	return n
}

// Submit adds the host's time on the way in, ±25% at random with
// Exponential, so that requests which completed together do not arrive
// together for ever after, as on a real host (a closed network's
// throughput does not depend on how its think times are spread). With
// HostCores, the latency share comes first (the wake-up), then the CPU
// share runs on the core that is free first, after a context switch if
// the request had to wait for it.
func (m *model) Submit(t time.Duration, b *offload.Batch) time.Duration {
	d := m.prof.Host + time.Duration(len(b.Ops))*m.prof.HostPerOp + time.Duration(float64(m.bytes(b))*m.prof.HostPerByte)
	if m.prof.Exponential {
		d = time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
	}
	if len(m.cores) == 0 {
		return t + d
	}
	work := time.Duration(float64(d) * m.prof.HostCPU)
	t += d - work
	i := 0
	for j := range m.cores {
		if m.cores[j] < m.cores[i] {
			i = j
		}
	}
	if m.cores[i] > t {
		work += m.prof.Switch
		t = m.cores[i]
	}
	m.cores[i] = t + work
	return t + work
}

func (m *model) Record(ops []*offload.Op) time.Duration {
	d := m.prof.RecordSetup
	for _, op := range ops {
		c, _ := m.cost(op)
		d += c
	}
	if m.prof.Exponential {
		d = time.Duration(float64(d) * rand.ExpFloat64())
	}
	return d
}

// Complete adds the latency from a record's end to the host seeing it.
func (m *model) Complete(t time.Duration, _ *offload.Batch) time.Duration {
	return t + m.prof.Latency
}
