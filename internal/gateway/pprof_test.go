package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// The profiler is not on the metrics listener: it has a handler (and an
// address, pprof:) of its own.
func TestProfilerApartFromMetrics(t *testing.T) {
	b := newBed(t, cpu.New(), pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16, Auth: sa.AuthNone}, 64))
	metrics := httptest.NewServer(b.gw1.Handler())
	defer metrics.Close()
	prof := httptest.NewServer(gateway.ProfileHandler())
	defer prof.Close()
	for _, c := range []struct {
		url  string
		want int
	}{
		{metrics.URL + "/metrics", http.StatusOK},
		{metrics.URL + "/debug/pprof/", http.StatusNotFound},
		{metrics.URL + "/debug/pprof/profile?seconds=1", http.StatusNotFound},
		{prof.URL + "/debug/pprof/", http.StatusOK},
		{prof.URL + "/metrics", http.StatusNotFound},
	} {
		resp, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s: %d, want %d", c.url, resp.StatusCode, c.want)
		}
	}
}
