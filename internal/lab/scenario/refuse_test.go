package scenario

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/espgw/espgw/sa"
)

// Every scenario that cannot run as written is refused at parse (so by
// `espgw scenario list`), before a test bed is built, with the field.
func TestScenarioRefusedAtParse(t *testing.T) {
	dir := t.TempDir()
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
		name, doc, field, msg string
	}{
		{"negative timeout", "timeout: -5s\n" + base, "timeout", "-5s"},
		{"huge timeout", "timeout: 1000h\n" + base, "timeout", "at most"},
		{"replay window beyond the SA model", "sa: {replay-window: 100000}\n" + base, "sa.replay-window", fmt.Sprint(sa.MaxReplayWindow)},
		{"negative lifetime", "sa: {lifetimes: {soft: {time: -5s}}}\n" + base, "sa.lifetimes", "negative"},
		{"soft above hard", "sa: {lifetimes: {soft: {packets: 10}, hard: {packets: 5}}}\n" + base, "sa.lifetimes", "exceeds"},
		{"initial-seq with no room", "sa: {initial-seq: 4294967295}\n" + base, "sa.initial-seq", "leaves no"},
		{"unknown engine", "engine: turbo\n" + base, "engine", "unknown offload engine"},
		{"unknown gw2 engine", "engines: {gw2: emul:nosuchcard}\n" + base, "engines.gw2", "unknown offload engine"},
		{"pcap is a directory", pcap("captures.pcap"), "traffic.steps[0].pcap.file", "directory"},
		{"pcap is not a capture", pcap("junk.pcap"), "traffic.steps[0].pcap.file", "not a pcap"},
		{"negative interval", "traffic: {steps: [{ping: {interval: -10ms}}]}\nexpect: {delivered: 1}\n", "traffic.steps[0].ping.interval", "-10ms"},
		{"empty file", "", "", "empty file"},
		{"matrix bomb", matrixBomb(), "matrix", "more than 256 combinations"},
		{"too many tunnels", "topology: {tunnels: 100000}\n" + base, "topology.tunnels", "want 1.."},
		{"tunnels in transport mode", "topology: {tunnels: 10}\nsa: {mode: transport}\n" + base, "topology.tunnels", "tunnel"},
		{"action of two kinds", "traffic: {steps: [{ping: {}}], actions: [{at: 1s, add: 1, del: 1}]}\nexpect: {delivered: 1}\n", "traffic.actions[0]", "exactly one of rekey, add, del"},
		{"rekey of a tunnel not there", "topology: {tunnels: 3}\ntraffic: {steps: [{ping: {}}], actions: [{at: 1s, rekey: 3}]}\nexpect: {delivered: 1}\n", "traffic.actions[0].rekey", "tunnels 0..2"},
		{"action after the timeout", "timeout: 5s\ntraffic: {steps: [{ping: {}}], actions: [{at: 10s, rekey: 0}]}\nexpect: {delivered: 1}\n", "traffic.actions[0].at", "within the timeout"},
		{"spread over IPv6", "topology: {tunnels: 3}\ntraffic: {steps: [{udp: {spread: true, family: ipv6}}]}\nexpect: {delivered: 1}\n", "traffic.steps[0].udp.spread", "IPv4"},
		{"unknown tunnel metric", "topology: {tunnels: 3}\ntraffic: {steps: [{ping: {}}]}\nexpect: {tunnels.lost: 0}\n", "expect.tunnels.lost", "unknown metric"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(filepath.Join(dir, "s.yaml"), []byte(tc.doc))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a ParseError", err)
			}
			if pe.Field != tc.field || !strings.Contains(pe.Error(), tc.msg) {
				t.Errorf("err = %q (field %q), want field %q mentioning %q", pe, pe.Field, tc.field, tc.msg)
			}
		})
	}
}

// matrixBomb is a 600-byte matrix of 8 fields × 10 values: 10^8
// combinations.
func matrixBomb() string {
	var b strings.Builder
	b.WriteString("matrix:\n")
	for i := range 8 {
		fmt.Fprintf(&b, "  traffic.x%d: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", i)
	}
	return b.String() + "traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
}

// The matrix bomb is refused before any combination is built.
func TestMatrixBombCostsNothing(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse("bomb.yaml", []byte(matrixBomb()))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a matrix of 10^8 combinations parsed")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("refusing the matrix allocated %d MB", alloc>>20)
	}
	// The largest matrix allowed still expands.
	doc := "matrix:\n  engine: [cpu, ring, cpu, ring]\n  sa.mode: [tunnel, tunnel, tunnel, tunnel]\n  topology.family: [ipv4, ipv6, ipv4, ipv6]\n  topology.outer: [ipv4, ipv4, ipv4, ipv4]\n" +
		"traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
	scs, err := Parse("max.yaml", []byte(doc))
	if err != nil || len(scs) != MaxMatrix {
		t.Errorf("a matrix of %d combinations: %d scenarios, %v", MaxMatrix, len(scs), err)
	}
}

// A key written where it does not belong is never printed.
func TestScenarioErrorsHideKeys(t *testing.T) {
	const hexKey = "0xa1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6"
	const ascii = "randomSecretValue42"
	base := "traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
	for _, doc := range []string{
		"sa: {keys: " + hexKey + "}\n",
		"sa: {keys: " + ascii + "}\n",
		"sa: {keys: [" + hexKey + ", " + hexKey + "]}\n",
		"sa: {keys: [{enc-key: " + ascii + "}, {enc-key: " + ascii + "}]}\n",
		"sa: {mode: " + ascii + "}\n",
		"sa: {encap: " + hexKey + "}\n",
		"sa: {suite: " + ascii + "}\n",
		"sa: {replay-window: " + ascii + "}\n",
		"engine: " + ascii + "\n",
		"topology: {family: " + ascii + "}\n",
		"timeout: " + ascii + "\n",
	} {
		_, err := Parse("s.yaml", []byte(doc+base))
		if err == nil {
			t.Errorf("%q: no error", doc)
			continue
		}
		if strings.Contains(err.Error(), "a1b2c3") || strings.Contains(err.Error(), "Secret") {
			t.Errorf("%q: the error shows the key: %v", doc, err)
		}
	}
}

// Scenario files above sa.MaxFileSize are refused before they are read.
func TestScenarioFileSizeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sa.MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load of a file over the bound: %v", err)
	}
}
