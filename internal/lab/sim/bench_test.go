package sim_test

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

// cpuTime is the CPU time (user and system) of the whole process: every
// goroutine, the runtime's included. An engine that hands work to other
// goroutines looks faster by the wall clock than by what it costs.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// slot is one batch of packets sealed together, with its engine batch.
type slot struct {
	pkts   []esp.Packet
	bufs   [][]byte
	ops    []*offload.Op
	batch  offload.Batch
	done   chan struct{}
	queued bool // submitted and not yet finished
}

// sealer seals batches of same-sized packets on one engine, with up to
// len(slots) batches in flight, and keeps the wall and CPU time it took.
// With one slot it goes through esp.Processor, as a synchronous caller
// does; with more it submits to the engine itself and finishes each batch
// when its Done comes, as the gateway's pipeline does.
type sealer struct {
	eng   offload.Engine
	sa    *esp.SA
	size  int
	slots []*slot
	next  int

	pr   *esp.Processor // one slot
	ptrs []*esp.Packet

	wall, cpu time.Duration
	bytes     int64
}

func newSealer(b *testing.B, eng offload.Engine, suite sa.Suite, encKeyLen, size, batch, inflight int) *sealer {
	cfg := &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Suite: suite,
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"),
		EncKey: key(encKeyLen), AuthKey: key(suite.AuthKeyLen())}
	out, err := esp.NewSA(cfg, eng, esp.Options{})
	if err != nil {
		b.Fatalf("SA on %s: %v", eng.Name(), err)
	}
	s := &sealer{eng: eng, sa: out, size: size}
	for range inflight {
		sl := &slot{pkts: make([]esp.Packet, batch), ops: make([]*offload.Op, 0, batch), done: make(chan struct{}, 1)}
		sl.batch.Done = func(*offload.Batch) { sl.done <- struct{}{} }
		for range batch {
			sl.bufs = append(sl.bufs, make([]byte, esp.Headroom+size+esp.Tailroom))
		}
		s.slots = append(s.slots, sl)
	}
	if inflight == 1 {
		s.pr = esp.NewProcessor(eng)
		for i := range s.slots[0].pkts {
			s.ptrs = append(s.ptrs, &s.slots[0].pkts[i])
		}
	}
	return s
}

// prepare resets the slot's inner packets (an IPv4 packet as far as tunnel
// mode cares).
func (s *sealer) prepare(sl *slot) {
	for i := range sl.pkts {
		sl.pkts[i] = esp.Packet{Buf: sl.bufs[i], Off: esp.Headroom, Len: s.size, SA: s.sa}
		sl.bufs[i][esp.Headroom] = 0x45
	}
}

// finish waits for a queued slot and judges its packets.
func (s *sealer) finish(b *testing.B, sl *slot) {
	<-sl.done
	sl.queued = false
	for i := range sl.pkts {
		p := &sl.pkts[i]
		if r := s.sa.FinishSeal(p); r != esp.OK {
			b.Fatalf("seal on %s dropped a packet: %v", s.eng.Name(), r)
		}
	}
}

// run seals n batches and adds their wall and CPU time.
func (s *sealer) run(b *testing.B, n int) {
	ctx := context.Background()
	c0, t0 := cpuTime(b), time.Now()
	for range n {
		if s.pr != nil {
			sl := s.slots[0]
			s.prepare(sl)
			if err := s.pr.Seal(ctx, s.ptrs); err != nil {
				b.Fatalf("seal on %s: %v", s.eng.Name(), err)
			}
			for _, p := range s.ptrs {
				if p.Drop != esp.OK {
					b.Fatalf("seal on %s dropped a packet: %v", s.eng.Name(), p.Drop)
				}
			}
			continue
		}
		sl := s.slots[s.next]
		s.next = (s.next + 1) % len(s.slots)
		if sl.queued {
			s.finish(b, sl)
		}
		s.prepare(sl)
		sl.ops = sl.ops[:0]
		for i := range sl.pkts {
			if r := s.sa.PrepareSeal(&sl.pkts[i]); r != esp.OK {
				b.Fatalf("prepare seal: %v", r)
			}
			sl.ops = append(sl.ops, &sl.pkts[i].Op)
		}
		sl.batch.Ops = sl.ops
		if err := s.eng.Submit(ctx, &sl.batch); err != nil {
			b.Fatalf("submit to %s: %v", s.eng.Name(), err)
		}
		sl.queued = true
	}
	for range s.slots { // drain, oldest first
		if sl := s.slots[s.next]; sl.queued {
			s.finish(b, sl)
		}
		s.next = (s.next + 1) % len(s.slots)
	}
	s.wall += time.Since(t0)
	s.cpu += cpuTime(b) - c0
	s.bytes += int64(n * len(s.slots[0].pkts) * s.size)
}

func (s *sealer) reset()            { s.wall, s.cpu, s.bytes = 0, 0, 0 }
func (s *sealer) mbps() float64     { return float64(s.bytes) / s.wall.Seconds() / 1e6 }
func (s *sealer) cpuPerB() float64  { return float64(s.cpu.Nanoseconds()) / float64(s.bytes) }
func (s *sealer) wallPerB() float64 { return float64(s.wall.Nanoseconds()) / float64(s.bytes) }

// handoff is the least an engine that hands batches to a goroutine of its
// own can cost: one goroutine, one channel, the cpu engine's ciphers, no
// queue or records. It is the benchmark's yardstick for what the hand-off
// itself costs (goroutine wake-ups, packets moving between cores), apart
// from the ring's bookkeeping.
type handoff struct {
	cpu  *cpu.Engine // for sessions and counters; not embedded, so handoff is not Inline
	work chan *offload.Batch
}

func newHandoff() *handoff {
	h := &handoff{cpu: cpu.New(), work: make(chan *offload.Batch, 2)}
	go func() {
		for b := range h.work {
			for _, op := range b.Ops {
				offload.Process(op)
			}
			h.cpu.Count(b.Ops)
			b.Done(b)
		}
	}()
	return h
}

func (h *handoff) Name() string                                     { return "handoff" }
func (h *handoff) Stats() offload.Stats                             { return h.cpu.Stats() }
func (h *handoff) Submit(_ context.Context, b *offload.Batch) error { h.work <- b; return nil }
func (h *handoff) Close() error                                     { close(h.work); return nil }
func (h *handoff) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	return h.cpu.NewSession(cfg)
}

// BenchmarkRingVsCPU seals batches of 32 1400-byte packets (ESP tunnel
// mode) on the cpu engine and on the ring engine in the same loop,
// alternating 16 batches on each, so that both see the same machine; it
// reports each one's MB/s and CPU time per byte (getrusage: the whole
// process) and the ratios ring÷cpu. A third engine in the same loop,
// handoff, is the floor of any engine with a worker goroutine
// (handoff/cpu-cpu): what is left between it and the ring is the ring's
// own cost. The ring runs with its default workers
// (GOMAXPROCS) and with one, the fair single-core comparison; and with one
// batch in flight (sync: esp.Processor, which waits for each batch) or two
// (inflight=2: the next batch is framed while the engine works on the
// last, as the gateway's pipeline does). The target is ring/cpu-cpu ≤ 1.10.
//
//	go test -run '^$' -bench RingVsCPU -benchtime 2s -count 5 ./internal/lab/sim/
func BenchmarkRingVsCPU(b *testing.B) {
	const size, batch, chunk = 1400, 32, 16
	suites := []struct {
		name      string
		suite     sa.Suite
		encKeyLen int
	}{
		{"aes-cbc-128+hmac-sha1-96", sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, 16},
		{"aes-gcm-16", sa.Suite{Cipher: sa.CipherAESGCM16, Auth: sa.AuthNone}, 20},
	}
	for _, st := range suites {
		for _, workers := range []int{0, 1} {
			for _, inflight := range []int{1, 2} {
				w, mode := "default", "sync"
				if workers > 0 {
					w = fmt.Sprint(workers)
				}
				if inflight > 1 {
					mode = fmt.Sprintf("inflight=%d", inflight)
				}
				name := fmt.Sprintf("esp-%d-batch%d/%s/workers=%s/%s", size, batch, st.name, w, mode)
				b.Run(name, func(b *testing.B) {
					cpuEng, err := (sim.Engines{}).Open("cpu", engines.Options{})
					if err != nil {
						b.Fatal(err)
					}
					defer cpuEng.Close()
					ringEng, err := (sim.Engines{}).Open("ring", engines.Options{Workers: workers})
					if err != nil {
						b.Fatal(err)
					}
					defer ringEng.Close()
					hoEng := newHandoff()
					defer hoEng.Close()
					ref := newSealer(b, cpuEng, st.suite, st.encKeyLen, size, batch, inflight)
					ring := newSealer(b, ringEng, st.suite, st.encKeyLen, size, batch, inflight)
					ho := newSealer(b, hoEng, st.suite, st.encKeyLen, size, batch, inflight)
					all := []*sealer{ref, ring, ho}
					for _, s := range all {
						s.run(b, chunk) // warm: key schedules, pools, the workers
						s.reset()
					}
					b.ReportAllocs()
					for b.Loop() {
						for _, s := range all {
							s.run(b, chunk)
						}
					}
					b.ReportMetric(ref.mbps(), "cpu-MB/s")
					b.ReportMetric(ring.mbps(), "ring-MB/s")
					b.ReportMetric(ref.cpuPerB(), "cpu-cpu-ns/B")
					b.ReportMetric(ring.cpuPerB(), "ring-cpu-ns/B")
					b.ReportMetric(ring.wallPerB()/ref.wallPerB(), "ring/cpu-wall")
					b.ReportMetric(ring.cpuPerB()/ref.cpuPerB(), "ring/cpu-cpu")
					b.ReportMetric(ho.cpuPerB()/ref.cpuPerB(), "handoff/cpu-cpu")
				})
			}
		}
	}
}

func key(n int) sa.Key {
	k := make(sa.Key, n)
	for i := range k {
		k[i] = byte(i*7 + 1)
	}
	return k
}
