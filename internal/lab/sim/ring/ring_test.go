package ring_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/sim/ring"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

func session(t testing.TB, e offload.Engine) offload.Session {
	t.Helper()
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	enc, auth := make(sa.Key, 16), make(sa.Key, 20)
	rand.Read(enc)
	rand.Read(auth)
	s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: enc, AuthKey: auth})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ops returns n seal ops of 8+16+64+12 bytes, tagged by their first IV byte.
func ops(s offload.Session, n int) []*offload.Op {
	out := make([]*offload.Op, n)
	for i := range out {
		pkt := make([]byte, 8+16+64+12)
		pkt[8] = byte(i)
		out[i] = &offload.Op{Session: s, Dir: offload.Seal, Buf: pkt}
		lay(out[i])
	}
	return out
}

// lay fills op's ranges for its aes-cbc+hmac-sha1-96 packet as esp does.
func lay(op *offload.Op) {
	layout := esp.NewLayout(sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, nil, false)
	layout.Op(op, op.Session, op.Dir, op.Buf, op.SeqHi)
}

// gated is a session whose ops wait until the gate opens: it holds the
// ring's only unit so the queue fills up.
type gated struct {
	*cpu.Session
	open chan struct{}
}

func (g gated) Process(op *offload.Op) {
	<-g.open
	g.Session.Process(op)
}

// gatedRing is a ring whose sessions are gated on open.
func gatedRing(cfg ring.Config, open chan struct{}) *ring.Engine {
	cfg.NewSession = func(sc offload.SessionConfig) (offload.Session, error) {
		s, err := cpu.NewSession(sc)
		return gated{s, open}, err
	}
	return ring.New(cfg)
}

func TestBackPressure(t *testing.T) {
	open := make(chan struct{})
	e := gatedRing(ring.Config{QueueDepth: 4, Aggregation: 1, Units: 1}, open)
	defer e.Close()
	s := session(t, e)
	var mu sync.Mutex
	var order []int
	batch := func(id, n int) *offload.Batch {
		return &offload.Batch{Ops: ops(s, n), Done: func(*offload.Batch) {
			mu.Lock()
			order = append(order, id)
			mu.Unlock()
		}}
	}
	if err := e.Submit(context.Background(), batch(1, 4)); err != nil {
		t.Fatalf("first batch: %v", err)
	}
	ended, end := context.WithCancel(context.Background())
	end()
	if err := e.Submit(ended, batch(2, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit on a full queue with an ended context: %v, want canceled", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := e.Submit(ctx, batch(3, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit on a full queue with a short context: %v, want deadline exceeded", err)
	}
	// A blocked Submit is let in once the unit moves again; a batch larger
	// than the whole queue streams through behind it.
	submitted := make(chan error, 2)
	go func() { submitted <- e.Submit(context.Background(), batch(4, 2)) }()
	time.Sleep(10 * time.Millisecond)
	select {
	case err := <-submitted:
		t.Fatalf("Submit returned %v while the queue was full", err)
	default:
	}
	close(open)
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if err := e.Submit(context.Background(), batch(5, 11)); err != nil {
		t.Fatal(err)
	}
	w := offload.NewWaiter(e)
	if err := w.Run(context.Background(), ops(s, 1)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[1 4 5]" {
		t.Errorf("completion order %v, want [1 4 5]", order)
	}
	st := e.Stats()
	if st.QueueFull < 2 || st.Ops != 4+2+11+1 || st.MaxQueue != 4 || st.QueueDepth != 0 {
		t.Errorf("stats %+v: want QueueFull ≥ 2, Ops 18, MaxQueue 4, QueueDepth 0", st)
	}
}

// TestOrderConcurrent checks, under concurrent submitters, that every batch
// completes once, with the right results, and that a batch submitted after
// another's Submit returned never completes before it.
// lateHost is a Timing whose host sees each completion a while after the
// card raised it; records take no time.
type lateHost struct {
	delay time.Duration
	epoch time.Time
}

func (h *lateHost) now() int64                                    { return int64(time.Since(h.epoch)) }
func (h *lateHost) Arrive(*offload.Batch) int64                   { return h.now() }
func (h *lateHost) Feed(_ int, waiting, _ int64) (int64, bool)    { return waiting, true }
func (h *lateHost) Worked(_ int, at int64, _ []*offload.Op) int64 { return at }
func (h *lateHost) Deliver(_ *offload.Batch, _, done int64) int64 {
	return max(done, h.now()) + int64(h.delay)
}
func (h *lateHost) Wait(at int64) {
	if d := time.Duration(at - h.now()); d > 0 {
		time.Sleep(d)
	}
}

// TestBlockedSubmitWaitsForDelivery: a Submit blocked because every place
// for a batch is taken by completed batches not yet delivered is let in
// when they are delivered, with no op completing in between.
func TestBlockedSubmitWaitsForDelivery(t *testing.T) {
	e := ring.New(ring.Config{QueueDepth: 1, Aggregation: 1, Units: 1, Timing: &lateHost{delay: 20 * time.Millisecond, epoch: time.Now()}})
	defer e.Close()
	s := session(t, e)
	var order []int
	var mu sync.Mutex
	all := make(chan struct{}, 3)
	batches := make([]*offload.Batch, 3)
	for i := range batches {
		batches[i] = &offload.Batch{Ops: ops(s, 1), Done: func(*offload.Batch) {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			all <- struct{}{}
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The queue holds one op and the fifo two batches: the third Submit
	// finds both places taken by batches done on the card and waiting for
	// the host.
	for i, b := range batches {
		if err := e.Submit(ctx, b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	for range batches {
		select {
		case <-all:
		case <-ctx.Done():
			t.Fatal("batches not delivered")
		}
	}
	if fmt.Sprint(order) != "[0 1 2]" {
		t.Errorf("delivered in order %v, want [0 1 2]", order)
	}
}

func TestOrderConcurrent(t *testing.T) {
	for _, aggr := range []int{1, 5} {
		t.Run(fmt.Sprintf("aggregation=%d", aggr), func(t *testing.T) {
			e := ring.New(ring.Config{QueueDepth: 16, Aggregation: aggr, Units: 3})
			defer e.Close()
			ref := cpu.New()
			s := session(t, e)
			var ticket atomic.Int64
			type rec struct{ start, ret, done int64 }
			const submitters, rounds = 6, 150
			recs := make([][]rec, submitters)
			var wg sync.WaitGroup
			for g := range submitters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := mrand.New(mrand.NewPCG(uint64(g), 1))
					for r := range rounds {
						n := 1 + rng.IntN(24) // some batches larger than the queue
						b := &offload.Batch{Ops: ops(s, n)}
						want := ops(s, n)
						for i := range n {
							rand.Read(b.Ops[i].Buf)
							copy(want[i].Buf, b.Ops[i].Buf)
							lay(b.Ops[i])
							lay(want[i])
						}
						done := make(chan struct{})
						recs[g] = append(recs[g], rec{})
						me := &recs[g][r]
						b.Done = func(*offload.Batch) { me.done = ticket.Add(1); close(done) }
						me.start = ticket.Add(1)
						var err error
						if r%2 == 0 {
							err = e.Submit(context.Background(), b)
						} else {
							// Retry a Submit that gives up after a
							// while, as a caller that does other work
							// between tries would.
							for {
								ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
								err = e.Submit(ctx, b)
								cancel()
								if !errors.Is(err, context.DeadlineExceeded) {
									break
								}
							}
						}
						me.ret = ticket.Add(1)
						if err != nil {
							t.Error(err)
							return
						}
						<-done
						ref.Run(want)
						for i := range n {
							if string(b.Ops[i].Buf) != string(want[i].Buf) || b.Ops[i].Status != offload.OK {
								t.Errorf("submitter %d batch %d op %d differs from cpu", g, r, i)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			var all []rec
			for _, r := range recs {
				all = append(all, r...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i].done < all[j].done })
			minRet := int64(1 << 62)
			for i := len(all) - 1; i >= 0; i-- {
				if minRet < all[i].start {
					t.Fatalf("a batch submitted after another's Submit returned completed before it")
				}
				minRet = min(minRet, all[i].ret)
			}
			st := e.Stats()
			if st.Batches != submitters*rounds || st.Interrupts != st.Records || st.MaxBatch > uint64(aggr) || st.QueueDepth != 0 {
				t.Errorf("stats %+v", st)
			}
			if aggr > 1 && st.MaxBatch < 2 {
				t.Errorf("no record carried more than one op: %+v", st)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	e := ring.New(ring.Config{})
	s := session(t, e)
	e.Close()
	b := &offload.Batch{Ops: ops(s, 1)}
	if err := e.Submit(context.Background(), b); !errors.Is(err, offload.ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

func TestEmptyBatchCompletes(t *testing.T) {
	e := ring.New(ring.Config{})
	defer e.Close()
	done := make(chan struct{})
	if err := e.Submit(context.Background(), &offload.Batch{Done: func(*offload.Batch) { close(done) }}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("an empty batch never completed")
	}
}

// TestSteadyStateAllocatesNothing proves a submit-and-wait round allocates
// nothing once warm.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	e := ring.New(ring.Config{})
	defer e.Close()
	s := session(t, e)
	w := offload.NewWaiter(e)
	batch := ops(s, 32)
	ctx := context.Background()
	round := func() {
		if err := w.Run(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Errorf("a 32-op round allocates %.1f times, want 0", n)
	}
}

// byArrival is a Timing whose batches arrive at the times it was told,
// records and deliveries taking no time.
type byArrival struct{ at map[*offload.Batch]int64 }

func (a byArrival) Arrive(b *offload.Batch) int64                     { return a.at[b] }
func (byArrival) Feed(_ int, waiting, _ int64) (int64, bool)          { return waiting, true }
func (byArrival) Worked(_ int, at int64, _ []*offload.Op) int64       { return at }
func (byArrival) Deliver(_ *offload.Batch, arrival, done int64) int64 { return max(arrival, done) }
func (byArrival) Wait(int64)                                          {}

// TestTimingOrdersByArrival: with a Timing, queued batches are worked and
// delivered in the order they arrive, not the order they were submitted;
// a batch already on the card stays first.
func TestTimingOrdersByArrival(t *testing.T) {
	open := make(chan struct{})
	timing := byArrival{at: map[*offload.Batch]int64{}}
	e := gatedRing(ring.Config{QueueDepth: 8, Aggregation: 1, Units: 1, Timing: timing}, open)
	defer e.Close()
	s := session(t, e)
	var mu sync.Mutex
	var order []string
	done := make(chan struct{}, 3)
	batch := func(name string, at int64) *offload.Batch {
		b := &offload.Batch{Ops: ops(s, 1), Done: func(*offload.Batch) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			done <- struct{}{}
		}}
		timing.at[b] = at
		return b
	}
	first, late, early := batch("first", 0), batch("late", 20), batch("early", 10)
	if err := e.Submit(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	// The unit holds first's op (the gate); the other two queue behind it.
	for e.Stats().Records == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, b := range []*offload.Batch{late, early} {
		if err := e.Submit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	close(open)
	for range 3 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("batches not delivered")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(order) != "[first early late]" {
		t.Errorf("delivered %v, want [first early late]", order)
	}
}
