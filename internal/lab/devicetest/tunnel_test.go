package devicetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/nsrun"
	"github.com/espgw/espgw/sa"
)

// The tunnel's inner sides: the host gateway's TUN and the guest's.
var (
	hostInner  = netip.MustParseAddr("198.51.100.1")
	guestInner = netip.MustParseAddr("203.0.113.1")
)

// tunnel is an espgw gateway on the host (cpu engine, in the tap's
// namespace) and one inside the guest on the engine under test.
type tunnel struct {
	g       *Guest
	ns      string
	dir     string
	host    *exec.Cmd
	hostOut bytes.Buffer
	engine  string
}

func (tn *tunnel) hostBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(tn.dir, "espgw")
	root, err := ModuleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := Build(context.Background(), root, "./cmd/espgw", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startTunnel writes one SA pair (AES-CBC with HMAC-SHA1-96, random keys)
// and both gateways' configs, and starts both gateways.
func startTunnel(t *testing.T, g *Guest, engine string) *tunnel {
	t.Helper()
	tn := &tunnel{g: g, ns: g.Netns(), dir: t.TempDir(), engine: engine}
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}
	var sas []*sa.SA
	for i, spi := range []uint32{0x1001, 0x2001} {
		enc, auth, err := sa.RandomKeys(suite, 128)
		if err != nil {
			t.Fatal(err)
		}
		s := &sa.SA{SPI: spi, Mode: sa.Tunnel, Src: HostAddr.Addr(), Dst: GuestAddr.Addr(), Suite: suite,
			EncKey: enc, AuthKey: auth, ReplayWindow: 64}
		if i == 1 {
			s.Src, s.Dst = s.Dst, s.Src
		}
		sas = append(sas, s)
	}
	saFile := filepath.Join(tn.dir, "sas.yaml")
	if err := sa.WriteFile(saFile, &sa.Config{SAs: sas}); err != nil {
		t.Fatal(err)
	}
	conf := func(local, peer netip.Addr, addr string, route string, eng string) string {
		return fmt.Sprintf("local: %s\npeer: %s\nengine: %s\nmetrics: 127.0.0.1:9478\nouter-mtu: 9000\n"+
			"tun:\n  name: esp0\n  addresses: [%s]\n  routes: [%s]\nsa-file: sas.yaml\nstate-dir: state\n",
			local, peer, eng, addr, route)
	}
	hostConf := filepath.Join(tn.dir, "gw1.yaml")
	if err := os.WriteFile(hostConf, []byte(conf(HostAddr.Addr(), GuestAddr.Addr(), hostInner.String()+"/24", "203.0.113.0/24", "cpu")), 0o600); err != nil {
		t.Fatal(err)
	}
	// The guest's copy of the SA file travels over the control port,
	// which logs no command.
	sasYAML, err := os.ReadFile(saFile)
	if err != nil {
		t.Fatal(err)
	}
	script := "rm -rf /tmp/gw && mkdir -p /tmp/gw && cd /tmp/gw && umask 077 && cat > sas.yaml <<'EOF'\n" + string(sasYAML) + "EOF\n" +
		"cat > gw2.yaml <<'EOF'\n" + conf(GuestAddr.Addr(), HostAddr.Addr(), guestInner.String()+"/24", "198.51.100.0/24", engine) + "EOF\n"
	if _, err := g.Run(context.Background(), script); err != nil {
		t.Fatalf("write the guest gateway's files: %v", err)
	}
	bin := tn.hostBinary(t)
	tn.host = exec.Command("ip", "netns", "exec", tn.ns, bin, "run", "-c", hostConf)
	tn.host.Dir = tn.dir
	tn.host.Stdout, tn.host.Stderr = &tn.hostOut, &tn.hostOut
	if err := tn.host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tn.host.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { tn.host.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tn.host.Process.Kill()
		}
		// Wait until the gateway is gone: the next test takes the device.
		if err := tn.stopGuestGateway("INT"); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("host gateway:\n%s", tn.hostOut.String())
			log, _ := g.Run(context.Background(), "cat /tmp/gw/gw2.log")
			t.Logf("guest gateway:\n%s", log)
		}
	})
	tn.startGuestGateway(t)
	waitFor(t, "host gateway", func() error {
		_, err := exec.Command("ip", "netns", "exec", tn.ns, bin, "stats", "--json").Output()
		return err
	})
	return tn
}

// alive is a guest shell function: whether process $1 runs (the guest's
// init reaps nothing, so an exited gateway stays a zombie).
const alive = "alive() { [ -e /proc/$1 ] && ! grep -q '^State:[[:space:]]*Z' /proc/$1/status; }; "

func (tn *tunnel) startGuestGateway(t *testing.T) {
	t.Helper()
	if _, err := tn.g.Run(context.Background(), "cd /tmp/gw && (/espgw/espgw run -c gw2.yaml </dev/null >>gw2.log 2>&1 & echo $! >gw2.pid) </dev/null >/dev/null 2>&1"); err != nil {
		t.Fatal(err)
	}
	if out, err := tn.g.Run(context.Background(), alive+"sleep 0.5; alive $(cat /tmp/gw/gw2.pid)"); err != nil {
		log, _ := tn.g.Run(context.Background(), "cat /tmp/gw/gw2.log")
		t.Fatalf("the guest's gateway exited at start: %v %s\n%s", err, out, log)
	}
	waitFor(t, "guest gateway", func() error {
		_, err := tn.g.Run(context.Background(), "/espgw/espgw stats --json >/dev/null")
		return err
	})
}

// stopGuestGateway signals the guest's gateway and waits until it is gone,
// its files (the device's among them) closed; after 10 s it kills it.
func (tn *tunnel) stopGuestGateway(sig string) error {
	_, err := tn.g.Run(context.Background(), alive+"p=$(cat /tmp/gw/gw2.pid) || exit 1; kill -"+sig+" $p; "+
		"i=0; while alive $p && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done; "+
		"alive $p && kill -KILL $p; while alive $p; do sleep 0.2; done; rm -f /tmp/gw/gw2.pid")
	if err != nil {
		return fmt.Errorf("stop the guest's gateway: %w", err)
	}
	return nil
}

func waitFor(t *testing.T, what string, ok func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = ok(); err == nil {
			return
		}
	}
	t.Fatalf("%s did not come up: %v", what, err)
}

func (tn *tunnel) hostStats(t *testing.T) gateway.Stats {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", tn.ns, filepath.Join(tn.dir, "espgw"), "stats", "--json").Output()
	if err != nil {
		t.Fatalf("host gateway stats: %v", err)
	}
	var st gateway.Stats
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (tn *tunnel) guestStats(t *testing.T) gateway.Stats {
	t.Helper()
	out, err := tn.g.Run(context.Background(), "/espgw/espgw stats --json")
	if err != nil {
		t.Fatalf("guest gateway stats: %v", err)
	}
	var st gateway.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("guest gateway stats: %v: %s", err, out)
	}
	return st
}

// pings sends one echo request of every size each way and wants a reply.
func (tn *tunnel) pings(t *testing.T) int {
	t.Helper()
	n := 0
	for _, size := range []int{0, 1, 56, 100, 500, 1000, 1400} {
		if out, err := exec.Command("ip", "netns", "exec", tn.ns, "ping", "-c", "1", "-W", "10", "-s", fmt.Sprint(size),
			"-I", hostInner.String(), guestInner.String()).CombinedOutput(); err != nil {
			t.Fatalf("ping %d bytes host → guest: %v\n%s", size, err, out)
		}
		if out, err := tn.g.Run(context.Background(), fmt.Sprintf("ping -c 1 -W 10 -s %d %s", size, hostInner)); err != nil {
			t.Fatalf("ping %d bytes guest → host: %v\n%s", size, err, out)
		}
		n += 2
	}
	return n
}

// transfer sends random bytes over TCP through the tunnel both ways and
// compares their SHA-256 on the two ends.
func (tn *tunnel) transfer(t *testing.T, size int) {
	t.Helper()
	ctx := context.Background()
	h, err := vnetns.GetFromName(tn.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)

	// host → guest: busybox nc listens in the guest.
	if _, err := tn.g.Run(ctx, "rm -f /tmp/rx; (nc -l -p 5001 >/tmp/rx </dev/null & echo $! >/tmp/nc.pid) </dev/null >/dev/null 2>&1"); err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err = nsrun.Run(h, func() (err error) {
			conn, err = net.DialTimeout("tcp", net.JoinHostPort(guestInner.String(), "5001"), 5*time.Second)
			return err
		})
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("connect to the guest through the tunnel: %v", err)
	}
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	var got string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		out, _ := tn.g.Run(ctx, alive+"alive $(cat /tmp/nc.pid) || sha256sum /tmp/rx")
		if got = firstField(out); got != "" || time.Now().After(deadline) {
			break
		}
	}
	if got != hex.EncodeToString(want[:]) {
		t.Fatalf("host → guest: the guest received sha256 %q, sent %x", got, want)
	}

	// guest → host: the host listens in its namespace, the guest sends.
	var ln net.Listener
	if err := nsrun.Run(h, func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(hostInner.String(), "5002"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := tn.g.Run(ctx, fmt.Sprintf("head -c %d /dev/urandom >/tmp/tx && (nc %s 5002 </tmp/tx >/dev/null 2>&1 &) </dev/null >/dev/null 2>&1", size, hostInner)); err != nil {
		t.Fatal(err)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept the guest's connection: %v", err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	hsum := sha256.New()
	n, err := io.Copy(hsum, c)
	c.Close()
	if err != nil || n != int64(size) {
		t.Fatalf("guest → host: received %d bytes (%v), want %d", n, err, size)
	}
	out, err := tn.g.Run(ctx, "sha256sum /tmp/tx")
	if err != nil {
		t.Fatalf("sha256sum in the guest: %v: %q", err, out)
	}
	if gsum := firstField(out); gsum != hex.EncodeToString(hsum.Sum(nil)) {
		t.Fatalf("guest → host: sha256 %x here, %s sent", hsum.Sum(nil), gsum)
	}
}

// agree checks that what one side sealed on an SA the other opened, with
// no drops on either side.
func agree(t *testing.T, host, guest gateway.Stats) {
	t.Helper()
	bySPI := func(st gateway.Stats) map[string]gateway.SAStats {
		m := map[string]gateway.SAStats{}
		for _, s := range st.SAs {
			m[s.SPI] = s
		}
		return m
	}
	h, g := bySPI(host), bySPI(guest)
	for _, spi := range []string{"0x1001", "0x2001"} {
		hs, gs := h[spi], g[spi]
		sealed, opened := hs.SealedPackets+gs.SealedPackets, hs.OpenedPackets+gs.OpenedPackets
		if sealed == 0 || sealed != opened {
			t.Errorf("SA %s: sealed %d (host %d, guest %d), opened %d (host %d, guest %d)",
				spi, sealed, hs.SealedPackets, gs.SealedPackets, opened, hs.OpenedPackets, gs.OpenedPackets)
		}
		for _, d := range []map[string]uint64{hs.Drops, gs.Drops} {
			if len(d) > 0 {
				t.Errorf("SA %s: drops %v", spi, d)
			}
		}
	}
}

// TestVirtioGatewayInGuest: an espgw gateway in the guest on the virtio
// engine forms a tunnel with an espgw gateway on the host; pings of every
// size and a TCP transfer both ways, checked by SHA-256; the counters of
// the two sides agree and the device did the guest's cipher work; then the
// guest's gateway is killed and restarted, and the restarted one takes the
// device back and carries the tunnel again.
func TestVirtioGatewayInGuest(t *testing.T) {
	g := guest(t)
	tn := startTunnel(t, g, "virtio")
	tn.pings(t)
	tn.transfer(t, 1<<20)
	time.Sleep(500 * time.Millisecond)
	host, guestSt := tn.hostStats(t), tn.guestStats(t)
	agree(t, host, guestSt)
	if guestSt.Engine.Name != "virtio" || guestSt.Engine.Records == 0 || guestSt.Engine.Completions != guestSt.Engine.Records {
		t.Errorf("guest engine %q: %d records, %d completions", guestSt.Engine.Name, guestSt.Engine.Records, guestSt.Engine.Completions)
	}
	t.Logf("guest engine: %d requests to the device, %d doorbells, deepest queue %d", guestSt.Engine.Records, guestSt.Engine.Doorbells, guestSt.Engine.MaxQueue)

	// kill -9, then wait until the process is gone (its files closed):
	// the device is the restarted gateway's to take.
	if err := tn.stopGuestGateway("KILL"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Run(context.Background(), "/espgw/espgw stats --json >/dev/null 2>&1"); err == nil {
		t.Fatal("the killed gateway still answers")
	}
	tn.startGuestGateway(t)
	before := tn.guestStats(t).Engine.Records
	tn.pings(t)
	if after := tn.guestStats(t).Engine.Records; after <= before {
		t.Fatalf("the restarted gateway did no work on the device: %d requests, %d before the pings", after, before)
	}
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// TestVirtioWithoutDevice is the negative control: in a guest started
// without the device, the engine refuses with a clear error and nothing
// runs.
func TestVirtioWithoutDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU guest under TCG; run without -short")
	}
	guest(t) // after the device guest's tests: the two boots do not overlap
	ctx := context.Background()
	ns := fmt.Sprintf("dt0-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	g, err := Boot(ctx, GuestOptions{Commands: []string{"./cmd/espgw"}, Netns: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	out, err := g.Run(ctx, "/espgw/espgw speed -engine virtio -evp aes-128-cbc -seconds 1 2>&1")
	if err == nil || !strings.Contains(out, "no virtio-crypto device") {
		t.Fatalf("virtio engine in a guest without the device: %v\n%s", err, out)
	}
	t.Logf("without the device: %s", strings.TrimSpace(out))
}
