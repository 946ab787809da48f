package cbc

import (
	"fmt"
	"unsafe"
)

// Lanes is how many buffers the multi-buffer kernel keeps in flight.
//
// With AES-NI alone, eight XMM registers at one AESENC each per round keep
// the AES unit busy while each chain waits out its latency. With VAES the
// eight lanes run as four pairs in YMM registers, two lanes per VAESENC, so
// a step is bound by one chain's latency rather than by 88 instructions.
// Sixteen lanes gain only at 16 small buffers and lose at large ones (16
// streams at one page offset overflow the 8-way L1 sets), and a gateway's
// batches are rarely 16 packets of one SA.
const Lanes = 8

// lanes is the state the multi-buffer kernel works on: per lane, where the
// next block is read and written, the key, and the chaining value. The
// assembly reads in, out and keys at fixed offsets and writes only iv.
type lanes struct {
	in   [Lanes]*byte
	out  [Lanes]*byte
	keys [Lanes]*Key // the kernel reads the encryption schedule at offset 0
	iv   [Lanes][BlockSize]byte
	// pair points, for the VAES kernel, at the paired schedule of lanes 2p
	// and 2p+1: the key's enc2 when both lanes use one key, else pairBuf[p].
	pair    [Lanes / 2]*byte
	pairBuf [Lanes / 2][(maxRounds + 1) * 2 * BlockSize]byte
	// active marks lanes holding a job. The assembly runs every lane (idle
	// lanes repeat a busy one, harmlessly); the Go kernel skips idle ones.
	active [Lanes]bool
	// pairBufUsed says pairBuf holds round keys to wipe.
	pairBufUsed bool
}

// Encrypter runs batches of CBC encryptions as parallel lanes. Its zero value
// is ready to use; reuse one per goroutine, so that the lane state is not
// set up again for every batch. It is not safe for concurrent use.
type Encrypter struct {
	st lanes
}

// EncryptBatch encrypts every job, up to Lanes of them at a time in
// parallel. Jobs may differ in length, key and key size. It checks
// every job before it encrypts any, so on error nothing has been written.
func (e *Encrypter) EncryptBatch(jobs []Job) error {
	for i := range jobs {
		j := &jobs[i]
		if err := checkBuffers(j.Key, j.IV, j.Dst, j.Src); err != nil {
			return fmt.Errorf("cbc encrypt batch: job %d of %d: %w", i, len(jobs), err)
		}
	}
	e.encryptBatch(jobs, best)
	return nil
}

// encryptBatch is the job manager: it fills the lanes with jobs, runs the
// kernel for as many blocks as the shortest job still needs, retires the jobs
// that finish and refills their lanes, until every job is done. A kernel call
// needs one round count, so each key size runs as its own set of lanes.
func (e *Encrypter) encryptBatch(jobs []Job, kern kernel) {
	first := -1
	mixed := false
	for i := range jobs {
		if len(jobs[i].Src) == 0 {
			continue
		}
		if first < 0 {
			first = i
		} else if jobs[i].Key.rounds != jobs[first].Key.rounds {
			mixed = true
			break
		}
	}
	switch {
	case first < 0:
	case len(jobs) == 1:
		// One buffer is one stream: the single-stream loop, without the
		// lanes' setup.
		j := &jobs[0]
		encrypt(j.Key, j.IV, j.Dst, j.Src, kern)
	case !mixed && kern != kernelGo && e.runEqual(jobs, kern):
	case !mixed:
		e.runLanes(jobs[first:], jobs[first].Key.rounds, kern)
	default:
		for _, rounds := range [...]int{10, 12, 14} {
			e.runLanes(jobs[first:], rounds, kern)
		}
	}
	// Drop the references to the caller's buffers and keys.
	clear(e.st.in[:])
	clear(e.st.out[:])
	clear(e.st.keys[:])
	clear(e.st.pair[:])
	if e.st.pairBufUsed {
		// Key material does not outlive the batch.
		clear(e.st.pairBuf[:])
		e.st.pairBufUsed = false
	}
}

// runEqual runs the commonest batch — at most Lanes jobs of one length
// under keys of one size, as a burst of equal packets gives — in a single
// kernel call, without the scheduler's bookkeeping: for short packets that
// bookkeeping costs more than the AES. It reports false, having done
// nothing, for any other batch.
func (e *Encrypter) runEqual(jobs []Job, kern kernel) bool {
	n := len(jobs)
	if n < 2 || n > Lanes {
		return false
	}
	size := len(jobs[0].Src)
	for i := 1; i < n; i++ {
		if len(jobs[i].Src) != size {
			return false
		}
	}
	st := &e.st
	for l := range Lanes {
		// Idle lanes repeat the last job: the same block, key and chaining
		// value give the same output to the same place.
		j := &jobs[min(l, n-1)]
		st.in[l], st.out[l], st.keys[l], st.iv[l] = &j.Src[0], &j.Dst[0], j.Key, *j.IV
	}
	st.encrypt(kern, jobs[0].Key.rounds, size/BlockSize)
	return true
}

// encrypt runs kernel kern for blocks blocks of every lane.
func (st *lanes) encrypt(kern kernel, rounds, blocks int) {
	switch {
	case kern >= kernelVAES:
		st.pairSchedules(rounds)
		encryptLanesVAES(st, rounds, blocks)
	case kern >= kernelAVX:
		encryptLanesAVX(st, rounds, blocks)
	case kern == kernelXMM:
		encryptLanesAsm(st, rounds, blocks)
	default:
		encryptLanesGeneric(st, blocks)
	}
}

func (e *Encrypter) runLanes(jobs []Job, rounds int, kern kernel) {
	var (
		st   = &e.st
		job  [Lanes]int // index into jobs of each lane's job
		off  [Lanes]int // bytes of that job done
		next int        // next job to consider
	)
	clear(st.active[:])
	for {
		busy, first := 0, -1
		for l := 0; l < Lanes; l++ {
			if !st.active[l] {
				for next < len(jobs) && (jobs[next].Key.rounds != rounds || len(jobs[next].Src) == 0) {
					next++
				}
				if next < len(jobs) {
					j := &jobs[next]
					st.active[l], job[l], off[l] = true, next, 0
					st.keys[l], st.iv[l] = j.Key, *j.IV
					next++
				}
			}
			if st.active[l] {
				busy++
				if first < 0 {
					first = l
				}
			}
		}
		switch {
		case busy == 0:
			return
		case busy == 1 && kern != kernelGo:
			// The last job runs alone: the single-stream kernel is as fast
			// and reads no idle lanes.
			j, o := &jobs[job[first]], off[first]
			encryptBlocksAsm(&j.Key.enc[0], rounds, &st.iv[first], &j.Dst[o], &j.Src[o], (len(j.Src)-o)/BlockSize)
			st.active[first] = false
			continue
		}
		blocks := int(^uint(0) >> 1)
		for l := 0; l < Lanes; l++ {
			if st.active[l] {
				j := &jobs[job[l]]
				blocks = min(blocks, (len(j.Src)-off[l])/BlockSize)
				st.in[l], st.out[l] = &j.Src[off[l]], &j.Dst[off[l]]
			}
		}
		if kern != kernelGo {
			for l := 0; l < Lanes; l++ {
				if !st.active[l] {
					// Repeat a busy lane: the same input, key and chaining
					// value give the same output to the same place, and the
					// kernel loads every lane's block before it stores any.
					st.in[l], st.out[l], st.keys[l], st.iv[l] = st.in[first], st.out[first], st.keys[first], st.iv[first]
				}
			}
		}
		st.encrypt(kern, rounds, blocks)
		for l := 0; l < Lanes; l++ {
			if st.active[l] {
				off[l] += blocks * BlockSize
				if off[l] == len(jobs[job[l]].Src) {
					st.active[l] = false
				}
			}
		}
	}
}

// pairSchedules points each lane pair at a schedule of 32-byte round-key
// pairs: the shared key's enc2 (the common case: one SA's packets), or the
// two schedules interleaved into pairBuf.
func (st *lanes) pairSchedules(rounds int) {
	for p := range st.pair {
		lo, hi := st.keys[2*p], st.keys[2*p+1]
		if lo == hi {
			st.pair[p] = &lo.enc2[0]
			continue
		}
		buf := &st.pairBuf[p]
		st.pairBufUsed = true
		for r := 0; r <= rounds; r++ {
			copy(buf[2*r*BlockSize:(2*r+1)*BlockSize], lo.enc[r*BlockSize:])
			copy(buf[(2*r+1)*BlockSize:(2*r+2)*BlockSize], hi.enc[r*BlockSize:])
		}
		st.pair[p] = &buf[0]
	}
}

// encryptLanesGeneric is the kernel in Go: blocks blocks of every busy lane,
// with the standard library's block cipher.
func encryptLanesGeneric(st *lanes, blocks int) {
	for l := 0; l < Lanes; l++ {
		if !st.active[l] {
			continue
		}
		in := unsafe.Slice(st.in[l], blocks*BlockSize)
		out := unsafe.Slice(st.out[l], blocks*BlockSize)
		prev := st.iv[l][:]
		for i := 0; i < len(in); i += BlockSize {
			c := out[i : i+BlockSize]
			for b := range c {
				c[b] = in[i+b] ^ prev[b]
			}
			st.keys[l].block.Encrypt(c, c)
			prev = c
		}
		copy(st.iv[l][:], prev)
	}
}
