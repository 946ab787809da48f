package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"github.com/espgw/espgw/internal/netns"
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
	args := []string{"-n", "-q", "-c", strconv.Itoa(count), "-s", strconv.Itoa(size), "-i", "0.01", "-W", "2", "-w", deadline}
	if dst.Is4() {
		args = append(args, "-M", "do") // DF: too-big must come back as ICMP, not fragments
	}
	out, _ := ns.Command(ctx, "ping", append(args, dst.String())...).CombinedOutput()
	r.Output = string(out)
	m := pingCounts.FindStringSubmatch(r.Output)
	if m == nil {
		return r, fmt.Errorf("ping %s from %s: no summary in output:\n%s", dst, ns.Short(), r.Output)
	}
	r.Sent, _ = strconv.Atoi(m[1])
	r.Received, _ = strconv.Atoi(m[2])
	if m := pingRTT.FindStringSubmatch(r.Output); m != nil {
		ms, _ := strconv.ParseFloat(m[1], 64)
		r.RTTAvg = time.Duration(ms * float64(time.Millisecond))
	}
	return r, nil
}
