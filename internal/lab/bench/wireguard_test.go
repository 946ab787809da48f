package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// The wireguard-go baseline is a real tunnel: built at the pinned version,
// keyed with wg, carrying pings from hostA to hostB where the WAN has no
// route for the LANs, and gone without a trace after Close.
func TestWireguardBaselineCarriesTraffic(t *testing.T) {
	if err := Check(Options{Baselines: []string{KindWireguard}}); err != nil {
		t.Fatalf("the wireguard-go baseline cannot run here: %v", err)
	}
	labtest.NeedTools(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := BuildWireguard(ctx, "") // the user cache: built once per machine
	if err != nil {
		t.Fatal(err)
	}
	topo, err := netns.NewTopology("bnw", netns.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Close() })
	w, err := startWireguard(ctx, bin, topo, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.PIDs()) != 2 {
		t.Fatalf("wireguard-go processes: %v", w.PIDs())
	}
	r, err := testbed.Ping(ctx, topo.HostA, topo.Addr.HostB4.Addr(), testbed.PingOptions{Size: 1000, Count: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The first ping may go while the handshake runs.
	if r.Received < r.Sent-1 || r.Sent != 5 {
		t.Errorf("pings through wireguard-go: %d of %d came back\n%s", r.Received, r.Sent, r.Output)
	}
	w.Close()
	for _, name := range w.names {
		if _, err := os.Stat(filepath.Join("/var/run/wireguard", name+".sock")); !os.IsNotExist(err) {
			t.Errorf("UAPI socket of %s left behind (%v)", name, err)
		}
	}
}
