package gateway

import (
	"math/bits"
	"sync/atomic"
)

// batchBuckets are the size classes of BatchSizes: 1, 2-3, 4-7, 8-15,
// 16-31, 32-63, 64-127 and 128 ops or more.
const batchBuckets = 8

// BatchSizes counts the batches one direction handed the engine, by the
// number of ops in each: whether packets that arrive together (a TCP
// train, a GSO segment list) reach the engine together.
type BatchSizes struct {
	Ops     atomic.Uint64
	buckets [batchBuckets]atomic.Uint64
}

// add counts a batch of n > 0 ops.
func (b *BatchSizes) add(n int) {
	b.Ops.Add(uint64(n))
	b.buckets[min(bits.Len(uint(n))-1, batchBuckets-1)].Add(1)
}

// BatchStats is a copy of one direction's BatchSizes.
type BatchStats struct {
	Batches uint64  `json:"batches"`
	Ops     uint64  `json:"ops"`
	Mean    float64 `json:"mean"` // ops per batch
	// Sizes are the batches by size class, the empty classes left out.
	Sizes []BatchBucket `json:"sizes,omitempty"`
}

// BatchBucket is the number of batches of Min to Max ops (Max 0: no
// upper bound).
type BatchBucket struct {
	Min     int    `json:"min"`
	Max     int    `json:"max,omitempty"`
	Batches uint64 `json:"batches"`
}

// Snapshot copies the counts.
func (b *BatchSizes) Snapshot() BatchStats {
	var s BatchStats
	s.Ops = b.Ops.Load()
	for k := range b.buckets {
		n := b.buckets[k].Load()
		if n == 0 {
			continue
		}
		lo, hi := 1<<k, 1<<(k+1)-1
		if k == batchBuckets-1 {
			hi = 0
		}
		s.Sizes = append(s.Sizes, BatchBucket{Min: lo, Max: hi, Batches: n})
		s.Batches += n
	}
	if s.Batches > 0 {
		s.Mean = float64(s.Ops) / float64(s.Batches)
	}
	return s
}

// DirectionBatches are the batch sizes of both directions.
type DirectionBatches struct {
	Outbound BatchStats `json:"outbound"` // sealed: TUN to wire
	Inbound  BatchStats `json:"inbound"`  // opened: wire to TUN
}

// cumulative is the size classes as a Prometheus histogram's buckets: the
// batches of at most each class's Max ops.
func (s BatchStats) cumulative() map[float64]uint64 {
	m := make(map[float64]uint64, batchBuckets-1)
	for k := range batchBuckets - 1 {
		m[float64(int(1)<<(k+1)-1)] = 0
	}
	for _, b := range s.Sizes {
		for le := range m {
			if b.Max != 0 && float64(b.Max) <= le {
				m[le] += b.Batches
			}
		}
	}
	return m
}
