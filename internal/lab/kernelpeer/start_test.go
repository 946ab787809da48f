package kernelpeer

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
)

// TestStartFailureReportsAndCleansUp boots a kernel image that is not one:
// Start must fail with qemu's own complaint and leave no tap behind.
func TestStartFailureReportsAndCleansUp(t *testing.T) {
	labtest.NeedNamespaces(t)
	labtest.NeedTools(t, "qemu-system-x86_64")
	bed, err := netns.New("kp-fail", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	tapNS, err := bed.AddNamespace("tap")
	if err != nil {
		t.Fatal(err)
	}
	ns := tapNS.Name()
	dir := t.TempDir()
	bogus := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(bogus, []byte("not a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Start(ctx, Config{
		Netns:      ns,
		Tap:        "kptapfail",
		GuestAddrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24")},
		Assets:     &Assets{Kernel: bogus, Initramfs: bogus, KernelRelease: "bogus"},
	})
	if err == nil {
		t.Fatal("Start with a bogus kernel succeeded")
	}
	t.Logf("Start error: %v", err)
	if !strings.Contains(err.Error(), "qemu exited") || !strings.Contains(err.Error(), "guest console") {
		t.Errorf("error does not say qemu exited and show the console: %v", err)
	}
	if out, _ := exec.Command("ip", "-n", ns, "link", "show", "kptapfail").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("tap left behind after a failed start: %s", out)
	}
}

func TestConfigRejects(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Netns is empty"},
		{Config{Netns: "x", Tap: "a-very-long-tap-name"}, "longer than 15"},
		{Config{Netns: "x"}, "GuestAddrs is empty"},
		{Config{Netns: "x", GuestAddrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24")}, MTU: 100}, "MTU 100"},
	} {
		_, err := Start(context.Background(), tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Start(%+v): %v, want an error saying %q", tt.cfg, err, tt.want)
		}
	}
}

// TestModulesLoadAfterTheirDependencies checks the load order Prepare
// recorded against each module's own dependency list.
func TestModulesLoadAfterTheirDependencies(t *testing.T) {
	a, err := Prepared(PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	idx, err := indexModules(filepath.Join(filepath.Dir(filepath.Dir(a.Kernel)), "lib", "modules", a.KernelRelease))
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range a.Modules {
		pos[m] = i
	}
	for _, want := range []string{"esp4", "esp6", "xfrm_user", "authenc", "authencesn", "gcm", "virtio_net", "virtio_console", "drbg"} {
		if _, ok := pos[want]; !ok {
			t.Errorf("module %s not in the initramfs's load list %v", want, a.Modules)
		}
	}
	for i, m := range a.Modules {
		data, err := readModule(idx[m])
		if err != nil {
			t.Fatal(err)
		}
		deps, err := moduleDepends(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range deps {
			if j, ok := pos[d]; !ok || j > i {
				t.Errorf("%s loads at %d but its dependency %s is at %d (present: %v)", m, i, d, j, ok)
			}
		}
	}
}
