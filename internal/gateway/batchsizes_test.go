package gateway

import (
	"reflect"
	"testing"
)

// BatchSizes puts each batch in its power-of-two class and keeps the mean.
func TestBatchSizes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		want  BatchStats
		hist  map[float64]uint64
	}{
		{"none", nil, BatchStats{}, map[float64]uint64{1: 0, 3: 0, 7: 0, 15: 0, 31: 0, 63: 0, 127: 0}},
		{"ones", []int{1, 1, 1}, BatchStats{Batches: 3, Ops: 3, Mean: 1, Sizes: []BatchBucket{{1, 1, 3}}},
			map[float64]uint64{1: 3, 3: 3, 7: 3, 15: 3, 31: 3, 63: 3, 127: 3}},
		{"edges", []int{2, 3, 4, 7, 8, 64, 127, 128, 1000},
			BatchStats{Batches: 9, Ops: 1343, Mean: 1343.0 / 9, Sizes: []BatchBucket{{2, 3, 2}, {4, 7, 2}, {8, 15, 1}, {64, 127, 2}, {128, 0, 2}}},
			map[float64]uint64{1: 0, 3: 2, 7: 4, 15: 5, 31: 5, 63: 5, 127: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b BatchSizes
			for _, n := range tc.sizes {
				b.add(n)
			}
			got := b.Snapshot()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Snapshot = %+v, want %+v", got, tc.want)
			}
			if h := got.cumulative(); !reflect.DeepEqual(h, tc.hist) {
				t.Errorf("cumulative = %v, want %v", h, tc.hist)
			}
		})
	}
}
