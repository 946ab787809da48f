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

// pciByID finds the guest's PCI device with vendor:device one of ids, and
// returns its address and ID.
func pciByID(t *testing.T, g *Guest, ids ...string) (addr, id string) {
	t.Helper()
	out, err := g.Run(context.Background(), `for d in /sys/bus/pci/devices/*; do echo "$(basename $d) $(cat $d/vendor):$(cat $d/device)"; done`)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for _, id := range ids {
			if len(f) == 2 && f[1] == id {
				return f[0], id
			}
		}
	}
	t.Fatalf("no PCI device %v in the guest:\n%s", ids, out)
	return "", ""
}

// pciDriver is the driver the guest's device at addr is bound to, and its
// driver_override.
func pciDriver(t *testing.T, g *Guest, addr string) (driver, override string) {
	t.Helper()
	out, err := g.Run(context.Background(), "d=/sys/bus/pci/devices/"+addr+"; basename $(readlink $d/driver) 2>/dev/null || echo none; cat $d/driver_override")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("driver of %s: %q", addr, out)
	}
	return f[0], f[1]
}

// TestVirtioRefusesOtherDevices: virtio:ADDR naming the guest's virtio-rng
// device (a virtio device, but not a crypto one) is refused with what is
// there, and the rng device stays on its driver, its driver_override unset.
func TestVirtioRefusesOtherDevices(t *testing.T) {
	g := iommuGuest(t)
	rng, id := pciByID(t, g, "0x1af4:0x1005", "0x1af4:0x1044")
	name := map[string]string{"0x1af4:0x1005": "1af4:1005 virtio-rng (transitional)", "0x1af4:0x1044": "1af4:1044 virtio-rng"}[id]
	drv, ovr := pciDriver(t, g, rng)
	out, err := g.Run(context.Background(), Espgw+" speed -engine virtio:"+rng+" -evp aes-128-cbc -seconds 1 -bytes 1024 2>&1")
	want := rng + " is " + name + " (driver " + drv + "), not a virtio-crypto device (1af4:1054)"
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("virtio:%s: %v\n%s\nwant %q", rng, err, out, want)
	}
	if d, o := pciDriver(t, g, rng); d != drv || o != ovr {
		t.Errorf("after the refusal the rng device has driver %s and driver_override %s; it had %s and %s", d, o, drv, ovr)
	}
	out, err = g.Run(context.Background(), Espgw+" device release "+rng+" 2>&1")
	if err == nil || !strings.Contains(out, "not a virtio-crypto device") {
		t.Errorf("device release %s: %v\n%s", rng, err, out)
	}
	t.Logf("refused: %s", strings.TrimSpace(out))
}

// TestVirtioGivesDeviceBack: with the kernel's virtio_crypto driver
// serving afalg on the device, a virtio engine run takes the device and,
// when it ends, gives it back: afalg on virtio_crypto works again and the
// device's queue counts its requests. A run killed with kill -9 leaves the
// device on vfio-pci (espgw device list says so); the next virtio run gives
// it back when it ends, and so does `espgw device release` after another
// kill.
func TestVirtioGivesDeviceBack(t *testing.T) {
	g := iommuGuest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := g.LoadModules(ctx, "virtio_crypto"); err != nil {
		t.Fatal(err)
	}
	addr, _ := pciByID(t, g, "0x1af4:0x1054")
	afalg := func(when string) {
		t.Helper()
		if d, o := pciDriver(t, g, addr); d != "virtio-pci" || o != "(null)" {
			t.Fatalf("%s: the device has driver %s, driver_override %s; want virtio-pci and none", when, d, o)
		}
		before := usedIndex(t, g)
		out, err := g.RunFor(ctx, 5*time.Minute, Espgw+" speed -elapsed -seconds 1 -bytes 1024 -evp aes-128-cbc -engine afalg:"+device+" 2>&1")
		if err != nil {
			t.Fatalf("%s: afalg on the kernel's driver: %v\n%s", when, err, out)
		}
		if usedIndex(t, g) == before {
			t.Fatalf("%s: the afalg run did not reach the device", when)
		}
	}
	virtioRun := func(when string) {
		t.Helper()
		out, err := g.RunFor(ctx, 5*time.Minute, Espgw+" speed -elapsed -seconds 1 -bytes 1024 -evp aes-128-cbc -engine virtio:"+addr+" 2>&1")
		if err != nil {
			t.Fatalf("%s: virtio run: %v\n%s", when, err, out)
		}
	}
	// killed starts a long virtio run, waits until it holds the device for
	// its measurement (espgw speed opens the engine once to look at it,
	// then afresh for each size) and kills it with kill -9.
	killed := func() {
		t.Helper()
		if _, err := g.Run(ctx, "("+Espgw+" speed -elapsed -seconds 600 -bytes 1024 -evp aes-128-cbc -engine virtio:"+addr+
			" </dev/null >/tmp/killed.log 2>&1 & echo $! >/tmp/killed.pid) </dev/null >/dev/null 2>&1"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
			out, _ := g.Run(ctx, "grep -c 'virtio-crypto device ready' /tmp/killed.log; "+Espgw+" device list")
			if strings.HasPrefix(out, "2\n") && strings.Contains(out, "(espgw)") {
				break
			}
			if time.Now().After(deadline) {
				log, _ := g.Run(ctx, "cat /tmp/killed.log")
				t.Fatalf("the virtio run never held the device:\n%s\n%s", out, log)
			}
		}
		if _, err := g.Run(ctx, "kill -9 $(cat /tmp/killed.pid); while kill -0 $(cat /tmp/killed.pid) 2>/dev/null; do sleep 0.1; done"); err != nil {
			t.Fatal(err)
		}
		if d, _ := pciDriver(t, g, addr); d != "vfio-pci" {
			t.Fatalf("after kill -9 the device has driver %s; a killed run cannot have given it back", d)
		}
		out, err := g.Run(ctx, Espgw+" device list")
		if err != nil || !strings.Contains(out, "is gone (espgw device release "+addr+")") || !strings.Contains(out, "virtio-pci\n") {
			t.Fatalf("device list after kill -9: %v\n%s", err, out)
		}
		t.Logf("after kill -9:\n%s", out)
	}

	afalg("before any virtio run")
	virtioRun("first")
	afalg("after a virtio run")

	killed()
	virtioRun("the run after a kill -9")
	afalg("after the run that followed a kill -9")

	killed()
	out, err := g.Run(ctx, Espgw+" device release "+addr)
	if err != nil || strings.TrimSpace(out) != addr+": virtio-pci" {
		t.Fatalf("device release: %v\n%s", err, out)
	}
	afalg("after espgw device release")
	out, err = g.Run(ctx, Espgw+" device list")
	if err != nil || !strings.Contains(out, "virtio-pci (virtio_crypto)  the kernel") {
		t.Fatalf("device list at the end: %v\n%s", err, out)
	}
	t.Logf("at the end:\n%s", out)
}
