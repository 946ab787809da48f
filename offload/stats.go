package offload

// Plus is the counters of two engines (or two runs of one) together: the
// counts summed, the maxima the larger.
func (s Stats) Plus(o Stats) Stats {
	return Stats{
		Ops: s.Ops + o.Ops, Bytes: s.Bytes + o.Bytes, Batches: s.Batches + o.Batches, Records: s.Records + o.Records,
		Interrupts: s.Interrupts + o.Interrupts, Doorbells: s.Doorbells + o.Doorbells, Completions: s.Completions + o.Completions,
		QueueFull: s.QueueFull + o.QueueFull, MCRFull: s.MCRFull + o.MCRFull,
		MaxBatch: max(s.MaxBatch, o.MaxBatch), MaxQueue: max(s.MaxQueue, o.MaxQueue),
		Errors: s.Errors + o.Errors, BadICV: s.BadICV + o.BadICV, QueueDepth: s.QueueDepth + o.QueueDepth,
	}
}
