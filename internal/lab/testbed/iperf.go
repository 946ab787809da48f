package testbed

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
)

// IperfOptions shape one iperf3 run.
type IperfOptions struct {
	Duration time.Duration // default 3s
	Streams  int           // parallel streams (default 1)
	UDP      bool
	Bitrate  string // UDP target rate, e.g. "100M" (iperf3 -b)
	Length   int    // UDP datagram / TCP write size (iperf3 -l)
	Reverse  bool   // server sends
	Window   string // socket buffer size, e.g. "4M" (iperf3 -w; the server takes it too)
}

// IperfResult is iperf3's end-of-test summary.
type IperfResult struct {
	BitsPerSecond float64
	Bytes         uint64
	Retransmits   int
	LostPackets   int     // UDP
	Packets       int     // UDP
	JitterMS      float64 // UDP
}

// Iperf3 runs an iperf3 server in server (one test, then it exits) and a
// client in client toward addr; both bounded in time.
func Iperf3(ctx context.Context, server, client *netns.Namespace, addr netip.Addr, o IperfOptions) (IperfResult, error) {
	var r IperfResult
	o.Duration = cmp.Or(o.Duration, 3*time.Second)
	o.Streams = cmp.Or(o.Streams, 1)
	limit := o.Duration + 15*time.Second
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	port := "5201"
	srv := server.Command(ctx, "iperf3", "-s", "-1", "-p", port)
	if err := srv.Start(); err != nil {
		return r, fmt.Errorf("start iperf3 server in %s: %w", server.Short(), err)
	}
	defer srv.Wait()
	defer srv.Process.Kill()
	args := []string{"-c", addr.String(), "-p", port, "-J", "-t", strconv.FormatFloat(o.Duration.Seconds(), 'f', 1, 64),
		"-P", strconv.Itoa(o.Streams), "--connect-timeout", "3000"}
	if o.UDP {
		args = append(args, "-u")
		if o.Bitrate != "" {
			args = append(args, "-b", o.Bitrate)
		}
	}
	if o.Length > 0 {
		args = append(args, "-l", strconv.Itoa(o.Length))
	}
	if o.Window != "" {
		args = append(args, "-w", o.Window)
	}
	if o.Reverse {
		args = append(args, "-R")
	}
	var out []byte
	var err error
	for try := 0; try < 30; try++ { // the server needs a moment to listen
		out, err = client.Command(ctx, "iperf3", args...).Output()
		if !bytes.Contains(out, []byte("unable to connect")) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var res struct {
		Error string `json:"error"`
		End   struct {
			SumSent struct {
				Bytes         uint64  `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
				Retransmits   int     `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bytes         uint64  `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sum struct {
				Bytes         uint64  `json:"bytes"`
				BitsPerSecond float64 `json:"bits_per_second"`
				JitterMS      float64 `json:"jitter_ms"`
				LostPackets   int     `json:"lost_packets"`
				Packets       int     `json:"packets"`
			} `json:"sum"`
		} `json:"end"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		return r, fmt.Errorf("iperf3 from %s to %s: %v (output %q)", client.Short(), addr, err, out)
	}
	if res.Error != "" {
		return r, fmt.Errorf("iperf3 from %s to %s: %s", client.Short(), addr, res.Error)
	}
	if o.UDP {
		s := res.End.Sum
		return IperfResult{BitsPerSecond: s.BitsPerSecond, Bytes: s.Bytes, LostPackets: s.LostPackets, Packets: s.Packets, JitterMS: s.JitterMS}, nil
	}
	return IperfResult{BitsPerSecond: res.End.SumReceived.BitsPerSecond, Bytes: res.End.SumReceived.Bytes, Retransmits: res.End.SumSent.Retransmits}, nil
}
