package main

// `espgw scenario` as a user runs it: the built binary, its output, its
// reports and its exit status.

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/scenario"
	"github.com/espgw/espgw/internal/lab/testbed"
)

func TestScenarioList(t *testing.T) {
	bin := labtest.Espgw(t)
	out, errOut, code := run(bin, "scenario", "list", "../../scenarios")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	bundled, errOut, code := run(bin, "scenario", "list")
	if code != 0 || strings.Count(bundled, "\n") != strings.Count(out, "\n") {
		t.Errorf("bundled list (exit %d, %s) differs in length from the directory's:\n%s\n%s", code, errOut, bundled, out)
	}
	for _, want := range []string{"dpdk[transport,aes-gcm-16,ipv6]", "replay-attack", "engines[emul:ubsec-2014]"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %s:\n%s", want, out)
		}
	}
}

func TestScenarioMalformed(t *testing.T) {
	bin := labtest.Espgw(t)
	path := filepath.Join(t.TempDir(), "bad.yaml")
	doc := "name: bad\ntraffic:\n  steps:\n    - ping: {count: -1}\nexpect: {delivered: 1}\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(bin, "scenario", "run", path)
	if code == 0 || !strings.Contains(errOut, path+":4: traffic.steps[0].ping.count: -1") {
		t.Errorf("exit %d, stderr %q: want a failure naming file, line 4 and the field", code, errOut)
	}
}

// TestScenarioRun runs one passing scenario (with given keys) and one
// failing one with every report: the table, JSON, JUnit and the captures.
func TestScenarioRun(t *testing.T) {
	labtest.NeedNamespaces(t)
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte(`name: good
sa:
  keys:
    - {enc-key: 0x000102030405060708090a0b0c0d0e0f, auth-key: 0x101112131415161718191a1b1c1d1e1f20212223}
    - {enc-key: 0x303132333435363738393a3b3c3d3e3f, auth-key: 0x404142434445464748494a4b4c4d4e4f50515253}
impair: {gw1-to-gw2: {duplicate: 10}}
traffic: {steps: [{name: flow, udp: {packets: 200, rate: 2000}}]}
expect:
  delivered: 1
  replay: == wan.duplicated
  conservation: true
`), 0o644)
	os.WriteFile(bad, []byte(`name: bad
traffic: {steps: [{ping: {count: 2}}]}
expect:
  delivered: == 0.5
`), 0o644)
	caps, junit := filepath.Join(dir, "caps"), filepath.Join(dir, "junit.xml")
	out, errOut, code := run(bin, "scenario", "run", "--prefix", "scc", "--json", "--junit", junit, "--captures", caps, good, bad)
	if code == 0 {
		t.Errorf("exit 0 with a failing expectation; stderr:\n%s", errOut)
	}
	results := scenarioResults(t, out, errOut, code)
	if len(results) != 2 || !results[0].Pass || results[1].Pass {
		t.Fatalf("results %+v: want good passing, bad failing", results)
	}
	if v := results[1].Verdicts[0]; v.Got != 1 {
		t.Errorf("bad: delivered %v, want 1 (every ping answered)", v.Got)
	}
	var j struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, &j); err != nil || len(j.Suites) != 2 || j.Suites[1].Failures != 1 || j.Suites[0].Failures != 0 {
		t.Errorf("junit %+v (%v):\n%s", j, err, b)
	}
	for _, f := range []string{"wan.pcap", "hostA.pcap", "hostB.pcap", "esp_sa"} {
		if fi, err := os.Stat(filepath.Join(caps, "good", f)); err != nil || fi.Size() == 0 {
			t.Errorf("capture %s: %v", f, err)
		}
	}
	// An independent judge: tshark decrypts the WAN capture with the
	// esp_sa file and checks every ICV; the relay forwarded 200 flow
	// packets plus their duplicates gw1→gw2. The file holds the keys the
	// scenario gave, so those are the keys on the wire.
	lines, err := os.ReadFile(filepath.Join(caps, "good", "esp_sa"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"0x000102030405060708090a0b0c0d0e0f", "0x404142434445464748494a4b4c4d4e4f50515253"} {
		if !strings.Contains(string(lines), key) {
			t.Errorf("esp_sa lacks the given key %s:\n%s", key, lines)
		}
	}
	v, err := testbed.Tshark(context.Background(), filepath.Join(caps, "good", "wan.pcap"), strings.Split(strings.TrimSpace(string(lines)), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v.ESP < 210 || v.ICVGood != v.ESP || v.Decrypted != v.ESP {
		t.Errorf("tshark on the WAN capture: %+v, want at least 210 ESP packets, all with good ICVs, all decrypted", v)
	}
	if left, _ := netns.List("scc"); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

// TestScenarioBundledKernelPeer runs the kernel-peer section of the bundled
// scenarios — every bundled file that also runs with peer: linux-xfrm (the
// DPDK matrix, NAT-T, ESN across 2^32, replay attack, tamper, loss and
// reorder in and beyond the window, MTU/DF) — with the Linux kernel's ESP
// as gw2, as `espgw scenario run --bundled --peer linux-xfrm` does: every
// scenario must pass, and one boot of the guest must serve them all.
func TestScenarioBundledKernelPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the QEMU kernel guest and runs every kernel-peer scenario; run without -short")
	}
	labtest.NeedNamespaces(t)
	bin := labtest.Espgw(t)
	out, errOut, code := run(bin, "scenario", "run", "--bundled", "--peer", "linux-xfrm", "--prefix", "sck", "--json")
	files := map[string]bool{}
	for _, r := range scenarioResults(t, out, errOut, code) {
		base, _, _ := strings.Cut(r.Name, "[")
		files[base] = true
		if !r.Pass || r.Peer != "linux-xfrm" || r.KernelBoots != 1 {
			t.Errorf("%s: pass %v, peer %q, guest boots %d (want one boot for all): %s", r.Name, r.Pass, r.Peer, r.KernelBoots, r.Error)
		}
	}
	for _, want := range []string{"dpdk", "nat-t", "esn", "replay-attack", "tamper", "loss-reorder-in-window", "reorder-beyond-window", "mtu-df", "traffic-kinds"} {
		if !files[want] {
			t.Errorf("no kernel-peer run of %s (ran %v)", want, files)
		}
	}
	if code != 0 && !t.Failed() {
		t.Errorf("exit %d with every scenario passing:\n%s", code, errOut)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", errOut)
	}
	if left, _ := netns.List("sck"); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
}

// scenarioResults reads what `espgw scenario run --json` printed.
func scenarioResults(t *testing.T, out, errOut string, code int) []*scenario.Result {
	t.Helper()
	var rep struct{ Results []*scenario.Result }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output (exit %d): %v\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	return rep.Results
}

// An unwritable --junit report stops the run before any test bed is built,
// not after the whole run.
func TestScenarioJUnitCheckedFirst(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	for _, junit := range []string{filepath.Join(dir, "missing", "x.xml"), dir} {
		_, errOut, code := run(bin, "scenario", "run", "--junit", junit, "../../scenarios/tamper.yaml")
		if code == 0 || !strings.Contains(errOut, "--junit") || strings.Contains(errOut, "[1/") {
			t.Errorf("--junit %s: exit %d, stderr %q: want a refusal before the first scenario", junit, code, errOut)
		}
	}
}
