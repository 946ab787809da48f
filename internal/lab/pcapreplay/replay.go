// Package pcapreplay sends the packets of a rewritten capture
// (internal/lab/pcaprewrite) from the two hosts of a test bed and checks what
// arrives at the other end: each packet sent from one host must reach the
// other byte for byte, but for what routers change on the way (TTL or hop
// limit, the IPv4 header checksum, and an IPv4 ID the sending kernel filled
// in for a zero one). It reports packets delivered, missing and unexpected
// (those a host's own stack sent, such as TCP resets for a replayed flow it
// has no socket for).
//
// Packets leave through raw sockets with the IP header included, so they go
// out as captured; they are watched for with a packet socket on each host's
// interface.
package pcapreplay

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/pcaprewrite"
)

// Host is one end of the replay: the network namespace it lives in and the
// interface its traffic crosses.
type Host struct {
	Netns     string
	Interface string
}

// Options tune Run.
type Options struct {
	// Linger bounds the wait for packets still on their way after the last
	// one is sent (default 2s); Run stops waiting as soon as every packet
	// arrived.
	Linger time.Duration
}

// Result is what a replay saw, by the side that sent (index 0 for A, 1 for
// B) or, for Unexpected, the side that received.
type Result struct {
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

// Run sends pkts from hosts[A] and hosts[B] at their due times and watches
// both interfaces until every packet arrived or Linger passed after the last
// send.
func Run(ctx context.Context, pkts []pcaprewrite.Packet, hosts [2]Host, opt Options) (Result, error) {
	var res Result
	if opt.Linger == 0 {
		opt.Linger = 2 * time.Second
	}
	var ends [2]*end
	defer func() {
		for _, e := range ends {
			if e != nil {
				e.close()
			}
		}
	}()
	for i, h := range hosts {
		e, err := openEnd(h)
		if err != nil {
			return res, fmt.Errorf("replay host %s: %w", "AB"[i:i+1], err)
		}
		ends[i] = e
	}
	// What each side expects to receive: packets by their comparable form.
	var expect [2]map[string][]int
	for i := range expect {
		expect[i] = map[string][]int{}
	}
	outstanding := 0
	for i, p := range pkts {
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
		if !neighbourTraffic(pkt) {
			res.Unexpected[side]++
		}
	}
	var wg sync.WaitGroup
	for i, e := range ends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.watch(func(b []byte) { receive(i, b) })
		}()
	}
	stopWatching := func() {
		for _, e := range ends {
			e.stop()
		}
		wg.Wait()
	}

	start := time.Now()
	for i, p := range pkts {
		if d := time.Until(start.Add(p.At)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				stopWatching()
				return res, ctx.Err()
			}
		}
		res.Sent[p.From]++
		mu.Lock()
		sentAt[i] = time.Now()
		mu.Unlock()
		if err := ends[p.From].send(p.Data); err != nil {
			mu.Lock()
			res.SendErrors[p.From]++
			res.LastSendError = fmt.Sprintf("packet %d: %v", i, err)
			mu.Unlock()
		}
	}
	select {
	case <-allIn:
	case <-time.After(opt.Linger):
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

// key is the comparable form of an IP packet: TTL or hop limit and the IPv4
// header checksum zeroed, and the IPv4 ID too when zeroID is set.
func key(p []byte, zeroID bool) string {
	b := []byte(string(p))
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		b[8], b[10], b[11] = 0, 0, 0
		if zeroID {
			b[4], b[5] = 0, 0
		}
	case len(b) >= 40 && b[0]>>4 == 6:
		b[7] = 0
	}
	return string(b)
}

// end is one host's sockets: raw senders and a packet-socket watcher.
type end struct {
	send4, send6 int
	watchFD      int
	watchFile    *os.File
	done         chan struct{}
}

func openEnd(h Host) (*end, error) {
	e := &end{send4: -1, send6: -1, watchFD: -1, done: make(chan struct{})}
	ns, err := vnetns.GetFromName(h.Netns)
	if err != nil {
		return nil, fmt.Errorf("open netns %q: %w", h.Netns, err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- netns.Run(ns, func() error {
			ifi, err := net.InterfaceByName(h.Interface)
			if err != nil {
				return err
			}
			// IPPROTO_RAW implies the IP header is ours (IP_HDRINCL; for
			// IPv6 since Linux 4.5).
			if e.send4, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
				return fmt.Errorf("raw IPv4 socket: %w", err)
			}
			if e.send6, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
				return fmt.Errorf("raw IPv6 socket: %w", err)
			}
			proto := int(uint16(unix.ETH_P_ALL)<<8 | uint16(unix.ETH_P_ALL)>>8)
			if e.watchFD, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto); err != nil {
				return fmt.Errorf("packet socket: %w", err)
			}
			unix.SetsockoptInt(e.watchFD, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
			if err := unix.SetsockoptInt(e.watchFD, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
				return fmt.Errorf("PACKET_IGNORE_OUTGOING: %w", err)
			}
			return unix.Bind(e.watchFD, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index})
		})
	}()
	if err := <-errc; err != nil {
		e.close()
		return nil, fmt.Errorf("netns %s interface %s: %w", h.Netns, h.Interface, err)
	}
	e.watchFile = os.NewFile(uintptr(e.watchFD), "replay-watch")
	return e, nil
}

func (e *end) send(p []byte) error {
	if len(p) < 20 {
		return fmt.Errorf("%d-byte packet", len(p))
	}
	if p[0]>>4 == 6 && len(p) >= 40 {
		sa := &unix.SockaddrInet6{Addr: [16]byte(p[24:40])}
		return unix.Sendto(e.send6, p, 0, sa)
	}
	return unix.Sendto(e.send4, p, 0, &unix.SockaddrInet4{Addr: [4]byte(p[16:20])})
}

// watch hands every IP packet arriving on the interface to got until stop.
func (e *end) watch(got func([]byte)) {
	buf := make([]byte, 65536)
	raw, err := e.watchFile.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil || rerr != nil {
			return // stopped (deadline) or closed
		}
		if n >= 20 && (buf[0]>>4 == 4 || buf[0]>>4 == 6) {
			got(trimIP(buf[:n]))
		}
	}
}

// neighbourTraffic reports ICMPv6 neighbour discovery and multicast listener
// messages, which any IPv6 link carries and no replay sends.
func neighbourTraffic(p []byte) bool {
	if len(p) < 41 || p[0]>>4 != 6 || p[6] != 58 {
		return false
	}
	t := p[40]
	return t >= 130 && t <= 137 || t == 143
}

// trimIP cuts link padding off an IP packet.
func trimIP(b []byte) []byte {
	n := len(b)
	if b[0]>>4 == 4 {
		n = int(binary.BigEndian.Uint16(b[2:]))
	} else if len(b) >= 40 {
		n = 40 + int(binary.BigEndian.Uint16(b[4:]))
	}
	if n > 0 && n <= len(b) {
		return b[:n]
	}
	return b
}

func (e *end) stop() {
	if e.watchFile != nil {
		e.watchFile.SetReadDeadline(time.Unix(1, 0))
	}
}

func (e *end) close() {
	for _, fd := range []int{e.send4, e.send6} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if e.watchFile != nil {
		e.watchFile.Close()
	} else if e.watchFD >= 0 {
		unix.Close(e.watchFD)
	}
}
