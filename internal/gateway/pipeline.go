package gateway

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
)

// The data path, one pipeline per direction (pipeline.run): a reader fills a
// batch, the engine works it — on the reader when it is small and nothing is
// in flight, on a worker otherwise — and a writer finishes the batches in
// the order read.
//
// Outbound, TUN to wire (outbound.go):
//
//  1. readTUN reads inner packets from the TUN device, and those queued
//     behind them, into one batch.
//  2. route finds each packet's SA by the SPD, with the tables held once
//     for the batch; a packet without one is counted and left out.
//  3. setOuter decides the outer header (TOS, TTL, DF) on the packet; one
//     too big for the path MTU is answered with ICMP or sent in fragments.
//  4. PrepareSeal takes the sequence number and frames the ESP packet
//     (header, IV, padding, trailer) around the inner one, filling its op.
//  5. The engine encrypts and computes the ICVs of the batch's ops
//     (offload.Waiter).
//  6. sendESP, in read order: FinishSeal counts each packet on its SA, and
//     the ESP packets go out, one Send per outer connection in turn.
//
// Inbound, wire to TUN (inbound.go), one pipeline per outer connection:
//
//  1. readESP receives ESP packets from the connection into one batch.
//  2. The SAD (sa.Index) finds each packet's SA by SPI, destination,
//     encapsulation and source; a packet without one is counted and left
//     out.
//  3. PrepareOpen checks length, lifetime and the replay window before any
//     crypto and infers the ESN high bits, filling the packet's op.
//  4. The engine checks the ICVs and decrypts the batch's ops.
//  5. writeTUN, in read order: FinishOpen takes the engine's verdict,
//     updates the replay window and unframes the inner packet; RFC 6040
//     folds the outer ECN into it; the inner packets go to the TUN device
//     in one write.

// Buffer sizes bound the gateway's memory. TUN reads with offloads split
// GSO super-packets into MTU-sized segments, so an outbound buffer holds one
// inner packet with the ESP framing around it. Inbound buffers are larger:
// GRO coalesces consecutive segments of a flow into the capacity of the
// first one's buffer before writing them to the TUN, one write for many.
const (
	outboundSlack = 1024 // TFC padding beyond the framing
	inboundBuf    = 16 << 10
)

// tunOffset is where inner packets sit when written to the TUN device: the
// room its virtio-net header needs in front of them.
const tunOffset = 16

// batch is the unit of work of the pipelines: packets read together, framed
// together, sent to the engine as one offload.Batch, and written out
// together, in order. One esp.Packet carries each packet from the read to
// the write: its SA (nil when it was dropped before the engine, counted),
// its outer header, its engine op. Batches are recycled; nothing in them is
// allocated per packet.
type batch struct {
	pkts []esp.Packet
	// ptrs is the batch in order: packet i is ptrs[i]. Receive reorders
	// it (the ESP packets first); outbound it stays &pkts[i].
	ptrs []*esp.Packet
	n    int
	// bufs and sizes are the TUN device's read vectors: bufs[i] is
	// pkts[i].Buf, sizes[i] what the read put there.
	bufs  [][]byte
	sizes []int

	ops []*offload.Op // the Ops of the packets going to the engine
	run *offload.Waiter

	sendq []*esp.Packet // sealed packets to send, per connection in turn
	out   [][]byte      // inner packets to write to the TUN
}

func newBatch(engine offload.Engine, size, bufSize int) *batch {
	b := &batch{
		run:   offload.NewWaiter(engine),
		bufs:  make([][]byte, size),
		sizes: make([]int, size),
		pkts:  make([]esp.Packet, size),
		ops:   make([]*offload.Op, 0, size),
		ptrs:  make([]*esp.Packet, size),
		sendq: make([]*esp.Packet, 0, size),
		out:   make([][]byte, 0, size),
	}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, bufSize)
		b.pkts[i].Buf = b.bufs[i]
		b.ptrs[i] = &b.pkts[i]
	}
	return b
}

func (b *batch) reset() {
	b.n = 0
	clear(b.ops)
	clear(b.sendq[:cap(b.sendq)])
	b.ops, b.out, b.sendq = b.ops[:0], b.out[:0], b.sendq[:0]
}

// queue packet i's op for the engine.
func (b *batch) queue(i int) { b.ops = append(b.ops, &b.ptrs[i].Op) }

// pipeline runs one direction: a reader fills batches, workers hand them to
// the engine in parallel, and a writer finishes them in the order read —
// wireguard-go's send pipeline, with the engine in the middle.
//
// A small batch read while nothing is in flight is run to completion on the
// reader instead, when the engine works inline: every hand-off between
// goroutines is a wake-up, and at a few packets per batch the wake-ups, not
// the crypto, are what a packet costs (and what its latency is made of).
// Large batches, and every batch while others are in flight, still go
// through the workers, so bulk traffic keeps its parallel crypto — except
// on a small machine, where every batch runs on its reader (SmallMachine).
type pipeline struct {
	free  chan *batch
	work  chan *batch
	order chan *batch

	// inlineMax is the largest batch (in ops) the reader runs itself; 0
	// when the engine completes asynchronously (is not offload.Inline).
	inlineMax int
	// inflight counts batches handed to the workers and not yet finished.
	inflight atomic.Int32
	// sizes counts the batches handed to the engine by size.
	sizes *BatchSizes
}

func newPipeline(engine offload.Engine, sizes *BatchSizes, batches, size, bufSize, inlineMax int) *pipeline {
	if _, ok := engine.(offload.Inline); !ok {
		inlineMax = 0
	}
	p := &pipeline{
		free:      make(chan *batch, batches),
		work:      make(chan *batch, batches),
		order:     make(chan *batch, batches),
		inlineMax: inlineMax,
		sizes:     sizes,
	}
	for range batches {
		p.free <- newBatch(engine, size, bufSize)
	}
	return p
}

// run drives the pipeline until fill fails or ctx ends. fill reads into a
// batch and queues its ops; finish judges and writes a completed batch.
func (p *pipeline) run(ctx context.Context, workers int, fill func(*batch) error, finish func(*batch)) error {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range p.work {
				b.run.Start(ctx, b.ops) // failed ops are counted in finish
			}
		}()
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for b := range p.order {
			b.run.Wait()
			finish(b)
			p.inflight.Add(-1)
			b.reset()
			p.free <- b
		}
	}()

	var err error
	for err == nil {
		var b *batch
		select {
		case <-ctx.Done():
		case b = <-p.free:
		}
		if b == nil {
			break
		}
		if err = fill(b); err != nil {
			p.free <- b
			break
		}
		if len(b.ops) > 0 {
			p.sizes.add(len(b.ops))
		}
		// With nothing in flight the writer is idle, so finishing here
		// keeps the order and never runs finish twice at once.
		if len(b.ops) <= p.inlineMax && p.inflight.Load() == 0 {
			b.run.Run(ctx, b.ops) // failed ops are counted in finish
			finish(b)
			b.reset()
			p.free <- b
			continue
		}
		p.inflight.Add(1)
		p.order <- b
		p.work <- b
	}
	close(p.work)
	wg.Wait()
	close(p.order)
	<-writerDone
	return err
}
