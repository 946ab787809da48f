package bench

import (
	"context"
	"fmt"
	"time"
)

// Trial offers a load at rate packets per second for a fixed time and
// reports the fraction of it that was lost.
type Trial func(ctx context.Context, rate float64) (loss float64, err error)

// Attempt is one trial the search ran.
type Attempt struct {
	Rate float64 `json:"rate_pps"`
	Loss float64 `json:"loss"`
}

// Searcher finds, RFC 2544 style, the highest rate whose loss stays at or
// below a threshold, by binary search between 0 and Max. Every trial is
// kept, so a second search (the partial-drop rate after the zero-loss rate)
// starts from what the first one learnt.
//
// On a shared machine a trial can lose packets because a forwarding thread
// did not get a CPU for a few milliseconds, not because the rate is too
// high, and one such trial sends a binary search far below the path's
// rate. So a trial over the threshold is run again, up to Retries times,
// before its rate counts as lossy: a rate's loss is the least of its
// trials' (a path that carried the rate once without loss can carry it).
type Searcher struct {
	Max        float64       // highest rate to offer (the generator's own limit)
	Iterations int           // most trials per Find, repeats included
	Retries    int           // repeats of a trial over the threshold before its rate counts as lossy
	Resolution float64       // stop when the bracket is narrower than this fraction of Max
	Budget     time.Duration // most time per Find (0: none)
	Trial      Trial
	History    []Attempt
}

// probeSearch is the search over probe trials of mix, each trial long, up
// to the rate the full-speed trial full offered, which is its first
// attempt: the frame-size rows' and the tunnel counts' searches alike.
func probeSearch(probe *Probe, mix Mix, full TrialResult, trial time.Duration, iterations, retries int) *Searcher {
	return &Searcher{Max: full.SentRate(), Iterations: iterations, Retries: retries, Resolution: 0.01,
		Budget:  time.Duration(iterations) * (trial + drainMax),
		History: []Attempt{{Rate: full.SentRate(), Loss: full.Loss()}},
		Trial: func(ctx context.Context, rate float64) (float64, error) {
			r, err := probe.Run(ctx, mix, rate, trial, false)
			return r.Loss(), err
		}}
}

// Find returns the highest rate seen passing threshold (0 if none did)
// after at most s.Iterations new trials.
func (s *Searcher) Find(ctx context.Context, threshold float64) (float64, error) {
	if s.Max <= 0 {
		return 0, fmt.Errorf("rate search: maximum rate %g must be positive", s.Max)
	}
	start := time.Now()
	for range s.Iterations {
		lo, hi := s.bracket(threshold)
		again, repeat := s.toRepeat(threshold, hi)
		if hi-lo <= s.Resolution*s.Max && !repeat {
			break
		}
		if s.Budget > 0 && time.Since(start) > s.Budget {
			break
		}
		rate := (lo + hi) / 2
		if hi == s.Max && !s.tried(s.Max) {
			rate = s.Max // RFC 2544 starts at the maximum rate
		}
		if repeat {
			rate = again
		}
		loss, err := s.Trial(ctx, rate)
		if err != nil {
			lo, _ = s.bracket(threshold)
			return lo, fmt.Errorf("trial at %.0f pkt/s: %w", rate, err)
		}
		s.History = append(s.History, Attempt{Rate: rate, Loss: loss})
	}
	lo, _ := s.bracket(threshold)
	return lo, nil
}

// toRepeat is the rate that bounds the bracket from above (hi) when its
// trials all failed and it has repeats left: that rate is run again before
// the search moves below it.
func (s *Searcher) toRepeat(threshold, hi float64) (float64, bool) {
	if s.Retries <= 0 || hi == s.Max {
		return 0, false
	}
	n := 0
	for _, a := range s.History {
		if a.Rate == hi {
			if a.Loss <= threshold {
				return 0, false
			}
			n++
		}
	}
	return hi, n > 0 && n <= s.Retries
}

func (s *Searcher) tried(rate float64) bool {
	for _, a := range s.History {
		if a.Rate == rate {
			return true
		}
	}
	return false
}

// bracket is the search interval the history gives: hi is the lowest rate
// that failed (Max if none), lo the highest that passed below hi. Taking lo
// below hi keeps a noisy pass above a fail from ending the search too high.
// A rate failed when every trial of it did (Retries).
func (s *Searcher) bracket(threshold float64) (lo, hi float64) {
	hi = s.Max
	failed := false
	for _, a := range s.History {
		if a.Loss > threshold && a.Rate <= hi && !s.passedOnce(a.Rate, threshold) {
			hi, failed = a.Rate, true
		}
	}
	for _, a := range s.History {
		if a.Loss <= threshold && a.Rate > lo && (a.Rate < hi || !failed && a.Rate <= hi) {
			lo = a.Rate
		}
	}
	if !failed && lo == s.Max {
		return lo, lo
	}
	return lo, hi
}

// passedOnce reports whether some trial at rate stayed within threshold.
func (s *Searcher) passedOnce(rate, threshold float64) bool {
	for _, a := range s.History {
		if a.Rate == rate && a.Loss <= threshold {
			return true
		}
	}
	return false
}
