package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/lab/bench"
)

func newBench() *cobra.Command {
	var o bench.Options
	var encaps, frames, baseline, charts, save string
	var asJSON, quiet bool
	var tunnels string
	var reconfig time.Duration
	var controlAdds int
	var ikeOpts bench.IKEOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure tunnels under load, RFC 2544 style, beside plain routing and wireguard-go",
		Long: `Build hostA — gw1 — wan — gw2 — hostB in network namespaces and, for plain
routing (the ceiling), a wireguard-go tunnel (--baseline) and every espgw
configuration asked for (--suites × --engines × --encaps), measure: iperf3 TCP
with 1 and 4 streams; UDP at each frame size and IMIX as fast as the probe
sends; the RFC 2544 zero-loss rate per frame size by binary search and the
partial-drop rate (loss ≤ 0.1%); one-way latency p50/p99/p99.9 at 10, 50 and
90% of the zero-loss rate; CPU and memory of each gateway and the offload
engine's queue counters. Prints tables and the ratios of each espgw
configuration to the baselines; --json for the whole report, --charts for PNG
charts. Needs root, iperf3 and (for the wireguard-go baseline) wg from
wireguard-tools and the go tool. Every load is bounded in time; Ctrl-C stops
with the results so far.

With --tunnels 1,100,1000,10000 it measures tunnel scale instead, one espgw
path per count (the first suite, engine and encapsulation): each tunnel its
own SA pair and inner prefix pair with policies; the time gw1 takes to start
with all its SAs, its RSS and the growth per SA over the first count, iperf3
TCP, the zero-loss rate of a load spread round-robin over every tunnel (and
its ratio to the first count's), the packets lost at half that rate while one
tunnel is added and removed next to the live ones and while a live one is
rekeyed make-before-break, and SAs added per second through the control
socket.

With --ike-tunnels N it measures IKEv2 tunnel setup instead: N tunnels
(IKE_SA_INIT, then IKE_AUTH with the first CHILD_SA, a PSK) set up from gw1 to
gw2 for each pair of initiator and responder among espgw's IKE and
strongSwan's charon (--ike-sides; charon with kernel-libipsec, initiating
through stroke up-nb, one IKE SA each), --ike-parallel of them in flight: the
time until all were established and tunnels per second; then, with espgw
initiating, every CHILD_SA rekeyed (CREATE_CHILD_SA with REKEY_SA): rekeys per
second; the memory per tunnel of espgw against espgw; and the ratios of the
pairs, all in one run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ikeOpts.Tunnels > 0 {
				ikeOpts.ProfileDir = o.ProfileDir
				return benchIKE(cmd, ikeOpts, asJSON, quiet, save)
			}
			if tunnels != "" {
				return benchTunnels(cmd, o, tunnels, encaps, frames, reconfig, controlAdds, asJSON, quiet, save)
			}
			for _, e := range splitList(encaps) {
				enc, err := parseEncap("--encaps", e)
				if err != nil {
					return err
				}
				o.Encaps = append(o.Encaps, enc)
			}
			var err error
			if o.Frames, err = bench.ParseMixes(frames); err != nil {
				return fmt.Errorf("--frames: %w", err)
			}
			for _, b := range splitList(baseline) {
				if b != "none" {
					o.Baselines = append(o.Baselines, b)
				}
			}
			if !quiet {
				var finish func()
				o.Progress, finish = progressBar(cmd, progressbar.OptionSetPredictTime(true))
				defer finish()
			}
			rep, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			rep.Command = "espgw " + strings.Join(os.Args[1:], " ")
			if charts != "" {
				files, err := bench.WriteCharts(charts, rep)
				if err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.ErrOrStderr(), "charts: %s\n", strings.Join(files, ", "))
				}
			}
			return printBench(cmd, rep, rep.Print, rep.Partial, len(rep.Problems), "path(s)", asJSON, save)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Suites, "suites", []string{"aes-gcm-16", "chacha20-poly1305", "aes-cbc-128+hmac-sha1-96"}, "ESP suites, CIPHER[-BITS][+AUTH], comma-separated")
	f.StringSliceVar(&o.Engines, "engines", []string{"cpu"}, "offload engines, comma-separated")
	f.StringVar(&encaps, "encaps", "none", "outer encapsulations, comma-separated: none (raw ESP), udp (RFC 3948)")
	f.StringVar(&baseline, "baseline", "wireguard-go", "baseline tunnel besides plain routing: wireguard-go or none")
	f.StringVar(&o.WireguardDir, "cache-dir", "", "where the wireguard-go build is kept (default: the user cache folder)")
	f.BoolVar(&o.OuterV6, "ipv6-outer", false, "carry the espgw tunnels over IPv6")
	f.BoolVar(&o.NoOffloads, "no-offloads", false, "turn the gateways' TUN vnet-hdr offloads off")
	f.StringSliceVar(&o.WanIO, "wan-io", []string{"socket"}, "the gateways' wan-io for raw ESP, a path each, comma-separated: socket, xdp (AF_XDP, generic mode on veth), xdp-native (AF_XDP, the program attached natively), auto")
	f.IntVar(&o.Nice, "nice", 0, "run every tunnel's processes (espgw and wireguard-go alike) at this nice(1) value, e.g. -10")
	f.StringVar(&frames, "frames", "all", "frame sizes in bytes and/or imix, comma-separated; all = 64,128,256,512,1024,1280,1400,imix")
	f.DurationVar(&o.TCPDuration, "tcp-time", 3*time.Second, "length of each iperf3 TCP run")
	f.IntVar(&o.TCPRuns, "tcp-runs", 1, "iperf3 TCP runs per path and stream count, taking turns; the median is reported, every run in --json")
	f.DurationVar(&o.TrialDuration, "trial-time", time.Second, "length of each UDP trial")
	f.IntVar(&o.Iterations, "iterations", 10, "most trials of each zero-loss search, repeats included")
	f.IntVar(&o.Retries, "retries", 1, "run a lossy trial again this many times before its rate counts as lossy (a rate passes when any of its trials does)")
	f.IntVar(&o.PartialIters, "partial-iterations", 3, "most extra trials for each partial-drop rate")
	f.IntVar(&o.LatencyFrame, "latency-frame", 512, "frame size of the latency loads")
	f.DurationVar(&o.LatencyTime, "latency-time", 2*time.Second, "length of each latency load")
	f.StringVar(&o.ProfileDir, "profile", "", "have the espgw gateways serve pprof and write CPU profiles of each into this folder, during the first TCP×1 run and the first frame size's search, or with --ike-gateway-tunnels while gw1 rekeys (the rates of such a run are not comparable)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&charts, "charts", "", "write PNG charts into this folder")
	f.StringVar(&save, "save", "", "also write the JSON report to this file")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	f.StringVar(&tunnels, "tunnels", "", "measure tunnel scale at these tunnel counts, comma-separated (e.g. 1,100,1000,10000)")
	f.DurationVar(&reconfig, "reconfig-time", 2*time.Second, "--tunnels: length of the loads during a tunnel's add/remove and a rekey")
	f.IntVar(&controlAdds, "control-adds", 5000, "--tunnels: SAs added through the control socket to measure its rate")
	f.IntVar(&ikeOpts.Tunnels, "ike-tunnels", 0, "measure IKEv2 tunnel setup and CHILD_SA rekey with this many tunnels per initiator and responder")
	f.IntVar(&ikeOpts.Parallel, "ike-parallel", 8, "--ike-tunnels: setups and rekeys in flight per initiator")
	f.StringSliceVar(&ikeOpts.Sides, "ike-sides", nil, "--ike-tunnels: implementations measured as initiator and responder, comma-separated: espgw, charon (default both, charon when installed)")
	f.StringVar(&ikeOpts.IKE, "ike-proposals", "aes128-sha256-x25519", "--ike-tunnels: IKE proposals, strongSwan syntax")
	f.StringVar(&ikeOpts.ESP, "esp-proposals", "aes128gcm16", "--ike-tunnels: ESP proposals, strongSwan syntax")
	f.IntVar(&ikeOpts.GatewayTunnels, "ike-gateway-tunnels", 0, "--ike-tunnels: also run an espgw gateway pair that negotiates this many tunnels itself: time to all up and carrying traffic, gw2's memory per tunnel, every CHILD_SA rekeyed under load with the packets lost")
	f.StringVar(&ikeOpts.Dir, "ike-dir", "", "--ike-tunnels: keep charon's configurations and logs in this folder")
	f.DurationVar(&ikeOpts.Timeout, "ike-timeout", 5*time.Minute, "--ike-tunnels: bound on each pair's setups and rekeys")
	return cmd
}

// benchIKE is espgw bench --ike-tunnels.
func benchIKE(cmd *cobra.Command, o bench.IKEOptions, asJSON, quiet bool, save string) error {
	if err := bench.CheckIKE(o); err != nil {
		return err
	}
	if !quiet {
		var finish func()
		o.Progress, finish = progressBar(cmd)
		defer finish()
	}
	rep, err := bench.RunIKE(cmd.Context(), o)
	if err != nil {
		return err
	}
	rep.Command = "espgw " + strings.Join(os.Args[1:], " ")
	return printBench(cmd, rep, rep.Print, rep.Partial, len(rep.Problems), "initiator/responder pair(s)", asJSON, save)
}

// benchTunnels is espgw bench --tunnels.
func benchTunnels(cmd *cobra.Command, o bench.Options, counts, encaps, frames string, reconfig time.Duration, adds int, asJSON, quiet bool, save string) error {
	to := bench.TunnelOptions{Suite: o.Suites[0], Engine: o.Engines[0], TCPDuration: o.TCPDuration, TrialDuration: o.TrialDuration,
		Iterations: o.Iterations, Retries: o.Retries, ReconfigTime: reconfig, ControlAdds: adds, Nice: o.Nice, Frame: o.LatencyFrame}
	for _, c := range splitList(counts) {
		n, err := strconv.Atoi(c)
		if err != nil {
			return fmt.Errorf("--tunnels %q: want tunnel counts like 1,100,1000", counts)
		}
		to.Counts = append(to.Counts, n)
	}
	if e := splitList(encaps); len(e) > 0 {
		var err error
		if to.Encap, err = parseEncap("--encaps", e[0]); err != nil {
			return err
		}
	}
	if frames != "all" {
		mixes, err := bench.ParseMixes(frames)
		if err != nil || len(mixes) != 1 || mixes[0].IsIMIX() {
			return fmt.Errorf("--frames %q: --tunnels takes one frame size", frames)
		}
		to.Frame = mixes[0].Frames[0]
	}
	if !quiet {
		var finish func()
		to.Progress, finish = progressBar(cmd)
		defer finish()
	}
	rep, err := bench.RunTunnels(cmd.Context(), to)
	if err != nil {
		return err
	}
	rep.Command = "espgw " + strings.Join(os.Args[1:], " ")
	return printBench(cmd, rep, rep.Print, rep.Partial, len(rep.Problems), "tunnel count(s)", asJSON, save)
}

// printBench prints a bench report after the progress bar and fails the
// command when the run was cut short or some of its parts (what) failed.
func printBench(cmd *cobra.Command, rep any, print func(io.Writer), partial bool, problems int, what string, asJSON bool, save string) error {
	fmt.Fprintln(cmd.ErrOrStderr())
	if err := printReport(cmd, rep, print, asJSON, save); err != nil {
		return err
	}
	if partial {
		return fmt.Errorf("bench interrupted: results above are partial")
	}
	if problems > 0 {
		return fmt.Errorf("bench: %d %s failed (see the report)", problems, what)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
