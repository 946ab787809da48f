package esp

// StartReceiveAfter positions the anti-replay window as if seq were the
// highest sequence number accepted so far, so that the next packets are
// judged, and with ESN their high bits inferred, from there. A receiver calls
// it before the first packet when its peer starts at a configured
// InitialSeq (test beds crossing 2^32), and known-answer tests call it to
// open a published ESN packet whose high bits are far from zero.
func (s *SA) StartReceiveAfter(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.window.Reset(s.windowSize())
	s.window.mark(seq)
}
