package gateway

import (
	"math"
	"testing"
)

// On two CPUs or fewer every batch runs on its reader by default (no idle
// CPU for the workers' crypto, only their hand-offs); above, batches up to
// DefaultInline do.
func TestDefaultInlineBySize(t *testing.T) {
	for _, tc := range []struct{ procs, want int }{
		{1, math.MaxInt32},
		{SmallMachine, math.MaxInt32},
		{SmallMachine + 1, DefaultInline},
		{64, DefaultInline},
	} {
		if got := defaultInline(tc.procs); got != tc.want {
			t.Errorf("defaultInline(%d) = %d, want %d", tc.procs, got, tc.want)
		}
	}
}
