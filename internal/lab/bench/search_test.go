package bench

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// lossCurve simulates a path with a capacity: below it nothing is lost; a
// little above it, loss grows linearly from a partial-drop shoulder.
func lossCurve(capacity, shoulder float64) Trial {
	return func(_ context.Context, rate float64) (float64, error) {
		switch {
		case rate <= capacity:
			return 0, nil
		case rate <= shoulder:
			return 0.0005 * (rate - capacity) / (shoulder - capacity), nil // under 0.1%
		default:
			return 0.0005 + (rate-shoulder)/rate, nil
		}
	}
}

func TestSearchFindsZeroLossAndPartialRates(t *testing.T) {
	for _, tc := range []struct {
		name               string
		max, cap, shoulder float64
		iterations         int
		wantZero, wantPart float64 // within resolution of max
	}{
		{"mid", 100_000, 37_000, 41_000, 12, 37_000, 41_000},
		{"low", 100_000, 3_000, 3_300, 12, 3_000, 3_300},
		{"near max", 100_000, 95_000, 99_000, 12, 95_000, 99_000},
		{"all pass", 50_000, 80_000, 90_000, 12, 50_000, 50_000},
		{"nothing passes", 10_000, 0, 0, 12, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trials := 0
			curve := lossCurve(tc.cap, tc.shoulder)
			s := &Searcher{Max: tc.max, Iterations: tc.iterations, Resolution: 0.01,
				Trial: func(ctx context.Context, r float64) (float64, error) { trials++; return curve(ctx, r) }}
			zero, err := s.Find(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			tol := 0.01 * tc.max
			if zero > tc.wantZero || zero < tc.wantZero-tol {
				t.Errorf("zero-loss rate %.0f, want within %.0f below %.0f", zero, tol, tc.wantZero)
			}
			if l, _ := curve(context.Background(), zero); l != 0 {
				t.Errorf("zero-loss rate %.0f loses %g", zero, l)
			}
			if trials > tc.iterations {
				t.Errorf("%d trials, bound is %d", trials, tc.iterations)
			}
			before := trials
			part, err := s.Find(context.Background(), 0.001)
			if err != nil {
				t.Fatal(err)
			}
			if part < zero {
				t.Errorf("partial-drop rate %.0f below the zero-loss rate %.0f", part, zero)
			}
			if part > tc.wantPart || part < tc.wantPart-tol {
				t.Errorf("partial-drop rate %.0f, want within %.0f below %.0f", part, tol, tc.wantPart)
			}
			if trials-before > tc.iterations {
				t.Errorf("%d partial trials, bound is %d", trials-before, tc.iterations)
			}
		})
	}
}

func TestSearchStartsAtMaxAndStopsAtIterations(t *testing.T) {
	var rates []float64
	s := &Searcher{Max: 1000, Iterations: 3, Resolution: 0.0001,
		Trial: func(_ context.Context, r float64) (float64, error) {
			rates = append(rates, r)
			return lossCurve(123, 124)(nil, r)
		}}
	got, err := s.Find(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1000, 500, 250}
	if len(rates) != len(want) {
		t.Fatalf("trials at %v, want %v", rates, want)
	}
	for i := range want {
		if rates[i] != want[i] {
			t.Fatalf("trials at %v, want %v", rates, want)
		}
	}
	if got != 0 {
		t.Errorf("after three failing trials the rate is %g, want 0", got)
	}
}

func TestSearchUsesHistoryAndBudget(t *testing.T) {
	// A history that already brackets the rate narrowly needs no new trial.
	s := &Searcher{Max: 1000, Iterations: 5, Resolution: 0.01, History: []Attempt{{1000, 0.2}, {500, 0}, {505, 0.1}},
		Trial: func(context.Context, float64) (float64, error) {
			t.Fatal("trial run despite a closed bracket")
			return 0, nil
		}}
	if got, err := s.Find(context.Background(), 0); err != nil || got != 500 {
		t.Errorf("Find = %g, %v; want 500 from history", got, err)
	}
	// An exhausted budget stops the search after the trial in progress.
	n := 0
	s = &Searcher{Max: 1000, Iterations: 50, Resolution: 1e-9, Budget: 30 * time.Millisecond,
		Trial: func(_ context.Context, r float64) (float64, error) {
			n++
			time.Sleep(20 * time.Millisecond)
			return lossCurve(400, 401)(nil, r)
		}}
	s.Find(context.Background(), 0)
	if n > 3 {
		t.Errorf("%d trials in a 30 ms budget of 20 ms trials", n)
	}
}

func TestSearchNoisyPassAboveFailDoesNotWin(t *testing.T) {
	// A pass at 800 after a fail at 600 must not be the answer.
	s := &Searcher{Max: 1000, History: []Attempt{{1000, 0.5}, {600, 0.01}, {800, 0}, {300, 0}}}
	lo, hi := s.bracket(0)
	if lo != 300 || hi != 600 {
		t.Errorf("bracket = [%g, %g], want [300, 600]", lo, hi)
	}
}

func TestSearchTrialErrorKeepsBestSoFar(t *testing.T) {
	boom := errors.New("path gone")
	calls := 0
	s := &Searcher{Max: 1000, Iterations: 8, Resolution: 0.01,
		Trial: func(_ context.Context, r float64) (float64, error) {
			calls++
			if calls == 3 {
				return 0, boom
			}
			return lossCurve(700, 701)(nil, r)
		}}
	got, err := s.Find(context.Background(), 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the trial's", err)
	}
	if got != 500 || math.IsNaN(got) {
		t.Errorf("rate after the error = %g, want 500 (the pass before it)", got)
	}
	if _, err := (&Searcher{}).Find(context.Background(), 0); err == nil {
		t.Error("a search with no maximum rate did not fail")
	}
}

func TestSearchRepeatsALossyTrialBeforeCallingItLossy(t *testing.T) {
	// A path of capacity 700 on which every rate's first trial loses a
	// packet (a thread that missed its CPU): without repeats the search
	// ends at 0, with one repeat per failing rate it finds 700.
	for _, tc := range []struct {
		name    string
		retries int
		want    float64
	}{
		{"no repeats", 0, 0},
		{"one repeat", 1, 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[float64]int{}
			s := &Searcher{Max: 1000, Iterations: 40, Retries: tc.retries, Resolution: 0.01,
				Trial: func(_ context.Context, r float64) (float64, error) {
					seen[r]++
					if seen[r] == 1 {
						return 0.01, nil
					}
					return lossCurve(700, 701)(nil, r)
				}}
			got, err := s.Find(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got > tc.want || got < tc.want-10 {
				t.Errorf("zero-loss rate %g, want within 10 below %g (trials %v)", got, tc.want, s.History)
			}
			for r, n := range seen {
				if n > 1+tc.retries {
					t.Errorf("rate %g tried %d times, at most %d", r, n, 1+tc.retries)
				}
			}
		})
	}
}
