// Package cryptoguest boots the QEMU guest the device engines are proven in.
//
// It is the machine espgw's device engines are proven on: the kernel peer's
// QEMU guest (Debian's kernel) booted with QEMU's virtio-crypto device,
// AF_ALG, and espgw's own static binaries — the espgw command, test binaries
// of the packages under test (go test -c), the known-answer vectors, and
// openssl with its afalg engine — in a per-boot archive added to the shared
// initramfs (kernelpeer.Extra).
//
// The host's kernel has neither AF_ALG nor the device; the guest has both.
// Tests boot one Guest and run everything in it: the engine conformance
// tests as test binaries, `espgw speed` beside `openssl speed`, an espgw
// gateway forming a tunnel with one on the host. QEMU's monitor (QMP) says
// how many requests the device's data queue completed, which proves the
// device did the work.
package cryptoguest

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/shell"
)

// Root is where the guest keeps espgw's files, laid out as the module is
// (Root/testdata/vectors, Root/offload/afalg/afalg.test), so that a test
// binary run in its package folder finds its test data as on the host.
const Root = "/espgw"

// Espgw is the espgw command in the guest.
const Espgw = Root + "/bin/espgw"

// OpenSSL is the host's openssl, brought into the guest with its
// libraries and engines-3/afalg.so.
const (
	OpenSSL       = "/usr/bin/openssl"
	OpenSSLEngine = "/usr/lib/x86_64-linux-gnu/engines-3/afalg.so"
)

// Modules the guest loads at boot for AF_ALG and espgw's gateway, and the
// driver of the crypto device, which a test loads when it wants the device
// to take cbc(aes) (from then on it outranks the kernel's software).
var (
	BootModules  = []string{"af_alg", "algif_aead", "algif_skcipher", "algif_hash", "tun"}
	LaterModules = []string{"virtio_crypto"}
)

// Addresses of the guest's link (TEST-NET-1).
var (
	HostAddr  = netip.MustParsePrefix("192.0.2.1/24")
	GuestAddr = netip.MustParsePrefix("192.0.2.2/24")
)

// Options shape a Guest.
type Options struct {
	// CryptoDevice adds QEMU's virtio-crypto-pci (and QMP to count its
	// requests).
	CryptoDevice bool
	// IOMMU starts a q35 machine with an emulated Intel IOMMU and puts the
	// device behind it, for the virtio engine's user-space driver (VFIO).
	IOMMU bool
	// Tests are packages (import paths or ./dirs of this module) whose
	// test binaries go into the guest, each at Root/PKGDIR/NAME.test.
	Tests []string
	// OpenSSL brings openssl and its afalg engine.
	OpenSSL bool
	// CPUs is the guest's vCPUs; 0 means 1.
	CPUs int
	// Prefix names the network namespace (unique among concurrent runs).
	Prefix      string
	BootTimeout time.Duration
	Logger      *slog.Logger
}

// Guest is a booted guest and the network namespace on the host side of
// its link.
type Guest struct {
	*kernelpeer.Peer
	NS      *netns.Namespace
	bed     *netns.Bed
	dir     string // host build folder
	binary  string // the static espgw, also usable on the host
	modRoot string
}

// Boot builds the binaries, boots the guest and loads BootModules. On
// error everything made so far is removed.
func Boot(ctx context.Context, opts Options) (g *Guest, err error) {
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.Prefix = cmp.Or(opts.Prefix, "cg")
	modRoot, err := ModuleRoot(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "espgw-cryptoguest-")
	if err != nil {
		return nil, fmt.Errorf("boot crypto guest: %w", err)
	}
	g = &Guest{dir: dir, modRoot: modRoot}
	defer func() {
		if err != nil {
			g.Close()
			g = nil
		}
	}()
	files, err := g.files(ctx, opts)
	if err != nil {
		return nil, err
	}
	devices := kernelpeer.Devices{}
	if opts.CryptoDevice {
		devices.Crypto = 1
	}
	devices.IOMMU = opts.IOMMU
	if g.bed, err = netns.New(opts.Prefix, opts.Logger); err != nil {
		return nil, fmt.Errorf("boot crypto guest: %w", err)
	}
	if g.NS, err = g.bed.AddNamespace("host"); err != nil {
		return nil, fmt.Errorf("boot crypto guest: %w", err)
	}
	assets, err := kernelpeer.Prepare(ctx, kernelpeer.PrepareOptions{Offline: true, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	g.Peer, err = kernelpeer.Start(ctx, kernelpeer.Config{
		Netns: g.NS.Name(), Tap: "cgtap0",
		HostAddrs: []netip.Prefix{HostAddr}, GuestAddrs: []netip.Prefix{GuestAddr},
		MTU: 1600, NATTPorts: []uint16{},
		Assets: assets, MemoryMB: 768, CPU: "max", CPUs: opts.CPUs,
		BootTimeout: opts.BootTimeout, CommandTimeout: time.Minute, Logger: opts.Logger,
		Files: files, Modules: BootModules, LaterModules: LaterModules, Devices: devices,
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// files builds what the boot adds: espgw, test binaries, vectors, openssl.
func (g *Guest) files(ctx context.Context, opts Options) (map[string]string, error) {
	files := map[string]string{}
	g.binary = filepath.Join(g.dir, "espgw")
	if err := Build(ctx, g.modRoot, "./cmd/espgw", g.binary); err != nil {
		return nil, err
	}
	files[Espgw] = g.binary
	for _, pkg := range opts.Tests {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, "github.com/espgw/espgw/"), "./")
		bin := filepath.Join(g.dir, strings.ReplaceAll(rel, "/", "_")+".test")
		if err := BuildTest(ctx, g.modRoot, "./"+rel, bin); err != nil {
			return nil, err
		}
		files[TestBinary(rel)] = bin
	}
	vectors, err := filepath.Glob(filepath.Join(g.modRoot, "testdata", "vectors", "*"))
	if err != nil || len(vectors) == 0 {
		return nil, fmt.Errorf("boot crypto guest: no known-answer vectors in %s/testdata/vectors", g.modRoot)
	}
	for _, v := range vectors {
		files[path.Join(Root, "testdata", "vectors", filepath.Base(v))] = v
	}
	if opts.OpenSSL {
		prog, err := kernelpeer.HostProgram(OpenSSL, OpenSSLEngine)
		if err != nil {
			return nil, fmt.Errorf("bring openssl into the guest (apt-get install openssl libssl3): %w", err)
		}
		for k, v := range prog {
			files[k] = v
		}
	}
	return files, nil
}

// TestBinary is where the test binary of the package in folder rel of the
// module is in the guest.
func TestBinary(rel string) string {
	return path.Join(Root, rel, path.Base(rel)+".test")
}

// Binary is the static espgw built for the guest; it runs on the host too.
func (g *Guest) Binary() string { return g.binary }

// RunTest runs the test binary of the package in folder rel, in that
// folder, with env (KEY=VALUE) and args (-test.run …), and returns its
// output. A failing test is an error that carries the output.
func (g *Guest) RunTest(ctx context.Context, timeout time.Duration, rel string, env []string, args ...string) (string, error) {
	var sh strings.Builder
	fmt.Fprintf(&sh, "cd %s && env ", shell.Quote(path.Join(Root, rel)))
	for _, e := range env {
		sh.WriteString(shell.Quote(e) + " ")
	}
	sh.WriteString(shell.Quote(TestBinary(rel)))
	for _, a := range args {
		sh.WriteString(" " + shell.Quote(a))
	}
	sh.WriteString(" 2>&1")
	out, err := g.RunFor(ctx, timeout, sh.String())
	if err != nil {
		return out, fmt.Errorf("guest test binary %s: %w", rel, err)
	}
	return out, nil
}

// Close stops the guest and removes the namespace and the build folder.
func (g *Guest) Close() error {
	var errs []error
	if g.Peer != nil {
		if err := g.Peer.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if g.bed != nil {
		if err := g.bed.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	os.RemoveAll(g.dir)
	if len(errs) > 0 {
		return fmt.Errorf("close crypto guest: %v", errs)
	}
	return nil
}

// CryptoRequests is the used index of the device's data queue, read from
// QEMU: the requests it completed since boot, modulo 2^16.
func (g *Guest) CryptoRequests(ctx context.Context) (uint16, error) {
	return g.QueueUsed(ctx, "crypto0", 0)
}
