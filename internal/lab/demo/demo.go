// Package demo is espgw demo: the whole test bed in one run, with a report.
//
// It tells the whole espgw story in one run: the standard test bed with two
// gateways and fresh random keys, pings of many sizes both ways over IPv4
// and IPv6, a TCP burst with iperf3, a capture of the WAN decrypted by
// tshark with the same SAs, and a report of what was sent, what came out and
// why anything did not.
package demo

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/pcapgen"
	"github.com/espgw/espgw/internal/lab/runinfo"
	"github.com/espgw/espgw/internal/lab/scenario"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
	"github.com/espgw/espgw/scenarios"
)

// Options choose what the demo runs.
type Options struct {
	Suite    string // as testbed.ParseSuite reads it
	Engine   string
	Encap    sa.Encap
	OuterV6  bool
	Duration time.Duration // iperf3 burst
	Binary   string
	Prefix   string
	Progress io.Writer // step-by-step progress; nil for none
}

// Step is one piece of traffic and what came of it.
type Step struct {
	Name      string `json:"name"`
	Sent      int    `json:"sent"`
	Delivered int    `json:"delivered"`
	Note      string `json:"note,omitempty"`
}

// Report is the demo's outcome.
type Report struct {
	Suite    string                `json:"suite"`
	Engine   string                `json:"engine"`
	Encap    string                `json:"encap"`
	Steps    []Step                `json:"steps"`
	TCPBits  float64               `json:"tcp_bits_per_second"`
	Gateways [2]gateway.Stats      `json:"gateways"`
	WAN      testbed.TsharkVerdict `json:"wan_tshark"`
	Scenario []*scenario.Result    `json:"scenario"`
	Problems []string              `json:"problems,omitempty"`
	Elapsed  time.Duration         `json:"elapsed_ns"`
	Machine  runinfo.Machine       `json:"machine"`
}

// OK reports whether everything sent came out and tshark agreed.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Check refuses, clearly, to run where the demo cannot.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("espgw demo needs root: it creates network namespaces and TUN devices (run it with sudo)")
	}
	var missing []string
	for _, tool := range []string{"ip", "ping", "iperf3", "tcpdump", "tshark", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("espgw demo needs %s on PATH (apt-get install iproute2 iputils-ping iperf3 tcpdump tshark ethtool, or run scripts/setup.sh)", strings.Join(missing, ", "))
	}
	return nil
}

// Run runs the demo. The test bed is torn down before it returns, also when
// ctx is cancelled (Ctrl-C).
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if err := Check(); err != nil {
		return nil, err
	}
	suite, bits, err := testbed.ParseSuite(o.Suite)
	if err != nil {
		return nil, err
	}
	if !capture.TsharkDecrypts(suite.Cipher) {
		return nil, fmt.Errorf("espgw demo judges the WAN capture with tshark, and tshark 4.0 cannot decrypt %s: run it with espgw bench --suites or in a scenario", testbed.SuiteName(suite, bits))
	}
	o.Engine = cmp.Or(o.Engine, "cpu")
	o.Prefix = cmp.Or(o.Prefix, "demo")
	o.Duration = cmp.Or(o.Duration, 3*time.Second)
	progress := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "==> "+format+"\n", args...)
		}
	}
	r := &Report{Suite: testbed.SuiteName(suite, bits), Engine: o.Engine, Encap: o.Encap.String(), Machine: runinfo.Describe()}
	progress("building hostA — gw1 — wan — gw2 — hostB; gateways with %s on engine %s (%s encapsulation)", r.Suite, o.Engine, r.Encap)
	bed, err := testbed.Start(ctx, testbed.Options{Binary: o.Binary, Prefix: o.Prefix, Suite: suite, AESBits: bits,
		Encap: o.Encap, OuterV6: o.OuterV6, Engine: [2]string{o.Engine, o.Engine}, SegmentOnWire: true})
	if err != nil {
		return nil, err
	}
	defer bed.Close()

	wan, err := testbed.StartCapture(bed.Topo.WAN, "gw1", filepath.Join(bed.Dir, "wan.pcap"), 5000)
	if err != nil {
		return nil, err
	}
	a := bed.Topo.Addr
	for _, p := range []struct {
		name     string
		from     int
		dst      netip.Addr
		mtuLimit int
	}{
		{"ping hostA→hostB IPv4", 0, a.HostB4.Addr(), 28},
		{"ping hostB→hostA IPv4", 1, a.HostA4.Addr(), 28},
		{"ping hostA→hostB IPv6", 0, a.HostB6.Addr(), 48},
	} {
		progress("%s, sizes 0…1400", p.name)
		step := Step{Name: p.name}
		from := bed.Topo.HostA
		if p.from == 1 {
			from = bed.Topo.HostB
		}
		for _, size := range []int{0, 1, 56, 100, 512, 1000, 1200, 1300, 1350} {
			res, err := testbed.Ping(ctx, from, p.dst, testbed.PingOptions{Size: size, Count: 3})
			if err != nil {
				return r, err
			}
			step.Sent += res.Sent
			step.Delivered += res.Received
		}
		r.Steps = append(r.Steps, step)
	}

	for _, name := range []string{"http.pcap", "dns.pcap", "icmp.pcap", "ipv6.pcap"} {
		progress("replaying the bundled capture %s between the hosts", name)
		step, err := replay(ctx, bed, name)
		if err != nil {
			return r, err
		}
		r.Steps = append(r.Steps, step)
	}

	progress("iperf3 TCP hostA→hostB for %s", o.Duration)
	ip, err := testbed.Iperf3(ctx, bed.Topo.HostB, bed.Topo.HostA, a.HostB4.Addr(), testbed.IperfOptions{Duration: o.Duration})
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	r.TCPBits = ip.BitsPerSecond
	r.Steps = append(r.Steps, Step{Name: "iperf3 TCP hostA→hostB", Note: fmt.Sprintf("%.0f MB, %.2f Gbit/s, %d retransmits", float64(ip.Bytes)/1e6, ip.BitsPerSecond/1e9, ip.Retransmits)})

	if err := wan.Stop(); err != nil {
		return r, err
	}
	for i := range 2 {
		if r.Gateways[i], err = bed.Stats(ctx, i); err != nil {
			return r, err
		}
	}
	progress("decrypting the WAN capture with tshark and the SAs' keys")
	var lines []string
	for _, s := range bed.SAs {
		lines = append(lines, testbed.EspSALine(s))
	}
	if r.WAN, err = testbed.Tshark(ctx, wan.Path, lines); err != nil {
		return r, err
	}
	r.judge()
	// The tunnel under faults: the bundled demo scenario runs the same kind
	// of traffic across a WAN that duplicates and replays ESP, and checks
	// every drop is counted under its reason.
	bed.Close()
	progress("running the bundled scenario demo.yaml: the same traffic across a WAN that duplicates and replays ESP")
	results, err := scenario.RunBundled(ctx, scenarios.Bundled, "demo.yaml", scenario.Options{Binary: o.Binary, Prefix: o.Prefix + "sc"})
	if err != nil {
		return r, err
	}
	r.Scenario = results
	for _, res := range results {
		if !res.Pass {
			r.Problems = append(r.Problems, fmt.Sprintf("scenario %s failed: %s", res.Name, res.Error))
		}
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// replay sends a bundled capture (internal/lab/pcapgen) from hostA and hostB,
// rewritten onto the test bed, and counts what arrived byte for byte.
func replay(ctx context.Context, bed *testbed.Bed, name string) (Step, error) {
	step := Step{Name: "pcap replay " + name}
	var data []byte
	var err error
	for _, c := range pcapgen.Captures() {
		if c.Name == name {
			data, err = c.Generate()
		}
	}
	if data == nil || err != nil {
		return step, fmt.Errorf("bundled capture %s: %v", name, err)
	}
	a := bed.Topo.Addr
	topo := capture.Topology{
		A: capture.Hosts{IPv4: a.HostA4.Addr(), IPv6: a.HostA6.Addr()},
		B: capture.Hosts{IPv4: a.HostB4.Addr(), IPv6: a.HostB6.Addr()},
	}
	all, _, err := capture.Load(bytes.NewReader(data), name, topo, capture.RewriteOptions{Timing: capture.KeepTiming, Speed: 10})
	if err != nil {
		return step, err
	}
	// Packets larger than the tunnel's MTU cannot cross it: the sender's
	// router answers ICMP instead. The replay keeps to those that fit.
	mtu, err := gateway.InnerMTU(1500, bed.SAs[0])
	if err != nil {
		return step, err
	}
	var pkts []capture.Packet
	for _, p := range all {
		if len(p.Data) <= mtu {
			pkts = append(pkts, p)
		}
	}
	res, err := capture.Replay(ctx, pkts, [2]capture.ReplayHost{
		{NS: bed.Topo.HostA, Interface: "eth0"},
		{NS: bed.Topo.HostB, Interface: "eth0"},
	}, capture.ReplayOptions{})
	if err != nil {
		return step, err
	}
	step.Sent = res.Sent[0] + res.Sent[1]
	step.Delivered = res.Delivered[0] + res.Delivered[1]
	step.Note = fmt.Sprintf("byte for byte; one-way p50 %s", res.Latency.P50.Round(time.Microsecond))
	if len(res.MissingPackets) > 0 {
		var lens []string
		for _, i := range res.MissingPackets {
			lens = append(lens, fmt.Sprintf("#%d (%d bytes)", i, len(pkts[i].Data)))
		}
		step.Note += "; missing " + strings.Join(lens, ", ")
	}
	if skipped := len(all) - len(pkts); skipped > 0 {
		step.Note += fmt.Sprintf("; %d packets over the %d-byte tunnel MTU left out", skipped, mtu)
	}
	return step, nil
}

// judge lists what does not add up.
func (r *Report) judge() {
	for _, s := range r.Steps {
		if s.Delivered != s.Sent {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d of %d delivered", s.Name, s.Delivered, s.Sent))
		}
	}
	if r.WAN.ESP == 0 || r.WAN.ICVGood != r.WAN.ESP || r.WAN.Decrypted != r.WAN.ESP {
		r.Problems = append(r.Problems, fmt.Sprintf("tshark: %d ESP packets on the WAN, %d with a good ICV, %d decrypted", r.WAN.ESP, r.WAN.ICVGood, r.WAN.Decrypted))
	}
	for i, g := range r.Gateways {
		if n := sum(g.Drops); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("gw%d dropped %d packets: %v", i+1, n, g.Drops))
		}
		for _, s := range g.SAs {
			if n := sum(s.Drops); n > 0 {
				r.Problems = append(r.Problems, fmt.Sprintf("gw%d SA %s dropped %d packets: %v", i+1, s.SPI, n, s.Drops))
			}
		}
	}
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nespgw demo: %s on engine %s, %s encapsulation (%.1fs)\n\n", r.Suite, r.Engine, r.Encap, r.Elapsed.Seconds())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tsent\tdelivered\t")
	for _, s := range r.Steps {
		if s.Sent == 0 && s.Note != "" {
			fmt.Fprintf(tw, "%s\t\t\t%s\n", s.Name, s.Note)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", s.Name, s.Sent, s.Delivered, s.Note)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "gateway\tSA\tdir\tsealed\topened\tdrops by reason")
	for i, g := range r.Gateways {
		for _, s := range g.SAs {
			fmt.Fprintf(tw, "gw%d\t%s\t%s\t%d\t%d\t%s\n", i+1, s.SPI, s.Direction, s.SealedPackets, s.OpenedPackets, esp.FormatCounts(s.Drops))
		}
		fmt.Fprintf(tw, "gw%d\t(gateway)\t\t\t\t%s\n", i+1, esp.FormatCounts(g.Drops))
	}
	tw.Flush()
	if len(r.Scenario) > 0 {
		fmt.Fprintln(w)
		scenario.PrintTable(w, r.Scenario)
	}
	fmt.Fprintf(w, "\nWAN capture: %d ESP packets; tshark with the SAs' keys: %d good ICV, %d decrypted to IP\n", r.WAN.ESP, r.WAN.ICVGood, r.WAN.Decrypted)
	if r.OK() {
		fmt.Fprintln(w, "\nverdict: PASS — every packet sent came out, and an independent implementation agrees.")
		return
	}
	fmt.Fprintln(w, "\nverdict: FAIL")
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  -", p)
	}
}
