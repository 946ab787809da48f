package capture

// Replay sends the packets of a rewritten capture from the two hosts of a
// test bed and checks what arrives at the other end: each packet sent from
// one host must reach the other byte for byte, but for what routers change
// on the way (TTL or hop limit, the IPv4 header checksum, and an IPv4 ID the
// sending kernel filled in for a zero one). It reports packets delivered,
// missing and unexpected (those a host's own stack sent between the
// replay's addresses, such as TCP resets for a replayed flow it has no
// socket for).
//
// Packets leave through raw sockets with the IP header included, so they go
// out as captured; they are watched for with a Sniffer on each host's
// interface.

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/netns"
)

// ReplayHost is one end of a replay: the network namespace it lives in and
// the interface its traffic crosses.
type ReplayHost struct {
	NS        *netns.Namespace
	Interface string
}

// ReplayOptions tune Replay.
type ReplayOptions struct {
	// Linger bounds the wait for packets still on their way after the last
	// one is sent (default 2s); Replay stops waiting as soon as every
	// packet arrived.
	Linger time.Duration
	// Settle, when set, replaces Linger: the wait ends when it returns
	// (say, once a WAN relay holds nothing more).
	Settle func()
}

// ReplayResult is what a replay saw, by the side that sent (index 0 for A, 1 for
// B) or, for Unexpected, the side that received.
type ReplayResult struct {
	Sent       [2]int `json:"sent"`
	Delivered  [2]int `json:"delivered"`
	Missing    [2]int `json:"missing"`
	SendErrors [2]int `json:"send_errors"`
	Unexpected [2]int `json:"unexpected"`
	// MissingPackets are the indexes (into the replayed slice) of the
	// packets that did not arrive, or could not be sent.
	MissingPackets []int         `json:"missing_packets,omitempty"`
	LastSendError  string        `json:"last_send_error,omitempty"`
	Elapsed        time.Duration `json:"elapsed"`
	// Latency is the one-way time from send to arrival of the delivered
	// packets (both hosts share the machine's clock).
	Latency Latency `json:"latency"`
}

// Latency summarizes one-way delays.
type Latency struct {
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

// summarize returns the percentiles of d (nearest rank), sorting it.
func summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	rank := func(p float64) time.Duration { return d[int(math.Ceil(p*float64(len(d))))-1] }
	return Latency{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: d[len(d)-1]}
}

// Replay sends pkts from hosts[A] and hosts[B] at their due times and
// watches both interfaces until every packet arrived or the wait after the
// last send ended. Only packets between the replay's own addresses are
// judged: not the neighbour discovery of the link, nor the ICMP errors
// routers send about the replay.
func Replay(ctx context.Context, pkts []Packet, hosts [2]ReplayHost, opt ReplayOptions) (ReplayResult, error) {
	var res ReplayResult
	opt.Linger = cmp.Or(opt.Linger, 2*time.Second)
	var senders [2]*rawSender
	defer func() {
		for _, e := range senders {
			if e != nil {
				e.close()
			}
		}
	}()
	for i, h := range hosts {
		e, err := newRawSender(h.NS)
		if err != nil {
			return res, fmt.Errorf("replay host %s: %w", Side(i), err)
		}
		senders[i] = e
	}
	// What each side expects to receive: packets by their comparable form.
	var expect [2]map[string][]int
	for i := range expect {
		expect[i] = map[string][]int{}
	}
	outstanding := 0
	ours := map[netip.Addr]bool{}
	for i, p := range pkts {
		src, dst := header.Addrs(p.Data)
		ours[src], ours[dst] = true, true
		to := 1 - int(p.From)
		k := key(p.Data, false)
		expect[to][k] = append(expect[to][k], i)
		outstanding++
	}
	var mu sync.Mutex
	arrived := make([]bool, len(pkts))
	sentAt := make([]time.Time, len(pkts))
	var delays []time.Duration
	allIn := make(chan struct{})
	receive := func(side int, pkt []byte) {
		if src, dst := header.Addrs(pkt); !ours[src] || !ours[dst] {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, zeroID := range []bool{false, true} {
			if idx := expect[side][key(pkt, zeroID)]; len(idx) > 0 {
				arrived[idx[0]] = true
				delays = append(delays, time.Since(sentAt[idx[0]]))
				expect[side][key(pkt, zeroID)] = idx[1:]
				res.Delivered[1-side]++
				if outstanding--; outstanding == 0 {
					close(allIn)
				}
				return
			}
		}
		res.Unexpected[side]++
	}
	var sniffers [2]*Sniffer
	stopWatching := func() {
		for _, s := range sniffers {
			if s != nil {
				s.Stop()
			}
		}
	}
	defer stopWatching()
	for i, h := range hosts {
		s, err := Sniff(h.NS, h.Interface, SniffOptions{}, func(p Sniffed) { receive(i, p.Data) })
		if err != nil {
			return res, fmt.Errorf("replay host %s: %w", Side(i), err)
		}
		sniffers[i] = s
	}

	start := time.Now()
	for i, p := range pkts {
		if d := time.Until(start.Add(p.At)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
		res.Sent[p.From]++
		mu.Lock()
		sentAt[i] = time.Now()
		mu.Unlock()
		if err := senders[p.From].send(p.Data); err != nil {
			mu.Lock()
			res.SendErrors[p.From]++
			res.LastSendError = fmt.Sprintf("packet %d: %v", i, err)
			mu.Unlock()
		}
	}
	settled := make(chan struct{})
	if opt.Settle != nil {
		go func() { opt.Settle(); close(settled) }()
	} else {
		t := time.AfterFunc(opt.Linger, func() { close(settled) })
		defer t.Stop()
	}
	select {
	case <-allIn:
	case <-settled:
	case <-ctx.Done():
	}
	stopWatching()
	res.Elapsed = time.Since(start)
	res.Latency = summarize(delays)
	for i, ok := range arrived {
		if !ok {
			res.Missing[pkts[i].From]++
			res.MissingPackets = append(res.MissingPackets, i)
		}
	}
	return res, ctx.Err()
}

// key is the comparable form of an IP packet: TTL or hop limit zeroed, and
// the IPv4 ID too when zeroID is set, with the IPv4 header checksum
// computed again over the fixed header, so that it depends on nothing else.
func key(p []byte, zeroID bool) string {
	b := []byte(string(p))
	switch v := header.Version(b); {
	case v == 4 && len(b) >= header.IPv4Len:
		header.SetTTL(b, 0)
		if zeroID {
			header.SetIPv4ID(b, 0)
		}
		header.IPv4Header(b[:header.IPv4Len])
	case v == 6 && len(b) >= header.IPv6Len:
		header.SetTTL(b, 0)
	}
	return string(b)
}
