package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/sa"
	"github.com/espgw/espgw/scenarios"
)

const good = `name: t
description: d
topology: {family: ipv6, wan-mtu: 1600}
sa:
  suite: aes-gcm-16-256
  mode: tunnel
  encap: udp
  esn: true
  replay-window: 128
  initial-seq: 0x1fffffff0
  lifetimes: {soft: {packets: 10}, hard: {packets: 20, bytes: 3000, time: 1m}}
engines: {gw1: ring, gw2: cpu}
impair:
  gw1-to-gw2: {seed: 3, loss: 1, replay: {percent: 5, after: 2ms}}
traffic:
  together: true
  steps:
    - ping: {sizes: [56, 1000], count: 2}
    - name: flow
      udp: {from: hostB, to: hostA, packets: 10, rate: 100, size: 100}
    - iperf3: {protocol: udp, duration: 1s}
expect:
  delivered: ">= 0.99"
  replay: == wan.replayed + wan.duplicated
  steps.flow.latency.p99: "<20ms"
  gw2.outside-window: 0
  conservation: true
`

// mustParse parses doc, which must give n scenarios.
func mustParse(t *testing.T, doc string, n int) []*Scenario {
	t.Helper()
	scs, err := Parse("s.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != n {
		t.Fatalf("got %d scenarios, want %d", len(scs), n)
	}
	return scs
}

func TestParseGood(t *testing.T) {
	s := mustParse(t, good, 1)[0]
	if s.Topology.Outer != "ipv6" || s.Topology.Inner != "ipv6" || s.Topology.WANMTU != 1600 {
		t.Errorf("topology = %+v", s.Topology)
	}
	if s.SA.suite.Cipher != sa.CipherAESGCM16 || s.SA.aesBits != 256 || s.SA.encap != sa.EncapUDP || s.SA.InitialSeq != 0x1fffffff0 {
		t.Errorf("sa = %+v", s.SA)
	}
	if s.SA.Lifetimes.Hard != (Lifetime{Packets: 20, Bytes: 3000, Time: time.Minute}) {
		t.Errorf("hard lifetime = %+v", s.SA.Lifetimes.Hard)
	}
	if s.Engines != (Engines{GW1: "ring", GW2: "cpu"}) {
		t.Errorf("engines = %+v", s.Engines)
	}
	if c := s.Impair.GW1ToGW2; c == nil || c.Loss != 1 || c.Replay.After != 2*time.Millisecond || c.Reorder.Depth != 3 {
		t.Errorf("impairment = %+v (defaults must fill the rest)", c)
	}
	st := s.Traffic.Steps
	if st[0].Name != "ping1" || st[0].Ping.From != "hostA" || st[0].Ping.Family != "ipv6" || !*st[0].Ping.DF {
		t.Errorf("step 0 = %+v %+v", st[0], st[0].Ping)
	}
	if st[1].UDP.From != "hostB" || st[1].UDP.Port != 9000 {
		t.Errorf("step 1 = %+v", st[1].UDP)
	}
	if st[2].Name != "iperf33" || st[2].Iperf3.Bitrate != "10M" {
		t.Errorf("step 2 = %+v %+v", st[2], st[2].Iperf3)
	}
	want := []string{"delivered >= 0.99", "replay == wan.replayed + wan.duplicated", "steps.flow.latency.p99 < 0.02", "gw2.outside-window == 0", "conservation == 1"}
	for i, e := range s.Expect {
		if got := e.Metric + " " + e.Expr; got != want[i] {
			t.Errorf("expect[%d] = %q, want %q", i, got, want[i])
		}
	}
	if s.Expect[0].Line != 23 {
		t.Errorf("expect[0] at line %d, want 23", s.Expect[0].Line)
	}
}

func TestTransportDefaults(t *testing.T) {
	p := mustParse(t, "sa: {mode: transport}\ntopology: {family: mixed}\ntraffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n", 1)[0].Traffic.Steps[0].Ping
	if p.From != "gw1" || p.To != "gw2" || p.Family != "ipv4" {
		t.Errorf("transport ping = %+v, want gw1 -> gw2 over the outer family", p.Ends)
	}
}

// One WAN direction's metrics are its stage's counters with what entered
// and left it (received, emitted); the sum over both directions has no
// received, which is the hosts'.
func TestDirectionMetrics(t *testing.T) {
	doc := "traffic: {steps: [{ping: {}}]}\nexpect: {gw1-to-gw2.received: \"> 0\", gw2-to-gw1.emitted: \"> 0\"}\n"
	if _, err := Parse("d.yaml", []byte(doc)); err != nil {
		t.Error(err)
	}
	if _, err := Parse("d.yaml", []byte("traffic: {steps: [{ping: {}}]}\nexpect: {wan.received: 0}\n")); err == nil {
		t.Error("wan.received parsed")
	}
}

func TestMatrix(t *testing.T) {
	doc := `name: m
matrix:
  sa.mode: [tunnel, transport]
  topology.family: [ipv4, ipv6]
  engine: [cpu, ring]
traffic: {steps: [{ping: {}}]}
expect: {delivered: 1}
`
	scs := mustParse(t, doc, 8)
	last := scs[7]
	if last.Name != "m[transport,ipv6,ring]" || last.SA.mode != sa.Transport || last.Topology.Outer != "ipv6" || last.Engines.GW2 != "ring" {
		t.Errorf("last = %s %+v %+v %+v", last.Name, last.SA, last.Topology, last.Engines)
	}
	if p := last.Traffic.Steps[0].Ping; p.From != "gw1" || p.Family != "ipv6" {
		t.Errorf("transport step defaults in a matrix: %+v", p.Ends)
	}
	if scs[0].Traffic.Steps[0].Ping.From != "hostA" {
		t.Error("combinations share state")
	}
}

// Every scenario that is malformed, or cannot run as written, is refused
// at parse (so by `espgw scenario list`), before a test bed is built, with
// the file, the line and the field.
func TestParseErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.pcap"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "captures.pcap"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.pcap"), []byte("not a capture at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := "traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
	pcap := func(file string) string {
		return "traffic:\n  steps:\n    - pcap: {file: " + file + "}\nexpect: {delivered: 1}\n"
	}
	for _, tc := range []struct {
		name, doc string
		line      int // 0: not checked
		field     string
		msg       string
	}{
		{"unknown top field", "nmae: x\n" + base, 1, "nmae", "unknown field"},
		{"unknown nested field", "sa:\n  suite: aes-gcm-16\n  windw: 3\n" + base, 3, "", "windw"},
		{"bad suite", "sa:\n  suite: aes-cbcc\n" + base, 2, "sa.suite", "aes-cbcc"},
		{"bad mode", "sa: {mode: tunel}\n" + base, 1, "sa.mode", "tunel"},
		{"wide initial seq", "sa: {initial-seq: 0x100000000}\n" + base, 1, "sa.initial-seq", "esn"},
		{"bad type", "sa:\n  esn: maybe\n" + base, 2, "", "bool"},
		{"no traffic", "expect: {delivered: 1}\n", 1, "traffic.steps", "no traffic"},
		{"two kinds", "traffic:\n  steps:\n    - ping: {}\n      udp: {}\nexpect: {delivered: 1}\n", 3, "traffic.steps[0]", "exactly one"},
		{"no expect", "traffic: {steps: [{ping: {}}]}\n", 1, "expect", "missing"},
		{"unknown metric", "traffic: {steps: [{ping: {}}]}\nexpect:\n  delivred: 1\n", 3, "expect.delivred", "unknown metric"},
		{"unknown step metric", "traffic: {steps: [{ping: {}}]}\nexpect:\n  steps.nope.sent: 1\n", 3, "expect.steps.nope.sent", "unknown metric"},
		{"bad expression", "traffic: {steps: [{ping: {}}]}\nexpect:\n  replay: == wan.duplicated +\n", 3, "expect.replay", "operator"},
		{"bad number", "traffic: {steps: [{ping: {}}]}\nexpect:\n  latency.p99: < 2parsecs\n", 3, "expect.latency.p99", "number"},
		{"impairment", "impair:\n  gw1-to-gw2: {loss: 140}\n" + base, 2, "impair.gw1-to-gw2", "loss"},
		{"missing pcap", "traffic:\n  steps:\n    - pcap: {file: nope.pcap}\nexpect: {delivered: 1}\n", 3, "traffic.steps[0].pcap.file", "no such file"},
		{"bad timing", "traffic:\n  steps:\n    - pcap: {file: x.pcap, timing: fats}\nexpect: {delivered: 1}\n", 3, "traffic.steps[0].pcap.timing", "fats"},
		{"gateway end in tunnel mode", "traffic:\n  steps:\n    - ping: {from: gw1, to: gw2}\nexpect: {delivered: 1}\n", 3, "traffic.steps[0]", "transport"},
		{"host end in transport mode", "sa: {mode: transport}\ntraffic:\n  steps:\n    - ping: {from: hostA, to: hostB}\nexpect: {delivered: 1}\n", 4, "traffic.steps[0]", "gw1"},
		{"unknown peer", "peer: strongswan\n" + base, 1, "peer", "want one of espgw, linux-xfrm"},
		{"linux peer engine", "peer: linux-xfrm\nengines: {gw2: ring}\n" + base, 2, "engines.gw2", "kernel"},
		{"linux peer with tunnels", "peer: linux-xfrm\ntopology: {tunnels: 1}\n" + base, 2, "topology.tunnels", "peer: linux-xfrm"},
		{"linux peer with actions", "peer: linux-xfrm\ntraffic: {steps: [{ping: {}}], actions: [{at: 1s, add: 1}]}\nexpect: {delivered: 1}\n", 2, "traffic.actions", "control socket"},
		{"linux peer traffic from gw2", "peer: linux-xfrm\nsa: {mode: transport}\ntraffic:\n  steps:\n    - ping: {from: gw2, to: gw1}\nexpect: {delivered: 1}\n", 5, "traffic.steps[0]", "answers pings"},
		{"matrix not a list", "matrix: {sa.suite: aes-gcm-16}\n" + base, 1, "matrix.sa.suite", "list"},
		{"matrix bad path", "matrix: {foo.bar: [1]}\n" + base, 1, "matrix.foo.bar", "field path"},
		{"matrix bad value", "matrix:\n  sa.mode: [tunnel, transprot]\n" + base, 2, "sa.mode", "transprot"},
		{"duplicate step name", "traffic:\n  steps:\n    - {name: a, ping: {}}\n    - {name: a, ping: {}}\nexpect: {delivered: 1}\n", 4, "traffic.steps[1].name", "twice"},
		{"keys", "sa:\n  keys: [{enc-key: 0x00, auth-key: 0x01}, {enc-key: 0x02, auth-key: zz}]\n" + base, 2, "sa.keys[0].enc-key", "1 bytes"},
		{"negative timeout", "timeout: -5s\n" + base, 0, "timeout", "-5s"},
		{"huge timeout", "timeout: 1000h\n" + base, 0, "timeout", "at most"},
		{"replay window beyond the SA model", "sa: {replay-window: 100000}\n" + base, 0, "sa.replay-window", fmt.Sprint(sa.MaxReplayWindow)},
		{"negative lifetime", "sa: {lifetimes: {soft: {time: -5s}}}\n" + base, 0, "sa.lifetimes", "negative"},
		{"soft above hard", "sa: {lifetimes: {soft: {packets: 10}, hard: {packets: 5}}}\n" + base, 0, "sa.lifetimes", "exceeds"},
		{"initial-seq with no room", "sa: {initial-seq: 4294967295}\n" + base, 0, "sa.initial-seq", "leaves no"},
		{"unknown engine", "engine: turbo\n" + base, 0, "engine", "unknown offload engine"},
		{"unknown gw2 engine", "engines: {gw2: emul:nosuchcard}\n" + base, 0, "engines.gw2", "unknown offload engine"},
		{"pcap is a directory", pcap("captures.pcap"), 0, "traffic.steps[0].pcap.file", "directory"},
		{"pcap is not a capture", pcap("junk.pcap"), 0, "traffic.steps[0].pcap.file", "not a pcap"},
		{"negative interval", "traffic: {steps: [{ping: {interval: -10ms}}]}\nexpect: {delivered: 1}\n", 0, "traffic.steps[0].ping.interval", "-10ms"},
		{"empty file", "", 0, "", "empty file"},
		{"matrix bomb", matrixBomb(), 0, "matrix", "more than 256 combinations"},
		{"too many tunnels", "topology: {tunnels: 100000}\n" + base, 0, "topology.tunnels", "want 1.."},
		{"tunnels in transport mode", "topology: {tunnels: 10}\nsa: {mode: transport}\n" + base, 0, "topology.tunnels", "tunnel"},
		{"action of two kinds", "traffic: {steps: [{ping: {}}], actions: [{at: 1s, add: 1, del: 1}]}\nexpect: {delivered: 1}\n", 0, "traffic.actions[0]", "exactly one of rekey, add, del"},
		{"rekey of a tunnel not there", "topology: {tunnels: 3}\ntraffic: {steps: [{ping: {}}], actions: [{at: 1s, rekey: 3}]}\nexpect: {delivered: 1}\n", 0, "traffic.actions[0].rekey", "tunnels 0..2"},
		{"action after the timeout", "timeout: 5s\ntraffic: {steps: [{ping: {}}], actions: [{at: 10s, rekey: 0}]}\nexpect: {delivered: 1}\n", 0, "traffic.actions[0].at", "within the timeout"},
		{"spread over IPv6", "topology: {tunnels: 3}\ntraffic: {steps: [{udp: {spread: true, family: ipv6}}]}\nexpect: {delivered: 1}\n", 0, "traffic.steps[0].udp.spread", "IPv4"},
		{"unknown tunnel metric", "topology: {tunnels: 3}\ntraffic: {steps: [{ping: {}}]}\nexpect: {tunnels.lost: 0}\n", 0, "expect.tunnels.lost", "unknown metric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "s.yaml")
			_, err := Parse(path, []byte(tc.doc))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a ParseError", err)
			}
			if pe.File != path || tc.line != 0 && pe.Line != tc.line || pe.Field != tc.field || !strings.Contains(pe.Error(), tc.msg) {
				t.Errorf("err = %q (line %d, field %q), want line %d, field %q, mentioning %q", pe, pe.Line, pe.Field, tc.line, tc.field, tc.msg)
			}
		})
	}
}

func TestBundledScenariosParse(t *testing.T) {
	files, err := Files([]string{"../../../scenarios"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		scs, err := Load(f)
		if err != nil {
			t.Error(err)
		}
		n += len(scs)
	}
	if n < 20 {
		t.Errorf("%d bundled scenarios, want the DPDK matrix alone to give 16", n)
	}
}

// TestBundledScenariosJudgeNoSpeed: the bundled scenarios, which the test
// command runs on loaded machines too, judge no latency and no rate (the
// report records both; speed is the bench's, as ratios in one run): every
// expectation that names a latency.* or bps metric, left or right, fails.
func TestBundledScenariosJudgeNoSpeed(t *testing.T) {
	files, err := Files([]string{"../../../scenarios"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		scs, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range scs {
			for _, e := range sc.Expect {
				n++
				for _, word := range []string{"latency.", "bps"} {
					if strings.Contains(e.Metric, word) || strings.Contains(e.Expr, word) {
						t.Errorf("%s:%d: %s %s judges a wall-clock figure; record it (the report shows it) and judge loss or conservation", f, e.Line, e.Metric, e.Expr)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no expectations read")
	}
}

// TestBundledEmbedded checks that the embedded copy holds every bundled
// file, pcaps included (LoadFS checks that each replayed file is there).
func TestBundledEmbedded(t *testing.T) {
	names, err := BundledFiles(scenarios.Bundled)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files([]string{"../../../scenarios"})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(files) {
		t.Errorf("embedded %v, on disk %v", names, files)
	}
	for _, n := range names {
		if _, err := LoadFS(scenarios.Bundled, n); err != nil {
			t.Error(err)
		}
	}
}

func TestREADMEExampleParses(t *testing.T) {
	b, err := os.ReadFile("../../../scenarios/README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The complete example is the first ```yaml block.
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	if !ok {
		t.Fatal("no ```yaml block in scenarios/README.md")
	}
	doc, _, _ := strings.Cut(rest, "```")
	if _, err := Parse("../../../scenarios/README.yaml", []byte(doc)); err != nil {
		t.Fatalf("the README's complete example: %v", err)
	}
}

// A key pasted into a field of another type is not shown, not even the
// first characters yaml.v3 quotes of it.
func TestTypeErrorsHideValues(t *testing.T) {
	for _, v := range []string{"0011223344556677889900112233445566", "c2VjcmV0c2VjcmV0c2VjcmV0"} {
		doc := strings.Replace(good, "replay-window: 128", "replay-window: "+v, 1)
		_, err := Parse("s.yaml", []byte(doc))
		if err == nil {
			t.Fatalf("replay-window: %s: no error", v)
		}
		if strings.Contains(err.Error(), v[:7]) {
			t.Errorf("replay-window: %s: the error shows part of it: %v", v, err)
		}
	}
}

// A failed run whose end host refused packets for their checksums says
// where they were corrupted; other counters and the gateways say nothing.
func TestCorruptedWhere(t *testing.T) {
	for _, c := range []struct {
		host  string
		moved map[string]uint64
		want  string
	}{
		{"hostB", map[string]uint64{"Udp6InCsumErrors": 1, "Udp6InErrors": 1}, "hostB's kernel refused 1 packets for a bad UDP or TCP checksum: each was corrupted before gw1 sealed it"},
		{"hostA", map[string]uint64{"UdpInCsumErrors": 2, "TcpInCsumErrors": 1}, "hostA's kernel refused 3 packets for a bad UDP or TCP checksum: each was corrupted before gw2 sealed it (its TUN read completes offloaded checksums) or after gw1 opened it"},
		{"hostB", map[string]uint64{"UdpRcvbufErrors": 4}, ""},
		{"gw2", map[string]uint64{"Udp6InCsumErrors": 1}, ""},
	} {
		got := corruptedWhere(c.host, c.moved)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s %v: %q, want %q", c.host, c.moved, got, c.want)
		}
	}
}
