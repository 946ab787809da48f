package cryptoguest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/speed"
	"github.com/espgw/espgw/sa"
)

// The tests share one guest with the device, booted on first use, and run
// in the order of this file: the software-driver tests come before the
// device's driver is loaded (from then on it outranks the kernel's
// software for cbc(aes)).
var (
	shared labtest.Shared[*Guest]
	// withDriver is the shared guest once the device's driver is loaded.
	withDriver labtest.Shared[*Guest]
)

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
	return bootShared(t, &shared, "crypto guest", Options{CryptoDevice: true, OpenSSL: true, Tests: []string{enginesPkg, afalgPkg}, Prefix: "cga"})
}

// withDevice loads the device's driver and checks that /proc/crypto lists
// it.
func withDevice(t *testing.T) *Guest {
	t.Helper()
	g := guest(t)
	return withDriver.Get(t, "the device's driver", func() (*Guest, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := g.LoadModules(ctx, "virtio_crypto"); err != nil {
			return nil, err
		}
		out, err := g.Run(ctx, "grep -A2 '^driver *: "+device+"$' /proc/crypto")
		if err != nil || !strings.Contains(out, "virtio_crypto") {
			return nil, fmt.Errorf("/proc/crypto lists no %s after loading virtio_crypto: %v: %s", device, err, out)
		}
		return g, nil
	})
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
	lines := strings.Split(s, "\n")
	lines = slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(l, " INFO ") })
	s = strings.Join(lines, "\n")
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
		"^Test(KnownAnswers|CipherOnly|DeviceRequests|DriverReported|SessionAllocates|OversizedBatch|BackPressure)")
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(out, 6000))
	}
	requirePassed(t, out, "TestKnownAnswersGCM", "TestKnownAnswersModern", "TestKnownAnswersCiphers", "TestKnownAnswersHMAC",
		"TestCipherOnlyAgainstCPU", "TestDeviceRequests", "TestDriverReported", "TestSessionAllocatesNothing", "TestOversizedBatch", "TestBackPressure")
	if !strings.Contains(out, "afalg-driver authenc(hmac(sha1-generic),cbc(aes-generic))") {
		t.Errorf("the software run was not served by cbc(aes-generic):\n%s", tail(out, 3000))
	}
}

// speedSeconds is how long each size is timed: 1 s in the test suite,
// where only the runs themselves are checked; ESPGW_SPEED_SECONDS=3 for
// the numbers in BENCHMARKS.md.
func speedSeconds() string {
	return cmp.Or(os.Getenv("ESPGW_SPEED_SECONDS"), "1")
}

// speedResult is the JSON `espgw speed --json` prints.
type speedResult struct {
	speed.Result
	OpenSSL *speed.Compare `json:"openssl"`
}

// speed runs `espgw speed` in the guest and returns its result and table.
func runSpeed(t *testing.T, g *Guest, args ...string) (speedResult, string) {
	t.Helper()
	ctx := context.Background()
	// By the wall clock: the CPU time of the process leaves out the
	// device's work and the kernel threads' (openssl's own rate on the
	// device is infinite by CPU time).
	cmd := Espgw + " speed -elapsed -seconds " + speedSeconds() + " " + strings.Join(args, " ")
	out, err := g.RunFor(ctx, 10*time.Minute, cmd+" --json 2>/tmp/speed.err || { cat /tmp/speed.err; exit 1; }")
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	var r speedResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	// Rates are a benchmark's business, not a test's: a guest starved by
	// a loaded machine may finish no op within a second. That the runs
	// worked, on the driver named, is what is checked.
	if strings.HasPrefix(r.Engine, "afalg") && r.Stats.Records == 0 {
		t.Errorf("%s: the engine sent no request", cmd)
	}
	if strings.HasPrefix(r.Engine, "virtio") && (r.Stats.Records == 0 || r.Stats.Doorbells == 0 || r.Stats.Completions == 0) {
		t.Errorf("%s: the JSON counts %d requests, %d doorbells, %d completions: want every device counter", cmd, r.Stats.Records, r.Stats.Doorbells, r.Stats.Completions)
	}
	t.Logf("%s\n%s", cmd, formatSpeed(r))
	return r, formatSpeed(r)
}

// formatSpeed prints a result as a Markdown table row block.
func formatSpeed(r speedResult) string {
	var b strings.Builder
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s %s |", r.Engine, row.Label)
		for _, v := range row.KBps {
			fmt.Fprintf(&b, " %.0f |", v)
		}
		b.WriteString("\n")
		if r.OpenSSL != nil && len(r.OpenSSL.Rows) > 0 {
			fmt.Fprintf(&b, "| %s |", strings.Join(r.OpenSSL.Args, " "))
			for _, v := range r.OpenSSL.Rows[0].KBps {
				fmt.Fprintf(&b, " %.0f |", v)
			}
			b.WriteString("\n| ratio |")
			for _, v := range r.OpenSSL.Ratio[0] {
				fmt.Fprintf(&b, " %.2f× |", v)
			}
			b.WriteString("\n")
		}
	}
	for _, d := range r.Drivers {
		fmt.Fprintf(&b, "driver %s (%s), %d requests, %d most in flight\n", d.Driver, d.Module, r.Stats.Records, r.Stats.MaxQueue)
	}
	return b.String()
}

// TestAFALGSpeedSoftware: `espgw speed` on afalg with the kernel's
// software driver beside `openssl speed -engine afalg` (openssl's own
// AF_ALG engine, one request in flight) in the same guest. The numbers are
// a benchmark (BenchmarkAFALGSpeed, BENCHMARKS.md), not checked here.
func TestAFALGSpeedSoftware(t *testing.T) {
	g := guest(t)
	if deviceLoaded(t, g) {
		t.Fatal("the device's driver is loaded already: this test must run before TestAFALGDevice")
	}
	r, _ := runSpeed(t, g, "-evp aes-128-cbc -engine afalg -workers 1 --vs-openssl")
	if r.Stats.MaxQueue != 1 {
		t.Errorf("one socket, batches of one: %d ops in flight at most", r.Stats.MaxQueue)
	}
	if len(r.Drivers) == 0 || !strings.Contains(r.Drivers[0].Driver, "aes-generic") {
		t.Errorf("the software run names no software driver: %+v", r.Drivers)
	}
	if r.OpenSSL == nil || !strings.Contains(strings.Join(r.OpenSSL.Args, " "), "-engine afalg") {
		t.Errorf("openssl did not run with its afalg engine: %+v", r.OpenSSL)
	}
	// cpu and aesni beside it, and more sockets, are in the benchmark
	// (BenchmarkAFALGSpeed): the test suite only checks that the runs work.
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

// TestAFALGSpeedDevice: the same on the virtio-crypto device, with one
// socket and with four sockets in flight; the device's used index must
// advance by the requests the engine counted.
func TestAFALGSpeedDevice(t *testing.T) {
	g := withDevice(t)
	before := usedIndex(t, g)
	r, _ := runSpeed(t, g, "-evp aes-128-cbc -engine afalg:"+device+" -workers 1 --vs-openssl")
	if len(r.Drivers) == 0 || r.Drivers[0].Driver != device {
		t.Errorf("the device run names %+v, not %s", r.Drivers, device)
	}
	if usedIndex(t, g) == before {
		t.Error("the device completed nothing")
	}
	if r, _ := runSpeed(t, g, "-evp aes-128-cbc -engine afalg:"+device+" -workers 4 -batch 16"); r.Stats.MaxQueue != 16 {
		t.Errorf("four sockets, batches of 16: %d ops in flight at most", r.Stats.MaxQueue)
	}
}

// The tunnel's inner networks: the host gateway's TUN and the guest's.
var (
	hostInner  = netip.MustParsePrefix("198.51.100.1/24")
	guestInner = netip.MustParsePrefix("203.0.113.1/24")
)

// TestAFALGTunnel: an espgw gateway inside the guest, its crypto on the
// virtio-crypto device (afalg:virtio_crypto_aes_cbc, authencesn with ESN
// crossing 2^32 in both directions), forms a tunnel with an espgw gateway
// on the host (cpu engine): pings of 0 to 1400 bytes both ways, a TCP
// transfer each way checked by sha256, the gateways' counters agreeing,
// and the device's used index advancing by exactly the requests the
// guest's engine sent.
func TestAFALGTunnel(t *testing.T) {
	g := withDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sas := tunnelSAs(t, sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, 16, 32, func(out, in *sa.SA) {
		out.ESN, in.ESN = true, true
		out.InitialSeq, in.InitialSeq = 1<<32-5, 2<<32-5
	})
	startHostGateway(ctx, t, g, sas)

	// The guest's gateway, on the device.
	before := usedIndex(t, g)
	gw := startGuestGateway(ctx, t, g, sas, "afalg:"+device)

	// Pings both ways, 0 to 1400 bytes.
	pingBothWays(ctx, t, g, []int{0, 1, 56, 100, 500, 1000, 1200, 1400}, 3)

	// TCP both ways, checked by sha256.
	const n = 1 << 20
	if err := sendToGuest(ctx, g, n); err != nil {
		t.Error(err)
	}
	if err := receiveFromGuest(ctx, g, n); err != nil {
		t.Error(err)
	}

	// The counters agree: what one side sealed the other opened, nothing
	// dropped, and the guest's engine sent every request to the device.
	hOut, hIn, gOut, gIn, guestSt := tunnelCounters(ctx, t, g, gw)
	requests := guestSt.Engine.Records
	completed := usedIndex(t, g) - before
	t.Logf("host sealed %d opened %d; guest sealed %d opened %d; guest engine %s: %d requests (%+v); device completed %d",
		hOut.SealedPackets, hIn.OpenedPackets, gOut.SealedPackets, gIn.OpenedPackets, guestSt.Engine.Name, requests, guestSt.Engine.Drivers, completed)
	if want := gOut.SealedPackets + gIn.OpenedPackets; requests != want {
		t.Errorf("the guest's engine sent %d requests for %d packets", requests, want)
	}
	if uint64(completed) != requests%(1<<16) {
		t.Errorf("the device completed %d requests, the guest's engine sent %d", completed, requests)
	}
	if len(guestSt.Engine.Drivers) == 0 || !strings.Contains(guestSt.Engine.Drivers[0].Driver, "authencesn(hmac(sha256-generic),"+device+")") {
		t.Errorf("the guest's engine reports drivers %+v", guestSt.Engine.Drivers)
	}
}

// sendToGuest sends n random bytes over TCP from the host's inner address
// to busybox nc in the guest and compares sha256 sums.
func sendToGuest(ctx context.Context, g *Guest, n int) error {
	_, err := g.SendTCP(ctx, g.NS, netip.AddrPortFrom(guestInner.Addr(), 5001), n, 2*time.Minute)
	return err
}

// receiveFromGuest has busybox nc in the guest send n random bytes to a
// listener at the host's inner address and compares sha256 sums.
func receiveFromGuest(ctx context.Context, g *Guest, n int) error {
	_, err := g.ReceiveTCP(ctx, g.NS, netip.AddrPortFrom(hostInner.Addr(), 5002), n, 2*time.Minute)
	return err
}

// TestAFALGBindFailsWithoutDevice is the negative control: the very bind
// that works in the guest with the device (afalg:virtio_crypto_aes_cbc)
// fails, saying what /proc/crypto offers, in a guest started without it,
// where the virtio_crypto module loads but has no device to serve.
func TestAFALGBindFailsWithoutDevice(t *testing.T) {
	cmd := Espgw + " speed -elapsed -seconds 1 -bytes 1024 -evp aes-128-cbc -engine afalg:" + device + " 2>&1"
	with := withDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := with.RunFor(ctx, 5*time.Minute, cmd); err != nil {
		t.Fatalf("with the device: %v\n%s", err, out)
	}
	g := noDeviceGuest(t)
	if err := g.LoadModules(ctx, "virtio_crypto"); err != nil {
		t.Fatal(err)
	}
	out, err := g.RunFor(ctx, 5*time.Minute, "lsmod | grep -c '^virtio_crypto'; grep -c "+device+" /proc/crypto; "+cmd)
	if err == nil {
		t.Fatalf("the bind worked without the device:\n%s", out)
	}
	for _, want := range []string{"1\n0\n", `afalg:` + device + `: /proc/crypto lists no driver "` + device + `"`, "cbc(aes) is offered by: cbc(aes-generic) (kernel, priority 100)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output without the device lacks %q:\n%s", want, out)
		}
	}
	t.Logf("without the device: %s", tail(out, 600))
}
