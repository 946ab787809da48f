package strongswan

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

// TestIKEWithCharon negotiates IKEv2 between espgw's ike package on gw1
// and strongSwan's charon on gw2, each side initiating in turn, with IKE
// aes128-sha256-x25519 and each of two ESP proposals. charon's
// statusall must show the IKE SA ESTABLISHED and the CHILD_SA INSTALLED
// with espgw's SPIs, and the CHILD_SA keys charon logs (chd = 4) must be
// the ones espgw derived. Then a liveness check, and espgw deletes the
// IKE SA, which charon must drop.
func TestIKEWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		esp             string
		charonInitiates bool
	}{
		{"aes128gcm16", false},
		{"aes128-sha256", false},
		{"aes128gcm16", true},
		{"aes128-sha256", true},
	} {
		name := "espgw-initiates"
		if c.charonInitiates {
			name = "charon-initiates"
		}
		t.Run(name+"/"+c.esp, func(t *testing.T) { ikeWithCharon(t, c.esp, c.charonInitiates) })
	}
}

func ikeWithCharon(t *testing.T, esp string, charonInitiates bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	topo, err := netns.NewTopology("ik", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	psk := make([]byte, 16)
	rand.Read(psk)
	secret := hex.EncodeToString(psk)
	local, remote := a.GW1WAN4.Addr(), a.GW2WAN4.Addr()

	ikeP, err := ike.ParseProposals(ike.ProtoIKE, "aes128-sha256-x25519")
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, esp)
	if err != nil {
		t.Fatal(err)
	}
	children := make(chan *ike.Child, 1)
	cfg := ike.Config{LocalID: ike.FQDN("gw1"), RemoteID: ike.FQDN("gw2"), PSK: []byte(secret), IKE: ikeP, ESP: espP,
		LocalTS: []ike.Selector{ike.PrefixSelector(a.LANA4)}, RemoteTS: []ike.Selector{ike.PrefixSelector(a.LANB4)},
		OnChild: func(_ *ike.IKESA, c *ike.Child) { children <- c }}
	var tr *ike.Transport
	if err := topo.GW1.Do(func() (err error) { tr, err = ike.Listen(local); return err }); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ep, err := ike.NewEndpoint(cfg, local, tr.Send)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- tr.Serve(ctx, ep) }()
	defer func() { cancel(); <-served }()

	ch, err := Start(ctx, Config{NS: topo.GW2, Dir: filepath.Join(t.TempDir(), "gw2"), Local: remote, Remote: local,
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: secret, Initiate: charonInitiates,
		IKE: "aes128-sha256-x25519", ESP: esp})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Kill()

	var child *ike.Child
	var s *ike.IKESA
	if charonInitiates {
		select {
		case child = <-children:
		case <-time.After(30 * time.Second):
			t.Fatalf("charon's IKE SA did not come up at espgw within 30s; espgw counts %v\ncharon:\n%s", ep.Counts(), ch.Output())
		}
		for _, sa := range ep.SAs() {
			s = sa
		}
	} else {
		if s, err = ep.Initiate(ctx, netip.AddrPortFrom(remote, ike.Port)); err != nil {
			t.Fatalf("espgw initiating: %v; counts %v\ncharon:\n%s", err, ep.Counts(), ch.Output())
		}
		child = s.Children()[0]
	}
	if _, err := ch.Child(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := ch.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// charon names the CHILD_SA by its inbound and outbound SPIs.
	spis := fmt.Sprintf("%08x_i %08x_o", child.OutSPI, child.InSPI)
	if !strings.Contains(st, "ESTABLISHED") || !strings.Contains(st, "INSTALLED") || !strings.Contains(st, spis) {
		t.Fatalf("charon's status lacks ESTABLISHED, INSTALLED or SPIs %s:\n%s", spis, st)
	}
	if !s.NAT() || !child.UDP {
		t.Errorf("charon fakes a NAT (forceencaps): espgw saw none")
	}

	in, out, err := child.SAs()
	if err != nil {
		t.Fatal(err)
	}
	logged, err := sa.Load(ch.LogPath())
	if err != nil {
		t.Fatalf("read charon's log: %v", err)
	}
	if len(logged.SAs) != 2 {
		t.Fatalf("charon's log gave %d SAs, want 2", len(logged.SAs))
	}
	for _, theirs := range logged.SAs {
		var ours *sa.SA
		for _, o := range []*sa.SA{in, out} {
			if o.SPI == theirs.SPI {
				ours = o
			}
		}
		switch {
		case ours == nil:
			t.Errorf("charon has SA %#x, espgw has %#x and %#x", theirs.SPI, in.SPI, out.SPI)
		case ours.Suite != theirs.Suite || ours.Src != theirs.Src || ours.Dst != theirs.Dst:
			t.Errorf("SA %#x: espgw %v, charon %v", ours.SPI, ours, theirs)
		case string(ours.EncKey) != string(theirs.EncKey) || string(ours.AuthKey) != string(theirs.AuthKey):
			t.Errorf("SA %#x: espgw's keys are not charon's", ours.SPI)
		}
	}
	t.Logf("CHILD_SA %s in %#x out %#x, %s; espgw counts %v", esp, in.SPI, out.SPI, in.Suite, ep.Counts())

	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check: %v", err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, _ := ch.Status(ctx)
		if !strings.Contains(st, "ESTABLISHED") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("charon keeps the IKE SA espgw deleted:\n%s", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
