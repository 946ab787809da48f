package cryptoguest

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
)

// The virtio engine's tests share a guest of their own: q35 with an
// emulated Intel IOMMU and the virtio-crypto device behind it, which the
// engine's user-space driver takes through VFIO (the afalg guest leaves the
// device to the kernel's driver).
var sharedIOMMU labtest.Shared[*Guest]

const virtioPkg = "offload/virtio"

// virtioEnv makes a missing device fail the engine's tests, not skip them.
// The guest has one virtio-crypto device: the engine takes the first.
var virtioEnv = []string{"ESPGW_VIRTIO_REQUIRED=1"}

func iommuGuest(t *testing.T) *Guest {
	t.Helper()
	return bootShared(t, &sharedIOMMU, "guest with a virtio-crypto device behind an IOMMU",
		Options{CryptoDevice: true, IOMMU: true, Tests: []string{virtioPkg, enginesPkg}, Prefix: "cgv"})
}

// inGuest runs the virtio engine's test binary in the guest with the
// device required, and returns its verbose output.
func inGuest(t *testing.T, p *Guest, args ...string) string {
	t.Helper()
	out, err := p.RunTest(context.Background(), 10*time.Minute, virtioPkg, virtioEnv, append([]string{"-test.v", "-test.count=1"}, args...)...)
	if err != nil {
		ps, _ := p.Run(context.Background(), "ps; for f in /proc/[0-9]*/fd/*; do l=$(readlink $f); case $l in *vfio*) echo $f $l;; esac; done")
		t.Fatalf("virtio engine tests in the guest: %v\n%s\nprocesses:\n%s", err, out, ps)
	}
	if m := regexp.MustCompile(`--- (SKIP|FAIL): \S+`).FindAllString(out, -1); len(m) > 0 || !strings.Contains(out, "\nPASS") {
		t.Fatalf("virtio engine tests in the guest skipped or did not pass:\n%s", out)
	}
	return out
}

// TestVirtioEngineInGuest runs every test of the virtio engine on the
// device: setup and teardown, known answers, differential against cpu for
// every suite the device serves, tampering, in-order completion, reopen.
func TestVirtioEngineInGuest(t *testing.T) {
	p := iommuGuest(t)
	out := inGuest(t, p)
	t.Logf("guest:\n%s", out)
}

// TestVirtioDeviceDidTheWork: the device's own data queue (QEMU's used
// index, read through QMP while the engine still holds the device) advanced
// by exactly the requests the engine says it posted.
func TestVirtioDeviceDidTheWork(t *testing.T) {
	p := iommuGuest(t)
	ctx := context.Background()
	if _, err := p.Run(ctx, "rm -rf /tmp/hold && mkdir /tmp/hold && cd "+Root+"/"+virtioPkg+" && "+
		"(ESPGW_VIRTIO_REQUIRED=1 ESPGW_VIRTIO_HOLD=/tmp/hold "+TestBinary(virtioPkg)+" -test.v -test.run '^TestDeviceCountsRequests$' "+
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

// TestVirtioConformance runs the conformance tests every engine passes
// (package offload/engines: differential against cpu for every suite the
// engine offers, ESN, lengths, a flipped bit anywhere, in-order
// completion) on the virtio engine and the device.
func TestVirtioConformance(t *testing.T) {
	runConformance(t, iommuGuest(t), "virtio")
}
