package gateway_test

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/memnet"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// A stored sequence bound at the end of a non-ESN SA's 32-bit space would
// make every outbound packet seq-exhausted: the load refuses it, naming
// the state file.
func TestStateBoundWithoutRoomRefused(t *testing.T) {
	for _, c := range []struct {
		bound string
		esn   bool
		ok    bool
	}{
		{"4294967295", false, false},
		{"18446744073709551615", false, false},
		{"18446744073709551615", true, false},
		{"4294967000", false, true},
		{"4294967295", true, true},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "seq-00001001"), []byte(c.bound+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		sas := pairSAs(sa.Suite{Cipher: sa.CipherAESGCM16, Auth: sa.AuthNone}, 64)
		for _, s := range sas {
			s.ESN = c.esn
		}
		c1, _ := memnet.Pipe(netip.AddrPortFrom(gw1Addr, 0), netip.AddrPortFrom(gw2Addr, 0), 16)
		g := gateway.New(memnet.NewDevice(16, 64), []gateway.Conn{c1}, func(*sa.SA) gateway.Conn { return c1 }, cpu.New(),
			gateway.Options{Local: []netip.Addr{gw1Addr}, StateDir: dir, Log: slog.New(slog.DiscardHandler)})
		err := g.Load(sas, nil)
		g.Close()
		switch {
		case c.ok && err != nil:
			t.Errorf("bound %s esn %v: %v", c.bound, c.esn, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), "leaves no") || !strings.Contains(err.Error(), "seq-00001001")):
			t.Errorf("bound %s esn %v: %v, want a refusal naming the state file", c.bound, c.esn, err)
		}
	}
}
