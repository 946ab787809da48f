package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/certgen"
	"github.com/espgw/espgw/internal/lab/charonguest"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/libreswan"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/scenario"
	"github.com/espgw/espgw/sa"
)

// TestScenarioExternalIKE points peer: external scenarios with
// external.ike at an appliance that brings its tunnel up by IKEv2 itself:
// strongSwan's charon in the QEMU guest, configured by swanctl with a
// pre-shared key, its CHILD_SAs in the guest kernel's ESP (kernel-netlink).
// No key is copied: gw1 negotiates. The scenario's traffic must arrive
// whole each way with the device's counters (read by SPI from its
// `ip -s xfrm state`, which must list the SPIs gw1 negotiated) matching
// gw1's, a CHILD_SA rekey by gw1 in the middle of the traffic must
// lose nothing, and gw1's Delete at the end of each run must leave the
// device no SA. Transport mode over IPv4 and over IPv6 (the device's
// kernel lists its SAs between the two IPv6 addresses as mode transport,
// pings cross both ways), and certificates instead of the PSK (charon logs
// gw1 authenticated by its ECDSA signature). Then libreswan's pluto as
// the appliance's daemon, in the same boot: the traffic and counters
// again, a CHILD_SA rekey by pluto (whack --rekey-ipsec) during the
// traffic with nothing lost, transport mode, and certificates (pluto's
// log says it authenticated gw1 by an ECDSA digital signature with its
// certificate, issued by the test's CA).
func TestScenarioExternalIKE(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the QEMU kernel guest with charon as an external device; run without -short")
	}
	labtest.NeedNamespaces(t)
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	bed, err := netns.New("ikx", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bed.Close()
	home, err := bed.AddNamespace("dut")
	if err != nil {
		t.Fatal(err)
	}
	const wanIf, lanIf, mgmtIf = "ikxwan", "ikxlan", "ikxmgmt"
	dutWAN, dutLAN := netip.MustParsePrefix("198.51.100.129/24"), netip.MustParsePrefix("203.0.113.1/24")
	gw1, near := netip.MustParseAddr("198.51.100.1"), netip.MustParsePrefix("192.0.2.0/24")
	// The same WAN port over IPv6 too, for transport mode over IPv6.
	gw1v6, dutWANv6 := netip.MustParseAddr("2001:db8:5::1"), netip.MustParsePrefix("2001:db8:5::129/64")
	key := make([]byte, 24)
	rand.Read(key)
	psk := hex.EncodeToString(key)
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte(psk+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Certificates for a connection without a PSK: a CA made here, gw1's
	// and the appliance's, ECDSA P-256.
	ca, err := certgen.NewCA(certgen.ECDSA256, "espgw external test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, id string }{{"gw1", "gw1-cert.example"}, {"appliance", "appliance-cert.example"}} {
		is, err := ca.Issue(certgen.ECDSA256, c.id, []string{c.id}, certgen.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := certgen.WriteCerts(filepath.Join(dir, c.name+".pem"), is.Cert); err != nil {
			t.Fatal(err)
		}
		if err := certgen.WriteKey(filepath.Join(dir, c.name+".key"), is.Key); err != nil {
			t.Fatal(err)
		}
	}
	if err := certgen.WriteCerts(filepath.Join(dir, "ca.pem"), ca.Cert); err != nil {
		t.Fatal(err)
	}
	files, err := charonguest.Files(charonguest.Config{Dir: filepath.Join(dir, "charon"), LocalAddr: dutWAN.Addr(), RemoteAddr: gw1,
		LocalAddr6: dutWANv6.Addr(), RemoteAddr6: gw1v6,
		LocalID: "appliance.example", RemoteID: "gw1.example", PSK: psk,
		LocalTS: []netip.Prefix{dutLAN.Masked()}, RemoteTS: []netip.Prefix{near},
		Proposals: "aes128-sha256-x25519", ESPProposals: "aes128gcm16,aes128-sha256", Transport: true,
		Cert: &charonguest.Cert{LocalID: "appliance-cert.example", RemoteID: "gw1-cert.example", KeyType: "ecdsa",
			Cert: filepath.Join(dir, "appliance.pem"), Key: filepath.Join(dir, "appliance.key"), CA: filepath.Join(dir, "ca.pem")}})
	if err != nil {
		t.Fatal(err)
	}
	// libreswan's pluto comes in the same boot, for after charon.
	root, err := libreswan.Prepare(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	plutoCfg := libreswan.Config{Host: netip.PrefixFrom(gw1, 24), Guest: dutWAN, LocalNet: dutLAN.Masked(), RemoteNet: near,
		ID: "appliance.example", PeerID: "gw1.example", PSK: psk, IKE: "aes128-sha2_256-dh31", ESP: "aes_gcm128",
		Root: root, Dir: filepath.Join(dir, "pluto")}
	// pluto with certificates, the appliance's and the CA charon had, in
	// its NSS database: a configuration of its own, for the end.
	plutoCertCfg := plutoCfg
	plutoCertCfg.ID, plutoCertCfg.PeerID, plutoCertCfg.PSK = "appliance-cert.example", "gw1-cert.example", ""
	plutoCertCfg.Cert, plutoCertCfg.Key, plutoCertCfg.CA, plutoCertCfg.KeyType = filepath.Join(dir, "appliance.pem"), filepath.Join(dir, "appliance.key"), filepath.Join(dir, "ca.pem"), "ecdsa"
	plutoFiles, err := libreswan.Files(ctx, plutoCfg, plutoCertCfg)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range plutoFiles {
		files[k] = v
	}
	// The guest's agent holds no port-4500 socket: the IKE daemon owns it.
	dev, err := kernelpeer.Start(ctx, kernelpeer.Config{
		Netns: home.Name(), Tap: wanIf, ExtraTaps: []string{lanIf, mgmtIf}, GuestAddrs: []netip.Prefix{dutWAN},
		NATTPorts: []uint16{}, Files: files, MemoryMB: 384, BootTimeout: 5 * time.Minute, CommandTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// The appliance's LAN port, forwarding, the route back to the network
	// behind gw1, and a management port serving its counters.
	setup := fmt.Sprintf("set -e\nip -6 addr add "+dutWANv6.String()+" dev eth0 nodad\nip link set eth1 up\nip addr add %s dev eth1\necho 1 >/proc/sys/net/ipv4/ip_forward\nip route add %s via %s\n"+
		"ip link set eth2 up\nip addr add 10.99.0.1/30 dev eth2\nmkdir -p /www/cgi-bin\n"+
		"printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\n/sbin/ip -s xfrm state list nokeys\\n' >/www/cgi-bin/xfrm\n"+
		"chmod +x /www/cgi-bin/xfrm\nhttpd -p 10.99.0.1:80 -h /www\n", dutLAN, near, gw1)
	if out, err := dev.Run(ctx, setup); err != nil {
		t.Fatalf("configure the device: %v\n%s", err, out)
	}
	if err := home.AddAddr(mgmtIf, netip.MustParsePrefix("10.99.0.2/30")); err != nil {
		t.Fatal(err)
	}
	charon, err := charonguest.Start(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("charon's log:\n%s", charon.Log(context.Background()))
		}
	}()
	counters := fmt.Sprintf(`ip netns exec %s /usr/bin/python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://10.99.0.1/cgi-bin/xfrm', timeout=10).read().decode())"`, home.Name())
	head := func(rekey string) string {
		return fmt.Sprintf(`peer: external
external:
  netns: %s
  wan: {interface: %s, address: %s/24, dut: %s}
  lan: {interface: %s, address: 203.0.113.10/24, dut: %s}
  near: %s
  counters: %q
  ike:
    local: {id: gw1.example}
    remote: {id: appliance.example}
    psk_file: ../psk
    proposals: aes128-sha256-x25519
    esp_proposals: aes128gcm16
    rekey_time: %s
`, home.Name(), wanIf, gw1, dutWAN.Addr(), lanIf, dutLAN.Addr(), near, counters, rekey)
	}
	scenarios := filepath.Join(dir, "scenarios")
	os.Mkdir(scenarios, 0o755)
	os.WriteFile(filepath.Join(scenarios, "1-ike.yaml"), []byte(head("1h")+`name: appliance-ike
description: charon in the guest as the appliance, the SAs negotiated by IKE
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 1000, 1300], count: 3, interval: 5ms}
    - name: up
      udp: {packets: 300, rate: 1000, size: 400}
    - name: down
      udp: {from: hostB, to: hostA, packets: 300, rate: 1000, size: 400, port: 9001}
    - name: bulk
      iperf3: {protocol: tcp, duration: 1s}
expect:
  delivered: == 1
  exact: true
  steps.bulk.bytes: "> 0"
  gw1.drops: == 0
  gw2.opened: == gw1.sealed
  gw1.opened: == gw2.sealed
  gw2.drops: == 0
  ike.failed: == 0
  conservation: true
`), 0o644)
	os.WriteFile(filepath.Join(scenarios, "2-ike-rekey.yaml"), []byte(head("6s")+`name: appliance-ike-rekey
description: gw1 rekeys the CHILD_SA in the middle of the traffic; nothing may be lost
traffic:
  together: true
  steps:
    - name: up
      udp: {packets: 3000, rate: 500, size: 300}
    - name: down
      udp: {from: hostB, to: hostA, packets: 3000, rate: 500, size: 300, port: 9001}
expect:
  delivered: == 1
  ike.rekeys: ">= 1"
  gw1.drops: == 0
  conservation: true
`), 0o644)

	// The device rekeys (pluto, by whack): gw1 never does.
	os.WriteFile(filepath.Join(scenarios, "3-ike-peer-rekey.yaml"), []byte(head("1h")+`name: appliance-ike-peer-rekey
description: the device rekeys the CHILD_SA in the middle of the traffic; nothing may be lost
traffic:
  together: true
  steps:
    - name: up
      udp: {packets: 3000, rate: 500, size: 300}
    - name: down
      udp: {from: hostB, to: hostA, packets: 3000, rate: 500, size: 300, port: 9001}
expect:
  delivered: == 1
  ike.rekeys: ">= 1"
  gw1.drops: == 0
  conservation: true
`), 0o644)
	// Transport mode: gw1 asks for it (USE_TRANSPORT_MODE) with the two
	// hosts' addresses as selectors, and pings the device itself.
	lanLines := fmt.Sprintf("  lan: {interface: %s, address: 203.0.113.10/24, dut: %s}\n  near: %s\n", lanIf, dutLAN.Addr(), near)
	transportHead := strings.NewReplacer(lanLines, "", "    rekey_time: 1h\n", "    mode: transport\n").Replace(head("1h"))
	os.WriteFile(filepath.Join(scenarios, "4-ike-transport.yaml"), []byte(transportHead+`name: appliance-ike-transport
description: the device's IKE daemon gives gw1 a transport-mode CHILD_SA; gw1 pings the device itself
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 1000, 1400], count: 3, interval: 5ms}
    - name: more
      ping: {sizes: [200], count: 50, interval: 2ms}
expect:
  delivered: == 1
  gw1.drops: == 0
  gw2.opened: == gw1.sealed
  gw1.opened: == gw2.sealed
  gw2.drops: == 0
  ike.failed: == 0
  conservation: true
`), 0o644)
	// gw1 rekeys the transport-mode CHILD_SA during the pings: the new
	// one is asked for in transport mode too, and no echo is lost.
	transportRekey := strings.NewReplacer("name: appliance-ike-transport\n", "name: appliance-ike-transport-rekey\n",
		"    mode: transport\n", "    mode: transport\n    rekey_time: 3s\n",
		"    - name: more\n      ping: {sizes: [200], count: 50, interval: 2ms}\n", "    - name: more\n      ping: {sizes: [200], count: 1500, interval: 4ms}\n",
		"  ike.failed: == 0\n", "  ike.failed: == 0\n  ike.rekeys: \">= 1\"\n",
		// The device's counters of the CHILD_SA before go with it.
		"  gw2.opened: == gw1.sealed\n  gw1.opened: == gw2.sealed\n  gw2.drops: == 0\n", "")
	body, _ := os.ReadFile(filepath.Join(scenarios, "4-ike-transport.yaml"))
	os.WriteFile(filepath.Join(scenarios, "5-ike-transport-rekey.yaml"), []byte(transportRekey.Replace(string(body))), 0o644)
	// Transport mode over IPv6: the same, between gw1's and the device's
	// IPv6 addresses on the WAN port.
	wan4 := fmt.Sprintf("  wan: {interface: %s, address: %s/24, dut: %s}\n", wanIf, gw1, dutWAN.Addr())
	wan6 := fmt.Sprintf("  wan: {interface: %s, address: %s/64, dut: %s}\n", wanIf, gw1v6, dutWANv6.Addr())
	transport6 := strings.NewReplacer(wan4, wan6, "name: appliance-ike-transport\n", "name: appliance-ike-transport-ipv6\n",
		"description: the device's IKE daemon gives gw1 a transport-mode CHILD_SA;", "description: over IPv6, the device's IKE daemon gives gw1 a transport-mode CHILD_SA;",
		// 1400 bytes of ping are more than gw1's TUN takes over IPv6.
		"ping: {sizes: [56, 1000, 1400]", "ping: {sizes: [56, 1000, 1300]").Replace(string(body))
	if transport6 == string(body) || !strings.Contains(transport6, wan6) || !strings.Contains(transport6, "1300]") {
		t.Fatalf("the IPv6 transport-mode scenario is the IPv4 one:\n%s", transport6)
	}
	os.WriteFile(filepath.Join(scenarios, "7-ike-transport-ipv6.yaml"), []byte(transport6), 0o644)
	// Certificates, no PSK: gw1 authenticates with its own and checks the
	// device's against the CA.
	certHead := strings.NewReplacer("    local: {id: gw1.example}\n", "    local: {id: gw1-cert.example, auth: pubkey, certs: [../gw1.pem]}\n",
		"    remote: {id: appliance.example}\n", "    remote: {id: appliance-cert.example, auth: pubkey, cacerts: [../ca.pem]}\n",
		"    psk_file: ../psk\n", "    secrets: {ecdsa-gw1: {file: ../gw1.key}}\n").Replace(head("1h"))
	os.WriteFile(filepath.Join(scenarios, "6-ike-certs.yaml"), []byte(certHead+`name: appliance-ike-certs
description: charon in the guest and gw1 authenticate with certificates
traffic:
  steps:
    - name: sweep
      ping: {sizes: [56, 1000], count: 3, interval: 5ms}
    - name: up
      udp: {packets: 200, rate: 1000, size: 400}
expect:
  delivered: == 1
  gw1.drops: == 0
  gw2.opened: == gw1.sealed
  gw1.opened: == gw2.sealed
  ike.failed: == 0
  conservation: true
`), 0o644)
	daemon := "charon"
	runs := func(files ...string) {
		t.Helper()
		for _, f := range files {
			judge(t, daemon, f, runExternalAs(t, "ikxs", bin, filepath.Join(scenarios, f)))
		}
	}
	runs("1-ike.yaml", "2-ike-rekey.yaml", "4-ike-transport.yaml", "5-ike-transport-rekey.yaml")
	// Over IPv6 the device's owner lets neighbour discovery between the
	// two ends pass in clear, as strongSwan's documentation has it: the
	// host-to-host policies charon installs would otherwise take the
	// unicast solicitations and advertisements (ICMPv6 135, 136), and a
	// run longer than the neighbour entries' reachable time would lose
	// its neighbour (this short one passes without). Priority 0 comes
	// before charon's.
	var nd strings.Builder
	for _, typ := range []int{135, 136} {
		fmt.Fprintf(&nd, "ip xfrm policy %%[1]s src %[1]s/128 dst %[2]s/128 proto 58 type %[3]d dir out%%[2]s\n", dutWANv6.Addr(), gw1v6, typ)
		fmt.Fprintf(&nd, "ip xfrm policy %%[1]s src %[2]s/128 dst %[1]s/128 proto 58 type %[3]d dir in%%[2]s\n", dutWANv6.Addr(), gw1v6, typ)
	}
	if out, err := dev.Run(ctx, "set -e\n"+fmt.Sprintf(nd.String(), "add", " action allow priority 0")); err != nil {
		t.Fatalf("the device's neighbour discovery bypass: %v\n%s", err, out)
	}
	runs("7-ike-transport-ipv6.yaml")
	if out, err := dev.Run(ctx, "set -e\n"+fmt.Sprintf(nd.String(), "delete", "")); err != nil {
		t.Errorf("remove the device's neighbour discovery bypass: %v\n%s", err, out)
	}
	runs("6-ike-certs.yaml")
	// The certificate run authenticated gw1 by its certificate.
	if log := charon.Log(ctx); !strings.Contains(log, "authentication of 'gw1-cert.example' with ECDSA") {
		t.Errorf("charon's log has no signature authentication of gw1-cert.example")
	}
	// gw1 deleted its IKE SAs as each run ended: charon holds none, and
	// the guest's kernel no SA.
	if out, err := charon.Swanctl(ctx, "--list-sas"); err != nil || strings.Contains(out, "ESTABLISHED") {
		t.Errorf("charon after the runs: %v\n%s", err, out)
	}
	if out, err := dev.Run(ctx, "ip xfrm state"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("SAs left in the device's kernel: %v\n%s", err, out)
	}

	// The same appliance with libreswan's pluto as its IKE daemon.
	if err := charon.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	pluto, err := libreswan.StartIn(ctx, dev, plutoCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pluto.Close() }()
	defer func() {
		if t.Failed() {
			log, _ := pluto.Log(context.Background())
			t.Logf("pluto's log:\n%s", log)
		}
	}()
	daemon = "pluto"
	// gw1's rekey: pluto sends on the new CHILD_SA as soon as it has
	// answered, and gw1 holds what arrives before it has read the answer.
	runs("1-ike.yaml", "2-ike-rekey.yaml")
	// pluto rekeys once its CHILD_SA has carried 500 packets toward gw1.
	rekeyed := make(chan error, 1)
	go func() {
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(300 * time.Millisecond) {
			out, err := dev.Run(ctx, "ip -s xfrm state list nokeys")
			if err != nil || strings.TrimSpace(out) == "" {
				continue
			}
			states, err := sa.ParseXFRMStates("the device's ip -s xfrm state", []byte(out))
			if err != nil {
				continue
			}
			if slices.ContainsFunc(states, func(x sa.XFRMState) bool { return x.Dst == gw1 && x.Packets >= 500 }) {
				_, err := pluto.Whack(ctx, "--name", libreswan.Name, "--rekey-ipsec")
				rekeyed <- err
				return
			}
		}
		rekeyed <- fmt.Errorf("the device's CHILD_SA never carried 500 packets")
	}()
	runs("3-ike-peer-rekey.yaml")
	if err := <-rekeyed; err != nil {
		t.Errorf("pluto's rekey: %v", err)
	}
	if out, err := dev.Run(ctx, "ip xfrm state"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("SAs left in the device's kernel by pluto: %v\n%s", err, out)
	}

	// pluto with a transport-mode connection (type=transport).
	if err := pluto.Close(); err != nil {
		t.Fatal(err)
	}
	plutoCfg.Transport = true
	if pluto, err = libreswan.StartIn(ctx, dev, plutoCfg); err != nil {
		t.Fatal(err)
	}
	runs("4-ike-transport.yaml")
	if out, err := dev.Run(ctx, "ip xfrm state"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("SAs left in the device's kernel by pluto in transport mode: %v\n%s", err, out)
	}

	// pluto with certificates (authby=ecdsa, its certificate and key from
	// its NSS database, gw1's checked against the CA): the run charon had.
	if err := pluto.Close(); err != nil {
		t.Fatal(err)
	}
	if pluto, err = libreswan.StartIn(ctx, dev, plutoCertCfg); err != nil {
		t.Fatal(err)
	}
	before, err := pluto.Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runs("6-ike-certs.yaml")
	after, err := pluto.Log(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The run's: the authentications the log has beyond those before.
	run, earlier := authLines(after), len(authLines(before))
	if len(run) < earlier {
		t.Fatalf("pluto's log lost lines during the certificate run")
	}
	run = run[earlier:]
	if line, err := signatureAuth(run, "gw1-cert.example"); err != nil {
		t.Errorf("pluto with certificates: %v", err)
	} else {
		t.Logf("pluto with certificates: %s", line)
	}
	if out, err := dev.Run(ctx, "ip xfrm state"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("SAs left in the device's kernel by pluto with certificates: %v\n%s", err, out)
	}
}

// authLines are the lines of pluto's log that say it authenticated a
// peer, in order.
func authLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "authenticated peer") {
			out = append(out, l)
		}
	}
	return out
}

// signatureAuth finds among pluto's authentication lines the one that
// says it authenticated the peer id by an ECDSA digital signature with
// its certificate, and refuses lines that say it authenticated a peer by
// a pre-shared key.
func signatureAuth(lines []string, id string) (string, error) {
	var found string
	for _, l := range lines {
		if strings.Contains(l, "PSK") || strings.Contains(l, "authby=secret") {
			return "", fmt.Errorf("pluto authenticated a peer by a pre-shared key: %s", l)
		}
		if strings.Contains(l, "ECDSA") && strings.Contains(l, "digital signature") && strings.Contains(l, "certificate '@"+id+"'") {
			found = l
		}
	}
	if found == "" {
		return "", fmt.Errorf("pluto's log of the run says nothing of authenticating %s by an ECDSA signature with its certificate (%d authentications: %q)", id, len(lines), lines)
	}
	return found, nil
}

// judge checks one run against the appliance's IKE daemon.
func judge(t *testing.T, daemon, f string, r *scenario.Result) {
	t.Helper()
	if !r.Pass {
		t.Errorf("%s %s: pass %v, error %q, hint %q", daemon, r.Name, r.Pass, r.Error, r.Hint)
		if len(r.Gateways[0].Drops) > 0 {
			t.Logf("%s %s: gw1 drops %v", daemon, r.Name, r.Gateways[0].Drops)
		}
		for _, sa := range r.Gateways[0].SAs {
			if len(sa.Drops) > 0 {
				t.Logf("%s %s: gw1 SA %s %s drops %v", daemon, r.Name, sa.SPI, sa.Direction, sa.Drops)
			}
		}
		for _, st := range r.Steps {
			t.Logf("%s %s: step %s: sent %d received %d mismatched %d %s %s", daemon, r.Name, st.Name, st.Sent, st.Received, st.Mismatched, st.Detail, st.Output)
		}
	}
	t.Logf("%s %s: CHILD_SAs %v, ike.rekeys %v, gw1.held %v", daemon, r.Name, r.ExternalSPIs, r.Metrics["ike.rekeys"], r.Metrics["gw1.held"])
	if len(r.ExternalSPIs) == 0 || len(r.ExternalCounters) == 0 {
		t.Errorf("%s %s: no negotiated SPIs (%v) or device counters (%d listings)", daemon, r.Name, r.ExternalSPIs, len(r.ExternalCounters))
		return
	}
	// The device's kernel holds the SAs gw1 negotiated: both SPIs of
	// a CHILD_SA gw1 had in force in its listing before the traffic
	// (without a rekey, the only one).
	listed := func(pair string) bool {
		out, in, _ := strings.Cut(pair, "/")
		return strings.Contains(r.ExternalCounters[0], "spi "+out+"(") && strings.Contains(r.ExternalCounters[0], "spi "+in+"(")
	}
	if f == "1-ike.yaml" && (len(r.ExternalSPIs) != 1 || !listed(r.ExternalSPIs[0])) ||
		!slices.ContainsFunc(r.ExternalSPIs, listed) {
		t.Errorf("%s %s: the device's ip xfrm state does not list the CHILD_SAs gw1 negotiated (%v):\n%s", daemon, r.Name, r.ExternalSPIs, r.ExternalCounters[0])
	}
	// The device's kernel holds the CHILD_SA in the mode gw1 asked for.
	want, other := "mode tunnel", "mode transport"
	if strings.Contains(f, "-transport") {
		want, other = other, want
	}
	if !strings.Contains(r.ExternalCounters[0], want) || strings.Contains(r.ExternalCounters[0], other) {
		t.Errorf("%s %s: the device's SAs are not all in the mode gw1 asked for:\n%s", daemon, r.Name, r.ExternalCounters[0])
	}
	// Over IPv6 the device's SAs are between the two IPv6 addresses,
	// both ways, and the pings crossed both: gw1's echoes sealed and the
	// device's answers opened, as many as the device counted.
	if strings.Contains(f, "-ipv6") {
		for _, pair := range []string{"src 2001:db8:5::129 dst 2001:db8:5::1\n", "src 2001:db8:5::1 dst 2001:db8:5::129\n"} {
			if !strings.Contains(r.ExternalCounters[0], pair) {
				t.Errorf("%s %s: the device's ip xfrm state has no SA %s:\n%s", daemon, r.Name, strings.TrimSpace(pair), r.ExternalCounters[0])
			}
		}
		var sas []string
		for _, l := range strings.Split(r.ExternalCounters[0], "\n") {
			if strings.HasPrefix(l, "src ") || strings.Contains(l, " mode ") {
				sas = append(sas, strings.TrimSpace(l))
			}
		}
		t.Logf("%s %s: the device's SAs: %s", daemon, r.Name, strings.Join(sas, "; "))
		m := r.Metrics
		if m["gw1.sealed"] == 0 || m["gw1.opened"] == 0 || m["gw2.opened"] != m["gw1.sealed"] || m["gw2.sealed"] != m["gw1.opened"] {
			t.Errorf("%s %s: the pings did not cross both ways: gw1 sealed %v opened %v, the device opened %v sealed %v",
				daemon, r.Name, m["gw1.sealed"], m["gw1.opened"], m["gw2.opened"], m["gw2.sealed"])
		}
	}
	if (f == "2-ike-rekey.yaml" || f == "5-ike-transport-rekey.yaml") && len(slices.Compact(slices.Clone(r.ExternalSPIs))) < 2 {
		t.Errorf("%s %s: the CHILD_SA was not replaced during the run: %v", daemon, r.Name, r.ExternalSPIs)
	}
}
