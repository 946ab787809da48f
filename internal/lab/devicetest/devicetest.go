// Package devicetest runs espgw's device engines against real (virtual)
// crypto hardware: it boots Debian's kernel under QEMU (package kernelpeer)
// with QEMU's virtio-crypto-pci devices, puts espgw's own static binaries
// and the engines' test binaries into the guest, runs them there, and reads
// what the device itself counted through QMP. This machine's kernel has no
// VFIO or virtio-crypto; the guest's has, so that is where those engines
// are proven.
package devicetest

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
)

// ModuleRoot is the espgw module's folder, found from the go command.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("find the module root: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// BuildTest compiles the tests of package pkg (a path relative to the
// module root, e.g. ./offload/virtio) as a static binary at out, as the
// guest needs: it has no C library.
func BuildTest(ctx context.Context, root, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the tests of %s for the guest: %w: %s", pkg, err, b)
	}
	return nil
}

// Build compiles a command (e.g. ./cmd/espgw) as a static binary at out.
func Build(ctx context.Context, root, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s for the guest: %w: %s", pkg, err, b)
	}
	return nil
}

// GuestOptions describe a guest for device work.
type GuestOptions struct {
	Devices kernelpeer.Devices
	// Tests are packages whose test binaries go to /espgw/NAME.test
	// (NAME the package's last element), e.g. ./offload/virtio.
	Tests []string
	// Commands are packages whose binaries go to /espgw/NAME, e.g. ./cmd/espgw.
	Commands []string
	// Files are more files for the guest, guest path → host path.
	Files map[string]string
	// Netns is the namespace that gets the guest's tap (192.0.2.1/24 on
	// the host side, 192.0.2.2/24 in the guest).
	Netns string
	Log   *slog.Logger
}

// Guest is a booted device guest and the folder its binaries were built in.
type Guest struct {
	*kernelpeer.Peer
	work  string
	netns string
}

// Boot builds what the guest needs and boots it. The known-answer vectors
// always go along, at /espgw/testdata/vectors.
func Boot(ctx context.Context, opts GuestOptions) (_ *Guest, err error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	assets, err := kernelpeer.Prepare(ctx, kernelpeer.PrepareOptions{Offline: true})
	if err != nil {
		return nil, err
	}
	root, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	g := &Guest{netns: opts.Netns}
	if g.work, err = os.MkdirTemp("", "espgw-devicetest-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(g.work)
		}
	}()
	files := map[string]string{}
	for k, v := range opts.Files {
		files[k] = v
	}
	for _, pkg := range opts.Tests {
		bin := filepath.Join(g.work, filepath.Base(pkg)+".test")
		if err := BuildTest(ctx, root, pkg, bin); err != nil {
			return nil, err
		}
		files["/espgw/"+filepath.Base(bin)] = bin
	}
	for _, pkg := range opts.Commands {
		bin := filepath.Join(g.work, filepath.Base(pkg))
		if err := Build(ctx, root, pkg, bin); err != nil {
			return nil, err
		}
		files["/espgw/"+filepath.Base(bin)] = bin
	}
	vectors, _ := filepath.Glob(filepath.Join(root, "testdata", "vectors", "*.json"))
	for _, v := range vectors {
		files["/espgw/testdata/vectors/"+filepath.Base(v)] = v
	}
	if out, err := exec.CommandContext(ctx, "ip", "-n", opts.Netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("loopback up in %s: %v: %s", opts.Netns, err, out)
	}
	g.Peer, err = kernelpeer.Start(ctx, kernelpeer.Config{
		Netns:          opts.Netns,
		Tap:            "dttap0",
		HostAddrs:      []netip.Prefix{HostAddr},
		GuestAddrs:     []netip.Prefix{GuestAddr},
		Assets:         assets,
		Logger:         opts.Log,
		MemoryMB:       512,
		MTU:            9000,
		BootTimeout:    8 * time.Minute,
		CommandTimeout: 15 * time.Minute,
		Devices:        opts.Devices,
		Files:          files,
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// The tap's addresses: the host side and the guest.
var (
	HostAddr  = netip.MustParsePrefix("192.0.2.1/24")
	GuestAddr = netip.MustParsePrefix("192.0.2.2/24")
)

// Netns is the namespace that holds the guest's tap.
func (g *Guest) Netns() string { return g.netns }

// Close stops the guest and removes its binaries.
func (g *Guest) Close() error {
	err := g.Peer.Close()
	os.RemoveAll(g.work)
	return err
}
