package esp

// Window is an anti-replay window (RFC 4303 §3.4.3) kept as a ring of 64-bit
// words, as RFC 6479 describes: advancing the window clears whole words rather
// than shifting the bitmap, so its cost does not grow with the window size.
// The ring is as small as the window allows (a power of two of words, more
// than the window spans): a window of up to 192 packets lives in the SA
// itself, a larger one in a ring of its own. A gateway of 100,000 SAs with
// the default window of 64 holds 32 bytes of bitmap per SA, not the 520 a
// ring sized for the largest window would take.
// It is not safe for concurrent use; the SA guards it.
type Window struct {
	size  uint64 // packets the window accepts behind the highest
	last  uint64 // highest sequence number accepted; 0 before the first
	mask  uint64 // ring words - 1
	small [smallWords]uint64
	big   []uint64 // the ring when it does not fit in small
}

const (
	wordBits   = 64
	smallWords = 4
)

// Reset empties the window and sets its size (1…sa.MaxReplayWindow).
func (w *Window) Reset(size int) {
	// The size bits behind the highest span at most (size-1)/64+2 words;
	// the ring has that many or more, so advancing never clears a word
	// still in the window.
	need := uint64(max(size, 1)-1)/wordBits + 2
	n := uint64(1)
	for n < need {
		n <<= 1
	}
	*w = Window{size: uint64(size), mask: n - 1}
	if n > smallWords {
		w.big = make([]uint64, n)
	}
}

// word is the ring word holding bit seq.
func (w *Window) word(seq uint64) *uint64 {
	// By the ring's size, not by big itself: a small window reads
	// nothing past small.
	if w.mask >= smallWords {
		return &w.big[(seq/wordBits)&w.mask]
	}
	return &w.small[(seq/wordBits)&w.mask]
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
	if *w.word(seq)&(1<<(seq%wordBits)) != 0 {
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
		if next-cur > w.mask {
			clear(w.small[:])
			clear(w.big)
		} else {
			for i := cur + 1; i <= next; i++ {
				*w.word(i * wordBits) = 0
			}
		}
		w.last = seq
	}
	*w.word(seq) |= 1 << (seq % wordBits)
	return OK
}

// Resize changes the window's size, keeping what it saw of the numbers
// the new size still spans.
func (w *Window) Resize(size int) {
	old := *w
	w.Reset(size)
	w.last = old.last
	for n := uint64(0); n < min(old.size, w.size) && n < old.last; n++ {
		seq := old.last - n
		if *old.word(seq)&(1<<(seq%wordBits)) != 0 {
			*w.word(seq) |= 1 << (seq % wordBits)
		}
	}
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
