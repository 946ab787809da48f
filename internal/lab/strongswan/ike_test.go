package strongswan

import (
	"cmp"
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

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestIKEWithCharon negotiates IKEv2 between espgw's ike package on gw1
// and strongSwan's charon on gw2, each side initiating in turn, with IKE
// aes128-sha256-x25519 and each of two ESP proposals. charon's
// statusall must show the IKE SA ESTABLISHED and the CHILD_SA INSTALLED
// with espgw's SPIs, and the CHILD_SA keys charon logs (chd = 4) must be
// the ones espgw derived. Then a liveness check, an IKE SA rekey by
// espgw, a CHILD_SA rekey by espgw under the new IKE SA (CREATE_CHILD_SA
// with REKEY_SA, the old one deleted; its keys come from the new SK_d), and
// espgw deletes the IKE SA, which charon must drop.
func TestIKEWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	for _, c := range []ikeCase{
		{ike: "aes128-sha256-x25519", esp: "aes128gcm16"},
		{ike: "aes128-sha256-x25519", esp: "aes128-sha256"},
		{ike: "aes128-sha256-x25519", esp: "aes128gcm16", charonInitiates: true},
		{ike: "aes128-sha256-x25519", esp: "aes128-sha256", charonInitiates: true},
		// The SK payload under AES-GCM, the NIST and MODP groups.
		{ike: "aes256gcm16-prfsha384-ecp384", esp: "aes256gcm16"},
		{ike: "aes256-sha512-modp3072", esp: "aes256-sha1", charonInitiates: true},
		// ChaCha20-Poly1305 (RFC 7634) for the SK payload and for ESP.
		{ike: "chacha20poly1305-prfsha256-x25519", esp: "chacha20poly1305"},
		{ike: "chacha20poly1305-prfsha512-ecp256", esp: "chacha20poly1305", charonInitiates: true},
		// The initiator's first group is not the responder's: an
		// INVALID_KE_PAYLOAD and a retry with the group asked for.
		{ike: "aes128-sha256-x25519-ecp256", esp: "aes128gcm16", charonIKE: "aes128-sha256-ecp256", keRetry: true},
		{ike: "aes128-sha256-ecp256", esp: "aes128gcm16", charonInitiates: true, charonIKE: "aes128-sha256-x25519-ecp256", keRetry: true},
		// charon with strongSwan's default IKE and ESP proposals: as
		// initiator it offers them all, and espgw picks its own among
		// them; as responder it takes espgw's from them.
		{ike: "aes256gcm16-prfsha384-ecp384", esp: "aes256gcm16", charonInitiates: true, charonIKE: "default", charonESP: "default"},
		{ike: "aes128-sha256-x25519", esp: "aes128-sha256", charonIKE: "default", charonESP: "default"},
	} {
		name := "espgw-initiates"
		if c.charonInitiates {
			name = "charon-initiates"
		}
		if c.charonIKE == "default" {
			name += "/charon-default"
		}
		t.Run(name+"/"+c.ike+"/"+c.esp, func(t *testing.T) { ikeWithCharon(t, c) })
	}
}

// ikeCase is one negotiation of TestIKEWithCharon: espgw's proposals,
// charon's when they differ, who initiates, and whether the responder
// must ask for another group (INVALID_KE_PAYLOAD).
type ikeCase struct {
	ike, esp             string
	charonIKE, charonESP string
	charonInitiates      bool
	keRetry              bool
}

// ikeRun is espgw's ike endpoint on gw1 and charon on gw2 after they
// negotiated an IKE SA and its first CHILD_SA.
type ikeRun struct {
	topo     *netns.Topology
	children chan *ike.Child
	tr       *ike.Transport
	ep       *ike.Endpoint
	charon   *Charon
	s        *ike.IKESA
	child    *ike.Child
	served   chan error
	certs    *testCerts
}

// negotiation is how a tunnel is brought up: the proposals, who
// initiates, and, with a key type, certificates from a CA made for the
// test rather than a PSK.
type negotiation struct {
	ike, charonIKE, esp string
	charonESP           string // charon's ESP proposals, when not esp
	charonInitiates     bool
	keyType             certgen.KeyType
	// classic has both sides sign with the methods of RFC 7296 and 4754
	// (no SIGNATURE_HASH_ALGORITHMS); pss has both sign RSA with PSS.
	classic, pss bool
	// fragmentSize is espgw's, charonOptions go in charon's
	// strongswan.conf.
	fragmentSize  int
	charonOptions []string
}

func negotiateWith(t *testing.T, ctx context.Context, n negotiation) *ikeRun {
	t.Helper()
	ikeProposal, charonIKE, esp, charonInitiates := n.ike, n.charonIKE, n.esp, n.charonInitiates
	labtest.NeedNamespaces(t)
	topo, err := netns.NewTopology("ik", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	r := &ikeRun{topo: topo, served: make(chan error, 1)}
	a := topo.Addr
	psk := make([]byte, 16)
	rand.Read(psk)
	secret := hex.EncodeToString(psk)
	local, remote := a.GW1WAN4.Addr(), a.GW2WAN4.Addr()

	ikeP, err := ike.ParseProposals(ike.ProtoIKE, ikeProposal)
	if err != nil {
		t.Fatal(err)
	}
	espP, err := ike.ParseProposals(ike.ProtoESP, esp)
	if err != nil {
		t.Fatal(err)
	}
	children := make(chan *ike.Child, 8)
	cfg := ike.Config{LocalID: ike.FQDN("gw1"), RemoteID: ike.FQDN("gw2"), PSK: []byte(secret), IKE: ikeP, ESP: espP,
		LocalTS: []ike.Selector{ike.PrefixSelector(a.LANA4)}, RemoteTS: []ike.Selector{ike.PrefixSelector(a.LANB4)},
		OnChild: func(_ *ike.IKESA, c *ike.Child) { children <- c }}
	r.children = children
	charonCfg := Config{NS: topo.GW2, Dir: filepath.Join(t.TempDir(), "gw2"), Local: remote, Remote: local,
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: secret, Initiate: charonInitiates,
		IKE: charonIKE, ESP: cmp.Or(n.charonESP, esp)}
	if n.keyType != "" {
		r.certs = useCertificates(t, n, &cfg, &charonCfg)
	}
	cfg.FragmentSize = n.fragmentSize
	charonCfg.Options = append(charonCfg.Options, n.charonOptions...)
	if err := topo.GW1.Do(func() (err error) { r.tr, err = ike.Listen(local); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.tr.Close() })
	if r.ep, err = ike.NewEndpoint(cfg, local, r.tr.Send); err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	go func() { r.served <- r.tr.Serve(serveCtx, r.ep) }()
	t.Cleanup(func() { stop(); <-r.served })

	r.charon, err = Start(ctx, charonCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.charon.Kill() })
	if charonInitiates {
		select {
		case r.child = <-children:
		case <-time.After(30 * time.Second):
			t.Fatalf("charon's IKE SA did not come up at espgw within 30s; espgw counts %v\ncharon:\n%s", r.ep.Counts(), r.charon.Output())
		}
		for _, sa := range r.ep.SAs() {
			r.s = sa
		}
	} else {
		if err := r.charon.WaitConnection(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if r.s, err = r.ep.Initiate(ctx, netip.AddrPortFrom(remote, ike.Port)); err != nil {
			t.Fatalf("espgw initiating: %v; counts %v\ncharon:\n%s", err, r.ep.Counts(), r.charon.Output())
		}
		r.child = r.s.Children()[0]
	}
	if _, err := r.charon.Child(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	return r
}

func ikeWithCharon(t *testing.T, c ikeCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	esp, charonInitiates := c.esp, c.charonInitiates
	r := negotiateWith(t, ctx, negotiation{ike: c.ike, charonIKE: cmp.Or(c.charonIKE, c.ike), esp: esp, charonESP: c.charonESP, charonInitiates: charonInitiates})
	ch, s, child, ep := r.charon, r.s, r.child, r.ep
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
	sameKeys(t, ch.LogPath(), in, out)
	if c.keRetry && !charonInitiates && ep.Counts()["INVALID_KE_PAYLOAD received"] != 1 {
		t.Errorf("espgw's first group is not charon's, but it counted no INVALID_KE_PAYLOAD: %v", ep.Counts())
	}
	if c.keRetry && charonInitiates && ep.Counts()["INVALID_KE_PAYLOAD sent"] != 1 {
		t.Errorf("charon's first group is not espgw's, but espgw sent no INVALID_KE_PAYLOAD: %v", ep.Counts())
	}
	t.Logf("CHILD_SA %s in %#x out %#x, %s; espgw counts %v", esp, in.SPI, out.SPI, in.Suite, ep.Counts())

	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check: %v", err)
	}
	if charonInitiates {
		s, child = charonRekeys(t, ctx, r, s, child)
		spis = fmt.Sprintf("%08x_i %08x_o", child.OutSPI, child.InSPI)
	}
	// espgw rekeys the IKE SA: charon must have it under the new SPIs,
	// with the CHILD_SA.
	if s, err = s.Rekey(ctx); err != nil {
		t.Fatalf("IKE SA rekey: %v\ncharon:\n%s", err, ch.Output())
	}
	spii, spir := s.SPIs()
	if st, err = ch.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if ikeSPIs := fmt.Sprintf("%016x_i", spii); !strings.Contains(st, ikeSPIs) || !strings.Contains(st, fmt.Sprintf("%016x_r", spir)) || !strings.Contains(st, spis) {
		t.Fatalf("after espgw's IKE SA rekey charon should have IKE SPIs %016x/%016x and CHILD_SA %s:\n%s", spii, spir, spis, st)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check on the rekeyed IKE SA: %v", err)
	}
	// espgw rekeys the CHILD_SA (keys from the new IKE SA's SK_d): charon
	// must have the new one alone.
	fresh, err := s.RekeyChild(ctx, child)
	if err != nil {
		t.Fatalf("rekey: %v\ncharon:\n%s", err, ch.Output())
	}
	st, err = ch.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newSPIs, oldSPIs := fmt.Sprintf("%08x_i %08x_o", fresh.OutSPI, fresh.InSPI), spis; !strings.Contains(st, newSPIs) || strings.Contains(st, oldSPIs) {
		t.Fatalf("after espgw's rekey charon should have %s and not %s:\n%s", newSPIs, oldSPIs, st)
	}
	if !charonInitiates {
		// charon's log tells the directions of a CHILD_SA's keys only
		// when it initiated neither the IKE SA nor the rekey, or both.
		fin, fout, err := fresh.SAs()
		if err != nil {
			t.Fatal(err)
		}
		sameKeys(t, ch.LogPath(), fin, fout)
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

// TestIKENegotiatedTunnelCarriesTraffic has `espgw ike initiate` on gw1
// negotiate a CHILD_SA with charon on gw2 (aes128gcm16, ESP in UDP since
// charon fakes a NAT) and write it as an SA file; the SAs in the file must
// be charon's (its logged keys); then an espgw gateway on gw1 runs on that
// file alone: pings between hostA and hostB must cross it both ways,
// through charon's kernel-libipsec ESP on gw2, which must count them.
func TestIKENegotiatedTunnelCarriesTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon and an espgw gateway in namespaces; run without -short")
	}
	if err := CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := labtest.Espgw(t)
	topo, err := netns.NewTopology("it", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	dir := t.TempDir()
	psk := make([]byte, 16)
	rand.Read(psk)
	secret := hex.EncodeToString(psk)
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ch, err := Start(ctx, Config{NS: topo.GW2, Dir: filepath.Join(dir, "gw2"), Local: a.GW2WAN4.Addr(), Remote: a.GW1WAN4.Addr(),
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: secret, IKE: "aes128-sha256-x25519", ESP: "aes128gcm16"})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Kill()
	if err := ch.WaitConnection(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	sas := filepath.Join(dir, "sas.yaml")
	out, err := topo.GW1.Output(ctx, bin, "ike", "initiate", "--local", a.GW1WAN4.Addr().String(), "--remote", a.GW2WAN4.Addr().String(),
		"--local-id", "@gw1", "--remote-id", "@gw2", "--psk-file", filepath.Join(dir, "psk"),
		"--local-ts", a.LANA4.String(), "--remote-ts", a.LANB4.String(), "--esp-proposals", "aes128gcm16", "--out", sas)
	if err != nil {
		t.Fatalf("%v\ncharon:\n%s", err, ch.Output())
	}
	t.Logf("espgw ike initiate: %s", strings.TrimSpace(out))
	if strings.Contains(out, secret) {
		t.Error("espgw ike initiate printed the PSK")
	}
	before, err := ch.Child(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	written, err := sa.Load(sas)
	if err != nil {
		t.Fatal(err)
	}
	if len(written.SAs) != 2 {
		t.Fatalf("the SA file has %d SAs, want 2", len(written.SAs))
	}
	sameKeys(t, ch.LogPath(), written.SAs...)
	confPath := filepath.Join(dir, "gw1.yaml")
	err = testbed.GatewayConfig{Local: a.GW1WAN4.Addr(), Peer: a.GW2WAN4.Addr(), Engine: testbed.DefaultEngine(), Metrics: "127.0.0.1:9478",
		TUN: "esp0", Routes: []netip.Prefix{a.LANB4}, SAFile: "sas.yaml", StateDir: "gw1-state"}.Write(confPath)
	if err != nil {
		t.Fatal(err)
	}
	g, err := testbed.RunGateway(ctx, topo.GW1, bin, confPath)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop(syscall.SIGTERM)
	upA := ping(t, ctx, topo.HostA, a.HostB4.Addr(), 5)
	upB := ping(t, ctx, topo.HostB, a.HostA4.Addr(), 5)
	after, err := ch.Child(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if upA != 5 || upB != 5 {
		t.Errorf("through espgw ↔ charon on the negotiated CHILD_SA: hostA → hostB %d of 5 replies, hostB → hostA %d of 5\ngw1:\n%s", upA, upB, g.Output())
	}
	if pin, pout := after.PacketsIn-before.PacketsIn, after.PacketsOut-before.PacketsOut; pin < 10 || pout < 10 {
		t.Errorf("charon counted %d packets in and %d out on the CHILD_SA, want at least 10 each", pin, pout)
	}
	t.Logf("charon counted %d in, %d out", after.PacketsIn-before.PacketsIn, after.PacketsOut-before.PacketsOut)
}

// sameKeys checks that charon's log has each of espgw's SAs, by SPI, with
// the same suite, addresses and keys.
func sameKeys(t *testing.T, log string, ours ...*sa.SA) {
	t.Helper()
	logged, err := sa.Load(log)
	if err != nil {
		t.Fatalf("read charon's log: %v", err)
	}
	for _, o := range ours {
		var theirs *sa.SA
		for _, l := range logged.SAs {
			if l.SPI == o.SPI {
				theirs = l
			}
		}
		switch {
		case theirs == nil:
			t.Errorf("charon's log has no SA %#x (%d SAs)", o.SPI, len(logged.SAs))
		case o.Suite != theirs.Suite || o.Src != theirs.Src || o.Dst != theirs.Dst:
			t.Errorf("SA %#x: espgw %v, charon %v", o.SPI, o, theirs)
		case string(o.EncKey) != string(theirs.EncKey) || string(o.AuthKey) != string(theirs.AuthKey):
			t.Errorf("SA %#x: espgw's keys are not charon's", o.SPI)
		}
	}
}

// charonRekeys has charon rekey the CHILD_SA and then the IKE SA, espgw
// responding, and returns espgw's new IKE SA and CHILD_SA.
func charonRekeys(t *testing.T, ctx context.Context, r *ikeRun, s *ike.IKESA, child *ike.Child) (*ike.IKESA, *ike.Child) {
	t.Helper()
	if err := r.charon.Rekey(ctx, "espgw{1}"); err != nil {
		t.Fatal(err)
	}
	var fresh *ike.Child
	select {
	case fresh = <-r.children:
	case <-time.After(20 * time.Second):
		t.Fatalf("charon's CHILD_SA rekey did not reach espgw; counts %v\n%s", r.ep.Counts(), r.charon.Output())
	}
	// charon deletes the old CHILD_SA after the rekey.
	waitFor(t, 10*time.Second, func() bool { c := s.Children(); return len(c) == 1 && c[0] == fresh },
		func() string { return fmt.Sprintf("espgw keeps %d CHILD_SAs after charon's rekey", len(s.Children())) })
	st, err := r.charon.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if spis := fmt.Sprintf("%08x_i %08x_o", fresh.OutSPI, fresh.InSPI); !strings.Contains(st, spis) || strings.Contains(st, fmt.Sprintf("%08x_i", child.OutSPI)) {
		t.Fatalf("after charon's CHILD_SA rekey it should have %s alone:\n%s", spis, st)
	}
	if err := r.charon.Rekey(ctx, "espgw[1]"); err != nil {
		t.Fatal(err)
	}
	var next *ike.IKESA
	waitFor(t, 10*time.Second, func() bool {
		sas := r.ep.SAs()
		if len(sas) == 1 && sas[0] != s && sas[0].State() == ike.StateEstablished {
			next = sas[0]
		}
		return next != nil
	}, func() string {
		return fmt.Sprintf("espgw has %d IKE SAs after charon's IKE SA rekey; counts %v", len(r.ep.SAs()), r.ep.Counts())
	})
	if c := next.Children(); len(c) != 1 || c[0] != fresh {
		t.Fatalf("the CHILD_SA did not move to the rekeyed IKE SA")
	}
	if n := r.ep.Counts()["IKE SA rekeyed by the peer"]; n != 1 {
		t.Errorf("espgw counted %d IKE SA rekeys by the peer", n)
	}
	return next, fresh
}

func waitFor(t *testing.T, limit time.Duration, done func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !done(); {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
