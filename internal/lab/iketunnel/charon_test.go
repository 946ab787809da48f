package iketunnel

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/strongswan"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// TestGatewayIKEWithCharon runs an espgw gateway on gw1 whose tunnel
// comes up by IKE with strongSwan's charon on gw2 (kernel-libipsec, ESP
// in UDP on port 4500, which the gateway shares between its IKE and its
// ESP), each side initiating in turn. The tunnel must carry ping and
// iperf3; CHILD_SA rekeys by espgw and by charon under a counted ping
// stream must lose nothing; charon's Delete takes espgw's SAs out of force
// (and espgw, start_action=start, comes back); charon killed and started
// again is noticed by espgw's liveness checks (dpd_delay) and the tunnel
// re-established; espgw stopping deletes the IKE SA at charon.
func TestGatewayIKEWithCharon(t *testing.T) {
	if testing.Short() {
		t.Skip("runs charon and an espgw gateway in namespaces; run without -short")
	}
	if err := strongswan.CheckInstalled(); err != nil {
		t.Fatal(err)
	}
	labtest.NeedNamespaces(t)
	t.Run("espgw-initiates", func(t *testing.T) { withCharon(t, false) })
	t.Run("charon-initiates", func(t *testing.T) { withCharon(t, true) })
}

// charonSide is the test's charon and what restarting it takes.
type charonSide struct {
	cfg strongswan.Config
	*strongswan.Charon
}

func withCharon(t *testing.T, charonInitiates bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	topo, err := netns.NewTopology("ikesw", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	a := topo.Addr
	key := make([]byte, 16)
	rand.Read(key)
	psk := hex.EncodeToString(key)
	if err := os.WriteFile(filepath.Join(dir, "psk"), []byte(psk+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start, rekey := "start", "10s"
	if charonInitiates {
		start, rekey = "none", "0"
	}
	conf := filepath.Join(dir, "gw1.yaml")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`local: %[1]s
tun: {name: esp0, routes: [%[2]s]}
state-dir: gw1-state
engine: %[7]s
wan-io: %[8]s
ike:
  retransmit_timeout: 500ms
  retransmit_tries: 3
  decryption_table: ikev2_decryption_table
  connections:
    charon:
      local_addrs: [%[1]s]
      remote_addrs: [%[3]s]
      local: {id: gw1}
      remote: {id: gw2}
      proposals: aes128-sha256-x25519
      psk_file: psk
      dpd_delay: 2s
      children:
        net:
          local_ts: [%[4]s]
          remote_ts: [%[2]s]
          esp_proposals: aes128gcm16
          start_action: %[5]s
          rekey_time: %[6]s
          rand_time: 1s
`, a.GW1WAN4.Addr(), a.LANB4, a.GW2WAN4.Addr(), a.LANA4, start, rekey, testbed.DefaultEngine(), testbed.DefaultWanIO())), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ch := &charonSide{cfg: strongswan.Config{NS: topo.GW2, Dir: filepath.Join(dir, "gw2"), Local: a.GW2WAN4.Addr(), Remote: a.GW1WAN4.Addr(),
		LocalNet: a.LANB4, RemoteNet: a.LANA4, ID: "gw2", PeerID: "gw1", PSK: psk, IKE: "aes128-sha256-x25519", ESP: "aes128gcm16",
		Initiate: charonInitiates}}
	var gw *testbed.Gateway
	startCharon := func() {
		t.Helper()
		if ch.Charon, err = strongswan.Start(ctx, ch.cfg); err != nil {
			t.Fatal(err)
		}
		if err := ch.WaitConnection(ctx, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if !charonInitiates {
		startCharon()
	}
	if gw, err = testbed.RunGateway(ctx, topo.GW1, bin, conf); err != nil {
		t.Fatal(err)
	}
	defer gw.Stop(syscall.SIGKILL)
	if charonInitiates {
		startCharon()
	}
	defer func() { ch.Kill() }()
	logs := func() string { return "gw1:\n" + gw.Output() + "\ncharon:\n" + ch.Output() }
	first := waitChild(t, ctx, topo.GW1, bin, 1, logs)
	if _, err := ch.Child(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	hostA, hostB := a.HostA4.Addr(), a.HostB4.Addr()
	pingBoth := func(what string) {
		t.Helper()
		for _, p := range []struct {
			from *netns.Namespace
			to   *netns.Namespace
		}{{topo.HostA, topo.HostB}, {topo.HostB, topo.HostA}} {
			dst := hostB
			if p.to == topo.HostA {
				dst = hostA
			}
			r, err := testbed.Ping(ctx, p.from, dst, testbed.PingOptions{Count: 5, Interval: 50 * time.Millisecond})
			if err != nil || r.Received < 5 {
				t.Fatalf("%s: ping %s from %s: %d of 5 replies (%v)\n%s", what, dst, p.from.Short(), r.Received, err, logs())
			}
		}
	}
	pingBoth("espgw ↔ charon")
	ip, err := testbed.Iperf3(ctx, topo.HostB, topo.HostA, hostB, testbed.IperfOptions{Duration: 2 * time.Second})
	if err != nil || ip.Bytes == 0 {
		t.Fatalf("iperf3 through espgw ↔ charon: %+v %v", ip, err)
	}
	t.Logf("iperf3 TCP hostA → hostB through espgw ↔ charon: %.0f Mbit/s", ip.BitsPerSecond/1e6)
	events := func() map[string]uint64 {
		st, err := testbed.GatewayStats(ctx, topo.GW1, bin)
		if err != nil {
			t.Fatal(err)
		}
		return st.IKE.Connections[0].Events
	}
	// A counted stream of pings across a rekey must lose none.
	stream := func(what string, n int, during func()) {
		t.Helper()
		done := make(chan testbed.PingResult, 1)
		go func() {
			r, err := testbed.Ping(ctx, topo.HostA, hostB, testbed.PingOptions{Count: n, Interval: 12 * time.Millisecond, Deadline: time.Duration(n)*12*time.Millisecond + 5*time.Second})
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		if during != nil {
			time.Sleep(2 * time.Second)
			during()
		}
		r := <-done
		t.Logf("%s: %d pings sent, %d answered", what, r.Sent, r.Received)
		if r.Sent == 0 || r.Received != r.Sent {
			t.Errorf("%s: %d of %d pings answered\n%s", what, r.Received, r.Sent, logs())
		}
	}
	if !charonInitiates {
		before := events()["CHILD_SA rekeyed"]
		stream("CHILD_SA rekey by espgw", 1100, nil)
		if after := events()["CHILD_SA rekeyed"]; after <= before {
			t.Errorf("espgw rekeyed no CHILD_SA during the stream (%d rekeys before, %d after)", before, after)
		}
	}
	before := events()["CHILD_SA rekeyed by the peer"]
	stream("CHILD_SA rekey by charon", 500, func() {
		name, err := ch.InstalledChild(ctx)
		if err == nil && name == "" {
			err = fmt.Errorf("charon has no CHILD_SA installed")
		}
		if err == nil {
			err = ch.Rekey(ctx, name)
		}
		if err != nil {
			t.Error(err)
		}
	})
	waitFor(t, 10*time.Second, func() bool { return events()["CHILD_SA rekeyed by the peer"] > before },
		func() string { return "espgw saw no CHILD_SA rekey by charon\n" + logs() })

	if charonInitiates {
		// espgw's Delete, as it stops.
		if _, err := gw.Stop(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		charonForgets(t, ctx, ch, logs)
		return
	}

	// charon's Delete: espgw takes the SAs out of force, then comes back
	// (start_action: start).
	if err := ch.Down(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return events()["IKE SA deleted by the peer"] >= 1 },
		func() string { return "espgw saw no Delete of the IKE SA\n" + logs() })
	again := waitChild(t, ctx, topo.GW1, bin, 1, logs)
	if again.SPIi == first.SPIi {
		t.Fatalf("after charon's Delete espgw still has IKE SA %016x", first.SPIi)
	}
	pingBoth("after charon's Delete and espgw's new IKE SA")

	// charon dies; espgw's liveness checks find it gone, and the tunnel
	// comes back once charon runs again.
	if err := ch.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool {
		st, err := testbed.GatewayStats(ctx, topo.GW1, bin)
		return err == nil && st.IKE.Connections[0].DPDFailures >= 1 && inForce(st) == 0
	}, func() string { return "espgw did not notice charon gone\n" + logs() })
	startCharon()
	back := waitChild(t, ctx, topo.GW1, bin, 1, logs)
	if back.SPIi == again.SPIi {
		t.Fatalf("espgw kept IKE SA %016x of the dead charon", again.SPIi)
	}
	pingBoth("after charon's restart")
	st, err := testbed.GatewayStats(ctx, topo.GW1, bin)
	if err != nil {
		t.Fatal(err)
	}
	c := st.IKE.Connections[0]
	t.Logf("espgw: %d initiations, %d IKE SAs, %d failed, %d dpd failures, %d CHILD_SA rekeys; events %v",
		c.Initiated, c.Established, c.Failed, c.DPDFailures, c.ChildRekeys, c.Events)
	if _, err := gw.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	charonForgets(t, ctx, ch, logs)
}

// charonForgets waits until charon has no IKE SA left (espgw deleted it).
func charonForgets(t *testing.T, ctx context.Context, ch *charonSide, logs func() string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		st, err := ch.Status(ctx)
		return err == nil && !strings.Contains(st, "ESTABLISHED")
	}, func() string {
		st, _ := ch.Status(ctx)
		return "charon keeps its IKE SA after espgw deleted it:\n" + st + "\n" + logs()
	})
}
