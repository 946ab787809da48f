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
	waiter *offload.Waiter
	ops    []*offload.Op // the Ops of the packets going to the engine
}

// NewProcessor returns a Processor for batches on engine.
func NewProcessor(engine offload.Engine) *Processor {
	return &Processor{waiter: offload.NewWaiter(engine)}
}

// Seal seals every packet with its p.SA, which the caller sets. Packets that
// did not come out have p.Drop set and are counted on their SA.
func (pr *Processor) Seal(ctx context.Context, pkts []*Packet) error {
	pr.ops = pr.ops[:0]
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
	pr.ops = pr.ops[:0]
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

func (pr *Processor) add(p *Packet) { pr.ops = append(pr.ops, &p.Op) }

func (pr *Processor) run(ctx context.Context) error {
	err := pr.waiter.Run(ctx, pr.ops) // ops it could not run come back Failed
	clear(pr.ops)                     // hold no packets between batches
	return err
}
