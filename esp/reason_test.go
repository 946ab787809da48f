package esp

import "testing"

func TestFormatCounts(t *testing.T) {
	for _, tc := range []struct {
		counts map[string]uint64
		want   string
	}{
		{nil, "none"},
		{map[string]uint64{}, "none"},
		{map[string]uint64{"replay": 2}, "replay=2"},
		{map[string]uint64{"replay": 2, "bad-icv": 1, "unknown-spi": 30}, "bad-icv=1 replay=2 unknown-spi=30"},
	} {
		if got := FormatCounts(tc.counts); got != tc.want {
			t.Errorf("FormatCounts(%v) = %q, want %q", tc.counts, got, tc.want)
		}
	}
}
