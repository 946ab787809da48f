package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
)

// testPrefix names every namespace these tests make; RemoveLeftovers with it
// cleans up after a crashed run.
const testPrefix = "ni-t-"

func requirePrereqs(t *testing.T) {
	t.Helper()
	if err := CheckPrerequisites(); err != nil {
		t.Fatalf("test needs namespaces: %v", err)
	}
}

// newBed is a Bed under testPrefix+sub with namespaces of the names given,
// closed when the test ends.
func newBed(t *testing.T, sub string, names ...string) (*Bed, []*Namespace) {
	t.Helper()
	requirePrereqs(t)
	bed, err := New(testPrefix+sub, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	var nss []*Namespace
	for _, n := range names {
		ns, err := bed.AddNamespace(n)
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	return bed, nss
}

// newTopology is NewTopology under testPrefix, closed when the test ends.
func newTopology(t *testing.T, opt TopologyOptions) *Topology {
	t.Helper()
	requirePrereqs(t)
	topo, err := NewTopology(testPrefix, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	return topo
}

// links lists the interface names in the caller's (root) namespace.
func links(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link show: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 {
			names = append(names, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	return names
}

func TestTopologyPingAndTeardown(t *testing.T) {
	rootLinks := links(t)
	topo := newTopology(t, TopologyOptions{PlainRouting: true})
	prefix := topo.Prefix()

	names, err := List(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 5 {
		t.Fatalf("namespaces with prefix %s: got %v, want 5", prefix, names)
	}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range topo.Namespaces() {
		if !strings.Contains(string(out), ns.Name()) {
			t.Errorf("ip netns list does not show %s", ns.Name())
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Plain routing end to end, both families.
	for _, dst := range []string{topo.Addr.HostB4.Addr().String(), topo.Addr.HostB6.Addr().String()} {
		out, err := topo.HostA.Output(ctx, "ping", "-c", "1", "-W", "2", dst)
		if err != nil {
			t.Errorf("ping hostA -> %s: %v\n%s", dst, err, out)
		}
		// hostB answers with TTL 64; gw2, wan and gw1 each forward it once.
		if !strings.Contains(out, "ttl=61") {
			t.Errorf("ping hostA -> %s: reply did not cross three routers:\n%s", dst, out)
		}
	}
	// Sysctl really landed in the namespace (and not in ours).
	out2, err := topo.WAN.Output(ctx, "cat", "/proc/sys/net/ipv4/ip_forward")
	if err != nil || strings.TrimSpace(out2) != "1" {
		t.Errorf("wan ip_forward = %q, %v; want 1", out2, err)
	}

	// A process left running inside is killed by Close.
	sleeper := topo.GW1.Command(context.Background(), "sleep", "60")
	if err := topo.Start(sleeper); err != nil {
		t.Fatal(err)
	}

	if err := topo.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if names, _ := List(prefix); len(names) != 0 {
		t.Errorf("namespaces left after Close: %v", names)
	}
	if sleeper.ProcessState == nil {
		t.Errorf("process started in gw1 still running after Close")
	}
	after := links(t)
	if len(after) != len(rootLinks) {
		t.Errorf("root namespace links changed: before %v, after %v", rootLinks, after)
	}
}

func TestNoRouteWithoutPlainRouting(t *testing.T) {
	topo := newTopology(t, TopologyOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Gateways reach each other over the WAN router ...
	if out, err := topo.GW1.Output(ctx, "ping", "-c", "1", "-W", "2", topo.Addr.GW2WAN4.Addr().String()); err != nil {
		t.Errorf("gw1 -> gw2 over WAN: %v\n%s", err, out)
	}
	if out, err := topo.GW1.Output(ctx, "ping", "-c", "1", "-W", "2", topo.Addr.GW2WAN6.Addr().String()); err != nil {
		t.Errorf("gw1 -> gw2 over WAN (v6): %v\n%s", err, out)
	}
	// ... but hostA cannot reach hostB without a tunnel.
	if out, err := topo.HostA.Output(ctx, "ping", "-c", "1", "-W", "1", topo.Addr.HostB4.Addr().String()); err == nil {
		t.Errorf("hostA reached hostB with no tunnel and no plain routing:\n%s", out)
	}
}

func TestDoRunsInsideNamespace(t *testing.T) {
	_, nss := newBed(t, "", "solo")
	ns := nss[0]
	root, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var inside vnetns.NsHandle
	if err := ns.Do(func() error {
		var err error
		inside, err = vnetns.Get()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(ns.Handle()) {
		t.Errorf("Do ran in %s, want namespace %s", inside.UniqueId(), ns.Handle().UniqueId())
	}
	now, _ := vnetns.Get()
	defer now.Close()
	if !now.Equal(root) {
		t.Errorf("thread not restored to the root namespace after Do")
	}
}

func TestRemoveLeftovers(t *testing.T) {
	bed, nss := newBed(t, "lo-", "x", "y")
	if err := bed.Connect(nss[0], "v0", nss[1], "v1", LinkOptions{}); err != nil {
		t.Fatal(err)
	}
	// Simulate a crash: forget the Bed, then clean up by prefix.
	removed, err := RemoveLeftovers(bed.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("removed %v, want 2 namespaces", removed)
	}
	if names, _ := List(bed.Prefix()); len(names) != 0 {
		t.Errorf("left after RemoveLeftovers: %v", names)
	}
	if err := bed.Close(); err != nil { // tolerates namespaces already gone
		t.Errorf("close after RemoveLeftovers: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	requirePrereqs(t)
	if _, err := New("", nil); err == nil {
		t.Error("empty prefix accepted")
	}
	if _, err := New("a/b", nil); err == nil {
		t.Error("prefix with '/' accepted")
	}
	if _, err := RemoveLeftovers(""); err == nil {
		t.Error("RemoveLeftovers with empty prefix accepted (would remove every namespace)")
	}
	bed, nss := newBed(t, "", "a")
	a := nss[0]
	if err := bed.Connect(a, "this-name-is-way-too-long", a, "b", LinkOptions{}); err == nil {
		t.Error("overlong interface name accepted")
	}
	if err := a.SetUp("nosuchlink"); err == nil || !strings.Contains(err.Error(), "nosuchlink") {
		t.Errorf("SetUp on a missing link: %v", err)
	}
}

func TestPrerequisiteErrorWithoutIP(t *testing.T) {
	requirePrereqs(t)
	t.Setenv("PATH", t.TempDir())
	err := CheckPrerequisites()
	if err == nil || !strings.Contains(err.Error(), "iproute2") {
		t.Errorf("without ip on PATH: %v, want an error naming iproute2", err)
	}
	if _, err := New(testPrefix, nil); err == nil {
		t.Error("New succeeded without ip")
	}
}

// TestPrerequisiteErrorNotRoot runs this test binary as user nobody and
// checks that New refuses with a clear message.
func TestPrerequisiteErrorNotRoot(t *testing.T) {
	if os.Getenv("NI_NOT_ROOT_CHILD") == "1" {
		_, err := New(testPrefix, nil)
		fmt.Printf("child error: %v\n", err)
		return
	}
	requirePrereqs(t)
	dir, err := os.MkdirTemp("", "ni-notroot-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "netns.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestPrerequisiteErrorNotRoot$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NI_NOT_ROOT_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "need root") {
		t.Errorf("as nobody, New said:\n%s\nwant an error saying root is needed", out)
	}
}
