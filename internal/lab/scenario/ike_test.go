package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
)

// Bad sa.ike fields, and what sa.ike rules out, are refused at parse with
// the file, the line and the field.
func TestIKERefusals(t *testing.T) {
	const tail = "traffic:\n  steps:\n    - udp: {packets: 10}\nexpect: {delivered: 1}\n"
	for _, c := range []struct {
		name, doc, want string
	}{
		{"proposal", "sa:\n  ike:\n    proposals: aes128-md5-modp1024\n", "s.yaml:3: sa.ike.proposals: "},
		{"esp proposal", "sa:\n  ike:\n    esp_proposals: des\n", "s.yaml:3: sa.ike.esp_proposals: "},
		{"unknown field", "sa:\n  ike:\n    rekey: 1s\n", "s.yaml:3"},
		{"rekey too short", "sa:\n  ike: {rekey_time: 100ms}\n", "s.yaml:2: sa.ike.rekey_time: 100ms: want at least 1s"},
		{"rand not below rekey", "sa:\n  ike: {rekey_time: 2s, rand_time: 2s}\n", "sa.ike.rand_time: 2s is not less than rekey_time 2s"},
		{"life before rekey", "sa:\n  ike: {rekey_time: 2s, life_time: 1s}\n", "sa.ike.life_time: 1s is not after rekey_time"},
		{"life without rekey", "sa:\n  ike: {life_time: 10s}\n", "sa.ike.life_time: a life_time without rekey_time"},
		{"rekey_by", "sa:\n  ike: {rekey_by: gw2}\n", "sa.ike.rekey_by: "},
		{"tries", "sa:\n  ike: {retransmit_tries: 50}\n", "sa.ike.retransmit_tries: 50: want 1..20"},
		{"retransmit", "sa:\n  ike: {retransmit_timeout: 1ms}\n", "sa.ike.retransmit_timeout: 1ms: want 100ms..1m0s"},
		{"dpd", "sa:\n  ike: {dpd_delay: 10ms}\n", "sa.ike.dpd_delay: 10ms: want at least 500ms"},
		{"suite beside ike", "sa:\n  suite: aes-gcm-16\n  ike: {}\n", "s.yaml:2: sa.suite: with sa.ike"},
		{"keys beside ike", "sa:\n  ike: {}\n  keys: random\n", "s.yaml:3: sa.keys: with sa.ike"},
		{"kernel peer", "peer: linux-xfrm\nsa:\n  ike: {}\n", "s.yaml:3: sa.ike: with peer: linux-xfrm"},
		{"tunnels", "topology: {tunnels: 3}\nsa:\n  ike: {}\n", "s.yaml:1: topology.tunnels: with sa.ike"},
		{"rekey action", "sa:\n  ike: {}\ntraffic:\n  actions: [{at: 1s, rekey: 0}]\n  steps:\n    - udp: {packets: 10}\nexpect: {delivered: 1}\n", "traffic.actions[0]: rekey 0 changes the given SAs"},
		{"proposal injection", "sa:\n  ike: {proposals: \"aes128-sha256-x25519\\n      psk_file: /etc/shadow\"}\n", "sa.ike.proposals: want proposals"},
		{"ike metric without ike", "traffic:\n  steps:\n    - udp: {packets: 10}\nexpect: {ike.rekeys: 1}\n", "unknown metric"},
		{"ike metric unknown", "sa:\n  ike: {}\n" + strings.Replace(tail, "delivered", "ike.rekey", 1), "unknown metric"},
		{"restart who", "traffic:\n  actions: [{at: 1s, restart: gw3}]\n  steps:\n    - udp: {packets: 10}\nexpect: {delivered: 1}\n", "traffic.actions[0].restart: "},
		{"down without restart", "traffic:\n  actions: [{at: 1s, add: 1, down: 1s}]\n  steps:\n    - udp: {packets: 10}\nexpect: {delivered: 1}\n", "traffic.actions[0].down: only with restart"},
		{"after-actions without actions", "traffic:\n  steps:\n    - {udp: {packets: 10}, after-actions: true}\nexpect: {delivered: 1}\n", "traffic.steps[0].after-actions: the scenario has no actions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := c.doc
			if !strings.Contains(doc, "expect:") {
				doc += tail
			}
			_, err := Parse("s.yaml", []byte(doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// sa.ike's defaults, and the ike: sections written from them: gw1
// initiates and writes the tables, gw2 responds, both with the run's key
// file and the scenario's settings.
func TestIKESections(t *testing.T) {
	scs, err := Parse("s.yaml", []byte("sa:\n  ike:\n"+
		"traffic:\n  steps:\n    - udp: {packets: 10}\nexpect: {ike.up: true, ike.lost_during_rekey: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	k := scs[0].SA.IKE
	if k == nil || k.Proposals != "aes128-sha256-x25519" || k.ESPProposals != "aes128gcm16" || k.RetransmitTimeout != 500*time.Millisecond || k.RetransmitTries != 5 {
		t.Fatalf("defaults: %+v", k)
	}
	k.RekeyTime, k.LifeTime, k.DPDDelay = 2*time.Second, 5*time.Second, time.Second
	run, err := newIKERun("t")
	if err != nil {
		t.Fatal(err)
	}
	defer run.remove()
	r := &runner{s: scs[0], ike: run}
	secs := r.ikeSections()
	for i, want := range [][]string{
		{"start_action: start", "decryption_table:", "local_addrs: [198.51.100.1]", "remote_addrs: [198.51.100.129]", "life_time: 5s", "dpd_delay: 1s", "rekey_time: 2s"},
		{"start_action: none", "local_addrs: [198.51.100.129]", "remote_ts: [192.0.2.0/24, 2001:db8:a::/64]", "life_time: 10s", "rekey_time: 4s"},
	} {
		for _, w := range want {
			if !strings.Contains(secs[i], w) {
				t.Errorf("gw%d's ike: section has no %q:\n%s", i+1, w, secs[i])
			}
		}
		if strings.Contains(secs[i], run.psk) {
			t.Errorf("gw%d's ike: section holds the key itself", i+1)
		}
	}
}

// What the negotiated SAs counted is kept across a rekey (the old SA's
// counts folded into the gateway's retired totals) and a restart (the
// dead process's counts added to the new one's), never counted twice.
func TestCountsAcrossRekeyAndRestart(t *testing.T) {
	sa := func(spi, dir string, sealed, opened uint64) gateway.SAStats {
		return gateway.SAStats{SPI: spi, Direction: dir, Snapshot: esp.Snapshot{SealedPackets: sealed, OpenedPackets: opened, Drops: map[string]uint64{}}}
	}
	sum := func(st gateway.Stats) (sealed, opened uint64) {
		for _, s := range st.SAs {
			sealed += s.SealedPackets
			opened += s.OpenedPackets
		}
		return sealed, opened
	}
	before := gateway.Stats{WireOut: 100, SAs: []gateway.SAStats{sa("0x1", "out", 100, 0), sa("0x2", "in", 0, 90), sa("retired", "out", 40, 0)}}
	// 0x1 and 0x2 rekeyed to 0x3 and 0x4: their counts (before's too)
	// are in the retired totals now.
	after := gateway.Stats{WireOut: 160, SAs: []gateway.SAStats{sa("0x3", "out", 30, 0), sa("0x4", "in", 0, 25), sa("retired", "out", 40+130, 0), sa("retired", "in", 0, 110)}}
	if sealed, opened := sum(statsMinus(after, before)); sealed != 60 || opened != 45 {
		t.Errorf("across a rekey: sealed %d, opened %d; want 60 and 45", sealed, opened)
	}
	// A restart: the process died at pre, the new one counted since.
	pre := gateway.Stats{TunIn: 7, WireOut: 120, Drops: map[string]uint64{"unknown-spi": 2}, SAs: []gateway.SAStats{sa("0x1", "out", 120, 0), sa("retired", "out", 40, 0)}}
	now := gateway.Stats{TunIn: 3, WireOut: 5, Drops: map[string]uint64{"unknown-spi": 1}, SAs: []gateway.SAStats{sa("0x9", "out", 5, 0)}}
	both := statsPlus(pre, now)
	if both.TunIn != 10 || both.WireOut != 125 || both.Drops["unknown-spi"] != 3 {
		t.Errorf("restart: %+v", both)
	}
	d := statsMinus(both, gateway.Stats{WireOut: 100, SAs: []gateway.SAStats{sa("0x1", "out", 100, 0), sa("retired", "out", 40, 0)}})
	if sealed, _ := sum(d); sealed != 25 || d.WireOut != 25 {
		t.Errorf("restart: sealed %d, wire_out %d; want 25 and 25", sealed, d.WireOut)
	}
}
