package interop

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// The tests share one bed, and so one guest boot; kernelRelease is the
// guest's, for the matrix.
var (
	shared        labtest.Shared[*Bed]
	kernelRelease string
)

// matrix collects what the tests ran; TestMain writes it when asked.
var matrix Matrix

// matrixCommand regenerates docs/interop-matrix.md.
const matrixCommand = "ESPGW_WRITE_MATRIX=1 go test -count=1 -timeout 30m ./internal/lab/interop/"

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Close(&code, "interop bed", (*Bed).Close)
	scapyShared.Close(&code, "scapy interop bed", (*Bed).Close)
	labtest.Cleanup()
	if os.Getenv("ESPGW_WRITE_MATRIX") == "1" && matrix.Len() > 0 {
		path := filepath.Join("..", "..", "..", "docs", "interop-matrix.md")
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = matrix.WriteMarkdown(path, "espgw interop matrix", matrixCommand)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		} else {
			fmt.Fprintln(os.Stderr, "wrote", path)
		}
	}
	if code == 0 && !testing.Short() {
		if left, _ := netns.List("ki"); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "interop tests left namespaces behind:", strings.Join(left, " "))
			code = 1
		}
	}
	os.Exit(code)
}

// sharedBed builds the bed on first use, or fails the test saying what is
// missing and how to get it.
func sharedBed(t *testing.T) *Bed {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG and runs espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "qemu-system-x86_64", "ping")
	binary := labtest.Espgw(t)
	return shared.Get(t, "gateway ↔ kernel interop bed", func() (*Bed, error) { return bootBed(binary) })
}

func bootBed(binary string) (*Bed, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// Offline: never downloads; rebuilds the agent and initramfs when this
	// tree changed them.
	assets, err := kernelpeer.Prepare(ctx, kernelpeer.PrepareOptions{Offline: true})
	if err != nil {
		return nil, fmt.Errorf("%w (run `%s`)", err, kernelpeer.PrepareCommand)
	}
	kernelRelease = assets.KernelRelease
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	b, err := StartBed(ctx, BedOptions{Binary: binary, Prefix: "ki", BootTimeout: 5 * time.Minute, Log: log})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "interop bed up in %v: kernel %s booted in %v (qemu CPU %v)\n",
		time.Since(start).Round(time.Millisecond), assets.KernelRelease, b.Peer.BootTime.Round(time.Millisecond), b.Peer.BootCPU)
	return b, nil
}

// The suites proven against the kernel, by the CLI's names.
var suiteNames = []string{
	"aes-cbc-128+hmac-sha1-96",
	"aes-cbc-256+hmac-sha1-96",
	"aes-cbc-128+hmac-sha2-256-128",
	"aes-cbc-256+hmac-sha2-256-128",
	"3des-cbc+hmac-sha1-96",
	"aes-ctr-128+hmac-sha1-96",
	"aes-gcm-16-128",
}

// modernSuiteNames are the AEADs after RFC 4106, each at one key size of
// its own. They run on four of the eight combinations, which between them
// cover both modes, both encapsulations and ESN on and off.
var modernSuiteNames = []string{
	"chacha20-poly1305",
	"aes-gmac-128",
	"aes-ccm-8-128",
	"aes-ccm-12-192",
	"aes-ccm-16-256",
}

// modernCombos are the mode, encapsulation and ESN settings the modern
// suites run with.
var modernCombos = []struct {
	mode  sa.Mode
	encap sa.Encap
	esn   bool
}{
	{sa.Tunnel, sa.EncapNone, false},
	{sa.Tunnel, sa.EncapUDP, true},
	{sa.Transport, sa.EncapNone, true},
	{sa.Transport, sa.EncapUDP, false},
}

func parseSuite(t *testing.T, name string) (sa.Suite, int) {
	s, bits, err := testbed.ParseSuite(name)
	if err != nil {
		t.Fatal(err)
	}
	return s, bits
}

// Ping payload sizes, a spread over 0–1400.
var (
	pingSizes4 = []int{0, 1, 56, 333, 1000, 1400}
	pingSizes6 = []int{0, 1400}
)

// transferBytes is the size of each TCP transfer. The guest's crypto runs
// under TCG emulation: 3DES moves a few hundred KiB a second there.
const transferBytes = 256 << 10

// TestGatewayKernelInterop runs espgw's gateway against the Linux kernel's
// ESP for every suite, mode, encapsulation and ESN setting: pings of a
// spread of sizes and a TCP transfer checked by sha256, both directions,
// then the kernel's counters must show no error and agree with espgw's.
func TestGatewayKernelInterop(t *testing.T) {
	b := sharedBed(t)
	for _, name := range suiteNames {
		suite, bits := parseSuite(t, name)
		for _, mode := range []sa.Mode{sa.Tunnel, sa.Transport} {
			for _, encap := range []sa.Encap{sa.EncapNone, sa.EncapUDP} {
				for _, esn := range []bool{false, true} {
					c := Case{Suite: suite, AESBits: bits, Mode: mode, Encap: encap, ESN: esn}
					ok := t.Run(c.Name(), func(t *testing.T) { checkTraffic(t, b, c) })
					matrix.Add(MatrixRow{Suite: name, Mode: mode.String(), Encap: EncapName(encap), ESN: esn,
						Peer: "linux-xfrm " + kernelRelease, Checks: "ping+tcp+counters", Pass: ok})
				}
			}
		}
	}
	for _, name := range modernSuiteNames {
		suite, bits := parseSuite(t, name)
		for _, m := range modernCombos {
			c := Case{Suite: suite, AESBits: bits, Mode: m.mode, Encap: m.encap, ESN: m.esn}
			ok := t.Run(c.Name(), func(t *testing.T) { checkTraffic(t, b, c) })
			matrix.Add(MatrixRow{Suite: name, Mode: m.mode.String(), Encap: EncapName(m.encap), ESN: m.esn,
				Peer: "linux-xfrm " + kernelRelease, Checks: "ping+tcp+counters", Pass: ok})
		}
	}
}

// TestGatewayKernelGCMWith12ByteICV runs espgw's gateway against the
// kernel's rfc4106(gcm(aes)) with a 96-bit ICV (RFC 4106's 12-octet ICV):
// pings and a TCP transfer both ways, the kernel's counters clean.
func TestGatewayKernelGCMWith12ByteICV(t *testing.T) {
	b := sharedBed(t)
	c := Case{Suite: sa.Suite{Cipher: sa.CipherAESGCM12}, AESBits: 256, Mode: sa.Tunnel, Encap: sa.EncapUDP, ESN: true}
	ok := t.Run(c.Name(), func(t *testing.T) { checkTraffic(t, b, c) })
	matrix.Add(MatrixRow{Suite: testbed.SuiteName(c.Suite, c.AESBits), Mode: c.Mode.String(), Encap: EncapName(c.Encap), ESN: c.ESN,
		Peer: "linux-xfrm " + kernelRelease, Checks: "ping+tcp+counters", Pass: ok})
}

// configure sets c up on b for a test that may take timeout; the context
// ends with the test.
func configure(t *testing.T, b *Bed, c Case, timeout time.Duration) (context.Context, *Tunnel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	tun, err := b.Configure(ctx, c)
	if err != nil {
		t.Fatalf("configure: %v", err)
	}
	return ctx, tun
}

func checkTraffic(t *testing.T, b *Bed, c Case) {
	start := time.Now()
	ctx, tun := configure(t, b, c, 3*time.Minute)
	before, err := b.Peer.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stray := watchStray(t, b, tun)
	defer func() {
		if t.Failed() {
			t.Logf("gw1 log:\n%s\npackets into gw1's TUN outside the tunnel's flows:\n%s", b.GatewayOutput(), stray())
		}
	}()
	checkPings(t, ctx, b, tun, 2, func(v6 bool) []int {
		if v6 {
			return pingSizes6
		}
		return pingSizes4
	})
	pings := time.Since(start)
	up, err := b.Peer.SendTCP(ctx, tun.Near, netip.AddrPortFrom(tun.FarAddrs[0], farPort), transferBytes, time.Minute)
	if err != nil {
		t.Errorf("TCP to the kernel: %v", err)
	}
	down, err := b.Peer.ReceiveTCP(ctx, tun.Near, netip.AddrPortFrom(tun.NearAddrs[0], nearPort), transferBytes, time.Minute)
	if err != nil {
		t.Errorf("TCP from the kernel: %v", err)
	}
	checkCounters(t, ctx, b, tun, before, 0, 0)
	t.Logf("%s: pings %v, TCP %d KiB up %v, down %v, total %v", c.Name(), pings.Round(time.Millisecond),
		transferBytes>>10, up.Duration.Round(time.Millisecond), down.Duration.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// checkPings pings every far address from the tunnel's near end, count
// requests of each size sizes gives for the address's family, and every
// near address from the guest, one request of each size: every request
// must be answered.
func checkPings(t *testing.T, ctx context.Context, b *Bed, tun *Tunnel, count int, sizes func(v6 bool) []int) {
	t.Helper()
	for _, far := range tun.FarAddrs {
		for _, size := range sizes(far.Is6()) {
			r, err := PingNear(ctx, tun.Near, far, size, count)
			if err != nil {
				t.Fatal(err)
			}
			// PingNear sends until count replies came or its deadline passed.
			if r.Received < count {
				t.Errorf("ping %s → %s, %d bytes: %d replies to %d requests\n%s", tun.Near.Short(), far, size, r.Received, r.Sent, r.Output)
			}
		}
	}
	for _, near := range tun.NearAddrs {
		rs, err := b.Peer.PingSizes(ctx, near, sizes(near.Is6()), 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			if r.Received != r.Sent {
				t.Errorf("ping guest → %s, %d bytes: %d of %d replies\n%s", near, sizes(near.Is6())[i], r.Received, r.Sent, r.Output)
			}
		}
	}
}

// checkCounters compares the kernel's counters with gw1's after traffic:
// every packet gw1 sealed was opened by the kernel (less the tampered and
// replayed ones the relay made, which the kernel must count as such), every
// packet the kernel sent was opened by gw1, the sequence numbers agree,
// and neither side counted any other error.
func checkCounters(t *testing.T, ctx context.Context, b *Bed, tun *Tunnel, before kernelpeer.Counters, corrupted, replayed uint64) {
	t.Helper()
	var kc kernelpeer.Counters
	var gs gateway.Stats
	var kin, kout *sa.XFRMState
	var gout, gin *gateway.SAStats
	// Packets still in flight when the traffic ended (a last ACK) settle
	// within moments; read until both sides agree or a deadline passes.
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if kc, err = b.Peer.Counters(ctx); err != nil {
			t.Fatal(err)
		}
		if gs, err = b.GatewayStats(ctx); err != nil {
			t.Fatal(err)
		}
		kin, kout = kc.State(tun.Out.Dst, tun.Out.SPI), kc.State(tun.In.Dst, tun.In.SPI)
		gout, gin = gs.SA(tun.Out.SPI), gs.SA(tun.In.SPI)
		if kin == nil || kout == nil || gout == nil || gin == nil {
			t.Fatalf("SAs missing: kernel in %v out %v, gw1 out %v in %v", kin != nil, kout != nil, gout != nil, gin != nil)
		}
		settled := gout.SealedPackets == kin.Packets+corrupted && kout.Packets == gin.OpenedPackets
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("gw1 sealed %d packets (%d bytes, last seq %#x), kernel opened %d (%d bytes, highest %#x); kernel sealed %d (%d bytes, last %#x), gw1 opened %d (%d bytes, highest %#x)",
		gout.SealedPackets, gout.SealedBytes, gout.LastSeq, kin.Packets, kin.Bytes, kin.Seq,
		kout.Packets, kout.Bytes, kout.OSeq, gin.OpenedPackets, gin.OpenedBytes, gin.Highest)
	if gout.SealedPackets == 0 || kout.Packets == 0 {
		t.Errorf("no traffic counted: gw1 sealed %d, kernel sealed %d", gout.SealedPackets, kout.Packets)
	}
	if gout.SealedPackets != kin.Packets+corrupted {
		t.Errorf("gw1 sealed %d packets on SA %#x, the kernel opened %d and %d were tampered with", gout.SealedPackets, tun.Out.SPI, kin.Packets, corrupted)
	}
	if kout.Packets != gin.OpenedPackets {
		t.Errorf("the kernel sealed %d packets on SA %#x, gw1 opened %d", kout.Packets, tun.In.SPI, gin.OpenedPackets)
	}
	if gout.LastSeq != tun.Out.InitialSeq+gout.SealedPackets {
		t.Errorf("gw1's last sequence number %#x, want InitialSeq %#x + %d sealed", gout.LastSeq, tun.Out.InitialSeq, gout.SealedPackets)
	}
	if corrupted == 0 && kin.Seq != gout.LastSeq {
		t.Errorf("the kernel's highest received sequence number %#x, gw1's last sent %#x", kin.Seq, gout.LastSeq)
	}
	if kout.OSeq != gin.Highest || kout.OSeq != tun.In.InitialSeq+kout.Packets {
		t.Errorf("the kernel's last sent sequence number %#x, gw1's highest accepted %#x, want InitialSeq %#x + %d",
			kout.OSeq, gin.Highest, tun.In.InitialSeq, kout.Packets)
	}
	// The kernel counts inner bytes without the IP header in transport
	// mode (the payload after it), with it in tunnel mode; gw1's opened
	// bytes are whole inner packets (IPv4 here: 20-byte headers).
	wantBytes := gin.OpenedBytes
	if tun.Mode == sa.Transport {
		wantBytes -= 20 * gin.OpenedPackets
	}
	if kout.Bytes != wantBytes {
		t.Errorf("the kernel sealed %d inner bytes on SA %#x, gw1 opened %d (%d less IPv4 headers in transport mode)", kout.Bytes, tun.In.SPI, gin.OpenedBytes, wantBytes)
	}
	if err := kc.CheckDrops(before, tun.Out, kernelpeer.Drops{IntegrityFailed: corrupted, Replayed: replayed}, true); err != nil {
		t.Error(err)
	}
	checkNoDrops(t, gs, gout, gin)
}

// checkNoDrops fails the test if gw1 dropped a packet, on its SAs or on
// none.
func checkNoDrops(t *testing.T, gs gateway.Stats, sas ...*gateway.SAStats) {
	t.Helper()
	for _, s := range sas {
		if len(s.Drops) > 0 {
			t.Errorf("gw1 SA %s dropped packets: %v", s.SPI, s.Drops)
		}
	}
	if len(gs.Drops) > 0 {
		t.Errorf("gw1 dropped packets no SA owns: %v", gs.Drops)
	}
}

// TestKernelCountsTamperedAndReplayed has the relay between gw1 and the
// guest corrupt and replay some of gw1's ESP packets (internal/lab/impair,
// fixed seed): the kernel must count exactly the corrupted ones as
// integrity failures (XfrmInStateProtoError) and exactly the replayed
// copies as replays (XfrmInStateSeqError), and open all the others.
func TestKernelCountsTamperedAndReplayed(t *testing.T) {
	b := sharedBed(t)
	cases := []Case{
		{Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}, AESBits: 128, Mode: sa.Tunnel, Encap: sa.EncapNone},
		{Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}, AESBits: 256, Mode: sa.Transport, Encap: sa.EncapUDP, ESN: true},
		{Suite: sa.Suite{Cipher: sa.Cipher3DES, Auth: sa.AuthHMACSHA1_96}, Mode: sa.Tunnel, Encap: sa.EncapUDP},
		{Suite: sa.Suite{Cipher: sa.CipherAESCTR, Auth: sa.AuthHMACSHA1_96}, AESBits: 128, Mode: sa.Transport, Encap: sa.EncapNone},
		{Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, AESBits: 128, Mode: sa.Tunnel, Encap: sa.EncapNone, ESN: true},
	}
	for i, c := range cases {
		imp := impair.DefaultConfig()
		imp.Seed = uint64(i + 1)
		imp.Corrupt.Percent = 20
		imp.Replay.Percent = 20
		c.Impair = &imp
		ok := t.Run(c.Name(), func(t *testing.T) { checkImpaired(t, b, c) })
		matrix.Add(MatrixRow{Suite: testbed.SuiteName(c.Suite, c.AESBits), Mode: c.Mode.String(), Encap: EncapName(c.Encap), ESN: c.ESN,
			Peer: "linux-xfrm " + kernelRelease, Checks: "tamper+replay counted", Pass: ok})
	}
}

func checkImpaired(t *testing.T, b *Bed, c Case) {
	ctx, tun := configure(t, b, c, 2*time.Minute)
	before, err := b.Peer.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const count = 40
	r, err := PingNear(ctx, tun.Near, tun.FarAddrs[0], 100, count)
	if err != nil {
		t.Fatal(err)
	}
	// Replayed copies leave the relay 10 ms after their original; let the
	// last ones arrive.
	time.Sleep(500 * time.Millisecond)
	imp := b.RelayCounters().AToB.Impair
	t.Logf("ping: %d replies to %d requests; relay gw1→guest: matched %d, corrupted %d, replayed %d",
		r.Received, r.Sent, imp.Matched, imp.Corrupted, imp.Replayed)
	if imp.Corrupted == 0 || imp.Replayed == 0 {
		t.Fatalf("the relay corrupted %d and replayed %d packets: the test proves nothing without both", imp.Corrupted, imp.Replayed)
	}
	// ping sends until count replies came: the corrupted requests get
	// none, and so must have been resent; every other request is answered
	// (the replies to the last ones may come after ping has exited).
	if r.Received != r.Sent-int(imp.Corrupted) || r.Received < count {
		t.Errorf("%d echo replies to %d requests, want %d (every request but the %d corrupted) and at least %d",
			r.Received, r.Sent, r.Sent-int(imp.Corrupted), imp.Corrupted, count)
	}
	checkCounters(t, ctx, b, tun, before, imp.Corrupted, imp.Replayed)
}

// watchStray captures what enters gw1's TUN outside the case's own flows,
// to explain a drop or an extra packet when a case fails.
func watchStray(t *testing.T, b *Bed, tun *Tunnel) func() string {
	filter := fmt.Sprintf("not (host %s and host %s)", GW1WAN.Addr(), GuestWAN.Addr())
	if tun.Mode == sa.Tunnel {
		filter = fmt.Sprintf("not (net %s or net %s)", HostA4.Masked(), HostA6.Masked())
	}
	file := filepath.Join(b.Dir, "stray.pcap")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := b.GW1.Command(ctx, "tcpdump", "-U", "-ni", tunIf, "-c", "20", "-w", file, filter)
	if err := cmd.Start(); err != nil {
		t.Logf("tcpdump on gw1's TUN: %v", err)
		cancel()
		return func() string { return "" }
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	return func() string {
		out, _ := exec.Command("tcpdump", "-nvr", file).CombinedOutput()
		return string(out)
	}
}
