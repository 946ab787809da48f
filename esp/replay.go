package esp

import "github.com/espgw/espgw/sa"

// Window is an anti-replay window (RFC 4303 §3.4.3) kept as a ring of 64-bit
// words, as RFC 6479 describes: advancing the window clears whole words rather
// than shifting the bitmap, so its cost does not grow with the window size.
// It is not safe for concurrent use; the SA guards it.
type Window struct {
	size  uint64 // packets the window accepts behind the highest
	last  uint64 // highest sequence number accepted; 0 before the first
	words [sa.MaxReplayWindow/64 + 1]uint64
}

const (
	wordBits  = 64
	ringWords = sa.MaxReplayWindow/64 + 1
)

// Reset empties the window and sets its size (1…sa.MaxReplayWindow).
func (w *Window) Reset(size int) {
	*w = Window{size: uint64(size)}
}

// Last returns the highest sequence number accepted.
func (w *Window) Last() uint64 { return w.last }

// Check reports whether seq would be accepted, without recording it.
func (w *Window) Check(seq uint64) Reason {
	if seq == 0 {
		return OutsideWindow
	}
	if seq > w.last {
		return OK
	}
	if w.last-seq >= w.size {
		return OutsideWindow
	}
	idx := (seq / wordBits) % ringWords
	if w.words[idx]&(1<<(seq%wordBits)) != 0 {
		return Replay
	}
	return OK
}

// Accept records seq, which must have passed the ICV check; it returns the
// verdict of Check at the time of recording, since a concurrent packet with
// the same number may have been accepted in between.
func (w *Window) Accept(seq uint64) Reason {
	if r := w.Check(seq); r != OK {
		return r
	}
	if seq > w.last {
		cur := w.last / wordBits
		next := seq / wordBits
		if next-cur >= ringWords {
			w.words = [ringWords]uint64{}
		} else {
			for i := cur + 1; i <= next; i++ {
				w.words[i%ringWords] = 0
			}
		}
		w.last = seq
	}
	w.words[(seq/wordBits)%ringWords] |= 1 << (seq % wordBits)
	return OK
}

// InferSeqHi reconstructs the high 32 bits of a 64-bit ESN from the low bits
// received, the highest number accepted and the window size (RFC 4303
// Appendix A2.2).
func InferSeqHi(last uint64, window uint64, seqLo uint32) uint32 {
	tl := uint32(last)
	th := uint32(last >> 32)
	w := uint32(window)
	if w == 0 {
		w = 1
	}
	if tl >= w-1 { // case A: the window is within one subspace
		if seqLo >= tl-w+1 {
			return th
		}
		return th + 1
	}
	// case B: the window spans two subspaces
	if seqLo >= tl-w+1 { // wraps: tl-w+1 is large
		if th == 0 {
			return 0
		}
		return th - 1
	}
	return th
}
