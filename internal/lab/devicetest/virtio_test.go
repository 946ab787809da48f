package devicetest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
)

// One guest for the whole test binary: q35 with an emulated Intel IOMMU and
// one virtio-crypto device behind it, crypto0, for the user-space driver.
var shared struct {
	once  sync.Once
	peer  *Guest
	netns string
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.peer != nil {
		if err := shared.peer.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close guest:", err)
			code = 1
		}
	}
	if shared.netns != "" {
		exec.Command("ip", "netns", "del", shared.netns).Run()
	}
	os.Exit(code)
}

func guest(t *testing.T) *Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG; run without -short")
	}
	shared.once.Do(func() { shared.peer, shared.err = boot() })
	if shared.err != nil {
		t.Fatalf("guest with a virtio-crypto device unavailable: %v", shared.err)
	}
	return shared.peer
}

func boot() (*Guest, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("needs root (network namespaces, tap devices)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, fmt.Errorf("qemu-system-x86_64 not found: apt-get install qemu-system-x86")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("dt-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	shared.netns = ns
	g, err := Boot(ctx, GuestOptions{
		Devices:  kernelpeer.Devices{Crypto: 1, IOMMU: true},
		Tests:    []string{"./offload/virtio"},
		Commands: []string{"./cmd/espgw"},
		Netns:    ns,
		Log:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "guest with virtio-crypto booted in %v (qemu CPU %v)\n", g.BootTime.Round(time.Millisecond), g.BootCPU)
	return g, nil
}

// inGuest runs the virtio engine's test binary in the guest with the
// device required, and returns its verbose output.
func inGuest(t *testing.T, p *Guest, args string) string {
	t.Helper()
	out, err := p.Run(context.Background(),
		"cd /espgw && ESPGW_VIRTIO_REQUIRED=1 ESPGW_VECTORS=/espgw/testdata/vectors ./virtio.test -test.v -test.count=1 "+args+" 2>&1")
	if err != nil {
		ps, _ := p.Run(context.Background(), "ps; for f in /proc/[0-9]*/fd/*; do l=$(readlink $f); case $l in *vfio*) echo $f $l;; esac; done")
		t.Fatalf("virtio engine tests in the guest: %v\n%s\nprocesses:\n%s", err, out, ps)
	}
	if strings.Contains(out, "--- SKIP") || !strings.Contains(out, "\nPASS") {
		t.Fatalf("virtio engine tests in the guest skipped or did not pass:\n%s", out)
	}
	return out
}

// TestVirtioEngineInGuest runs every test of the virtio engine on the
// device: setup and teardown, known answers, differential against cpu for
// every suite the device serves, tampering, in-order completion, reopen.
func TestVirtioEngineInGuest(t *testing.T) {
	p := guest(t)
	out := inGuest(t, p, "")
	t.Logf("guest:\n%s", out)
}

// TestVirtioDeviceDidTheWork: the device's own data queue (QEMU's used
// index, read through QMP while the engine still holds the device) advanced
// by exactly the requests the engine says it posted.
func TestVirtioDeviceDidTheWork(t *testing.T) {
	p := guest(t)
	ctx := context.Background()
	if _, err := p.Run(ctx, "rm -rf /tmp/hold && mkdir /tmp/hold && cd /espgw && "+
		"(ESPGW_VIRTIO_REQUIRED=1 ESPGW_VIRTIO_HOLD=/tmp/hold ./virtio.test -test.v -test.run '^TestDeviceCountsRequests$' "+
		"</dev/null >/tmp/hold/log 2>&1; echo $? >/tmp/hold/rc) </dev/null >/dev/null 2>&1 &"); err != nil {
		t.Fatal(err)
	}
	var ready string
	for deadline := time.Now().Add(5 * time.Minute); ready == ""; time.Sleep(200 * time.Millisecond) {
		out, _ := p.Run(ctx, "cat /tmp/hold/ready 2>/dev/null; cat /tmp/hold/rc 2>/dev/null")
		if strings.HasPrefix(out, "records") {
			ready = out
		} else if out != "" || time.Now().After(deadline) {
			log, _ := p.Run(ctx, "cat /tmp/hold/log")
			t.Fatalf("the guest's requests did not finish (%q):\n%s", out, log)
		}
	}
	used, err := p.QueueUsed(ctx, "crypto0", 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Run(ctx, "touch /tmp/hold/release")
	m := regexp.MustCompile(`records (\d+), doorbells (\d+)`).FindStringSubmatch(ready)
	if m == nil {
		t.Fatalf("no record count from the guest: %q", ready)
	}
	records, _ := strconv.Atoi(m[1])
	// The engine opened the device with a reset, so its data queue counts
	// from 0: the used index is the number of requests the device completed.
	if int(used) != records || records == 0 {
		t.Fatalf("device's data queue used index is %d; the engine posted %d requests", used, records)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		rc, _ := p.Run(ctx, "cat /tmp/hold/rc 2>/dev/null")
		if strings.TrimSpace(rc) == "0" {
			break
		}
		if rc != "" || time.Now().After(deadline) {
			log, _ := p.Run(ctx, "cat /tmp/hold/log")
			t.Fatalf("guest test exit %q:\n%s", rc, log)
		}
	}
	t.Logf("the device completed %d requests (its used index), announced by %s doorbells", used, m[2])
}
