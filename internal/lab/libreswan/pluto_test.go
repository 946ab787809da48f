package libreswan

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/sa"
)

func TestMain(m *testing.M) { labtest.Main(m) }

var (
	hostAddr  = netip.MustParsePrefix("192.0.2.1/24")
	guestAddr = netip.MustParsePrefix("192.0.2.2/24")
	espgwNet  = netip.MustParsePrefix("198.51.100.0/24")
	plutoNet  = netip.MustParsePrefix("203.0.113.0/24")
	// Behind a NAT, espgw has behindNAT and the NAT's inside address is
	// natInside; the NAT's outside address is hostAddr, on the tap.
	behindNAT = netip.MustParsePrefix("198.51.100.253/30")
	natInside = netip.MustParsePrefix("198.51.100.254/30")
)

// The NAT maps espgw's source ports to natLow–natHigh (natPorts, as
// iptables takes them).
const (
	natLow, natHigh = 40000, 40999
	natPorts        = "40000-40999"
)

// bed is espgw's ike endpoint in a namespace and pluto in the guest
// behind its tap.
type bed struct {
	pluto    *Pluto
	ep       *ike.Endpoint
	children chan *ike.Child
	certs    [2]*certgen.Issued // espgw's and pluto's
	// transport: the CHILD_SAs are in transport mode.
	transport bool
	// local is espgw's address: hostAddr's, or behindNAT's behind the
	// NAT, whose outside address pluto sees.
	local netip.Addr
	nat   bool
}

// bedConfig is how a bed is built: the proposals (espgw's syntax, then
// libreswan's), certificates of a key type instead of a PSK, transport
// mode, and a NAT between espgw and pluto.
type bedConfig struct {
	ike, esp, plutoIKE, plutoESP string
	keyType                      certgen.KeyType
	transport, nat               bool
}

// makeCerts makes a CA and the certificates of espgw (DNS name espgw)
// and pluto (pluto), writes pluto's as PEM files and sets both
// configurations to use them.
func makeCerts(t *testing.T, kt certgen.KeyType, p *Config, e *ike.Config) [2]*certgen.Issued {
	t.Helper()
	ca, err := certgen.NewCA(kt, "espgw test CA")
	if err != nil {
		t.Fatal(err)
	}
	var out [2]*certgen.Issued
	for i, name := range []string{"espgw", "pluto"} {
		if out[i], err = ca.Issue(kt, name, []string{name}, certgen.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	p.Cert, p.Key, p.CA = filepath.Join(dir, "pluto.pem"), filepath.Join(dir, "pluto.key"), filepath.Join(dir, "ca.pem")
	for _, err := range []error{certgen.WriteCerts(p.Cert, out[1].Cert), certgen.WriteKey(p.Key, out[1].Key), certgen.WriteCerts(p.CA, ca.Cert)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p.KeyType, p.PSK = "ecdsa", ""
	if kt == certgen.RSA {
		p.KeyType = "rsa"
	}
	e.Certs, e.Key, e.CAs = []*x509.Certificate{out[0].Cert}, out[0].Key, []*x509.Certificate{ca.Cert}
	return out
}

// newBed is the bed with a PSK; with transport, both sides' CHILD_SA is
// transport mode between the two hosts' addresses.
func newBed(t *testing.T, ctx context.Context, ikeP, espP, plutoIKE, plutoESP string, transport bool) *bed {
	t.Helper()
	return newBedWith(t, ctx, bedConfig{ike: ikeP, esp: espP, plutoIKE: plutoIKE, plutoESP: plutoESP, transport: transport})
}

// newBedWith builds the bed bc says: with a key type, certificates from a
// CA made for the test instead of the PSK; with nat, espgw in a namespace
// of its own behind a NAT namespace (iptables MASQUERADE to ports
// natPorts) that holds the tap.
func newBedWith(t *testing.T, ctx context.Context, bc bedConfig) *bed {
	t.Helper()
	ikeP, espP, plutoIKE, plutoESP, kt, transport := bc.ike, bc.esp, bc.plutoIKE, bc.plutoESP, bc.keyType, bc.transport
	labtest.NeedNamespaces(t)
	root, err := Prepare(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	nb, err := netns.New("lsw", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nb.Close() })
	ns, err := nb.AddNamespace("espgw")
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{children: make(chan *ike.Child, 8), transport: transport, local: hostAddr.Addr(), nat: bc.nat}
	tapNS := ns
	if bc.nat {
		// A NAT namespace holds the tap and masquerades espgw's UDP
		// to hostAddr and a port of natPorts.
		labtest.NeedTools(t, "iptables")
		tapNS, err = nb.AddNAT(ctx, ns, netns.NAT{Name: "nat", HomeIf: "wan0", InsideIf: "inside0", Home: behindNAT, Inside: natInside, OutIf: "lswtap0", Ports: natPorts})
		if err != nil {
			t.Fatal(err)
		}
		b.local = behindNAT.Addr()
	}
	psk := make([]byte, 16)
	rand.Read(psk)
	secret := hex.EncodeToString(psk)
	pcfg := Config{Netns: tapNS.Name(), Tap: "lswtap0", Host: hostAddr, Guest: guestAddr,
		LocalNet: plutoNet, RemoteNet: espgwNet, ID: "pluto", PeerID: "espgw", PSK: secret, IKE: plutoIKE, ESP: plutoESP,
		Transport: transport, NAT: bc.nat, Root: root, Dir: t.TempDir()}
	var ecfg ike.Config
	if kt != "" {
		b.certs = makeCerts(t, kt, &pcfg, &ecfg)
	}
	b.pluto, err = Start(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := b.pluto.Log(context.Background())
			lines := strings.Split(log, "\n")
			t.Logf("pluto's log, the last 150 lines:\n%s", strings.Join(lines[max(0, len(lines)-150):], "\n"))
		}
		b.pluto.Close()
	})
	ikeProps, err := ike.ParseProposals(ike.ProtoIKE, ikeP)
	if err != nil {
		t.Fatal(err)
	}
	espProps, err := ike.ParseProposals(ike.ProtoESP, espP)
	if err != nil {
		t.Fatal(err)
	}
	var tr *ike.Transport
	if err := ns.Do(func() (err error) { tr, err = ike.Listen(b.local); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	cfg := ike.Config{LocalID: ike.FQDN("espgw"), RemoteID: ike.FQDN("pluto"), PSK: []byte(secret), IKE: ikeProps, ESP: espProps,
		LocalTS: []ike.Selector{ike.PrefixSelector(espgwNet)}, RemoteTS: []ike.Selector{ike.PrefixSelector(plutoNet)},
		OnChild: func(_ *ike.IKESA, c *ike.Child) { b.children <- c }}
	if transport {
		cfg.Transport = true
		cfg.LocalTS = []ike.Selector{ike.PrefixSelector(netip.PrefixFrom(b.local, 32))}
		cfg.RemoteTS = []ike.Selector{ike.PrefixSelector(netip.PrefixFrom(guestAddr.Addr(), 32))}
	}
	if kt != "" {
		// 500 bytes: espgw's IKE_AUTH with a certificate goes in
		// fragments (RFC 7383), which pluto must reassemble.
		cfg.PSK, cfg.Certs, cfg.Key, cfg.CAs, cfg.FragmentSize = nil, ecfg.Certs, ecfg.Key, ecfg.CAs, 500
	}
	if b.ep, err = ike.NewEndpoint(cfg, b.local, tr.Send); err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tr.Serve(serveCtx, b.ep) }()
	t.Cleanup(func() { stop(); <-served })
	return b
}

// kernelHas checks that the CHILD_SA is in the bed's mode and that pluto
// installed its two SAs in the guest's kernel, by SPI, with espgw's mode,
// suite and keys. It waits a little:
// as responder espgw has its CHILD_SA before pluto reads the response, and
// until pluto installs an SA the kernel lists it without algorithms (the
// SPI it allocated).
func (b *bed) kernelHas(t *testing.T, ctx context.Context, c *ike.Child) {
	t.Helper()
	p := b.pluto
	if c.Transport != b.transport {
		t.Errorf("CHILD_SA %#x: transport mode %v, want %v", c.InSPI, c.Transport, b.transport)
	}
	in, out, err := c.SAs()
	if err != nil {
		t.Fatal(err)
	}
	if b.nat {
		// pluto knows espgw by the NAT's outside address and port.
		in, out = b.seenThroughNAT(t, in), b.seenThroughNAT(t, out)
	}
	var problem string
	for deadline := time.Now().Add(15 * time.Second); ; {
		if problem = kernelProblem(ctx, p, in, out); problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(problem)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// seenThroughNAT is espgw's SA s as pluto's kernel has it: espgw's
// address the NAT's outside one (the ports kernelProblem checks apart).
func (b *bed) seenThroughNAT(t *testing.T, s *sa.SA) *sa.SA {
	t.Helper()
	if s.Encap != sa.EncapUDP {
		t.Fatalf("SA %#x behind the NAT is not ESP in UDP", s.SPI)
	}
	c := *s
	if c.Src == b.local {
		c.Src = hostAddr.Addr()
	}
	if c.Dst == b.local {
		c.Dst = hostAddr.Addr()
	}
	return &c
}

func kernelProblem(ctx context.Context, p *Pluto, ours ...*sa.SA) string {
	states, err := p.States(ctx)
	if err != nil {
		return err.Error()
	}
	for _, o := range ours {
		var theirs *sa.XFRMState
		for i := range states {
			if states[i].SPI == o.SPI {
				theirs = &states[i]
			}
		}
		switch {
		case theirs == nil:
			return fmt.Sprintf("the guest's kernel has no SA %#x (%d states)", o.SPI, len(states))
		case theirs.Suite != o.Suite || theirs.Src != o.Src || theirs.Dst != o.Dst || theirs.Mode != o.Mode || theirs.Encap != o.Encap:
			return fmt.Sprintf("SA %#x: espgw %v, pluto's kernel %v", o.SPI, o, theirs.SA)
		case o.Encap == sa.EncapUDP && !natPortsOK(theirs.SA, o):
			return fmt.Sprintf("SA %#x: ESP in UDP between ports %d and %d in pluto's kernel, want 4500 on pluto's side and one of %s on espgw's", o.SPI, theirs.SrcPort, theirs.DstPort, natPorts)
		case !bytes.Equal(theirs.EncKey, o.EncKey) || !bytes.Equal(theirs.AuthKey, o.AuthKey):
			return fmt.Sprintf("SA %#x: espgw's keys are not the ones pluto installed", o.SPI)
		}
	}
	return ""
}

// natPortsOK reports whether the kernel's ESP-in-UDP ports of the SA are
// pluto's 4500 and, for espgw, a port the NAT maps to.
func natPortsOK(theirs, ours *sa.SA) bool {
	plutoPort, espgwPort := theirs.SrcPort, theirs.DstPort
	if ours.Dst == guestAddr.Addr() {
		plutoPort, espgwPort = theirs.DstPort, theirs.SrcPort
	}
	return plutoPort == 4500 && espgwPort >= natLow && espgwPort <= natHigh
}

// kernelLacks checks that no SA of the child is left in the guest's
// kernel.
func kernelLacks(t *testing.T, ctx context.Context, p *Pluto, c *ike.Child) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		states, err := p.States(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if s.SPI == c.InSPI || s.SPI == c.OutSPI {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("pluto keeps CHILD_SA %#x/%#x in the kernel", c.InSPI, c.OutSPI) })
}

func waitFor(t *testing.T, limit time.Duration, done func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !done(); {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestIKEWithPluto negotiates IKEv2 between espgw's ike package and
// libreswan's pluto (4.10, Debian's) in the QEMU guest, whose kernel gets
// the SAs pluto installs: the CHILD_SA's SPIs, suite and keys in the
// guest's `ip xfrm state` must be the ones espgw derived. espgw initiates
// (PSK), checks liveness, rekeys the CHILD_SA and has pluto rekey it
// (whack --rekey-ipsec), rekeys the IKE SA and has pluto rekey it
// (--rekey-ike), deletes a CHILD_SA and the IKE SA (pluto's kernel drops
// the SAs); then pluto initiates to espgw and deletes the IKE SA itself
// (whack --terminate), which espgw must drop.
func TestIKEWithPluto(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU guest with pluto; run without -short")
	}
	for _, c := range []struct {
		ike, esp, plutoIKE, plutoESP string
		transport                    bool
	}{
		{"aes128-sha256-x25519", "aes128gcm16", "aes128-sha2_256-dh31", "aes_gcm128", false},
		{"aes256-sha512-ecp384", "aes256-sha256", "aes256-sha2_512-dh20", "aes256-sha2_256", false},
		{"aes128-sha256-x25519", "aes128gcm16", "aes128-sha2_256-dh31", "aes_gcm128", true},
	} {
		name := c.ike + "/" + c.esp
		if c.transport {
			name += "/transport"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b := newBed(t, ctx, c.ike, c.esp, c.plutoIKE, c.plutoESP, c.transport)
			espgwInitiates(t, ctx, b)
			plutoInitiates(t, ctx, b)
		})
	}
}

func espgwInitiates(t *testing.T, ctx context.Context, b *bed) {
	s, err := b.ep.Initiate(ctx, netip.AddrPortFrom(guestAddr.Addr(), ike.Port))
	if err != nil {
		t.Fatalf("espgw initiating to pluto: %v; counts %v", err, b.ep.Counts())
	}
	child := s.Children()[0]
	b.kernelHas(t, ctx, child)
	if s.NAT() != b.nat || child.UDP != b.nat {
		t.Errorf("espgw found a NAT %v and made the CHILD_SA ESP in UDP %v; behind a NAT %v", s.NAT(), child.UDP, b.nat)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check: %v", err)
	}
	// espgw rekeys the CHILD_SA.
	fresh, err := s.RekeyChild(ctx, child)
	if err != nil {
		t.Fatalf("CHILD_SA rekey by espgw: %v", err)
	}
	b.kernelHas(t, ctx, fresh)
	kernelLacks(t, ctx, b.pluto, child)
	// pluto rekeys it.
	if _, err := b.pluto.Whack(ctx, "--name", Name, "--rekey-ipsec"); err != nil {
		t.Fatal(err)
	}
	var byPluto *ike.Child
	select {
	case byPluto = <-b.children:
	case <-time.After(20 * time.Second):
		t.Fatalf("pluto's CHILD_SA rekey did not reach espgw; counts %v", b.ep.Counts())
	}
	b.kernelHas(t, ctx, byPluto)
	waitFor(t, 10*time.Second, func() bool { cs := s.Children(); return len(cs) == 1 && cs[0] == byPluto },
		func() string { return fmt.Sprintf("espgw keeps %d CHILD_SAs after pluto's rekey", len(s.Children())) })
	kernelLacks(t, ctx, b.pluto, fresh)
	// espgw rekeys the IKE SA, then pluto does.
	if s, err = s.Rekey(ctx); err != nil {
		t.Fatalf("IKE SA rekey by espgw: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check on the rekeyed IKE SA: %v", err)
	}
	if _, err := b.pluto.Whack(ctx, "--name", Name, "--rekey-ike"); err != nil {
		t.Fatal(err)
	}
	var next *ike.IKESA
	waitFor(t, 20*time.Second, func() bool {
		for _, n := range b.ep.SAs() {
			if n != s && n.State() == ike.StateEstablished {
				next = n
			}
		}
		return next != nil && len(b.ep.SAs()) == 1
	}, func() string {
		return fmt.Sprintf("espgw has %d IKE SAs after pluto's IKE SA rekey; counts %v", len(b.ep.SAs()), b.ep.Counts())
	})
	if cs := next.Children(); len(cs) != 1 || cs[0] != byPluto {
		t.Fatalf("the CHILD_SA did not move to pluto's rekeyed IKE SA")
	}
	if err := next.Ping(ctx); err != nil {
		t.Fatalf("liveness check on pluto's rekeyed IKE SA: %v", err)
	}
	// espgw deletes the CHILD_SA, then the IKE SA.
	if err := next.DeleteChild(ctx, byPluto); err != nil {
		t.Fatalf("delete CHILD_SA: %v", err)
	}
	kernelLacks(t, ctx, b.pluto, byPluto)
	if err := next.Delete(ctx); err != nil {
		t.Fatalf("delete IKE SA: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { st, _ := b.pluto.Status(ctx); return !strings.Contains(st, "ESTABLISHED_IKE_SA") },
		func() string { st, _ := b.pluto.Status(ctx); return "pluto keeps the IKE SA espgw deleted:\n" + st })
}

func plutoInitiates(t *testing.T, ctx context.Context, b *bed) {
	if _, err := b.pluto.Whack(ctx, "--name", Name, "--initiate", "--asynchronous"); err != nil {
		t.Fatal(err)
	}
	var child *ike.Child
	select {
	case child = <-b.children:
	case <-time.After(30 * time.Second):
		t.Fatalf("pluto's IKE SA did not come up at espgw; counts %v", b.ep.Counts())
	}
	b.kernelHas(t, ctx, child)
	var s *ike.IKESA
	for _, x := range b.ep.SAs() {
		s = x
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("liveness check on pluto's IKE SA: %v", err)
	}
	fresh, err := s.RekeyChild(ctx, child)
	if err != nil {
		t.Fatalf("CHILD_SA rekey by espgw under pluto's IKE SA: %v", err)
	}
	b.kernelHas(t, ctx, fresh)
	// pluto deletes the IKE SA and its CHILD_SA.
	deleted := b.ep.Counts()["IKE SA deleted by the peer"]
	if _, err := b.pluto.Whack(ctx, "--name", Name, "--terminate"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(b.ep.SAs()) == 0 },
		func() string {
			return fmt.Sprintf("espgw keeps %d IKE SAs after pluto deleted its; counts %v", len(b.ep.SAs()), b.ep.Counts())
		})
	if n := b.ep.Counts()["IKE SA deleted by the peer"] - deleted; n != 1 {
		t.Errorf("espgw counted %d IKE SA deletions by the peer on pluto's terminate, want 1", n)
	}
	kernelLacks(t, ctx, b.pluto, fresh)
}

// TestIKEThroughNATWithPluto puts a real NAT (iptables MASQUERADE, to
// other source ports) between espgw's ike endpoint and pluto: espgw,
// behind it, initiates; both must find the NAT, IKE must float to port
// 4500, and the CHILD_SA must be ESP in UDP on both sides, pluto's kernel
// SAs with the NAT's address and mapped port and espgw's keys. Then, all
// through the NAT, a liveness check, CHILD_SA rekeys by espgw and by
// pluto, IKE SA rekeys by both, and Deletes by espgw.
func TestIKEThroughNATWithPluto(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU guest with pluto behind a NAT; run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b := newBedWith(t, ctx, bedConfig{ike: "aes128-sha256-x25519", esp: "aes128gcm16", plutoIKE: "aes128-sha2_256-dh31", plutoESP: "aes_gcm128", nat: true})
	espgwInitiates(t, ctx, b)
	// pluto names the NAT's address and port it reached espgw at.
	log, _ := b.pluto.Log(ctx)
	var seen string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "established Child SA") {
			seen = l
			break
		}
	}
	if !strings.Contains(seen, "ESPinUDP") || !strings.Contains(seen, "NATD="+hostAddr.Addr().String()+":40") {
		t.Errorf("pluto's first CHILD_SA is not ESP in UDP to the NAT's %s and a port of %s:\n%s", hostAddr.Addr(), natPorts, seen)
	}
	t.Logf("pluto: %s", seen)
}

// TestIKECertificatesWithPluto authenticates espgw and pluto to each
// other with certificates from a CA made at test time, RSA and ECDSA
// P-256: espgw initiates, its IKE_AUTH in 500-byte fragments that pluto
// reassembles, holds pluto's certificate, and pluto's kernel SAs have
// espgw's keys; then pluto initiates, espgw responds, and pluto deletes
// the IKE SA.
func TestIKECertificatesWithPluto(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a QEMU guest with pluto; run without -short")
	}
	for _, kt := range []certgen.KeyType{certgen.RSA, certgen.ECDSA256} {
		t.Run(string(kt), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b := newBedWith(t, ctx, bedConfig{ike: "aes128-sha256-x25519", esp: "aes128gcm16", plutoIKE: "aes128-sha2_256-dh31", plutoESP: "aes_gcm128", keyType: kt})
			s, err := b.ep.Initiate(ctx, netip.AddrPortFrom(guestAddr.Addr(), ike.Port))
			if err != nil {
				t.Fatalf("espgw initiating to pluto with certificates: %v; counts %v", err, b.ep.Counts())
			}
			if got := s.PeerCertificate(); got == nil || !bytes.Equal(got.Raw, b.certs[1].Cert.Raw) {
				t.Fatal("espgw does not hold pluto's certificate")
			}
			b.kernelHas(t, ctx, s.Children()[0])
			if n := b.ep.Counts()["message sent in fragments"]; n < 1 {
				t.Errorf("espgw sent no fragments to pluto: %v", b.ep.Counts())
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatalf("delete: %v", err)
			}
			waitFor(t, 10*time.Second, func() bool { st, _ := b.pluto.Status(ctx); return !strings.Contains(st, "ESTABLISHED_IKE_SA") },
				func() string { st, _ := b.pluto.Status(ctx); return "pluto keeps the IKE SA espgw deleted:\n" + st })
			plutoInitiates(t, ctx, b)
			log, _ := b.pluto.Log(ctx)
			var authed []string
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "authenticated peer") {
					authed = append(authed, l)
				}
			}
			if len(authed) == 0 {
				t.Fatalf("pluto's log says nothing of authenticating espgw:\n%s", log)
			}
			t.Logf("pluto: %s", strings.Join(authed, "\n"))
		})
	}
}

// One boot's secrets serve each configuration it starts: each pair of
// identities with its key, a pair given twice once.
func TestSecretsOfSeveralConfigs(t *testing.T) {
	psk := Config{ID: "appliance.example", PeerID: "gw1.example", PSK: "an example key only"}
	cert := Config{ID: "appliance-cert.example", PeerID: "gw1-cert.example", Cert: "appliance.pem", KeyType: "ecdsa"}
	got := secretsOf([]Config{psk, cert, psk})
	want := "@appliance.example @gw1.example : PSK \"an example key only\"\n@appliance-cert.example @gw1-cert.example : PSK \"\"\n"
	if got != want {
		t.Errorf("ipsec.secrets:\n%s\nwant:\n%s", got, want)
	}
}
