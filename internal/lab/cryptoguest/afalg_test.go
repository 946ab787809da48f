package cryptoguest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests share one guest with the device, booted on first use, and run
// in the order of this file: the software-driver tests come before the
// device's driver is loaded (from then on it outranks the kernel's
// software for cbc(aes)).
var shared struct {
	once   sync.Once
	g      *Guest
	err    error
	device sync.Once
	devErr error
}

// The packages whose tests run in the guest.
const (
	enginesPkg = "offload/engines"
	afalgPkg   = "offload/afalg"
	device     = "virtio_crypto_aes_cbc"
)

func logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

func guest(t *testing.T) *Guest {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG; run without -short")
	}
	shared.once.Do(func() {
		if os.Geteuid() != 0 {
			shared.err = fmt.Errorf("needs root (network namespaces, tap devices)")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		shared.g, shared.err = Boot(ctx, Options{CryptoDevice: true, OpenSSL: true, Tests: []string{enginesPkg, afalgPkg},
			Prefix: "cga", BootTimeout: 5 * time.Minute, Logger: logger()})
	})
	if shared.err != nil {
		t.Fatalf("crypto guest unavailable: %v", shared.err)
	}
	return shared.g
}

// withDevice loads the device's driver and checks that /proc/crypto lists
// it.
func withDevice(t *testing.T) *Guest {
	t.Helper()
	g := guest(t)
	shared.device.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if shared.devErr = g.LoadModules(ctx, "virtio_crypto"); shared.devErr != nil {
			return
		}
		out, err := g.Run(ctx, "grep -A2 '^driver *: "+device+"$' /proc/crypto")
		if err != nil || !strings.Contains(out, "virtio_crypto") {
			shared.devErr = fmt.Errorf("/proc/crypto lists no %s after loading virtio_crypto: %v: %s", device, err, out)
		}
	})
	if shared.devErr != nil {
		t.Fatal(shared.devErr)
	}
	return g
}

func deviceLoaded(t *testing.T, g *Guest) bool {
	out, err := g.Run(context.Background(), "[ -d /sys/module/virtio_crypto ] && echo yes || echo no")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out) == "yes"
}

// requirePassed checks that each named test (or subtest) passed in a
// test binary's -test.v output, so that a test that skipped in the guest
// cannot pass here.
func requirePassed(t *testing.T, out string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !strings.Contains(out, "--- PASS: "+n+" ") {
			t.Errorf("%s did not pass in the guest", n)
		}
	}
	if m := regexp.MustCompile(`--- (SKIP|FAIL): \S+`).FindAllString(out, -1); len(m) > 0 {
		t.Errorf("in the guest: %s", strings.Join(m, ", "))
	}
	if t.Failed() {
		t.Logf("guest output:\n%s", tail(out, 6000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var conformance = []string{"TestDifferential", "TestFlippedBitAnywhere", "TestInOrderCompletion", "TestESPRoundTripEveryEngine"}

func runConformance(t *testing.T, g *Guest, engine string) {
	t.Helper()
	ctx := context.Background()
	out, err := g.RunTest(ctx, 20*time.Minute, enginesPkg, []string{"ESPGW_TEST_ENGINES=" + engine},
		"-test.v", "-test.run", "^("+strings.Join(conformance, "|")+")$")
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(out, 6000))
	}
	var names []string
	for _, c := range conformance {
		names = append(names, c+"/"+engine)
	}
	requirePassed(t, out, names...)
}

// TestAFALGSoftware: the conformance tests every engine passes (known
// answers, differential against cpu for every suite and key size with and
// without ESN, lengths 0 to 9000, a flipped bit anywhere, in-order
// completion) on the kernel's software drivers, and afalg's own tests.
func TestAFALGSoftware(t *testing.T) {
	g := guest(t)
	if deviceLoaded(t, g) {
		t.Fatal("the device's driver is loaded already: this test must run first")
	}
	runConformance(t, g, "afalg")
	out, err := g.RunTest(context.Background(), 10*time.Minute, afalgPkg, nil, "-test.v", "-test.run",
		"^Test(KnownAnswers|CipherOnly|DeviceRequests|DriverReported|SessionAllocates)")
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(out, 6000))
	}
	requirePassed(t, out, "TestKnownAnswersGCM", "TestKnownAnswersCiphers", "TestKnownAnswersHMAC",
		"TestCipherOnlyAgainstCPU", "TestDeviceRequests", "TestDriverReported", "TestSessionAllocatesNothing")
	if !strings.Contains(out, "afalg-driver authenc(hmac(sha1-generic),cbc(aes-generic))") {
		t.Errorf("the software run was not served by cbc(aes-generic):\n%s", tail(out, 3000))
	}
}

// usedIndex reads the device's data queue used index.
func usedIndex(t *testing.T, g *Guest) uint16 {
	t.Helper()
	n, err := g.CryptoRequests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAFALGDevice: the same on QEMU's virtio-crypto device, through the
// guest kernel's virtio_crypto driver (afalg:virtio_crypto_aes_cbc, which
// serves the AES-CBC suites), and the proof that the device did the work:
// the data virtqueue's used index, read from QEMU, advances by exactly the
// number of requests the engine sent.
func TestAFALGDevice(t *testing.T) {
	g := withDevice(t)
	engine := "afalg:" + device
	before := usedIndex(t, g)
	runConformance(t, g, engine)
	t.Logf("conformance: the device completed %d requests", usedIndex(t, g)-before)
	if usedIndex(t, g) == before {
		t.Fatal("the device's data queue completed nothing during the conformance tests")
	}

	env := []string{"ESPGW_AFALG_DRIVER=" + device}
	before = usedIndex(t, g)
	out, err := g.RunTest(context.Background(), 5*time.Minute, afalgPkg, env, "-test.v", "-test.run", "^TestDeviceRequests$")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	requirePassed(t, out, "TestDeviceRequests")
	var sent uint16
	if _, err := fmt.Sscanf(out[strings.Index(out, "afalg-device-requests "):], "afalg-device-requests %d", &sent); err != nil {
		t.Fatalf("no request count in %q", out)
	}
	if got := usedIndex(t, g) - before; got != sent {
		t.Fatalf("the device completed %d requests, the engine sent %d", got, sent)
	}
	t.Logf("the engine sent %d requests and the device's used index advanced by exactly %d", sent, sent)

	out, err = g.RunTest(context.Background(), 10*time.Minute, afalgPkg, env, "-test.v", "-test.run",
		"^Test(KnownAnswersCiphers|CipherOnly|DriverReported|UnservableSuite|SessionAllocates)")
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(out, 6000))
	}
	requirePassed(t, out, "TestKnownAnswersCiphers", "TestCipherOnlyAgainstCPU", "TestDriverReported", "TestUnservableSuite", "TestSessionAllocatesNothing")
	if !strings.Contains(out, "afalg-driver authenc(hmac(sha1-generic),"+device+") | sha1-generic: kernel, "+device+": virtio_crypto") {
		t.Errorf("the device run does not report the device's driver:\n%s", tail(out, 3000))
	}
}
