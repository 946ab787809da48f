package charonguest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/charonguest"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

func TestMain(m *testing.M) { labtest.Main(m) }

var (
	// gw1 is behind a NAT whose outside address, on the guest's tap, is
	// public; the device (charon in the guest) is dev.
	gw1       = netip.MustParsePrefix("198.51.100.253/30")
	natInside = netip.MustParsePrefix("198.51.100.254/30")
	public    = netip.MustParsePrefix("192.0.2.1/24")
	dev       = netip.MustParsePrefix("192.0.2.2/24")
)

// TestGatewayTransportThroughNAT runs an espgw gateway behind a real NAT
// (iptables MASQUERADE to other source ports) that brings up a
// transport-mode CHILD_SA by IKE with strongSwan's charon in the QEMU
// guest, whose kernel ESP gets it (RFC 7296 §2.23.1: each side names its
// own addresses, the SAs carry the IKE SA's). The device's SAs must be
// transport mode in UDP at the NAT's address, and TCP must cross both
// ways: the device's segments come with checksums over the NAT's address,
// which espgw makes anew over its own on opening (RFC 3948 §3.1.2); a
// gateway that did not would see every one of them dropped by its host.
func TestGatewayTransportThroughNAT(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU guest with charon and runs an espgw gateway behind a NAT; run without -short")
	}
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "iptables")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin := labtest.Espgw(t)
	dir := t.TempDir()

	nb, err := netns.New("cgn", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nb.Close() })
	home, err := nb.AddNamespace("gw1")
	if err != nil {
		t.Fatal(err)
	}
	nat, err := nb.AddNAT(ctx, home, netns.NAT{Name: "nat", HomeIf: "wan0", InsideIf: "inside0", Home: gw1, Inside: natInside, OutIf: "cgtap0", Ports: "40000-40999"})
	if err != nil {
		t.Fatal(err)
	}

	secret := make([]byte, 16)
	rand.Read(secret)
	psk := hex.EncodeToString(secret)
	files, err := charonguest.Files(charonguest.Config{Dir: filepath.Join(dir, "charon"), LocalAddr: dev.Addr(), RemoteAddr: public.Addr(),
		LocalID: "appliance.example", RemoteID: "gw1.example", PSK: psk,
		LocalTS: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}, RemoteTS: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/25")},
		Proposals: "aes128-sha256-x25519", ESPProposals: "aes128gcm16", Transport: true})
	if err != nil {
		t.Fatal(err)
	}
	assets, err := kernelpeer.Prepare(ctx, kernelpeer.PrepareOptions{Offline: true})
	if err != nil {
		t.Fatalf("the guest's kernel (scripts/prepare-kernel-peer.sh): %v", err)
	}
	// The guest's agent holds no port-4500 socket: charon owns it.
	peer, err := kernelpeer.Start(ctx, kernelpeer.Config{Netns: nat.Name(), Tap: "cgtap0", HostAddrs: []netip.Prefix{public},
		GuestAddrs: []netip.Prefix{dev}, NATTPorts: []uint16{}, Assets: assets, Files: files, MemoryMB: 384,
		BootTimeout: 5 * time.Minute, CommandTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	ch, err := charonguest.Start(ctx, peer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("charon's log:\n%s", ch.Log(context.Background()))
		}
	})

	t.Setenv("ESPGW_PSK", psk)
	conf := filepath.Join(dir, "gw1.yaml")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`local: %s
tun:
  name: espgw0
state-dir: state
engine: %s
ike:
  connections:
    gw1-appliance:
      local_addrs: [%s]
      remote_addrs: [%s]
      local: {id: gw1.example, auth: psk}
      remote: {id: appliance.example, auth: psk}
      proposals: aes128-sha256-x25519
      psk_env: ESPGW_PSK
      children:
        host:
          mode: transport
          esp_proposals: aes128gcm16
          start_action: start
`, gw1.Addr(), testbed.DefaultEngine(), gw1.Addr(), dev.Addr())), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	g, err := testbed.RunGateway(ctx, home, bin, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out, _ := g.Stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("gw1's log:\n%s", out)
		}
	})

	// The device's SAs: transport mode, ESP in UDP, espgw at the NAT's
	// address and a port it mapped to.
	var states string
	for deadline := time.Now().Add(45 * time.Second); ; {
		states, err = peer.Run(ctx, "ip xfrm state")
		if err == nil && strings.Count(states, "mode transport") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the device has no transport-mode SAs with gw1 after 45 s: %v\n%s\ncharon's SAs:\n%s", err, states, swanctlSAs(ctx, ch))
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, want := range []string{"src " + public.Addr().String() + " dst " + dev.Addr().String(), "src " + dev.Addr().String() + " dst " + public.Addr().String(), "encap type espinudp sport 4500", "dport 4500"} {
		if !strings.Contains(states, want) {
			t.Errorf("the device's SAs lack %q:\n%s", want, states)
		}
	}
	if !strings.Contains(states, "sport 40") && !strings.Contains(states, "dport 40") {
		t.Errorf("the device's SAs reach gw1 on no port the NAT maps to (40000-40999):\n%s", states)
	}
	// TCP both ways: gw1 sends to the device (which acknowledges through
	// the SAs), then the device sends to gw1, to its own address: the
	// device's segments go to the NAT's.
	tr, err := peer.SendTCP(ctx, home, netip.AddrPortFrom(dev.Addr(), 5001), 256<<10, 60*time.Second)
	if err != nil {
		t.Fatalf("TCP from gw1 to the device through the NAT: %v\ncharon's SAs:\n%s", err, swanctlSAs(ctx, ch))
	}
	t.Logf("gw1 → device: %d bytes in %v", tr.Bytes, tr.Duration)
	st, err := testbed.GatewayStats(ctx, home, bin)
	if err != nil {
		t.Fatal(err)
	}
	var opened uint64
	for _, s := range st.SAs {
		if s.Mode == "transport" && !s.Retired {
			opened += s.OpenedPackets
		}
	}
	if opened == 0 {
		t.Errorf("gw1 opened no packet on its transport-mode SAs: %+v", st.SAs)
	}
	t.Logf("gw1 opened %d packets of the device's on its transport-mode SA; charon's SAs:\n%s", opened, swanctlSAs(ctx, ch))
}

func swanctlSAs(ctx context.Context, ch *charonguest.Guest) string {
	out, err := ch.Swanctl(ctx, "--list-sas")
	if err != nil {
		return err.Error()
	}
	return out
}
