package e2e_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestNATKeepalivesHoldTheBinding puts a NAT (iptables MASQUERADE, its UDP
// mappings forgotten after 2 s idle) between gw1 and gw2 and lets the
// UDP-encapsulated tunnel idle well past that: with nat-keepalive on gw1
// the far side's first packet after the pause still reaches gw1 through
// the mapping gw1's keepalives kept; with nat-keepalive off the mapping is
// gone and the same packet is lost, the proof that the test can fail.
func TestNATKeepalivesHoldTheBinding(t *testing.T) {
	needRoot(t)
	labtest.NeedTools(t, "iptables")
	for _, c := range []struct {
		setting string
		arrives bool
	}{{"1s", true}, {"off", false}} {
		t.Run("nat-keepalive="+c.setting, func(t *testing.T) {
			natKeepalive(t, c.setting, c.arrives)
		})
	}
}

func natKeepalive(t *testing.T, setting string, arrives bool) {
	const idle = 6 * time.Second // three conntrack timeouts
	b := startBed(t, testbed.Options{Prefix: "itnat", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, Encap: sa.EncapUDP})
	a := b.Topo.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The NAT: gw1's packets leave the WAN toward gw2 from the WAN's own
	// address (port 4500 kept while free), a mapping conntrack forgets
	// after 2 s without a packet.
	public := a.WANToGW24.Addr()
	for _, cmd := range [][]string{
		{"iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "gw2", "-s", a.GW1WAN4.Addr().String(), "-p", "udp", "-j", "MASQUERADE"},
		{"sysctl", "-w", "net.netfilter.nf_conntrack_udp_timeout=2"},
		{"sysctl", "-w", "net.netfilter.nf_conntrack_udp_timeout_stream=2"},
	} {
		if out, err := b.Topo.WAN.Output(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("set up the NAT: %v\n%s", err, out)
		}
	}
	// gw2 sees gw1 at the NAT's address; gw1 says when to send keepalives.
	gw2 := []*sa.SA{}
	for _, s := range b.SAs {
		c := *s
		if c.Src == a.GW1WAN4.Addr() {
			c.Src = public
		} else {
			c.Dst = public
		}
		gw2 = append(gw2, &c)
	}
	if err := sa.WriteFile(filepath.Join(b.Dir, "gw2-nat-sas.yaml"), &sa.Config{SAs: gw2}); err != nil {
		t.Fatal(err)
	}
	for i, edit := range []func(string) string{
		func(s string) string { return s + "nat-keepalive: " + setting + "\n" },
		func(s string) string {
			return strings.Replace(s, "sa-file: sas.yaml", "sa-file: gw2-nat-sas.yaml", 1) + "nat-keepalive: off\n"
		},
	} {
		if _, err := b.StopGateway(i, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		cfg, err := os.ReadFile(b.GW[i].Config)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.GW[i].Config, []byte(edit(string(cfg))), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := b.StartGateway(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	// Up to three requests, a second apart, for the one reply wanted: a
	// loaded machine may lose one; without the mapping none gets through.
	ping := func(from, to string) int {
		ns, dst := b.Topo.HostA, a.HostB4.Addr()
		if from == "hostB" {
			ns, dst = b.Topo.HostB, a.HostA4.Addr()
		}
		r, err := testbed.Ping(ctx, ns, dst, testbed.PingOptions{Count: 1, Interval: time.Second, Deadline: 3500 * time.Millisecond})
		if err != nil {
			t.Fatalf("ping %s from %s: %v", to, from, err)
		}
		return r.Received
	}
	// hostA's ping makes the mapping; hostB's reaches hostA through it.
	if ping("hostA", "hostB") < 1 || ping("hostB", "hostA") < 1 {
		t.Fatal("the tunnel does not carry pings through the NAT")
	}
	time.Sleep(idle)
	got := ping("hostB", "hostA")
	st, err := b.Stats(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sent uint64
	for _, k := range st.Sockets {
		sent += k.KeepalivesSent
	}
	st2, err := b.Stats(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var heard uint64
	for _, k := range st2.Sockets {
		heard += k.Keepalives
	}
	t.Logf("after %v idle: hostB's ping answered %d; gw1 sent %d keepalives, gw2 heard %d", idle, got, sent, heard)
	if arrives != (got > 0) {
		t.Errorf("hostB's pings after %v idle: %d replies, want them answered: %v (nat-keepalive: %s)", idle, got, arrives, setting)
	}
	if arrives && (sent < 3 || heard < 3) {
		t.Errorf("gw1 sent %d keepalives and gw2 heard %d in %v idle, want at least 3 each", sent, heard, idle)
	}
	if !arrives && sent != 0 {
		t.Errorf("gw1 sent %d keepalives with nat-keepalive: off", sent)
	}
}
