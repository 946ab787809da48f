// Package sha is the aesni engine's HMAC-SHA1 and HMAC-SHA256 across a batch.
//
// It runs on the SHA extensions and AVX-512, with a pure-Go fallback.
//
// A Key holds the hash states after the inner and the outer padded key
// blocks (RFC 2104), so a packet's MAC is its own blocks from the inner
// state plus one block from the outer state. Macer.MACBatch runs the
// packets of a batch as independent streams: two whose compressions are
// interleaved in one SHA-NI kernel (SHA1RNDS4 and SHA256RNDS2 have a
// latency that one stream leaves idle), or, for SHA-1 on CPUs with
// AVX-512, eight lanes of 32-bit words in YMM registers (as intel-ipsec-mb's
// sha1_x8 does, with AVX-512VL's rotates and three-input logic). A job
// scheduler refills a lane with the next packet as soon as its packet is
// done, so lanes of unequal lengths run to the shortest, retire and refill. Each packet's message is its data in
// place, then a tail block or two built in the lane's scratch (the data's
// last partial block, the ESN trailer, the padding), then the outer block.
//
// The assembly is used on amd64 CPUs with the SHA extensions (found with
// CPUID; the eight-lane SHA-1 also needs AVX-512 F, VL and BW); elsewhere, on CPUs without them and in builds with the purego tag,
// the same scheduler drives the compression functions in Go. Nothing
// allocates per call.
package sha

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// BlockSize is the block size of both hashes.
const BlockSize = 64

// MaxSize is the longest digest, SHA-256's.
const MaxSize = sha256.Size

// Lanes is how many packets the kernels keep in flight: eight for SHA-1 on
// CPUs with AVX-512 (eight lanes of 32-bit words in YMM registers), else
// two. Two SHA-NI streams hide most of the SHA instructions' latency; the
// sixteen XMM registers that the legacy-encoded SHA instructions can name
// hold no more than two SHA-256 states with their message schedules.
const Lanes = 8

// wideMin is the fewest busy lanes the eight-lane kernel runs for: on the
// project's test machine one eight-lane step costs what four or five
// blocks cost on the two-stream SHA-NI kernel.
const wideMin = 5

// Hash names the hash of an HMAC.
type Hash uint8

// The hashes.
const (
	SHA1 Hash = iota + 1
	SHA256
)

// Size is the hash's digest length in bytes, 0 for an unknown hash.
func (h Hash) Size() int {
	switch h {
	case SHA1:
		return sha1.Size
	case SHA256:
		return sha256.Size
	}
	return 0
}

func (h Hash) String() string {
	switch h {
	case SHA1:
		return "sha1"
	case SHA256:
		return "sha256"
	}
	return fmt.Sprintf("hash(%d)", uint8(h))
}

// initial is each hash's initial state (FIPS 180-4 §5.3).
var initial = [...][8]uint32{
	SHA1:   {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0},
	SHA256: {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
}

// Key is one HMAC key as the hash states after its inner and its outer
// padded key block.
type Key struct {
	hash         Hash
	inner, outer [8]uint32
}

// NewKey precomputes the HMAC states of key under h.
func NewKey(h Hash, key []byte) (*Key, error) {
	k := new(Key)
	if err := k.Init(h, key); err != nil {
		return nil, err
	}
	return k, nil
}

var errUnknownHash = errors.New("unknown hash")

// Init precomputes the HMAC states of key under h into k. A key longer than
// a block is hashed first (RFC 2104 §2).
func (k *Key) Init(h Hash, key []byte) error {
	var long [MaxSize]byte
	switch h {
	case SHA1:
		if len(key) > BlockSize {
			long1 := sha1.Sum(key)
			key = long[:copy(long[:], long1[:])]
		}
	case SHA256:
		if len(key) > BlockSize {
			long = sha256.Sum256(key)
			key = long[:]
		}
	default:
		return fmt.Errorf("sha: HMAC key: %w %d", errUnknownHash, h)
	}
	var pad [BlockSize]byte
	state := func(st *[8]uint32, x byte) {
		for i := range pad {
			pad[i] = x
		}
		for i, b := range key {
			pad[i] ^= b
		}
		*st = initial[h]
		blocks(h, best, st, &pad[0], 1)
	}
	k.hash = h
	state(&k.inner, 0x36)
	state(&k.outer, 0x5c)
	clear(pad[:])
	clear(long[:])
	return nil
}

// Hash returns the key's hash, 0 for a Key not initialised.
func (k *Key) Hash() Hash { return k.hash }

// Size is the MAC length in bytes.
func (k *Key) Size() int { return k.hash.Size() }

// Job is one packet for Macer.MACBatch: HMAC(Key, Data, and with ESN the
// four bytes of SeqHi, big-endian, as RFC 4303 §2.2.1 appends them) written
// into Sum's first Key.Size() bytes.
type Job struct {
	Key   *Key
	Data  []byte
	ESN   bool
	SeqHi uint32
	Sum   *[MaxSize]byte
}

// MAC computes one job's HMAC as a single stream, for a packet with no other
// to interleave.
func (k *Key) MAC(sum *[MaxSize]byte, data []byte, esn bool, seqHi uint32) error {
	j := Job{Key: k, Data: data, ESN: esn, SeqHi: seqHi, Sum: sum}
	if err := checkJob(&j); err != nil {
		return fmt.Errorf("sha: HMAC: %w", err)
	}
	mac(&j, best)
	return nil
}

// mac runs one job alone on kernel kern, its scratch on the stack.
func mac(j *Job, kern kernel) {
	var (
		h     = j.Key.inner
		tail  [2 * BlockSize]byte
		outer [BlockSize]byte
	)
	if n := len(j.Data) / BlockSize; n > 0 {
		blocks(j.Key.hash, kern, &h, &j.Data[0], n)
	}
	blocks(j.Key.hash, kern, &h, &tail[0], fillTail(&tail, j))
	fillOuter(&outer, &h, j.Key.hash.Size())
	h = j.Key.outer
	blocks(j.Key.hash, kern, &h, &outer[0], 1)
	putSum(j.Sum, &h, j.Key.hash.Size())
}

// fillTail writes the inner message's last blocks into tail: the data after
// its last whole block, the ESN trailer and the padding. It returns how many
// blocks that is.
func fillTail(tail *[2 * BlockSize]byte, j *Job) int {
	whole := len(j.Data) &^ (BlockSize - 1)
	t := copy(tail[:], j.Data[whole:])
	msgLen := BlockSize + len(j.Data)
	if j.ESN {
		binary.BigEndian.PutUint32(tail[t:], j.SeqHi)
		t += 4
		msgLen += 4
	}
	tail[t] = 0x80
	t++
	n := 1
	if t > BlockSize-8 {
		n = 2
	}
	end := n * BlockSize
	clear(tail[t : end-8])
	binary.BigEndian.PutUint64(tail[end-8:end], uint64(msgLen)*8)
	return n
}

// fillOuter writes the outer message's one block: the inner digest h and
// the padding.
func fillOuter(outer *[BlockSize]byte, h *[8]uint32, size int) {
	for i := range size / 4 {
		binary.BigEndian.PutUint32(outer[4*i:], h[i])
	}
	outer[size] = 0x80
	clear(outer[size+1 : BlockSize-8])
	binary.BigEndian.PutUint64(outer[BlockSize-8:], uint64(BlockSize+size)*8)
}

// putSum writes the digest h, size bytes.
func putSum(sum *[MaxSize]byte, h *[8]uint32, size int) {
	for i := range size / 4 {
		binary.BigEndian.PutUint32(sum[4*i:], h[i])
	}
}

func checkJob(j *Job) error {
	switch {
	case j.Key == nil:
		return errors.New("no key")
	case j.Key.hash != SHA1 && j.Key.hash != SHA256:
		return errors.New("key not initialised (use NewKey or Init)")
	case j.Sum == nil:
		return errors.New("no place for the sum")
	}
	return nil
}

// Macer runs batches of HMACs as parallel lanes. Its zero value is ready to
// use; reuse one per goroutine. It is not safe for concurrent use.
type Macer struct {
	lanes [Lanes]lane
	used  int // lanes that may hold references to drop
	x8    x8
	// packed marks the lanes whose state is in x8.h rather than their own.
	packed [Lanes]bool
}

// MACBatch computes every job's HMAC, Lanes at a time. Jobs may differ in
// length, key and hash. It checks every job before it hashes any.
func (m *Macer) MACBatch(jobs []Job) error {
	has := [SHA256 + 1]bool{}
	for i := range jobs {
		if err := checkJob(&jobs[i]); err != nil {
			return fmt.Errorf("sha: HMAC batch: job %d of %d: %w", i, len(jobs), err)
		}
		has[jobs[i].Key.hash] = true
	}
	m.batch(jobs, has, best)
	return nil
}

// batch runs the jobs on kernel kern, each hash that has jobs as its own set
// of lanes.
func (m *Macer) batch(jobs []Job, has [SHA256 + 1]bool, kern kernel) {
	for _, h := range [...]Hash{SHA1, SHA256} {
		if has[h] {
			m.run(jobs, h, kern)
		}
	}
	// Drop the references to the caller's jobs and buffers.
	for i := range m.used {
		m.lanes[i].job, m.lanes[i].p = nil, nil
	}
	clear(m.x8.p[:])
	m.used = 0
}

// run is the job manager for the jobs under hash h: it fills the lanes,
// runs the kernel for as many blocks as the shortest busy lane's segment
// has, moves lanes whose segment is done on to their next segment or job,
// until every job is done. With at least wideMin busy lanes (SHA-1 on the
// eight-lane kernel) all lanes step together; fewer run in pairs on the
// two-stream kernel, an odd one alone.
func (m *Macer) run(jobs []Job, h Hash, kern kernel) {
	var active [Lanes]bool
	lanes := 2
	if kern == kernelX8 && h == SHA1 {
		lanes = Lanes
	}
	m.used = max(m.used, lanes)
	clear(m.packed[:])
	next := 0
	for {
		var busy [Lanes]int
		nb := 0
		for i := range lanes {
			for !active[i] && next < len(jobs) {
				j := &jobs[next]
				next++
				if j.Key.hash == h {
					active[i] = m.lanes[i].start(j)
				}
			}
			if active[i] {
				busy[nb] = i
				nb++
			}
		}
		switch {
		case nb == 0:
			return
		case nb >= wideMin:
			m.step8(busy[:nb], &active)
			continue
		}
		for _, i := range busy[:nb] {
			m.unpack(i)
		}
		for k := 0; k+1 < nb; k += 2 {
			a, b := &m.lanes[busy[k]], &m.lanes[busy[k+1]]
			n := min(a.n, b.n)
			blocks2(h, kern, &a.h, &b.h, a.p, b.p, n)
			active[busy[k]], active[busy[k+1]] = a.advance(n), b.advance(n)
		}
		if nb%2 == 1 {
			l := &m.lanes[busy[nb-1]]
			blocks(h, kern, &l.h, l.p, l.n)
			active[busy[nb-1]] = l.advance(l.n)
		}
	}
}

// step8 runs the busy lanes (SHA-1) on the eight-lane kernel for as many
// blocks as the shortest segment among them has. A lane's state stays in
// the kernel's transposed layout from step to step (packed) until its
// segment ends; idle lanes repeat a busy lane's input, their results
// dropped.
func (m *Macer) step8(busy []int, active *[Lanes]bool) {
	x := &m.x8
	n := int(^uint(0) >> 1)
	for _, i := range busy {
		n = min(n, m.lanes[i].n)
	}
	for _, i := range busy {
		l := &m.lanes[i]
		if !m.packed[i] {
			for w := range 5 {
				x.h[w][i] = l.h[w]
			}
			m.packed[i] = true
		}
		x.p[i] = l.p
	}
	for l := range Lanes {
		if !active[l] {
			x.p[l] = x.p[busy[0]]
			m.packed[l] = false
		}
	}
	sha1x8(x, n)
	for _, i := range busy {
		l := &m.lanes[i]
		if l.n == n {
			m.unpack(i)
		}
		active[i] = l.advance(n)
	}
}

// unpack moves lane i's state out of the kernel's layout, if it is there.
func (m *Macer) unpack(i int) {
	if !m.packed[i] {
		return
	}
	for w := range 5 {
		m.lanes[i].h[w] = m.x8.h[w][i]
	}
	m.packed[i] = false
}

// The segments of a job's message, in order.
const (
	segBody  = iota // the data's whole blocks, in place
	segTail         // the rest of the data, the ESN trailer and the padding
	segOuter        // the inner digest with the padding, from the outer state
)

// lane is one stream: its hash state and where the next blocks are. What a
// finished job leaves in it is not secret: the data's last bytes, the inner
// digest and the MAC (the key's states are never left there: each is
// advanced by at least a block).
type lane struct {
	h   [8]uint32
	p   *byte
	n   int // blocks left at p
	seg int
	job *Job
	// tail holds segTail (at most two blocks: 63 bytes of data, 4 of
	// trailer and 9 of padding), outer segOuter.
	tail  [2 * BlockSize]byte
	outer [BlockSize]byte
}

// start puts j in the lane at its first segment with blocks and reports
// true: every job has at least a tail and an outer block.
func (l *lane) start(j *Job) bool {
	l.job, l.h, l.seg = j, j.Key.inner, segBody
	l.n = len(j.Data) / BlockSize
	if l.n == 0 {
		return l.next()
	}
	l.p = &j.Data[0]
	return true
}

// advance records that the kernel has run n blocks of the lane and reports
// whether the lane still holds a job.
func (l *lane) advance(n int) bool {
	if l.n -= n; l.n > 0 {
		l.p = (*byte)(unsafe.Add(unsafe.Pointer(l.p), n*BlockSize))
		return true
	}
	return l.next()
}

// next moves the lane on from a finished segment and reports whether the
// job has one more; after the last it writes the job's sum.
func (l *lane) next() bool {
	j := l.job
	size := j.Key.hash.Size()
	switch l.seg {
	case segBody:
		l.seg, l.p, l.n = segTail, &l.tail[0], fillTail(&l.tail, j)
		return true
	case segTail:
		fillOuter(&l.outer, &l.h, size)
		l.h = j.Key.outer
		l.seg, l.p, l.n = segOuter, &l.outer[0], 1
		return true
	}
	putSum(j.Sum, &l.h, size)
	l.job, l.p = nil, nil
	return false
}

// kernel names an implementation of the compression functions.
type kernel uint8

const (
	kernelGo    kernel = iota // in Go
	kernelSHANI               // the SHA extensions, two streams interleaved
	kernelX8                  // kernelSHANI, and SHA-1 on eight lanes with AVX-512
)

var kernelNames = [...]string{kernelGo: "go", kernelSHANI: "sha-ni", kernelX8: "sha-ni+avx512-x8"}

func (k kernel) String() string { return kernelNames[k] }

// Accelerated reports whether this CPU and build run the assembly rather
// than the pure-Go fallback.
func Accelerated() bool { return best != kernelGo }

// Implementation names what runs the compressions: "sha-ni+avx512-x8",
// "sha-ni" or "go".
func Implementation() string { return best.String() }

// blocks runs n blocks of one stream.
func blocks(h Hash, kern kernel, st *[8]uint32, p *byte, n int) {
	switch {
	case kern == kernelGo && h == SHA1:
		sha1BlocksGo(st, p, n)
	case kern == kernelGo:
		sha256BlocksGo(st, p, n)
	case h == SHA1:
		sha1Blocks(st, p, n)
	default:
		sha256Blocks(st, p, n)
	}
}

// blocks2 runs n blocks of two streams.
func blocks2(h Hash, kern kernel, st0, st1 *[8]uint32, p0, p1 *byte, n int) {
	switch {
	case kern == kernelGo:
		blocks(h, kern, st0, p0, n)
		blocks(h, kern, st1, p1, n)
	case h == SHA1:
		sha1Blocks2(st0, st1, p0, p1, n)
	default:
		sha256Blocks2(st0, st1, p0, p1, n)
	}
}
