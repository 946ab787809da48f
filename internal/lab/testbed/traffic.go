package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
)

// PingResult is what one ping run saw.
type PingResult struct {
	Size           int
	Sent, Received int
	RTTAvg         time.Duration
	Output         string
}

var (
	pingCounts = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingRTT    = regexp.MustCompile(`= [\d.]+/([\d.]+)/`)
	pingReply  = regexp.MustCompile(`bytes from .*icmp_seq=(\d+)`)
)

// Ping sends count echo requests of size payload bytes from ns to dst, 10 ms
// apart, and counts the replies.
func Ping(ctx context.Context, ns *netns.Namespace, dst netip.Addr, size, count int) (PingResult, error) {
	r := PingResult{Size: size}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(count)*100*time.Millisecond+5*time.Second)
	defer cancel()
	// -w, an overall deadline, makes ping wait for every reply: with only
	// -W, once one reply came it waits just two round trips for the rest,
	// and on a loaded machine counts late replies as lost.
	deadline := strconv.Itoa(count/100 + 5)
	args := []string{"-n", "-c", strconv.Itoa(count), "-s", strconv.Itoa(size), "-i", "0.01", "-W", "2", "-w", deadline}
	if dst.Is4() {
		args = append(args, "-M", "do") // DF: too-big must come back as ICMP, not fragments
	}
	out, _ := ns.Command(ctx, "ping", append(args, dst.String())...).CombinedOutput()
	r.Output = string(out)
	m := pingCounts.FindStringSubmatch(r.Output)
	if m == nil {
		return r, fmt.Errorf("ping %s from %s: no summary in output:\n%s", dst, ns.Short(), r.Output)
	}
	// With a deadline ping goes on sending until count replies came, so
	// it may transmit more than count; the requests that count are
	// icmp_seq 1…count, each of which must have its reply.
	answered := map[int]bool{}
	for _, m := range pingReply.FindAllStringSubmatch(r.Output, -1) {
		if seq, _ := strconv.Atoi(m[1]); seq >= 1 && seq <= count {
			answered[seq] = true
		}
	}
	r.Sent, r.Received = count, len(answered)
	if m := pingRTT.FindStringSubmatch(r.Output); m != nil {
		ms, _ := strconv.ParseFloat(m[1], 64)
		r.RTTAvg = time.Duration(ms * float64(time.Millisecond))
	}
	return r, nil
}
