package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

// TestMetricsLintOnEveryEngine scrapes gateways whose SAs share SPIs (the
// tunnel's two directions under one SPI, and a third SA under it to a
// second local address), with ESN past 2^32 and a retired SA, on every
// engine this host has: /metrics answers, tells every SA apart, passes
// the client library's linter and carries the sequence numbers.
func TestMetricsLintOnEveryEngine(t *testing.T) {
	ran := 0
	for _, name := range (sim.Engines{}).Names() {
		t.Run(name, func(t *testing.T) {
			var engs [2]offload.Engine
			for i := range engs {
				e, err := (sim.Engines{}).Open(name, engines.Options{})
				if err != nil {
					t.Skipf("engine %s is not on this host (its own tests run where its device is): %v", name, err)
				}
				t.Cleanup(func() { e.Close() })
				engs[i] = e
			}
			ran++
			scrapeSharedSPIs(t, engs)
		})
	}
	if ran == 0 {
		t.Fatal("no engine opened on this host")
	}
}

func scrapeSharedSPIs(t *testing.T, engs [2]offload.Engine) {
	const initial = 1<<32 - 2
	gw1b, far := netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("198.51.100.9")
	suite := sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA256_128}
	mk := func(src, dst netip.Addr) *sa.SA {
		return &sa.SA{SPI: 0x1001, Mode: sa.Tunnel, Src: src, Dst: dst, Suite: suite, EncKey: key(32), AuthKey: key(32),
			ESN: true, ReplayWindow: 64, InitialSeq: initial}
	}
	sas := []*sa.SA{mk(gw1Addr, gw2Addr), mk(gw2Addr, gw1Addr), mk(far, gw1b)}
	c1, c2 := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 1024)
	dev1, dev2 := memnet.NewDevice(1024, 64), memnet.NewDevice(1024, 64)
	newGW := func(dev *memnet.Device, c *memnet.Conn, e offload.Engine, sas []*sa.SA, local ...netip.Addr) *gateway.Gateway {
		g := gateway.New(dev, []gateway.Conn{c}, func(*sa.SA) gateway.Conn { return c }, e,
			gateway.Options{Local: local, InnerMTU: 1438, RetireAfter: 10 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		if err := g.Load(sas, nil); err != nil {
			t.Fatal(err)
		}
		return g
	}
	gw1, gw2 := newGW(dev1, c1, engs[0], sas, gw1Addr, gw1b), newGW(dev2, c2, engs[1], sas[:2], gw2Addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- gw1.Run(ctx) }()
	go func() { done <- gw2.Run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("gateway run: %v", err)
			}
		}
	}()
	const n = 5
	bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
	for i := range n {
		dev1.Send(ipv4UDP(100, uint16(i+1)))
		if _, err := dev2.Receive(bufs, sizes); err != nil {
			t.Fatal(err)
		}
		dev2.Send(ipv4UDP(100, uint16(i+1)))
		if _, err := dev1.Receive(bufs, sizes); err != nil {
			t.Fatal(err)
		}
	}
	// A new key for the third SA retires the old one.
	next := clone(sas)
	next[2].EncKey = key(32)
	if err := gw1.Load(next, nil); err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(gw1.Handler())
	defer srv.Close()
	body := fetch(t, srv.URL+"/metrics")
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("lint /metrics: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	want := float64(initial + n)
	const suiteName = "aes-cbc-256+hmac-sha2-256-128"
	out := map[string]string{"spi": "0x1001", "direction": "out", "local": "198.51.100.1", "remote": "198.51.100.2", "suite": suiteName}
	in := map[string]string{"spi": "0x1001", "direction": "in", "local": "198.51.100.1", "remote": "198.51.100.2", "suite": suiteName}
	third := map[string]string{"spi": "0x1001", "direction": "in", "local": "198.51.100.3", "remote": "198.51.100.9", "suite": suiteName}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"espgw_sa_packets_total", with(out, "op", "seal"), n},
		{"espgw_sa_packets_total", with(in, "op", "open"), n},
		{"espgw_sa_packets_total", with(third, "op", "open"), 0},
		{"espgw_sa_sequence_number", out, want},
		{"espgw_sa_replay_window_top", in, want},
		{"espgw_sa_replay_window_top", third, initial},
		{"espgw_sa_packets_total", map[string]string{"spi": "retired", "direction": "in", "op": "open"}, 0},
		{"espgw_engine_ops_total", map[string]string{"engine": engs[0].Name()}, 2 * n},
	} {
		got, ok := value(mfs, c.name, c.labels)
		if !ok {
			t.Errorf("/metrics lacks %s%v", c.name, c.labels)
		} else if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, name := range []string{"espgw_engine_queue_depth", "espgw_engine_queue_depth_max", "espgw_engine_doorbells_total", "espgw_engine_completions_total"} {
		if _, ok := value(mfs, name, map[string]string{"engine": engs[0].Name()}); !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	var st gateway.Stats
	if err := json.Unmarshal(fetch(t, srv.URL+"/stats"), &st); err != nil {
		t.Fatalf("decode /stats: %v", err)
	}
	seen := map[[3]string]bool{}
	for _, s := range st.SAs {
		if s.Retired {
			continue
		}
		id := [3]string{s.SPI, s.Src, s.Dst}
		if seen[id] || s.Suite != suiteName {
			t.Errorf("/stats SA %+v: repeated or suite not %s", id, suiteName)
		}
		seen[id] = true
	}
	if len(seen) != 3 {
		t.Errorf("/stats holds %d SAs in force, want 3", len(seen))
	}
}

// fetch GETs url and insists on 200.
func fetch(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return body
}

func with(l map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range l {
		out[a] = b
	}
	return out
}

// value is the sample of family name whose labels include all of want.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}
