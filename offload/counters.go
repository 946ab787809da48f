package offload

import "sync/atomic"

// Counters are the counters every engine keeps about the batches it
// completes. Engines embed them and call Count once per batch.
type Counters struct {
	ops, bytes, batches, errors, badICV atomic.Uint64
}

// Count tallies a completed batch: its ops, bytes and failures by status.
func (c *Counters) Count(b *Batch) {
	var n, bad, failed uint64
	for i := range b.Ops {
		op := &b.Ops[i]
		n += uint64(len(op.Packet))
		switch op.Status {
		case OK:
		case BadICV:
			bad++
		default:
			failed++
		}
	}
	c.ops.Add(uint64(len(b.Ops)))
	c.bytes.Add(n)
	c.batches.Add(1)
	if bad != 0 {
		c.badICV.Add(bad)
	}
	if failed != 0 {
		c.errors.Add(failed)
	}
}

// Stats returns the counts as Stats; engines add their own fields.
func (c *Counters) Stats() Stats {
	return Stats{
		Ops: c.ops.Load(), Bytes: c.bytes.Load(), Batches: c.batches.Load(),
		Errors: c.errors.Load(), BadICV: c.badICV.Load(),
	}
}
