package scenario

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/secret"
)

// A check compares a metric with a sum of terms:
//
//	replay: "== wan.duplicated + wan.replayed"
//	delivered: ">= 0.99"
//	latency.p99: "< 20ms"
//	conservation: true
//
// The operator is one of == != < <= > >= (default ==). Terms are numbers
// (with an optional unit: ms, us, ns, s, % — times are in seconds, percent
// divided by 100) or metric names, joined by + and - with spaces around
// them (metric names contain '-'). A bare number or boolean means ==.
type check struct {
	metric string
	op     string
	terms  []term
}

type term struct {
	neg  bool
	num  float64
	name string // a metric, or "" for num
}

var ops = []string{"==", "!=", "<=", ">=", "<", ">"}

func parseCheck(metric, value, tag string) (check, error) {
	c := check{metric: metric, op: "=="}
	switch tag {
	case "!!bool":
		v := 0.0
		if value == "true" {
			v = 1
		}
		c.terms = []term{{num: v}}
		return c, nil
	case "!!int", "!!float":
		v, err := strconv.ParseFloat(strings.ReplaceAll(value, "_", ""), 64)
		if err != nil {
			return c, fmt.Errorf("%s: %w", secret.Name(value), err)
		}
		c.terms = []term{{num: v}}
		return c, nil
	}
	toks := strings.Fields(value)
	if len(toks) == 0 {
		return c, errors.New("empty expression")
	}
	// "==0" and "<20ms" are accepted without the space too.
	for _, op := range ops {
		if strings.HasPrefix(toks[0], op) {
			c.op = op
			if rest := toks[0][len(op):]; rest != "" {
				toks[0] = rest
			} else {
				toks = toks[1:]
			}
			break
		}
	}
	if len(toks) == 0 {
		return c, fmt.Errorf("%s: nothing to compare with after %s", secret.Name(value), c.op)
	}
	neg := false
	for i, tok := range toks {
		if i%2 == 1 {
			switch tok {
			case "+":
				neg = false
			case "-":
				neg = true
			default:
				return c, fmt.Errorf("%s: want + or - between terms, got %s (put spaces around + and -)", secret.Name(value), secret.Name(tok))
			}
			continue
		}
		t, err := parseTerm(tok)
		if err != nil {
			return c, fmt.Errorf("%s: %w", secret.Name(value), err)
		}
		t.neg = neg
		c.terms = append(c.terms, t)
	}
	if len(toks)%2 == 0 {
		return c, fmt.Errorf("%s: ends with an operator", secret.Name(value))
	}
	return c, nil
}

var units = []struct {
	suffix string
	scale  float64
}{{"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"s", 1}, {"%", 0.01}}

func parseTerm(tok string) (term, error) {
	if tok == "true" {
		return term{num: 1}, nil
	}
	if tok == "false" {
		return term{num: 0}, nil
	}
	if c := tok[0]; c >= '0' && c <= '9' || c == '.' {
		num, scale := tok, 1.0
		for _, u := range units {
			if strings.HasSuffix(tok, u.suffix) {
				num, scale = strings.TrimSuffix(tok, u.suffix), u.scale
				break
			}
		}
		var v float64
		var err error
		if strings.HasPrefix(num, "0x") {
			var u uint64
			u, err = strconv.ParseUint(num[2:], 16, 64)
			v = float64(u)
		} else {
			v, err = strconv.ParseFloat(strings.ReplaceAll(num, "_", ""), 64)
		}
		if err != nil {
			return term{}, fmt.Errorf("number %s: want digits with an optional unit (ms, us, ns, s, %%)", secret.Name(tok))
		}
		return term{num: v * scale}, nil
	}
	return term{name: tok}, nil
}

// names returns every metric the check reads.
func (c check) names() []string {
	out := []string{c.metric}
	for _, t := range c.terms {
		if t.name != "" {
			out = append(out, t.name)
		}
	}
	return out
}

func (c check) String() string {
	var b strings.Builder
	b.WriteString(c.op)
	for i, t := range c.terms {
		if i > 0 {
			if t.neg {
				b.WriteString(" -")
			} else {
				b.WriteString(" +")
			}
		}
		b.WriteByte(' ')
		if t.name != "" {
			b.WriteString(t.name)
		} else {
			b.WriteString(strconv.FormatFloat(t.num, 'g', -1, 64))
		}
	}
	return b.String()
}

// eval reads the metric and the right-hand side from m.
func (c check) eval(m Metrics) (got, want float64, pass bool) {
	got = m[c.metric]
	for _, t := range c.terms {
		v := t.num
		if t.name != "" {
			v = m[t.name]
		}
		if t.neg {
			v = -v
		}
		want += v
	}
	const eps = 1e-9
	switch c.op {
	case "==":
		pass = math.Abs(got-want) <= eps*math.Max(1, math.Abs(want))
	case "!=":
		pass = math.Abs(got-want) > eps*math.Max(1, math.Abs(want))
	case "<":
		pass = got < want
	case "<=":
		pass = got <= want+eps
	case ">":
		pass = got > want
	case ">=":
		pass = got >= want-eps
	}
	return got, want, pass
}

// Metrics are the numbers a run produced, by name (see metricNames).
type Metrics map[string]float64

// Counter names a scenario can check.
var (
	impairCounters = []string{"matched", "lost", "burst_lost", "overflow", "oversize", "rewritten", "corrupted", "corrupted_bytes",
		"truncated", "duplicated", "replayed", "replay_skipped", "reordered", "reorder_expired", "delayed",
		"ce_marked", "too_big", "too_big_reported", "ike_matched", "ike_dropped", "ike_duplicated"}
	gatewayCounters = []string{"sealed", "opened", "tun_in", "tun_out", "wire_in", "wire_out", "held", "drops", "last_seq",
		"pmtu-updates", "pmtu-ignored", "path-mtu", "fragmented", "fragments-out", "reasm-oks", "reasm-fails", "reasm-timeout"}
	stepMetrics = []string{"sent", "received", "delivered", "mismatched", "exact", "bytes", "bps", "retransmits",
		"dscp", "ecn-not-ect", "ecn-ect1", "ecn-ect0", "ecn-ce", "ttl", "path-mtu", "too-big", "time-exceeded", "frag-needed", "reported-mtu", "ext-headers"}
	runMetrics = []string{"kernel", "hostA.kernel", "gw1.kernel", "gw2.kernel", "hostB.kernel",
		"udp-rcvbuf", "hostA.udp-rcvbuf", "hostB.udp-rcvbuf", "sent", "received", "delivered", "mismatched", "exact", "conservation", "unaccounted", "drops",
		"sealed", "opened", "tun_in", "tun_out", "wire_in", "wire_out"}
	latencyMetrics = []string{"latency.min", "latency.p50", "latency.p90", "latency.p99", "latency.max", "latency.mean"}
)

// dropReasons are the reasons a packet is counted as dropped: the ESP
// layer's (per SA) and the gateway's (no SA to blame).
func dropReasons() []string {
	var out []string
	for r := esp.Reason(1); r < esp.NumReasons; r++ {
		out = append(out, r.String())
	}
	for r := gateway.Reason(0); r < gateway.NumReasons; r++ {
		if !slices.Contains(out, r.String()) {
			out = append(out, r.String())
		}
	}
	// The kernel's TUN queue overflowed: the gateway never saw the packet.
	return append(out, "tun-queue")
}

// knownMetric says whether name is something a run measures.
func (s *Scenario) knownMetric(name string) bool {
	reasons := dropReasons()
	if slices.Contains(runMetrics, name) || slices.Contains(latencyMetrics, name) || slices.Contains(reasons, name) {
		return true
	}
	if gw, rest, ok := strings.Cut(name, "."); ok {
		switch gw {
		case "wan":
			return slices.Contains(impairCounters, rest)
		case "gw1", "gw2":
			return slices.Contains(gatewayCounters, rest) || slices.Contains(reasons, rest)
		case "gw1-to-gw2", "gw2-to-gw1":
			// One direction also counts what entered and left its stage.
			return slices.Contains(impairCounters, rest) || rest == "received" || rest == "emitted"
		case "tunnels":
			return slices.Contains(tunnelsMetrics, rest)
		case "actions":
			return slices.Contains(actionMetrics, rest)
		case "ike":
			if s.SA.IKE != nil {
				return slices.Contains(ikeMetrics, rest)
			}
			return s.External != nil && s.External.IKE != nil && slices.Contains(externalIKEMetrics, rest)
		case "steps":
			step, m, ok := strings.Cut(rest, ".")
			if !ok {
				return false
			}
			found := slices.ContainsFunc(s.Traffic.Steps, func(st Step) bool { return st.Name == step })
			return found && (slices.Contains(stepMetrics, m) || slices.Contains(latencyMetrics, m))
		}
	}
	return false
}

func (s *Scenario) knownMetrics(c check) error {
	for _, n := range c.names() {
		if !s.knownMetric(n) {
			if slices.Contains(impairCounters, n) {
				return fmt.Errorf("unknown metric %s: the WAN's impairment counters are wan.%s (both directions) or gw1-to-gw2.%s", secret.Name(n), secret.Unquoted(secret.Name(n)), secret.Unquoted(secret.Name(n)))
			}
			return fmt.Errorf("unknown metric %s (see scenarios/README.md: counters, drop reasons, wan. impairments, gw1./gw2./gw1-to-gw2./steps.NAME./tunnels./actions./ike. with sa.ike)", secret.Name(n))
		}
	}
	return nil
}
