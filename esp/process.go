package esp

import (
	"context"
	"fmt"

	"github.com/espgw/espgw/offload"
)

// Processor seals and opens batches of packets through one engine and waits
// for the results. It belongs to one goroutine and reuses its buffers, so a
// batch allocates nothing.
type Processor struct {
	engine offload.Engine
	waiter *offload.Waiter
	ops    []offload.Op
	owner  []*Packet
}

// NewProcessor returns a Processor for batches on engine.
func NewProcessor(engine offload.Engine) *Processor {
	return &Processor{engine: engine, waiter: offload.NewWaiter()}
}

// Seal seals every packet with its p.SA, which the caller sets. Packets that
// did not come out have p.Drop set and are counted on their SA.
func (pr *Processor) Seal(ctx context.Context, pkts []*Packet) error {
	pr.ops, pr.owner = pr.ops[:0], pr.owner[:0]
	for _, p := range pkts {
		if p.SA == nil {
			return fmt.Errorf("seal: packet without an SA")
		}
		if p.SA.PrepareSeal(p) == OK {
			pr.add(p)
		}
	}
	err := pr.run(ctx)
	for _, p := range pkts {
		p.SA.FinishSeal(p)
	}
	if err != nil {
		return fmt.Errorf("seal batch: %w", err)
	}
	return nil
}

// Open opens every ESP packet with its p.SA, which the caller found by SPI.
// Packets that did not come out have p.Drop set and are counted on their SA.
func (pr *Processor) Open(ctx context.Context, pkts []*Packet) error {
	pr.ops, pr.owner = pr.ops[:0], pr.owner[:0]
	for _, p := range pkts {
		if p.SA == nil {
			return fmt.Errorf("open: packet without an SA")
		}
		if p.SA.PrepareOpen(p) == OK {
			pr.add(p)
		}
	}
	err := pr.run(ctx)
	for _, p := range pkts {
		p.SA.FinishOpen(p)
	}
	if err != nil {
		return fmt.Errorf("open batch: %w", err)
	}
	return nil
}

func (pr *Processor) add(p *Packet) {
	pr.ops = append(pr.ops, p.Op)
	pr.owner = append(pr.owner, p)
}

func (pr *Processor) run(ctx context.Context) error {
	if err := pr.waiter.Run(ctx, pr.engine, pr.ops); err != nil {
		for _, p := range pr.owner {
			p.Op.Status = offload.Failed
		}
		return err
	}
	for i, p := range pr.owner {
		p.Op.Status = pr.ops[i].Status
	}
	return nil
}
