package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Print writes the report as tables: per path, per frame size, latency,
// ratios, targets.
func (rep *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	line := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	if rep.Partial {
		fmt.Fprintln(w, "PARTIAL RESULTS: the run was interrupted.")
	}
	if rep.Machine.Host != "" {
		fmt.Fprintf(w, "machine: %s\n", rep.Machine)
	}
	if rep.LoadAvg != "" {
		fmt.Fprintf(w, "load average at start: %s\n", rep.LoadAvg)
	}
	if rep.LoadEnd != "" {
		fmt.Fprintf(w, "load average at end: %s\n", rep.LoadEnd)
	}
	if rep.Retries > 0 {
		fmt.Fprintf(w, "a lossy trial was run again up to %d time(s) before its rate counted as lossy\n", rep.Retries)
	}
	if rep.Nice != 0 {
		fmt.Fprintf(w, "tunnel processes (espgw and wireguard-go alike) at nice %d\n", rep.Nice)
	}
	fmt.Fprintln(w, "\nPaths (TCP: iperf3 hostA→hostB; CPU: % of one core over the path's whole run):")
	line("path", "TCP×1 Mbit/s", "TCP×4 Mbit/s", "gw1 CPU%", "gw2 CPU%", "peak RSS MiB", "engine max queue", "queue full", "gateway drops")
	for _, r := range rep.Results {
		cpu := []string{"-", "-"}
		var hwm, maxQ, full, drops uint64
		for i, g := range r.Gateways {
			if i < 2 {
				cpu[i] = fmt.Sprintf("%.0f", g.CPUPercent)
			}
			hwm = max(hwm, g.HWM)
			maxQ = max(maxQ, g.MaxQueue)
			full += g.QueueFull
			for _, n := range g.Drops {
				drops += n
			}
		}
		mem, q, qf, dr := "-", "-", "-", "-"
		if len(r.Gateways) > 0 {
			mem = fmt.Sprintf("%.1f", float64(hwm)/(1<<20))
		}
		if r.Kind == KindESP {
			q, qf, dr = fmt.Sprint(maxQ), fmt.Sprint(full), fmt.Sprint(drops)
		}
		line(r.Name, mbps(r.TCP1), mbps(r.TCP4), cpu[0], cpu[1], mem, q, qf, dr)
	}
	tw.Flush()
	for _, r := range rep.Results {
		if len(r.TCP1Runs) > 1 {
			fmt.Fprintf(w, "  %s: TCP×1 runs %s Mbit/s, TCP×4 runs %s (medians above)\n", r.Name, mbpsList(r.TCP1Runs), mbpsList(r.TCP4Runs))
		}
	}

	fmt.Fprintln(w, "\nUDP per frame size (kpkt/s; Mbit/s of Ethernet frames; zero-loss by RFC 2544 binary search):")
	line("path", "frame", "offered", "delivered", "zero-loss", "zero-loss Mbit/s", "≤0.1% loss", "trials", "limit")
	for _, r := range rep.Results {
		for _, f := range r.Frames {
			zl := kpps(f.ZeroLoss)
			if f.GeneratorLimited {
				zl += "+"
			}
			line(r.Name, f.Mix, kpps(f.Offered), kpps(f.Delivered), zl, fmt.Sprintf("%.0f", f.Mbps(f.ZeroLoss)), kpps(f.Partial), fmt.Sprint(len(f.Trials)), f.Limit)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(limit: path — the probe's full-speed trial lost packets, so the path set the rates; probe — no loss even at the probe's top rate (+), the path may do more)")
	for _, r := range rep.Results {
		if r.Iperf64 == nil {
			continue
		}
		if i := r.Iperf64; i.Sent > 0 {
			fmt.Fprintf(w, "the probe at 64 B on %s: sent %s kpkt/s at full speed, iperf3 -u -b 0 sent %s kpkt/s (%s arrived), best of two each, in turn: %.2f× iperf3\n",
				r.Name, kpps(i.Probe), kpps(i.Sent), kpps(i.Received), i.Probe/i.Sent)
		}
	}

	fmt.Fprintln(w, "\nOne-way latency (µs) under load, as a fraction of each path's own zero-loss rate:")
	line("path", "load", "frame", "kpkt/s", "p50", "p99", "p99.9", "lost")
	for _, r := range rep.Results {
		for _, l := range r.Latency {
			lost := uint64(0)
			if l.Sent > l.Received {
				lost = l.Sent - l.Received
			}
			line(r.Name, fmt.Sprintf("%.0f%%", l.Load*100), fmt.Sprint(l.Frame), kpps(l.Rate),
				fmt.Sprintf("%.0f", l.P50), fmt.Sprintf("%.0f", l.P99), fmt.Sprintf("%.0f", l.P999), fmt.Sprint(lost))
		}
	}
	tw.Flush()

	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w, "\nRatios (espgw ÷ baseline, same run, same topology):")
		var measures []string
		seen := map[string]bool{}
		for _, x := range rep.Ratios {
			if !seen[x.Measure] && keyMeasure(x.Measure) {
				seen[x.Measure] = true
				measures = append(measures, x.Measure)
			}
		}
		line(append([]string{"path", "baseline"}, measures...)...)
		type key struct{ path, base string }
		rows := map[key]map[string]float64{}
		var order []key
		for _, x := range rep.Ratios {
			k := key{x.Path, x.Baseline}
			if rows[k] == nil {
				rows[k] = map[string]float64{}
				order = append(order, k)
			}
			rows[k][x.Measure] = x.Value
		}
		for _, k := range order {
			cells := []string{k.path, k.base}
			for _, m := range measures {
				if v, ok := rows[k][m]; ok {
					cells = append(cells, fmt.Sprintf("%.2f×", v))
				} else {
					cells = append(cells, "-")
				}
			}
			line(cells...)
		}
		tw.Flush()
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "\nTargets:")
		line("path", "target", "measured", "want", "")
		for _, t := range rep.Targets {
			verdict := "FAIL"
			if t.Pass {
				verdict = "pass"
			}
			m, want := fmt.Sprintf("%.2f×", t.Measured), fmt.Sprintf("≥ %.1f×", t.Want)
			if t.Unit == "us" {
				m, want = fmt.Sprintf("%+.0f µs", t.Measured), fmt.Sprintf("≤ %+.0f µs", t.Want)
			}
			line(t.Path, t.Target, m, want, verdict)
		}
		tw.Flush()
	}
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Error)
		}
	}
}

// keyMeasure picks the ratios the table shows; --json has them all.
func keyMeasure(m string) bool {
	switch m {
	case "TCP 1 stream", "TCP 4 streams", "UDP 64 zero-loss", "UDP 512 zero-loss", "UDP 1400 zero-loss", "UDP imix zero-loss":
		return true
	}
	return false
}

func mbps(bps float64) string {
	if bps == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", bps/1e6)
}

func kpps(pps float64) string { return fmt.Sprintf("%.1f", pps/1e3) }

func mbpsList(bps []float64) string {
	var s []string
	for _, b := range bps {
		s = append(s, mbps(b))
	}
	return strings.Join(s, ", ")
}
