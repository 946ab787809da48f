package iketunnel

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/strongswan"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// pki is a CA made for one test and the certificates of gw1 and gw2
// (DNS names gw1.example, gw2.example), written as PEM files in dir.
type pki struct {
	dir      string
	ca       *certgen.CA
	gw1, gw2 *certgen.Issued
	keyPEM   [2]string // the keys' files' contents, to look for in logs
}

func newPKI(t *testing.T, kt certgen.KeyType) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var err error
	if p.ca, err = certgen.NewCA(kt, "espgw test CA"); err != nil {
		t.Fatal(err)
	}
	if p.gw1, err = p.ca.Issue(kt, "gw1", []string{"gw1.example"}, certgen.Options{}); err != nil {
		t.Fatal(err)
	}
	if p.gw2, err = p.ca.Issue(kt, "gw2", []string{"gw2.example"}, certgen.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{certgen.WriteCerts(p.path("ca.pem"), p.ca.Cert),
		certgen.WriteCerts(p.path("gw1.pem"), p.gw1.Cert), certgen.WriteKey(p.path("gw1.key"), p.gw1.Key),
		certgen.WriteCerts(p.path("gw2.pem"), p.gw2.Cert), certgen.WriteKey(p.path("gw2.key"), p.gw2.Key)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range []string{"gw1.key", "gw2.key"} {
		b, err := os.ReadFile(p.path(f))
		if err != nil {
			t.Fatal(err)
		}
		p.keyPEM[i] = string(b)
	}
	return p
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// showsKey reports whether a log holds a line of a private key's PEM.
func (p *pki) showsKey(log string) bool {
	for _, k := range p.keyPEM {
		for _, line := range strings.Split(k, "\n") {
			if len(line) >= 40 && !strings.HasPrefix(line, "-----") && strings.Contains(log, line) {
				return true
			}
		}
	}
	return false
}

// TestGatewayIKECertificatesWithCharon runs an espgw gateway whose ike:
// section authenticates with an X.509 certificate (local auth pubkey,
// certs, the key in secrets; remote auth pubkey, cacerts) against
// strongSwan's charon with its own certificate from the same CA made at
// test time, RSA with espgw initiating and ECDSA P-256 with charon
// initiating. espgw's identity is its certificate's subject DN (charon's
// rightid is that DN), charon's an FQDN of its certificate. charon must
// log that it verified espgw's signature; the tunnel must carry ping both
// ways and a CHILD_SA rekey by espgw under counted pings with none lost;
// neither side logs the key.
func TestGatewayIKECertificatesWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon and an espgw gateway in namespaces; run without -short")
	}
	if err := strongswan.CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	for _, c := range []struct {
		name            string
		kt              certgen.KeyType
		charonKeyType   string
		charonInitiates bool
		// scheme is how charon logs the signature it verified.
		scheme string
	}{
		{"rsa/espgw-initiates", certgen.RSA, "RSA", false, "RSA_EMSA_PKCS1_SHA2_256"},
		{"ecdsa-p256/charon-initiates", certgen.ECDSA256, "ECDSA", true, "ECDSA_WITH_SHA256_DER"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := newPKI(t, c.kt)
			bin := labtest.Espgw(t)
			dir := t.TempDir()
			topo, err := netns.NewTopology("ikegc", netns.TopologyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer topo.Close()
			a := topo.Addr
			start := "start"
			if c.charonInitiates {
				start = "none"
			}
			conf := filepath.Join(dir, "gw1.yaml")
			err = os.WriteFile(conf, []byte(fmt.Sprintf(`local: %[1]s
tun: {name: esp0, routes: [%[2]s]}
state-dir: gw1-state
engine: %[6]s
wan-io: %[7]s
ike:
  retransmit_timeout: 500ms
  retransmit_tries: 3
  connections:
    charon:
      local_addrs: [%[1]s]
      remote_addrs: [%[3]s]
      local: {auth: pubkey, certs: [%[8]s]}
      remote: {auth: pubkey, id: gw2.example, cacerts: [%[9]s]}
      proposals: aes128-sha256-x25519
      children:
        net:
          local_ts: [%[4]s]
          remote_ts: [%[2]s]
          esp_proposals: aes128gcm16
          start_action: %[5]s
          rekey_time: 8s
          rand_time: 1s
  secrets:
    private-gw1: {file: %[10]s}
`, a.GW1WAN4.Addr(), a.LANB4, a.GW2WAN4.Addr(), a.LANA4, start, testbed.DefaultEngine(), testbed.DefaultWanIO(),
				p.path("gw1.pem"), p.path("ca.pem"), p.path("gw1.key"))), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := strongswan.Start(ctx, strongswan.Config{NS: topo.GW2, Dir: filepath.Join(dir, "gw2"), Local: a.GW2WAN4.Addr(), Remote: a.GW1WAN4.Addr(),
				LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2.example", PeerDN: "C=CH, O=espgw test, CN=gw1",
				IKE: "aes128-sha256-x25519", ESP: "aes128gcm16", Cert: p.path("gw2.pem"), Key: p.path("gw2.key"), CA: p.path("ca.pem"),
				KeyType: c.charonKeyType, Initiate: c.charonInitiates})
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Kill()
			if err := ch.WaitConnection(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			gw, err := testbed.RunGateway(ctx, topo.GW1, bin, conf)
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Stop(syscall.SIGKILL)
			logs := func() string { return "gw1:\n" + gw.Output() + "\ncharon:\n" + ch.Output() }
			first := waitChild(t, ctx, topo.GW1, bin, 1, logs)
			if _, err := ch.Child(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			log, err := os.ReadFile(ch.LogPath())
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`authentication of 'C=CH, O=espgw test, CN=gw1' with ` + c.scheme + ` successful`).Match(log) {
				t.Errorf("charon did not log verifying espgw's certificate (DN identity) with %s:\n%s", c.scheme, log)
			}
			for _, dst := range []struct {
				from *netns.Namespace
				to   netip.Addr
			}{{topo.HostA, a.HostB4.Addr()}, {topo.HostB, a.HostA4.Addr()}} {
				r, err := testbed.Ping(ctx, dst.from, dst.to, testbed.PingOptions{Count: 5, Interval: 50 * time.Millisecond})
				if err != nil || r.Received < 5 {
					t.Fatalf("ping %s from %s: %d of 5 replies (%v)\n%s", dst.to, dst.from.Short(), r.Received, err, logs())
				}
			}
			r, err := testbed.Ping(ctx, topo.HostA, a.HostB4.Addr(), testbed.PingOptions{Count: 900, Interval: 12 * time.Millisecond, Deadline: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			now := waitChild(t, ctx, topo.GW1, bin, 1, logs)
			if now.ChildSAs[0].InSPI == first.ChildSAs[0].InSPI {
				t.Errorf("espgw did not rekey its CHILD_SA (still %#x)\n%s", first.ChildSAs[0].InSPI, logs())
			}
			t.Logf("%d pings across espgw's CHILD_SA rekeys: %d answered", r.Sent, r.Received)
			if r.Sent == 0 || r.Received != r.Sent {
				t.Errorf("CHILD_SA rekey under traffic: %d of %d pings answered\n%s", r.Received, r.Sent, logs())
			}
			if _, err := gw.Stop(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if p.showsKey(gw.Output()) {
				t.Error("espgw logged a line of a private key")
			}
		})
	}
}

// TestGatewayPairWithCertificates runs the example pair with certificates
// instead of the PSK (auth pubkey both ways, certs, cacerts, the key in
// secrets), with ECDSA P-384: each side checks the other's certificate
// against the CA; the tunnel carries ping.
func TestGatewayPairWithCertificates(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two espgw gateways in namespaces; run without -short")
	}
	labtest.NeedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := newPKI(t, certgen.ECDSA384)
	pr := startPair(t, ctx, "ikegp", false, func(i int, conf string) string {
		me, peer := "gw1", "gw2"
		if i == 1 {
			me, peer = "gw2", "gw1"
		}
		conf = regexp.MustCompile(`local: \{id: `+me+`\.example[^}]*\}`).ReplaceAllString(conf,
			fmt.Sprintf("local: {id: %s.example, auth: pubkey, certs: [%s]}", me, k.path(me+".pem")))
		conf = regexp.MustCompile(`remote: \{id: `+peer+`\.example[^}]*\}`).ReplaceAllString(conf,
			fmt.Sprintf("remote: {id: %s.example, auth: pubkey, cacerts: [%s]}", peer, k.path("ca.pem")))
		conf = strings.Replace(conf, "      psk_env: ESPGW_PSK\n", "", 1)
		return strings.Replace(conf, "  connections:\n", fmt.Sprintf("  secrets:\n    private-%s: {file: %s}\n  connections:\n", me, k.path(me+".key")), 1)
	})
	defer pr.close()
	st1 := waitChild(t, ctx, pr.topo.GW1, pr.bin, 1, pr.logs)
	st2 := waitChild(t, ctx, pr.topo.GW2, pr.bin, 1, pr.logs)
	if st1.SPIi != st2.SPIi {
		t.Fatalf("gw1 has IKE SA %016x, gw2 %016x", st1.SPIi, st2.SPIi)
	}
	if r, err := testbed.Ping(ctx, pr.topo.HostA, pr.topo.Addr.HostB4.Addr(), testbed.PingOptions{Count: 5}); err != nil || r.Received < 5 {
		t.Fatalf("ping through the pair with certificates: %d of 5 replies (%v)\n%s", r.Received, err, pr.logs())
	}
	if k.showsKey(pr.logs()) {
		t.Error("a gateway logged a line of a private key")
	}
}
