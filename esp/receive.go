package esp

// StartReceiveAfter moves the anti-replay window up as if seq had been
// accepted, so that the next packets are judged, and with ESN their high
// bits inferred, from there; what the window saw below stays seen, and a
// seq at or below the highest accepted changes nothing. A receiver calls
// it before the first packet when its peer starts at a configured
// InitialSeq (test beds crossing 2^32), and known-answer tests call it to
// open a published ESN packet whose high bits are far from zero.
func (s *SA) StartReceiveAfter(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq > s.window.Last() {
		s.window.Accept(seq)
	}
}
