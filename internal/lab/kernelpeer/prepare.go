package kernelpeer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultDir is where Prepare keeps the kernel and the initramfs unless
// PrepareOptions.Dir or the environment variable ESPGW_KERNEL_DIR says otherwise.
const DefaultDir = "/var/cache/espgw/kernel"

// KernelMetaPackage is the Debian package whose dependency names the kernel
// image Prepare fetches.
const KernelMetaPackage = "linux-image-amd64"

// agentPackage is the guest agent's import path, built for the initramfs.
const agentPackage = "github.com/espgw/espgw/internal/lab/kernelpeer/agent"

// PrepareCommand is what a person runs to prepare the kernel peer.
const PrepareCommand = "go run ./internal/lab/kernelpeer/cmd/prepare"

// Assets are the files a kernel peer boots from.
type Assets struct {
	Dir           string // the cache folder
	Package       string // the Debian kernel image package, e.g. linux-image-6.1.0-57-amd64
	KernelRelease string // uname -r of the guest, e.g. 6.1.0-57-amd64
	Kernel        string // path of the kernel image (vmlinuz)
	Initramfs     string // path of the gzipped cpio initramfs
	Modules       []string
}

// PrepareOptions tune Prepare.
type PrepareOptions struct {
	// Dir is the cache folder; empty means $ESPGW_KERNEL_DIR or DefaultDir.
	Dir string
	// Package is the kernel image package; empty means the one that
	// linux-image-amd64 depends on.
	Package string
	// Offline never downloads: it uses the kernel a previous Prepare
	// unpacked, and only rebuilds the initramfs when its inputs changed.
	Offline bool
	Logger  *slog.Logger
}

func (o PrepareOptions) dir() string {
	switch {
	case o.Dir != "":
		return o.Dir
	case os.Getenv("ESPGW_KERNEL_DIR") != "":
		return os.Getenv("ESPGW_KERNEL_DIR")
	}
	return DefaultDir
}

// Prepare makes the guest's kernel and initramfs ready in the cache folder
// and returns where they are. It fetches Debian's kernel image package with
// `apt-get download` and unpacks it with `dpkg-deb -x` into the folder (the
// machine's own kernel is not touched), builds the guest agent, and writes
// the initramfs. Each step is skipped when its result is already there, so
// a second call takes about a second.
func Prepare(ctx context.Context, opts PrepareOptions) (*Assets, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(opts.dir())
	if err != nil {
		return nil, fmt.Errorf("kernel peer cache folder: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel peer cache folder: %w", err)
	}
	// Test binaries of several packages may prepare at the same time.
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	a := &Assets{Dir: dir}
	if a.Package, err = kernelPackage(ctx, dir, opts); err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "unpacked", a.Package)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err != nil {
		if opts.Offline {
			return nil, fmt.Errorf("kernel %s is not unpacked in %s: run `%s` (needs apt-get and dpkg-deb)", a.Package, dir, PrepareCommand)
		}
		if err := fetchKernel(ctx, dir, a.Package, root, log); err != nil {
			return nil, err
		}
	}
	if err := a.findKernel(root); err != nil {
		return nil, err
	}
	agent, err := buildAgent(ctx, dir)
	if err != nil {
		return nil, err
	}
	if err := a.writeInitramfs(filepath.Join(root, "lib", "modules", a.KernelRelease), agent, log); err != nil {
		return nil, err
	}
	js, _ := json.MarshalIndent(a, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "assets.json"), js, 0o644); err != nil {
		return nil, fmt.Errorf("record prepared kernel peer: %w", err)
	}
	return a, nil
}

// lockDir takes an exclusive lock on the cache folder until unlock.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock kernel peer cache folder: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock kernel peer cache folder: %w", err)
	}
	return func() { f.Close() }, nil
}

// kernelPackage names the kernel image package: the option, the package
// named by apt, or offline the one a previous Prepare recorded.
func kernelPackage(ctx context.Context, dir string, opts PrepareOptions) (string, error) {
	if opts.Package != "" {
		return opts.Package, nil
	}
	if opts.Offline {
		prev, err := Prepared(PrepareOptions{Dir: dir})
		if err != nil {
			return "", fmt.Errorf("%w (needs apt-get, dpkg-deb, busybox-static, iproute2)", err)
		}
		if prev.Package == "" {
			return "", fmt.Errorf("%s records no kernel package: run `%s` again", filepath.Join(dir, "assets.json"), PrepareCommand)
		}
		return prev.Package, nil
	}
	if err := needTool("apt-cache", "apt"); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", KernelMetaPackage).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w: %s", KernelMetaPackage, err, bytes.TrimSpace(out))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if dep, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache names no kernel image for %s (run apt-get update first): %s", KernelMetaPackage, bytes.TrimSpace(out))
}

func needTool(tool, pkg string) error {
	if _, err := exec.LookPath(tool); err != nil {
		return fmt.Errorf("%s not found: apt-get install %s", tool, pkg)
	}
	return nil
}

// fetchKernel downloads the package and unpacks it into root.
func fetchKernel(ctx context.Context, dir, pkg, root string, log *slog.Logger) error {
	for tool, p := range map[string]string{"apt-get": "apt", "dpkg-deb": "dpkg"} {
		if err := needTool(tool, p); err != nil {
			return err
		}
	}
	debDir := filepath.Join(dir, "deb")
	if err := os.MkdirAll(debDir, 0o755); err != nil {
		return fmt.Errorf("kernel download folder: %w", err)
	}
	debs, _ := filepath.Glob(filepath.Join(debDir, pkg+"_*.deb"))
	if len(debs) == 0 {
		log.Info("downloading kernel package", "package", pkg)
		cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
		cmd.Dir = debDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get download %s: %w: %s", pkg, err, bytes.TrimSpace(out))
		}
		debs, _ = filepath.Glob(filepath.Join(debDir, pkg+"_*.deb"))
		if len(debs) == 0 {
			return fmt.Errorf("apt-get download %s left no .deb in %s", pkg, debDir)
		}
	}
	tmp := root + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("kernel unpack folder: %w", err)
	}
	log.Info("unpacking kernel package", "deb", debs[0], "into", root)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("dpkg-deb -x %s: %w: %s", debs[0], err, bytes.TrimSpace(out))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(filepath.Base(debs[0])+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark unpacked kernel: %w", err)
	}
	os.RemoveAll(root)
	if err := os.Rename(tmp, root); err != nil {
		return fmt.Errorf("move unpacked kernel into place: %w", err)
	}
	// The unpacked tree is what counts; the 70 MB package is not needed again.
	os.Remove(debs[0])
	return nil
}

// findKernel locates vmlinuz and the modules folder in an unpacked package.
func (a *Assets) findKernel(root string) error {
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(images) != 1 {
		return fmt.Errorf("want one boot/vmlinuz-* in %s, found %d", root, len(images))
	}
	a.Kernel = images[0]
	a.KernelRelease = strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")
	if _, err := os.Stat(filepath.Join(root, "lib", "modules", a.KernelRelease)); err != nil {
		return fmt.Errorf("modules of kernel %s: %w", a.KernelRelease, err)
	}
	return nil
}

// buildAgent compiles the guest agent as a static binary. It must run
// inside the espgw module (as `go test` and `go run` do).
func buildAgent(ctx context.Context, dir string) (string, error) {
	if err := needTool("go", "the Go toolchain"); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "espgw-agent")
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, agentPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the guest agent %s (run from inside the espgw module): %w: %s", agentPackage, err, bytes.TrimSpace(b))
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("build the guest agent: %w", err)
	}
	return out, nil
}

// Host files the initramfs takes; their packages are named in errors.
var (
	busyboxPaths = []string{"/bin/busybox", "/usr/bin/busybox"}
	ipPaths      = []string{"/sbin/ip", "/usr/sbin/ip", "/bin/ip"}
)

// writeInitramfs builds the initramfs and writes it unless an identical one
// is already there.
func (a *Assets) writeInitramfs(modDir, agent string, log *slog.Logger) error {
	arc := newArchive()
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "run", "etc", "root"} {
		arc.dir(d)
	}
	arc.charDev("dev/console", 5, 1) // init's stdio before devtmpfs is mounted
	arc.charDev("dev/null", 1, 3)

	busybox, err := firstExisting(busyboxPaths, "busybox (apt-get install busybox-static)")
	if err != nil {
		return err
	}
	if err := requireStatic(busybox); err != nil {
		return err
	}
	if err := addFile(arc, "bin/busybox", busybox, 0o755); err != nil {
		return err
	}

	ip, err := firstExisting(ipPaths, "iproute2's ip (apt-get install iproute2)")
	if err != nil {
		return err
	}
	if err := addFile(arc, "sbin/ip", ip, 0o755); err != nil {
		return err
	}
	libs, err := sharedLibraries(ip)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if err := addFile(arc, lib, lib, 0o755); err != nil {
			return err
		}
	}
	if err := addFile(arc, "bin/espgw-agent", agent, 0o755); err != nil {
		return err
	}

	idx, err := indexModules(modDir)
	if err != nil {
		return err
	}
	mods, err := resolveModules(idx, guestModules)
	if err != nil {
		return fmt.Errorf("kernel %s: %w", a.KernelRelease, err)
	}
	a.Modules = a.Modules[:0]
	for _, m := range mods {
		arc.file("lib/modules/espgw/"+m.name+".ko", 0o644, m.data)
		a.Modules = append(a.Modules, m.name)
	}
	arc.file("etc/espgw/modules", 0o644, []byte(strings.Join(a.Modules, "\n")+"\n"))
	arc.file("init", 0o755, []byte(initScript))

	var raw bytes.Buffer
	if err := arc.writeTo(&raw); err != nil {
		return err
	}
	sum := sha256.Sum256(raw.Bytes())
	hash := hex.EncodeToString(sum[:])
	a.Initramfs = filepath.Join(a.Dir, "initramfs.cpio.gz")
	stamp := filepath.Join(a.Dir, "initramfs.sha256")
	if old, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(old)) == hash {
		if _, err := os.Stat(a.Initramfs); err == nil {
			return nil
		}
	}
	log.Info("writing initramfs", "path", a.Initramfs, "modules", len(mods))
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(raw.Bytes())
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress initramfs: %w", err)
	}
	if err := writeAtomic(a.Initramfs, gz.Bytes()); err != nil {
		return err
	}
	return writeAtomic(stamp, []byte(hash+"\n"))
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func firstExisting(paths []string, what string) (string, error) {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found at %s", what, strings.Join(paths, " or "))
}

func addFile(arc *archive, name, src string, perm uint32) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("initramfs: read %s: %w", src, err)
	}
	arc.file(name, perm, data)
	return nil
}

// requireStatic refuses a dynamically linked busybox: the guest would lack
// its libraries (Debian's busybox package is dynamic, busybox-static is not).
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: apt-get install busybox-static", path)
		}
	}
	return nil
}

// sharedLibraries lists the libraries (and the dynamic loader) that ldd
// says bin needs, as absolute paths.
func sharedLibraries(bin string) ([]string, error) {
	if err := needTool("ldd", "libc-bin"); err != nil {
		return nil, err
	}
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, bytes.TrimSpace(out))
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s names no libraries: %s", bin, bytes.TrimSpace(out))
	}
	for _, l := range libs {
		if _, err := os.Stat(l); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("library %s of %s is missing", l, bin)
		}
	}
	return libs, nil
}
