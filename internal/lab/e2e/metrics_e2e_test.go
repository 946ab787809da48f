package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestMetricsOfARunningGateway scrapes a real `espgw run` whose two SAs
// share one SPI (one each way, so they differ in destination) with ESN
// past 2^32, after traffic both ways: /metrics answers, passes the
// client library's linter, and has each direction's series apart with
// its sequence number and replay window top.
func TestMetricsOfARunningGateway(t *testing.T) {
	needRoot(t)
	const initial = 1<<32 - 3
	b := startBed(t, testbed.Options{Prefix: "itmet", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, ESN: true, InitialSeq: initial,
		Customize: func(c *sa.Config) error {
			c.SAs[1].SPI = c.SAs[0].SPI
			return nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 5
	r, err := testbed.Ping(ctx, b.Topo.HostA, b.Topo.Addr.HostB4.Addr(), testbed.PingOptions{Count: n})
	if err != nil || r.Received < n {
		t.Fatalf("ping across the tunnel: %d of %d replies, %v", r.Received, n, err)
	}
	var body []byte
	if err := b.GW[0].NS.Do(func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:9478", 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: gw1\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if body, err = io.ReadAll(resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s\n%.2000s", resp.Status, body)
		}
		return nil
	}); err != nil {
		t.Fatalf("scrape gw1: %v", err)
	}
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
		t.Fatalf("parse /metrics: %v", err)
	}
	gw1, gw2 := b.Outer()
	sameSA := func(family string, dir string, want func(float64) bool) {
		for _, m := range mfs[family].GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["spi"] != "0x1001" || l["direction"] != dir || l["local"] != gw1.String() || l["remote"] != gw2.String() || l["op"] == "open" && dir == "out" || l["op"] == "seal" && dir == "in" {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			if !want(v) {
				t.Errorf("%s%v = %v", family, l, v)
			}
			return
		}
		t.Errorf("/metrics lacks %s for SA 0x1001 %s", family, dir)
	}
	atLeast := func(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }
	sameSA("espgw_sa_packets_total", "out", atLeast(n))
	sameSA("espgw_sa_packets_total", "in", atLeast(n))
	sameSA("espgw_sa_sequence_number", "out", atLeast(initial+n))
	sameSA("espgw_sa_replay_window_top", "in", atLeast(initial+n))
}
