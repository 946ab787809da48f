package bench

import (
	"fmt"
	"strconv"
)

// Ratio is one espgw path against one baseline, on one measure.
type Ratio struct {
	Path     string  `json:"path"`
	Baseline string  `json:"baseline"`
	Measure  string  `json:"measure"`
	Value    float64 `json:"value"` // path / baseline
}

// TargetCheck is one of the project's stated targets and how this run did.
type TargetCheck struct {
	Path     string  `json:"path"`
	Target   string  `json:"target"`
	Measured float64 `json:"measured"`
	Want     float64 `json:"want"`
	Unit     string  `json:"unit"` // "x" (a ratio) or "us"
	Pass     bool    `json:"pass"`
}

// The targets, as ratios against wireguard-go measured in the same
// run: TCP over one stream for these suites, by encapsulation.
var tcpTargets = map[string]map[string]float64{
	"aes-gcm-16-128":           {"none": 1.0, "udp": 1.5},
	"aes-cbc-128+hmac-sha1-96": {"none": 1.0, "udp": 1.5},
	"chacha20-poly1305":        {"none": 1.0, "udp": 1.5}, // wireguard-go's own cipher
}

const (
	udp64Target      = 2.0 // 64-byte zero-loss rate against wireguard-go, both encapsulations
	latencyTargetUS  = 200 // p99 at 50% load over plain routing's p99
	latencyTargetAt  = 0.5
	smallFrameTarget = "64"
)

// Compare derives the ratios of every espgw path to each baseline, and checks
// the targets that apply. latencyFrame labels the latency measure.
func Compare(results []*Result, latencyFrame int) ([]Ratio, []TargetCheck) {
	var plain, wg *Result
	for _, r := range results {
		switch {
		case r.Kind == KindPlain && r.Error == "":
			plain = r
		case r.Kind == KindWireguard && r.Error == "":
			wg = r
		}
	}
	var ratios []Ratio
	var checks []TargetCheck
	for _, r := range results {
		if r.Kind != KindESP {
			continue
		}
		for _, base := range []*Result{wg, plain} {
			if base == nil {
				continue
			}
			add := func(measure string, v, b float64) {
				if v > 0 && b > 0 {
					ratios = append(ratios, Ratio{Path: r.Name, Baseline: base.Name, Measure: measure, Value: v / b})
				}
			}
			add("TCP 1 stream", r.TCP1, base.TCP1)
			add("TCP 4 streams", r.TCP4, base.TCP4)
			for _, f := range r.Frames {
				if bf := base.Frame(f.Mix); bf != nil {
					add("UDP "+f.Mix+" zero-loss", f.ZeroLoss, bf.ZeroLoss)
					add("UDP "+f.Mix+" full speed", f.Delivered, bf.Delivered)
				}
			}
		}
		if wg != nil {
			if want, ok := tcpTargets[r.Suite][r.Encap]; ok && r.TCP1 > 0 && wg.TCP1 > 0 {
				checks = append(checks, TargetCheck{Path: r.Name, Target: "TCP (1 stream) vs wireguard-go",
					Measured: r.TCP1 / wg.TCP1, Want: want, Unit: "x", Pass: r.TCP1/wg.TCP1 >= want})
			}
			if f, bf := r.Frame(smallFrameTarget), wg.Frame(smallFrameTarget); f != nil && bf != nil && bf.ZeroLoss > 0 {
				v := f.ZeroLoss / bf.ZeroLoss
				checks = append(checks, TargetCheck{Path: r.Name, Target: "64-byte UDP zero-loss rate vs wireguard-go",
					Measured: v, Want: udp64Target, Unit: "x", Pass: v >= udp64Target})
			}
		}
		if plain != nil {
			l, pl := r.LatencyAt(latencyTargetAt), plain.LatencyAt(latencyTargetAt)
			if l != nil && pl != nil && l.P99 > 0 && pl.P99 > 0 {
				v := l.P99 - pl.P99
				checks = append(checks, TargetCheck{Path: r.Name,
					Target:   fmt.Sprintf("p99 at 50%% of zero-loss (%s B) over plain routing's p99", strconv.Itoa(latencyFrame)),
					Measured: v, Want: latencyTargetUS, Unit: "us", Pass: v <= latencyTargetUS})
			}
		}
	}
	return ratios, checks
}
