// Package virtio is the offload engine on a virtio-crypto device, driven
// from user space.
//
// It is the engine that drives a virtio-crypto device's rings from user
// space, as DPDK's crypto_virtio PMD does: the device is taken from the
// kernel through VFIO, requests are written into fixed slots of pinned DMA
// memory, many are in flight at once, one doorbell announces a whole
// submission, and completions are polled from the used ring. It is the ring
// engine's shape (package ring) on a real device.
//
// virtio-crypto devices as QEMU builds them have cipher sessions only (no
// hash, no chaining, no AEAD), so this is the "cipher-only card" case: the
// cipher runs on the device and the HMAC on the CPU — encrypt then MAC on
// seal, verify then decrypt on open, so a packet with a bad ICV never
// reaches the device and nothing unverified is decrypted. AES-GCM is not
// offered.
//
// Packets stay where the caller keeps them; each request's payload is
// copied into its slot and the result copied back (a bounce buffer, as the
// kernel's swiotlb does for a device that cannot reach the page). The data
// path in DMA memory would save the two copies, at the price of the whole
// gateway's buffers living there.
package virtio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/virtio/internal/vcrypto"
	"github.com/espgw/espgw/offload/virtio/internal/vfio"
	"github.com/espgw/espgw/sa"
)

// Name is the engine's catalog name.
const Name = "virtio"

// spinFor is how long the driver spins on the used ring before it sleeps
// between looks: longer than the device takes for a large request, so a
// wait ends on a spin rather than on a sleep, whose wake-up can take a
// millisecond on a loaded machine. It spins only while requests are in
// flight, as a poll-mode driver does.
const spinFor = 2 * time.Millisecond

// Config chooses the device and sizes the queue.
type Config struct {
	// Device is the PCI address (0000:00:04.0); empty takes the first
	// virtio-crypto device found.
	Device string
	// QueueSize is the data queue's descriptors, two per request in
	// flight (rounded up to a power of two). 0: 256 (128 requests).
	QueueSize int
	// Backlog is how many submitted batches wait for the device before
	// Submit blocks. 0: 64.
	Backlog int
	Log     *slog.Logger
}

// Engine is an open virtio-crypto device and the goroutine that drives it.
type Engine struct {
	dev     *vcrypto.Device
	log     *slog.Logger
	backlog chan *offload.Batch
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	closed  atomic.Bool

	counters offload.Counters
	records  atomic.Uint64 // requests posted to the device
	bells    atomic.Uint64 // doorbells rung
	reaped   atomic.Uint64 // completions taken from the used ring
	full     atomic.Uint64 // times a request waited for a free slot
	maxQueue atomic.Uint64 // most requests in flight at once
	depth    atomic.Uint64 // requests in flight now
}

// Open takes the device — only a virtio-crypto one — from its driver and
// starts the engine; devices a killed espgw left on vfio-pci are given
// back first (the one being taken keeps the record of its driver).
func Open(cfg Config) (*Engine, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = 64
	}
	addr := cfg.Device
	if addr == "" {
		found, err := vfio.Find(vcrypto.VendorID, vcrypto.DeviceID)
		if err != nil {
			return nil, fmt.Errorf("virtio engine: %w", err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("virtio engine: no virtio-crypto device (PCI %04x:%04x) on this machine", vcrypto.VendorID, vcrypto.DeviceID)
		}
		addr = found[0]
	}
	released, err := vfio.ReleaseStale(addr)
	for _, a := range released {
		cfg.Log.Info("gave back a device a stopped espgw had left on vfio-pci", "device", a)
	}
	if err != nil {
		cfg.Log.Warn("could not give back a device a stopped espgw left on vfio-pci", "err", err)
	}
	dev, err := vcrypto.Open(addr, vcrypto.Options{QueueSize: cfg.QueueSize})
	if err != nil {
		return nil, fmt.Errorf("virtio engine: %w", err)
	}
	e := &Engine{dev: dev, log: cfg.Log, backlog: make(chan *offload.Batch, cfg.Backlog),
		stop: make(chan struct{}), done: make(chan struct{})}
	cfg.Log.Info("virtio-crypto device ready", "device", addr, "requests-in-flight", dev.Slots(),
		"advertised-ciphers", fmt.Sprintf("%#x", dev.Advertised), "also-served", fmt.Sprint(dev.Probed))
	go e.drive()
	return e, nil
}

// Name is "virtio".
func (e *Engine) Name() string { return Name }

// Device is the PCI address of the device the engine drives.
func (e *Engine) Device() string { return e.dev.Address }

func (e *Engine) cipherOf(c sa.Cipher) (vcrypto.Cipher, bool) {
	var v vcrypto.Cipher
	switch c {
	case sa.CipherAESCBC:
		v = vcrypto.AESCBC
	case sa.Cipher3DES:
		v = vcrypto.DES3CBC
	case sa.CipherAESCTR:
		v = vcrypto.AESCTR
	default:
		return 0, false
	}
	return v, e.dev.Config.Has(v)
}

// session is one SA on the device: a session per direction (virtio-crypto
// sessions are one-way), and the CPU session that does the HMAC.
type session struct {
	eng      *Engine
	mac      *cpu.Session // nil for cipher-only sessions
	enc, dec uint64
	ivLen    int // the device's IV: the CBC IV, or the RFC 3686 counter block
	icvLen   int
	cbcBlock int // a CBC cipher's block, which the text must be whole blocks of; 1 for CTR
	ctr      bool
	closed   atomic.Bool
}

// Close destroys the device sessions.
func (s *session) Close() error {
	if s.closed.Swap(true) || s.eng.closed.Load() {
		return nil
	}
	return errors.Join(s.eng.dev.DestroySession(s.enc), s.eng.dev.DestroySession(s.dec))
}

// NewSession creates the SA's device sessions and its HMAC on the CPU.
func (e *Engine) NewSession(cfg offload.SessionConfig) (offload.Session, error) {
	if e.closed.Load() {
		return nil, offload.ErrClosed
	}
	suite := cfg.Suite
	c, ok := e.cipherOf(suite.Cipher)
	if !ok {
		return nil, fmt.Errorf("virtio engine: new %s session: device %s has no cipher for %s (it offers mask %#x; virtio-crypto has no AEAD here, so AES-GCM stays on the CPU engines)",
			suite, e.dev.Address, suite.Cipher, e.dev.Config.CipherAlgos)
	}
	// The CPU session checks the suite and key lengths, and is the HMAC.
	mac, err := cpu.NewSession(cfg)
	if err != nil {
		return nil, fmt.Errorf("virtio engine: %w", err)
	}
	s := &session{eng: e, ivLen: suite.IVLen(), icvLen: suite.ICVLen(), cbcBlock: suite.IVLen()}
	if !cfg.CipherOnly {
		s.mac = mac
	} else {
		s.icvLen = 0
	}
	key := []byte(cfg.EncKey)
	if suite.Cipher == sa.CipherAESCTR {
		s.ctr, s.ivLen, s.cbcBlock = true, 16, 1
		key = key[:len(key)-suite.Cipher.SaltLen()]
	}
	if s.enc, err = e.dev.CreateSession(c, vcrypto.Encrypt, key); err != nil {
		return nil, fmt.Errorf("virtio engine: new %s session: %w", suite, err)
	}
	if s.dec, err = e.dev.CreateSession(c, vcrypto.Decrypt, key); err != nil {
		e.dev.DestroySession(s.enc)
		return nil, fmt.Errorf("virtio engine: new %s session: %w", suite, err)
	}
	return s, nil
}

// Submit queues a batch for the device, blocking while the backlog is full.
func (e *Engine) Submit(ctx context.Context, b *offload.Batch) error {
	if e.closed.Load() {
		return offload.ErrClosed
	}
	select {
	case e.backlog <- b:
		return nil
	default:
	}
	e.full.Add(1)
	select {
	case e.backlog <- b:
		return nil
	case <-e.stop:
		return offload.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats are the engine's counters: Records are requests posted to the
// device, Doorbells the notifications that announced them, Completions
// what was reaped from the used ring.
func (e *Engine) Stats() offload.Stats {
	st := e.counters.Stats()
	st.Records = e.records.Load()
	st.Doorbells = e.bells.Load()
	st.Completions = e.reaped.Load()
	st.QueueFull = e.full.Load()
	st.MaxQueue = e.maxQueue.Load()
	st.QueueDepth = e.depth.Load()
	return st
}

// Close stops the engine once every submitted batch is done, then resets
// the device, releases it and gives it back to the driver it had.
func (e *Engine) Close() error {
	var err error
	e.once.Do(func() {
		e.closed.Store(true)
		close(e.stop)
		<-e.done
		err = e.dev.Close()
		// A Submit racing Close may have queued after the driver left.
		for {
			select {
			case b := <-e.backlog:
				for _, op := range b.Ops {
					op.Status = offload.Failed
				}
				e.counters.Count(b.Ops)
				if b.Done != nil {
					b.Done(b)
				}
				continue
			default:
			}
			break
		}
	})
	return err
}

// pending is a submitted batch on its way through the device.
type pending struct {
	b         *offload.Batch
	next      int // first op not yet posted
	remaining int // ops without a Status
}

// drive is the engine's one goroutine: it takes batches in order, posts
// their ops to free slots, rings the doorbell once per round, reaps
// completions and finishes batches in submission order. Being the only
// user of the data queue, it needs no lock on it.
func (e *Engine) drive() {
	defer close(e.done)
	nslots := e.dev.Slots()
	slotOp := make([]*offload.Op, nslots)
	slotBatch := make([]*pending, nslots)
	free := make([]int, 0, nslots)
	for i := nslots - 1; i >= 0; i-- {
		free = append(free, i)
	}
	// fifo is a ring of the batches in flight, oldest first.
	fifo := make([]*pending, 0, cap(e.backlog)+1)
	pool := make([]*pending, 0, cap(e.backlog)+1)
	for range cap(e.backlog) + 1 {
		pool = append(pool, new(pending))
	}
	head := 0
	inflight := 0
	stopping := false
	var waitStart, lastCheck time.Time

	take := func(b *offload.Batch) {
		p := pool[len(pool)-1]
		pool = pool[:len(pool)-1]
		*p = pending{b: b, remaining: len(b.Ops)}
		fifo = append(fifo, p)
	}
	complete := func(slot int, status uint8) {
		op, p := slotOp[slot], slotBatch[slot]
		slotOp[slot], slotBatch[slot] = nil, nil
		free = append(free, slot)
		inflight--
		s := op.Session.(*session)
		if status != vcrypto.StatusOK {
			op.Status = offload.Failed
		} else {
			text := op.Bytes(op.Cipher)
			_, _, dst := e.dev.Request(slot, 0)
			copy(text, dst[:len(text)])
			if op.Dir == offload.Seal && s.mac != nil {
				s.mac.WriteICV(op)
			}
			op.Status = offload.OK
		}
		p.remaining--
	}

	for {
		// Take what was submitted; block only when there is nothing to do.
		if len(fifo)-head == 0 && inflight == 0 {
			if stopping {
				select { // what was submitted before Close still completes
				case b := <-e.backlog:
					take(b)
					continue
				default:
					return
				}
			}
			select {
			case b := <-e.backlog:
				take(b)
			case <-e.stop:
				stopping = true
				continue
			}
		}
		for len(pool) > 0 {
			select {
			case b := <-e.backlog:
				take(b)
				continue
			case <-e.stop:
				stopping = true
			default:
			}
			break
		}

		// Post every op that has a slot, oldest batch first; one doorbell.
		posted := 0
		for i := head; i < len(fifo); i++ {
			p := fifo[i]
			for p.next < len(p.b.Ops) {
				op := p.b.Ops[p.next]
				s, ok := op.Session.(*session)
				if !ok || s.closed.Load() {
					op.Status = offload.Failed
					p.next++
					p.remaining--
					continue
				}
				if st, direct := s.precheck(op); direct {
					op.Status = st
					p.next++
					p.remaining--
					continue
				}
				if len(free) == 0 {
					e.full.Add(1)
					break
				}
				slot := free[len(free)-1]
				free = free[:len(free)-1]
				s.post(e.dev, slot, op)
				slotOp[slot], slotBatch[slot] = op, p
				p.next++
				inflight++
				posted++
			}
			if p.next < len(p.b.Ops) {
				break // in order: later batches wait for this one's slots
			}
		}
		if posted > 0 {
			e.dev.Kick()
			e.bells.Add(1)
			e.records.Add(uint64(posted))
			if d := uint64(inflight); d > e.maxQueue.Load() {
				e.maxQueue.Store(d)
			}
		}
		e.depth.Store(uint64(inflight))

		n := 0
		if inflight > 0 {
			n = e.dev.Reap(complete)
			e.reaped.Add(uint64(n))
		}

		// Finish batches in the order they came.
		for head < len(fifo) && fifo[head].remaining == 0 && fifo[head].next == len(fifo[head].b.Ops) {
			p := fifo[head]
			fifo[head] = nil
			head++
			e.counters.Count(p.b.Ops)
			if p.b.Done != nil {
				p.b.Done(p.b)
			}
			pool = append(pool, p)
		}
		if head == len(fifo) {
			fifo, head = fifo[:0], 0
		}

		// Poll the used ring (plain memory) while requests are in flight:
		// spin for a while, then sleep between looks. The device's status
		// register is looked at only once a wait grows long: reading it
		// traps into the device model, which a spinning poll would keep
		// busy while it should be ciphering.
		if inflight > 0 && n == 0 {
			now := time.Now()
			if waitStart.IsZero() {
				waitStart, lastCheck = now, now
			}
			if now.Sub(lastCheck) > 10*time.Millisecond {
				lastCheck = now
				if e.dev.NeedsReset() {
					e.failInflight(slotOp, slotBatch, &free, &inflight)
					continue
				}
			}
			if now.Sub(waitStart) < spinFor {
				runtime.Gosched()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
		} else {
			waitStart = time.Time{}
		}
	}
}

// failInflight fails every request in flight on a device that stopped.
func (e *Engine) failInflight(slotOp []*offload.Op, slotBatch []*pending, free *[]int, inflight *int) {
	e.log.Error("virtio-crypto device needs a reset: failing the requests in flight", "device", e.dev.Address, "requests", *inflight)
	for slot, op := range slotOp {
		if op == nil {
			continue
		}
		op.Status = offload.Failed
		slotBatch[slot].remaining--
		slotOp[slot], slotBatch[slot] = nil, nil
		*free = append(*free, slot)
		*inflight--
	}
}

// precheck decides the ops that need no device: a layout that does not fit
// the suite, an ICV that does not verify (nothing unverified is decrypted,
// so a forged packet never costs the device a request), an empty payload.
// It returns the status and whether the op is finished.
func (s *session) precheck(op *offload.Op) (offload.Status, bool) {
	if !op.Fits() || int(op.NonceLen) != s.ivLen || op.ICV.Len != s.icvLen {
		return offload.BadLength, true
	}
	n := op.Cipher.Len
	if n%s.cbcBlock != 0 {
		return offload.BadLength, true
	}
	if n+15 > s.eng.dev.MaxData() {
		return offload.Failed, true
	}
	if op.Dir == offload.Open && s.mac != nil && !s.mac.VerifyICV(op) {
		return offload.BadICV, true
	}
	if n == 0 {
		if op.Dir == offload.Seal && s.mac != nil {
			s.mac.WriteICV(op)
		}
		return offload.OK, true
	}
	return offload.OK, false
}

// post fills slot with op's nonce (the CBC IV, or the counter block) and
// text and posts it.
func (s *session) post(dev *vcrypto.Device, slot int, op *offload.Op) {
	text := op.Bytes(op.Cipher)
	iv, src, _ := dev.Request(slot, s.ivLen)
	copy(iv, op.NonceBytes())
	copy(src, text)
	n := len(text)
	if s.ctr {
		// The device ciphers whole AES blocks only, even in CTR mode; a
		// stream cipher's output for the text does not depend on what
		// follows it, so the tail of the last block is ciphered and dropped.
		n = (n + 15) &^ 15
	}
	id, op2 := s.enc, vcrypto.Encrypt
	if op.Dir == offload.Open {
		id, op2 = s.dec, vcrypto.Decrypt
	}
	dev.Post(slot, id, op2, s.ivLen, n)
}

// Drivers says what does the engine's work: the device, by address, for
// each cipher it serves, and the CPU for the HMAC.
func (e *Engine) Drivers() []offload.Driver {
	var out []offload.Driver
	for _, c := range []vcrypto.Cipher{vcrypto.AESCBC, vcrypto.AESCTR, vcrypto.DES3CBC} {
		if !e.dev.Config.Has(c) {
			continue
		}
		d := offload.Driver{Algorithm: c.String(), Driver: "virtio-crypto " + e.dev.Address,
			Module: "espgw's virtio driver over VFIO; HMAC on the CPU"}
		if e.dev.Advertised&(1<<uint(c)) == 0 {
			d.Note = "served though the device's configuration does not advertise it (found by a probe session)"
		}
		out = append(out, d)
	}
	return out
}
