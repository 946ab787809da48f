package testbed

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/netns"
)

var (
	pingReply   = regexp.MustCompile(`(?m)^\d+ bytes from .* icmp_seq=(\d+) .*$`)
	pingSummary = regexp.MustCompile(`(?m)^(\d+) packets transmitted`)
	pingRTT     = regexp.MustCompile(`= [\d.]+/([\d.]+)/`)
)

// PingOptions shape a ping run; the zero value of each field takes its
// default.
type PingOptions struct {
	Size     int           // payload bytes
	Count    int           // replies to wait for (default 3)
	Interval time.Duration // between requests (default 10ms)
	// NoDF lets IPv4 requests be fragmented; by default they carry DF, so
	// that a too-small path shows as ICMP too-big, not as fragments (IPv6
	// routers never fragment).
	NoDF bool
	// Deadline bounds the whole run (default Count × Interval + 3s).
	Deadline time.Duration
	// Settle, when set, returns once nothing more is on its way (say, when
	// the WAN relay holds nothing); otherwise late replies are waited for
	// up to Linger (default 1s).
	Settle func()
	Linger time.Duration
	// Args are more ping options (-Q TOS, -t TTL).
	Args []string
}

// PingResult is what one ping run saw.
type PingResult struct {
	Size           int
	Sent, Received int
	RTTAvg         time.Duration
	Output         string
}

// Ping sends echo requests from ns to dst and counts the requests sent and
// the replies that came back.
//
// ping runs with a deadline (-w), so a reply that is merely late is waited
// for: with -W alone, once one reply came, ping waits only two round trips
// for the rest. With a deadline ping sends until Count replies came,
// replies to requests past Count included, and exits with the requests
// still unanswered in flight; so neither its summary nor sequence numbers
// 1..Count say what arrived. What is counted is what ping sent (its
// summary) and every reply that came back to it: the ones it printed and
// the ones a sniffer in ns saw arrive after it exited, until nothing more
// is on its way.
func Ping(ctx context.Context, ns *netns.Namespace, dst netip.Addr, o PingOptions) (PingResult, error) {
	o.Count = cmp.Or(o.Count, 3)
	o.Interval = cmp.Or(o.Interval, 10*time.Millisecond)
	o.Deadline = cmp.Or(o.Deadline, time.Duration(o.Count)*o.Interval+3*time.Second)
	r := PingResult{Size: o.Size}
	w := newPingWatch(dst)
	sn, err := capture.Sniff(ns, "", capture.SniffOptions{Outgoing: true}, w.see)
	if err != nil {
		return r, fmt.Errorf("ping %s: %w", dst, err)
	}
	defer sn.Stop()
	pctx, cancel := context.WithTimeout(ctx, o.Deadline+5*time.Second)
	defer cancel()
	args := []string{"-n", "-c", strconv.Itoa(o.Count), "-s", strconv.Itoa(o.Size),
		"-i", strconv.FormatFloat(o.Interval.Seconds(), 'f', 3, 64), "-W", "2", "-w", strconv.Itoa(int(o.Deadline.Seconds() + 0.999))}
	if dst.Is4() {
		if o.NoDF {
			args = append(args, "-M", "dont")
		} else {
			args = append(args, "-M", "do")
		}
	}
	args = append(args, o.Args...)
	out, _ := ns.Command(pctx, "ping", append(args, dst.String())...).CombinedOutput()
	r.Output = string(out)
	m := pingSummary.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("ping %s from %s: no summary in output:\n%s", dst, ns.Short(), out)
	}
	r.Sent, _ = strconv.Atoi(string(m[1]))
	if r.Received = countReplies(out, r.Sent, w.replied()); r.Received < r.Sent {
		if o.Settle != nil {
			o.Settle()
		} else {
			o.Linger = cmp.Or(o.Linger, time.Second)
			for end := time.Now().Add(o.Linger); time.Now().Before(end) && countReplies(out, r.Sent, w.replied()) < r.Sent; {
				time.Sleep(20 * time.Millisecond)
			}
		}
		sn.Stop()
		r.Received = countReplies(out, r.Sent, w.replied())
	}
	if m := pingRTT.FindSubmatch(out); m != nil {
		ms, _ := strconv.ParseFloat(string(m[1]), 64)
		r.RTTAvg = time.Duration(ms * float64(time.Millisecond))
	}
	return r, nil
}

// countReplies counts the distinct sequence numbers 1..sent among the
// replies ping printed and those sniffed.
func countReplies(out []byte, sent int, sniffed map[int]bool) int {
	seen := map[int]bool{}
	for _, m := range pingReply.FindAllSubmatch(out, -1) {
		if seq, _ := strconv.Atoi(string(m[1])); !bytes.Contains(m[0], []byte("(DUP!)")) {
			seen[seq] = true
		}
	}
	for seq := range sniffed {
		seen[seq] = true
	}
	n := 0
	for seq := range seen {
		if seq >= 1 && seq <= sent {
			n++
		}
	}
	return n
}

// pingWatch follows one ping's echo requests out of a namespace (to learn
// their identifier) and its echo replies back in, whole or reassembled from
// their fragments.
type pingWatch struct {
	dst   netip.Addr
	mu    sync.Mutex
	ids   map[uint16]bool
	seqs  map[int]bool // of the replies to those requests
	frags map[datagramKey]*fragments
}

type fragments struct {
	got   map[int]int // offset → length, so a duplicated fragment counts once
	end   int         // the datagram's length, once its last fragment came
	first []byte      // the first fragment's payload: the ICMP header
}

func newPingWatch(dst netip.Addr) *pingWatch {
	return &pingWatch{dst: dst, ids: map[uint16]bool{}, seqs: map[int]bool{}, frags: map[datagramKey]*fragments{}}
}

func (w *pingWatch) replied() map[int]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int]bool, len(w.seqs))
	for s := range w.seqs {
		out[s] = true
	}
	return out
}

func (w *pingWatch) see(s capture.Sniffed) {
	p := s.Data
	src, dst := header.Addrs(p)
	if s.Outgoing && dst != w.dst || !s.Outgoing && src != w.dst {
		return
	}
	d, ok := datagram(p)
	if !ok || d.proto != 1 && d.proto != 58 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	icmp := d.payload
	if d.fragment {
		if !s.Outgoing {
			if icmp = w.reassemble(d); icmp == nil {
				return
			}
		} else if d.offset != 0 {
			return
		}
	}
	m, err := header.ParseICMP(icmp)
	if err != nil {
		return
	}
	// An echo's identifier and sequence number are the header's last four bytes.
	typ, id, seq := m.Type, uint16(m.Rest>>16), int(m.Rest&0xffff)
	switch {
	case s.Outgoing && (typ == 8 || typ == 128):
		w.ids[id] = true
	case !s.Outgoing && (typ == 0 || typ == 129) && w.ids[id]:
		w.seqs[seq] = true
	}
}

// reassemble keeps one fragment of a reply and returns the start of the
// reassembled payload once every byte of the datagram came.
func (w *pingWatch) reassemble(d ipDatagram) []byte {
	f := w.frags[d.key]
	if f == nil {
		f = &fragments{got: map[int]int{}, end: -1}
		w.frags[d.key] = f
	}
	f.got[d.offset] = len(d.payload)
	if d.offset == 0 {
		f.first = append([]byte(nil), d.payload...)
	}
	if !d.more {
		f.end = d.offset + len(d.payload)
	}
	n := 0
	for _, l := range f.got {
		n += l
	}
	if f.end < 0 || n != f.end || f.first == nil {
		return nil
	}
	delete(w.frags, d.key)
	return f.first
}

// ipDatagram is an IP packet's place in its datagram.
type ipDatagram struct {
	proto    uint8
	payload  []byte
	fragment bool
	key      datagramKey
	offset   int
	more     bool
}

// datagramKey names the datagram a fragment is of.
type datagramKey struct {
	src, dst netip.Addr
	proto    uint8
	id       uint32
}

// datagram reads the fragmentation of an IPv4 packet, or of an IPv6 packet
// from its fragment header.
func datagram(p []byte) (ipDatagram, bool) {
	hl, proto, _, _, ok := header.Header(p)
	if !ok {
		return ipDatagram{}, false
	}
	f, _ := header.Fragment(p)
	d := ipDatagram{proto: proto, payload: p[hl:], fragment: f.Is, offset: f.Offset, more: f.More}
	if f.Is {
		src, dst := header.Addrs(p)
		d.key = datagramKey{src, dst, f.Proto, f.ID}
	}
	return d, true
}
