package capture

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/wanrelay"
)

// bed is hostA — wan — hostB on one subnet, wan bridged by the relay.
func bed(t *testing.T) ([2]ReplayHost, string) {
	t.Helper()
	a, wan, b := labtest.Chain(t, "im-rp", true)
	labtest.Address(t, a, "a0", "192.0.2.1/24", "2001:db8::1/64")
	labtest.Address(t, b, "b0", "192.0.2.2/24", "2001:db8::2/64")
	return [2]ReplayHost{{a, "a0"}, {b, "b0"}}, wan.Name()
}

func bundled(t *testing.T) []Packet {
	t.Helper()
	topo := Topology{
		A: Hosts{IPv4: netip.MustParseAddr("192.0.2.1"), IPv6: netip.MustParseAddr("2001:db8::1")},
		B: Hosts{IPv4: netip.MustParseAddr("192.0.2.2"), IPv6: netip.MustParseAddr("2001:db8::2")},
	}
	pkts, st, err := Rewrite(source(t), topo, RewriteOptions{Timing: AsFast})
	if err != nil || len(st.Skipped) != 0 {
		t.Fatalf("rewrite: %v %+v", err, st)
	}
	return pkts
}

func startRelay(t *testing.T, wan string, cfg impair.Config) *wanrelay.Running {
	t.Helper()
	r, err := wanrelay.Start(wanrelay.Config{Netns: wan, A: "wa", B: "wb", AToB: cfg, BToA: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func TestReplayThroughRelay(t *testing.T) {
	hosts, wan := bed(t)
	pkts := bundled(t)

	t.Run("everything arrives", func(t *testing.T) {
		startRelay(t, wan, impair.DefaultConfig())
		res, err := Replay(context.Background(), pkts, hosts, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res)
		if res.Sent[0]+res.Sent[1] != len(pkts) || res.Missing != [2]int{} || res.Delivered != res.Sent || res.SendErrors != [2]int{} {
			t.Fatalf("replay of %d packets: %+v", len(pkts), res)
		}
	})

	t.Run("timing kept and scaled", func(t *testing.T) {
		startRelay(t, wan, impair.DefaultConfig())
		icmp := source(t, "icmp.pcap")
		span := icmp[len(icmp)-1].CI.Timestamp.Sub(icmp[0].CI.Timestamp)
		topo := Topology{A: Hosts{IPv4: netip.MustParseAddr("192.0.2.1")},
			B: Hosts{IPv4: netip.MustParseAddr("192.0.2.2")}}
		paced, _, err := Rewrite(icmp, topo, RewriteOptions{Speed: 50})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Replay(context.Background(), paced, hosts, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The latency is recorded, not bounded: only its percentiles'
		// order is checked.
		if l := res.Latency; l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.Max {
			t.Fatalf("latency %+v", l)
		}
		t.Logf("latency %+v", res.Latency)
		if want := span / 50; res.Elapsed < want || res.Missing != [2]int{} {
			t.Fatalf("replay took %v for a %v capture at 50×, want ≥ %v; %+v", res.Elapsed, span, want, res)
		}
	})

	t.Run("missing equals what the relay dropped", func(t *testing.T) {
		cfg := impair.DefaultConfig()
		cfg.Match, cfg.Loss, cfg.Seed = []string{"udp/53"}, 30, 3 // the DNS exchanges
		r := startRelay(t, wan, cfg)
		res, err := Replay(context.Background(), pkts, hosts, ReplayOptions{Linger: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c := r.Counters()
		t.Logf("%+v; relay lost %d a→b, %d b→a", res, c.AToB.Impair.Lost, c.BToA.Impair.Lost)
		if c.AToB.Impair.Lost == 0 || uint64(res.Missing[0]) != c.AToB.Impair.Lost || uint64(res.Missing[1]) != c.BToA.Impair.Lost {
			t.Fatalf("missing %v, relay lost %d and %d", res.Missing, c.AToB.Impair.Lost, c.BToA.Impair.Lost)
		}
		for _, i := range res.MissingPackets {
			if _, proto, _, _ := header.Upper(pkts[i].Data); proto != 17 {
				t.Fatalf("packet %d missing but it is no UDP", i)
			}
		}
	})
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := summarize(d)
	want := Latency{P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}
	if got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if summarize(nil) != (Latency{}) {
		t.Fatal("no delays, some latency")
	}
}
