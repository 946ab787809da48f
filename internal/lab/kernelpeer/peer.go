package kernelpeer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/espgw/espgw/internal/lab/kernelpeer/ctl"
)

// Config describes one kernel peer.
type Config struct {
	// Netns is the existing network namespace that gets the peer's tap
	// device; a gateway in it reaches the guest through the tap.
	Netns string
	// Tap names the tap device (at most 15 bytes, unique in Netns);
	// empty means "kptap0".
	Tap string
	// HostAddrs go on the tap in Netns, e.g. 192.0.2.1/24; may be empty.
	HostAddrs []netip.Prefix
	// GuestAddrs go on the guest's eth0, e.g. 192.0.2.2/24; at least one.
	GuestAddrs []netip.Prefix
	// GuestRoutes are routes in the guest, e.g. 198.51.100.0/24 via 192.0.2.1.
	GuestRoutes []Route
	// MTU of the tap and the guest's eth0; 0 leaves 1500. Tests that send
	// full-size inner packets through ESP need more room than 1500.
	MTU int
	// ExtraTaps are more tap devices made in Netns, each the guest's next
	// virtio-net NIC (eth1, eth2, … in order), unconfigured: the caller
	// addresses them in the guest. A caller may move them to other
	// namespaces while the guest runs (qemu keeps its descriptor); Close
	// removes those still in Netns (a tap goes with a namespace that is deleted).
	ExtraTaps []string
	// NATTPorts are the UDP ports on which the guest accepts ESP-in-UDP;
	// nil means 4500, an empty non-nil slice none.
	NATTPorts []uint16

	// Assets are the prepared kernel and initramfs; nil means the ones a
	// previous Prepare left in PrepareOptions{}.dir() (offline).
	Assets *Assets
	// MemoryMB is the guest's memory; 0 means 256.
	MemoryMB int
	// BootTimeout bounds the boot until the agent answers; 0 means 180 s.
	// An idle machine boots in seconds, but TCG emulation slows down
	// roughly in proportion to the load on a 2-core machine.
	BootTimeout time.Duration
	// CommandTimeout bounds each command that has no shorter context
	// deadline; 0 means 30 s.
	CommandTimeout time.Duration
	Logger         *slog.Logger

	// Devices is opt-in hardware for device tests; the zero value is the
	// plain peer the kernel-interop tests use.
	Devices Devices
	// Files are put into the guest's file system at boot, guest path →
	// host file (e.g. espgw's own static binaries, test binaries and the
	// files they read). They travel as a second cpio archive appended to
	// the prepared initramfs, which the kernel unpacks after the first, so
	// the prepared one is shared as it is.
	Files map[string]string
	// Modules are kernel modules of the guest's kernel, not in the
	// prepared initramfs, that this boot adds (with the dependencies it
	// lacks) and loads before Start returns; LaterModules are added but
	// loaded only by LoadModules (a device driver a test wants to bring in
	// at a moment of its choosing). See modules.go.
	Modules, LaterModules []string
	// CPU is QEMU's -cpu model ("max": AES-NI, AVX and the rest under
	// TCG); empty leaves QEMU's default.
	CPU string
	// CPUs is the guest's vCPUs (-smp); 0 means 1.
	CPUs int
}

// Devices are QEMU devices a guest can be started with.
type Devices struct {
	// Crypto adds this many virtio-crypto-pci devices with QEMU's builtin
	// backend (AES-CBC/CTR/ECB/XTS and 3DES sessions), named crypto0,
	// crypto1, … (see QueueUsed).
	Crypto int
	// IOMMU starts the guest on a q35 machine with an emulated Intel IOMMU
	// (intel_iommu=on) and puts the crypto devices behind it
	// (iommu_platform=on, disable-legacy=on), so that a user-space driver
	// can take them through VFIO.
	IOMMU bool
}

func (d Devices) qemuArgs() []string {
	var args []string
	if d.IOMMU {
		args = append(args, "-machine", "q35", "-device", "intel-iommu,intremap=off")
	}
	for i := range d.Crypto {
		dev := fmt.Sprintf("virtio-crypto-pci,id=crypto%d,cryptodev=cryptodev%d", i, i)
		if d.IOMMU {
			dev += ",iommu_platform=on,disable-legacy=on"
		}
		args = append(args, "-object", fmt.Sprintf("cryptodev-backend-builtin,id=cryptodev%d", i), "-device", dev)
	}
	return args
}

// Route is a guest route: traffic to Dst goes via Via.
type Route struct {
	Dst netip.Prefix // an invalid prefix means the default route
	Via netip.Addr
}

func (r Route) dst() string {
	if !r.Dst.IsValid() {
		return "default"
	}
	return r.Dst.String()
}

// Peer is a running guest.
type Peer struct {
	cfg     Config
	log     *slog.Logger
	work    string // temporary folder: control socket, console log
	cmd     *exec.Cmd
	exited  chan struct{} // closed when qemu has exited
	waitErr error
	tapMade bool
	// extraMade are the ExtraTaps made so far.
	extraMade []string
	// bootModules and laterModules are Config.Modules and LaterModules
	// with their dependencies, in load order, as put into the initrd.
	bootModules, laterModules []string
	BootTime                  time.Duration // from starting qemu to the agent's first answer
	// GuestMAC is the guest's eth0 address, for static neighbour entries.
	GuestMAC net.HardwareAddr
	// BootCPU is the CPU time qemu used for the boot: what the boot costs
	// on an idle machine, where BootTime grows with the load of others.
	BootCPU time.Duration

	mu     sync.Mutex // one command at a time
	conn   net.Conn
	lines  chan []byte
	nextID uint64
}

// ExitError is a guest command that ran and exited non-zero.
type ExitError struct {
	Code   int
	Output string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("exit status %d: %s", e.Code, tail(e.Output, 800))
}

const consoleTail = 3000

// Start boots a guest and returns once its agent answers. On any failure
// it cleans up what it made and the error carries the console's tail.
func Start(ctx context.Context, cfg Config) (_ *Peer, err error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("start kernel peer: qemu-system-x86_64 not found: apt-get install qemu-system-x86")
	}
	if err := exec.Command("ip", "netns", "exec", cfg.Netns, "true").Run(); err != nil {
		return nil, fmt.Errorf("start kernel peer: network namespace %q is not usable: %w", cfg.Netns, err)
	}
	work, err := os.MkdirTemp("", "espgw-kernelpeer-")
	if err != nil {
		return nil, fmt.Errorf("start kernel peer: %w", err)
	}
	p := &Peer{cfg: cfg, log: cfg.Logger, work: work, exited: make(chan struct{}), lines: make(chan []byte, 16)}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := p.makeTap(); err != nil {
		return nil, err
	}
	started := time.Now()
	if err := p.startQEMU(qemu); err != nil {
		return nil, err
	}
	bootCtx, cancel := context.WithTimeout(ctx, cfg.BootTimeout)
	defer cancel()
	if err := p.waitAgent(bootCtx); err != nil {
		return nil, fmt.Errorf("boot kernel peer (%s): %w\n--- guest console (tail) ---\n%s", cfg.Assets.KernelRelease, err, p.Console(consoleTail))
	}
	if err := p.pinTap(ctx); err != nil {
		return nil, err
	}
	if err := p.loadModules(ctx, p.bootModules); err != nil {
		return nil, err
	}
	if cfg.Devices.IOMMU {
		if _, err := p.Run(ctx, "echo 1 > /sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts"); err != nil {
			return nil, fmt.Errorf("start kernel peer: let VFIO run without interrupt remapping: %w", err)
		}
	}
	p.BootTime = time.Since(started)
	p.BootCPU = processCPU(p.cmd.Process.Pid)
	p.log.Info("kernel peer up", "kernel", cfg.Assets.KernelRelease, "boot", p.BootTime.Round(time.Millisecond),
		"boot_cpu", p.BootCPU, "netns", cfg.Netns, "tap", cfg.Tap)
	return p, nil
}

func (c *Config) fill() error {
	if c.Netns == "" {
		return errors.New("start kernel peer: Config.Netns is empty: the tap needs a network namespace")
	}
	if c.Tap == "" {
		c.Tap = "kptap0"
	}
	if len(c.Tap) > 15 {
		return fmt.Errorf("start kernel peer: tap name %q is longer than 15 bytes", c.Tap)
	}
	if len(c.GuestAddrs) == 0 {
		return errors.New("start kernel peer: Config.GuestAddrs is empty")
	}
	if c.NATTPorts == nil {
		c.NATTPorts = []uint16{4500}
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535) {
		return fmt.Errorf("start kernel peer: MTU %d outside 576..65535", c.MTU)
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = 256
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 180 * time.Second
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Assets == nil {
		a, err := Prepared(PrepareOptions{})
		if err != nil {
			return fmt.Errorf("start kernel peer: %w", err)
		}
		c.Assets = a
	}
	for _, f := range []string{c.Assets.Kernel, c.Assets.Initramfs} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("start kernel peer: %w: run `%s`", err, PrepareCommand)
		}
	}
	return nil
}

// Prepared returns the assets a previous Prepare recorded, without
// building or downloading anything.
func Prepared(opts PrepareOptions) (*Assets, error) {
	rec := filepath.Join(opts.dir(), "assets.json")
	b, err := os.ReadFile(rec)
	if err != nil {
		return nil, fmt.Errorf("kernel peer not prepared (%w): run `%s`", err, PrepareCommand)
	}
	var a Assets
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("read %s: %w: run `%s` again", rec, err, PrepareCommand)
	}
	return &a, nil
}

func (p *Peer) ipHost(args ...string) error {
	full := append([]string{"-n", p.cfg.Netns}, args...)
	out, err := exec.Command("ip", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(full, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (p *Peer) makeTap() error {
	if err := p.ipHost("tuntap", "add", "dev", p.cfg.Tap, "mode", "tap"); err != nil {
		return fmt.Errorf("create tap for kernel peer: %w", err)
	}
	p.tapMade = true
	for _, t := range p.cfg.ExtraTaps {
		if err := p.ipHost("tuntap", "add", "dev", t, "mode", "tap"); err != nil {
			return fmt.Errorf("create tap for kernel peer: %w", err)
		}
		p.extraMade = append(p.extraMade, t)
		if err := p.ipHost("link", "set", t, "up"); err != nil {
			return fmt.Errorf("bring up the kernel peer's tap: %w", err)
		}
	}
	for _, a := range p.cfg.HostAddrs {
		args := []string{"addr", "add", a.String(), "dev", p.cfg.Tap}
		if a.Addr().Is6() {
			args = append(args, "nodad")
		}
		if err := p.ipHost(args...); err != nil {
			return fmt.Errorf("address the kernel peer's tap: %w", err)
		}
	}
	if p.cfg.MTU != 0 {
		if err := p.ipHost("link", "set", p.cfg.Tap, "mtu", strconv.Itoa(p.cfg.MTU)); err != nil {
			return fmt.Errorf("set the kernel peer's tap MTU: %w", err)
		}
	}
	if err := p.ipHost("link", "set", p.cfg.Tap, "up"); err != nil {
		return fmt.Errorf("bring up the kernel peer's tap: %w", err)
	}
	return nil
}

// pinTap makes permanent neighbour entries between the tap and the
// guest, both ways. IPv6 neighbour unreachability probes are unicast
// ICMPv6 between the two addresses, so a transport-mode policy covering
// them would demand ESP from Neighbor Discovery itself; with static
// entries no such probes are sent.
func (p *Peer) pinTap(ctx context.Context) error {
	var hosts, guests []netip.Addr
	for _, h := range p.cfg.HostAddrs {
		for _, g := range p.cfg.GuestAddrs {
			if h.Contains(g.Addr()) {
				hosts, guests = append(hosts, h.Addr()), append(guests, g.Addr())
			}
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	h, err := vnetns.GetFromName(p.cfg.Netns)
	if err != nil {
		return fmt.Errorf("pin the kernel peer's neighbour entries: %w", err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return fmt.Errorf("pin the kernel peer's neighbour entries: %w", err)
	}
	defer nl.Close()
	return p.pinNeighbours(ctx, nl, p.cfg.Tap, hosts, guests)
}

// pinNeighbours makes permanent neighbour entries between the interface
// ifname that nl reaches (addresses hosts) and the guest's eth0 (addresses
// guests), both ways.
func (p *Peer) pinNeighbours(ctx context.Context, nl *netlink.Handle, ifname string, hosts, guests []netip.Addr) error {
	link, err := nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("pin neighbour entries for the kernel peer: %s: %w", ifname, err)
	}
	var sc strings.Builder
	for _, a := range hosts {
		fmt.Fprintf(&sc, "ip neigh replace %s lladdr %s dev eth0 nud permanent\n", a, link.Attrs().HardwareAddr)
	}
	if _, err := p.Run(ctx, sc.String()); err != nil {
		return fmt.Errorf("pin neighbour entries in the kernel peer: %w", err)
	}
	for _, a := range guests {
		fam := netlink.FAMILY_V4
		if a.Is6() {
			fam = netlink.FAMILY_V6
		}
		n := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT, IP: net.IP(a.AsSlice()), HardwareAddr: p.GuestMAC}
		if err := nl.NeighSet(n); err != nil {
			return fmt.Errorf("pin %s's neighbour entry for the kernel peer's %s: %w", ifname, a, err)
		}
	}
	return nil
}

// processCPU is the CPU time a process has used so far (user + system),
// or 0 when /proc does not say.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: state is
	// field 3, utime 14 and stime 15, in clock ticks of 1/100 s on Linux.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// kernelArgs passes the guest's network settings to its /init.
func (c *Config) kernelArgs() string {
	// no_timer_check: under TCG on a loaded machine the kernel's check
	// that the timer interrupt arrives through the IO-APIC can time out,
	// and it panics the boot ("IO-APIC + timer doesn't work"); the timer
	// works, the emulation was only slow to show it.
	args := []string{"console=ttyS0", "panic=-1", "quiet", "mitigations=off", "no_timer_check"}
	if c.Devices.IOMMU {
		// pt: the kernel's own drivers keep identity mappings; VFIO still
		// gets a translated domain of its own. Interrupt remapping stays
		// off: under TCG the kernel's check of the timer through a
		// remapped IO-APIC fails when the machine is loaded, and panics.
		// Without it VFIO wants allow_unsafe_interrupts, set once the guest
		// is up (Start); the user-space driver polls and asks for no
		// interrupt at all.
		args = append(args, "intel_iommu=on", "iommu=pt")
	}
	var addrs, routes, ports []string
	for _, a := range c.GuestAddrs {
		addrs = append(addrs, a.String())
	}
	for _, r := range c.GuestRoutes {
		routes = append(routes, r.dst()+"@"+r.Via.String())
	}
	for _, port := range c.NATTPorts {
		ports = append(ports, strconv.Itoa(int(port)))
	}
	for k, v := range map[string][]string{"espgw_addr": addrs, "espgw_route": routes, "espgw_natt": ports} {
		if len(v) > 0 {
			args = append(args, k+"="+strings.Join(v, ","))
		}
	}
	if c.MTU != 0 {
		args = append(args, "espgw_mtu="+strconv.Itoa(c.MTU))
	}
	return strings.Join(args, " ")
}

func (p *Peer) startQEMU(qemu string) error {
	p.GuestMAC = qemuMAC()
	initrd, err := p.initrd()
	if err != nil {
		return err
	}
	args := []string{"netns", "exec", p.cfg.Netns, qemu,
		"-accel", "tcg", "-m", strconv.Itoa(p.cfg.MemoryMB), "-smp", strconv.Itoa(max(p.cfg.CPUs, 1)),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", p.cfg.Assets.Kernel, "-initrd", initrd,
		"-append", p.cfg.kernelArgs(),
		"-qmp", "unix:" + p.qmpPath() + ",server=on,wait=off",
		"-serial", "file:" + p.consolePath(),
		"-netdev", "tap,id=n0,ifname=" + p.cfg.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + p.GuestMAC.String(),
	}
	for i, t := range p.cfg.ExtraTaps {
		id := fmt.Sprintf("n%d", i+1)
		args = append(args, "-netdev", "tap,id="+id+",ifname="+t+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev="+id+",mac="+qemuMAC().String())
	}
	args = append(args,
		"-device", "virtio-rng-pci",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=ctl,path="+p.socketPath()+",server=on,wait=off",
		"-device", "virtserialport,chardev=ctl,name="+ctl.PortName,
	)
	args = append(args, p.cfg.Devices.qemuArgs()...)
	if p.cfg.CPU != "" {
		args = append(args, "-cpu", p.cfg.CPU)
	}
	// ip netns exec execs qemu in place: the PID is qemu's.
	p.cmd = exec.Command("ip", args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	p.cmd.Stdout, p.cmd.Stderr = &stderr, &stderr
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start qemu: %w", err)
	}
	go func() {
		err := p.cmd.Wait()
		if s := strings.TrimSpace(stderr.String()); s != "" {
			err = fmt.Errorf("%v: %s", err, tail(s, 1000))
		}
		p.waitErr = err
		close(p.exited)
	}()
	return nil
}

// qemuMAC is a random MAC address in QEMU's OUI.
func qemuMAC() net.HardwareAddr {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 0}
	rand.Read(mac[3:])
	return mac
}

func (p *Peer) consolePath() string { return filepath.Join(p.work, "console.log") }
func (p *Peer) socketPath() string  { return filepath.Join(p.work, "ctl.sock") }
func (p *Peer) qmpPath() string     { return filepath.Join(p.work, "qmp.sock") }

// initrd is the prepared initramfs, or, with Config.Files, a copy of it
// with a second archive holding those files appended.
func (p *Peer) initrd() (string, error) {
	if len(p.cfg.Files)+len(p.cfg.Modules)+len(p.cfg.LaterModules) == 0 {
		return p.cfg.Assets.Initramfs, nil
	}
	base, err := os.ReadFile(p.cfg.Assets.Initramfs)
	if err != nil {
		return "", fmt.Errorf("start kernel peer: %w", err)
	}
	arc := newArchive()
	for guest, host := range p.cfg.Files {
		st, err := os.Stat(host)
		if err != nil {
			return "", fmt.Errorf("start kernel peer: file for the guest's %s: %w", guest, err)
		}
		if err := addFile(arc, guest, host, uint32(st.Mode().Perm())); err != nil {
			return "", fmt.Errorf("start kernel peer: %w", err)
		}
	}
	if p.bootModules, p.laterModules, err = p.cfg.extraModules(arc); err != nil {
		return "", fmt.Errorf("start kernel peer: %w", err)
	}
	var buf bytes.Buffer
	buf.Write(base)
	gz := gzip.NewWriter(&buf)
	if err := arc.writeTo(gz); err != nil {
		return "", fmt.Errorf("start kernel peer: extra files: %w", err)
	}
	if err := gz.Close(); err != nil {
		return "", fmt.Errorf("start kernel peer: extra files: %w", err)
	}
	path := filepath.Join(p.work, "initramfs.cpio.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("start kernel peer: %w", err)
	}
	return path, nil
}

// Console returns up to the last n bytes of the guest's serial console.
func (p *Peer) Console(n int) string {
	b, _ := os.ReadFile(p.consolePath())
	return tail(string(b), n)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// waitAgent connects to the control socket and pings until the agent
// answers. Pings sent before the guest opened its port may be lost or
// answered late; answers are matched by id, so late ones are ignored.
func (p *Peer) waitAgent(ctx context.Context) error {
	for p.conn == nil {
		c, err := net.Dial("unix", p.socketPath())
		if err == nil {
			p.conn = c
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("control socket never opened: %w", ctx.Err())
		case <-p.exited:
			return fmt.Errorf("qemu exited: %v", p.waitErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	go p.readLines()
	// Ping until any answer comes back. A ping answered late still proves
	// the agent is up; exec later skips answers to pings by their ids.
	ping := func() error {
		_, err := p.send([]string{"true"}, 5*time.Second)
		return err
	}
	if err := ping(); err != nil {
		return fmt.Errorf("ping guest agent: %w", err)
	}
	every := time.NewTicker(2 * time.Second)
	defer every.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				select { // qemu closing the socket usually means qemu is gone
				case <-p.exited:
					return fmt.Errorf("qemu exited: %v", p.waitErr)
				case <-time.After(5 * time.Second):
					return errors.New("control socket closed")
				}
			}
			var resp ctl.Response
			if json.Unmarshal(line, &resp) == nil && resp.ID != 0 {
				return nil
			}
		case <-every.C:
			if err := ping(); err != nil {
				return fmt.Errorf("ping guest agent: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("guest agent never answered: %w", ctx.Err())
		case <-p.exited:
			return fmt.Errorf("qemu exited: %v", p.waitErr)
		}
	}
}

func (p *Peer) readLines() {
	r := bufio.NewReaderSize(p.conn, 64<<10)
	defer close(p.lines)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			p.lines <- line
		}
		if err != nil {
			return
		}
	}
}

// Exec runs argv in the guest (no shell) and returns its combined output.
// A non-zero exit is an *ExitError. The command line itself is never put
// into errors or logs: it may hold keys.
func (p *Peer) Exec(ctx context.Context, argv ...string) (string, error) {
	return p.exec(ctx, argv, p.cfg.CommandTimeout)
}

// send writes a request for argv with timeout to the agent and returns
// its id.
func (p *Peer) send(argv []string, timeout time.Duration) (uint64, error) {
	p.nextID++
	req, _ := json.Marshal(ctl.Request{ID: p.nextID, Argv: argv, TimeoutMS: timeout.Milliseconds()})
	p.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := p.conn.Write(append(req, '\n'))
	return p.nextID, err
}

func (p *Peer) exec(ctx context.Context, argv []string, timeout time.Duration) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return "", errors.New("kernel peer is closed")
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return "", fmt.Errorf("guest command: %w", context.DeadlineExceeded)
	}
	id, err := p.send(argv, timeout)
	if err != nil {
		return "", fmt.Errorf("send guest command: %w", err)
	}
	// The agent enforces the timeout itself; the margin covers the round trip.
	deadline := time.NewTimer(timeout + 2*time.Second)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return "", errors.New("guest command: control channel closed")
			}
			var resp ctl.Response
			if err := json.Unmarshal(line, &resp); err != nil {
				return "", fmt.Errorf("guest command: bad response %q: %w", tail(string(line), 200), err)
			}
			if resp.ID != id {
				continue // a late answer to an earlier ping
			}
			out := string(resp.Output)
			switch {
			case resp.Error != "":
				return out, fmt.Errorf("guest command: %s", resp.Error)
			case resp.Exit != 0:
				return out, &ExitError{Code: resp.Exit, Output: out}
			}
			return out, nil
		case <-deadline.C:
			return "", fmt.Errorf("guest command: no answer within %v", timeout+2*time.Second)
		case <-ctx.Done():
			return "", fmt.Errorf("guest command: %w", ctx.Err())
		case <-p.exited:
			return "", fmt.Errorf("guest command: qemu exited: %v", p.waitErr)
		}
	}
}

// Close stops qemu (by its PID), removes the tap and the work folder.
func (p *Peer) Close() error {
	var errs []error
	p.mu.Lock()
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	p.mu.Unlock()
	if p.cmd != nil && p.cmd.Process != nil {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			select {
			case <-p.exited:
			case <-time.After(10 * time.Second):
				errs = append(errs, fmt.Errorf("qemu (pid %d) did not exit after SIGKILL", p.cmd.Process.Pid))
			}
		}
	}
	if p.tapMade {
		if err := p.ipHost("link", "del", p.cfg.Tap); err != nil {
			errs = append(errs, fmt.Errorf("remove kernel peer tap: %w", err))
		}
		p.tapMade = false
	}
	for _, t := range p.extraMade {
		// A tap moved into a namespace that is gone went with it; one
		// still in Netns is removed here.
		p.ipHost("link", "del", t)
	}
	p.extraMade = nil
	if err := os.RemoveAll(p.work); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
