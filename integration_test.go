package espgw_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/espgw/espgw/internal/testbed"
	"github.com/espgw/espgw/sa"
)

// binary is the espgw executable the gateways run, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "espgw-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "espgw")
	if out, err := exec.Command("go", "build", "-o", binary, "./cmd/espgw").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build espgw: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestGatewayPing(t *testing.T) {
	ctx := context.Background()
	b, err := testbed.Start(ctx, testbed.Options{Binary: binary, Prefix: "itping",
		Suite: sa.Suite{Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r, err := testbed.Ping(ctx, b.Topo.HostA, b.Topo.Addr.HostB4.Addr(), 56, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.Received != r.Sent {
		st0, _ := b.Stats(ctx, 0)
		st1, _ := b.Stats(ctx, 1)
		t.Fatalf("ping: %d/%d\n%s\ngw1 %+v\ngw2 %+v", r.Received, r.Sent, r.Output, st0, st1)
	}
}

func TestGatewayIperf(t *testing.T) {
	ctx := context.Background()
	for _, suite := range []sa.Suite{{Cipher: sa.CipherAESGCM16}, {Cipher: sa.CipherAESCBC, Auth: sa.AuthHMACSHA1_96}} {
		b, err := testbed.Start(ctx, testbed.Options{Binary: binary, Prefix: "itperf", Suite: suite})
		if err != nil {
			t.Fatal(err)
		}
		r, err := testbed.Iperf3(ctx, b.Topo.HostB, b.Topo.HostA, b.Topo.Addr.HostB4.Addr(), testbed.IperfOptions{Duration: 3e9})
		st, _ := b.Stats(ctx, 1)
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.2f Gbit/s, %d retransmits; gw2 %+v", suite, r.BitsPerSecond/1e9, r.Retransmits, st)
	}
}
