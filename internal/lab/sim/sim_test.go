package sim_test

import (
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/offload/engines"
)

func TestNames(t *testing.T) {
	names := sim.Engines{}.Names()
	if len(names) < 6 || names[0] != "cpu" || names[1] != "aesni" || names[2] != "ring" || !strings.HasPrefix(names[3], "emul:") {
		t.Errorf("names %v: want cpu, aesni, ring, emul:…, then the devices", names)
	}
	if got := names[len(names)-2:]; got[0] != "afalg" || got[1] != "virtio" {
		t.Errorf("names end %v: want afalg, virtio", got)
	}
	for _, n := range (engines.Product{}).Names() {
		if err := (sim.Engines{}).Check(n); err != nil {
			t.Errorf("product engine %s: %v", n, err)
		}
	}
}

// Every software engine opens under its own name; names the catalog does
// not know are refused by Check and Open alike, listing what it knows.
func TestOpen(t *testing.T) {
	cat := sim.Engines{}
	for _, name := range cat.Software() {
		t.Run(name, func(t *testing.T) {
			if err := cat.Check(name); err != nil {
				t.Fatalf("check: %v", err)
			}
			e, err := cat.Open(name, engines.Options{Workers: 2, QueueDepth: 8})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer e.Close()
			if e.Name() != name {
				t.Errorf("opened %q", e.Name())
			}
		})
	}
	for _, tc := range []struct{ name, open, check string }{
		{"turbo", `unknown offload engine "turbo" (known: cpu, aesni, ring, emul:`, "unknown offload engine (known: cpu, aesni, ring"},
		{"emul:nosuchcard", `offload engine "emul:nosuchcard"`, ""},
		{"cpu:x", `unknown offload engine "cpu:x" (known: cpu, aesni, ring`, ""},
		{"ring:x", `unknown offload engine "ring:x" (known: cpu, aesni, ring`, ""},
	} {
		_, err := cat.Open(tc.name, engines.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.open) {
			t.Errorf("open %s: %v, want %q", tc.name, err, tc.open)
		}
		if tc.check != "" {
			if err := cat.Check(tc.name); err == nil || !strings.Contains(err.Error(), tc.check) {
				t.Errorf("check %s: %v, want %q", tc.name, err, tc.check)
			}
		}
	}
}
