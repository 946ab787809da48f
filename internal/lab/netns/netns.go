// Package netns builds network test beds out of Linux network namespaces.
//
// It builds network test beds out of Linux network namespaces: named
// namespaces under a unique run prefix, veth pairs between them, addresses,
// routes and forwarding, a way to run commands and Go code inside each
// namespace, and a teardown that removes everything it made.
//
// Namespaces are created with `ip netns add`, so they live under /run/netns
// and tools work on them (`ip netns exec NAME ...`, tcpdump, iperf3). Links
// and addresses are configured through netlink handles bound to each
// namespace, so configuring never changes the calling thread's namespace.
//
// A Bed must be closed; Close deletes every namespace it created (which
// deletes the veths inside them) and kills the processes it started. After a
// crash, RemoveLeftovers finds namespaces by prefix and removes them.
package netns

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/nsrun"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RunDir is where `ip netns` keeps the bind mounts of named namespaces.
const RunDir = "/run/netns"

// CheckPrerequisites reports, as one clear error, why namespaces cannot be
// built here: not root (CAP_SYS_ADMIN and CAP_NET_ADMIN are needed) or no
// `ip` (iproute2) on PATH.
func CheckPrerequisites() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, fmt.Errorf("network namespaces need root (running as uid %d): run as root or with sudo", os.Geteuid()))
	}
	if _, err := exec.LookPath("ip"); err != nil {
		errs = append(errs, fmt.Errorf("the `ip` tool (iproute2) is not on PATH: install it with `apt-get install -y iproute2`: %w", err))
	}
	return errors.Join(errs...)
}

// Bed is a set of namespaces created under one run prefix. Its methods are
// safe for concurrent use.
type Bed struct {
	prefix string
	log    *slog.Logger

	mu    sync.Mutex
	nss   []*Namespace
	procs []*exec.Cmd
	done  bool
}

// New checks the prerequisites and returns an empty Bed whose namespaces are
// named prefix + a random run tag + "-" + name, e.g. "ni-3fa2c1-gw1". The
// random tag keeps concurrent runs (and helpers) apart; RemoveLeftovers with
// the bare prefix removes the namespaces of every run.
func New(prefix string, log *slog.Logger) (*Bed, error) {
	if err := CheckPrerequisites(); err != nil {
		return nil, fmt.Errorf("build namespace test bed: %w", err)
	}
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	var tag [3]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return nil, fmt.Errorf("make run tag: %w", err)
	}
	return &Bed{prefix: prefix + hex.EncodeToString(tag[:]) + "-", log: cmp.Or(log, slog.New(slog.DiscardHandler))}, nil
}

func validPrefix(prefix string) error {
	if prefix == "" {
		return errors.New("namespace prefix is empty: a prefix is what keeps runs apart and lets leftovers be found")
	}
	for _, r := range prefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("namespace prefix %q: character %q not allowed (use letters, digits, - _ .)", prefix, r)
		}
	}
	return nil
}

// Prefix is the full run prefix of this Bed's namespace names.
func (b *Bed) Prefix() string { return b.prefix }

// Namespace is one named network namespace of a Bed.
type Namespace struct {
	name   string // short name given by the caller
	full   string // name under /run/netns
	handle vnetns.NsHandle
	nl     *netlink.Handle
}

// Name is the namespace's full name, as `ip netns` knows it.
func (ns *Namespace) Name() string { return ns.full }

// Short is the name the namespace was created with, without the run prefix.
func (ns *Namespace) Short() string { return ns.name }

// Handle is the namespace's file descriptor handle; it stays valid until the
// Bed is closed. Pass it to tun.Options or netlink.NewHandleAt.
func (ns *Namespace) Handle() vnetns.NsHandle { return ns.handle }

// Netlink is a netlink handle whose requests act inside the namespace.
func (ns *Namespace) Netlink() *netlink.Handle { return ns.nl }

// AddNamespace creates the namespace prefix+name with its loopback up and
// IPv6 duplicate address detection off.
func (b *Bed) AddNamespace(name string) (*Namespace, error) {
	if name == "" || strings.ContainsAny(name, "/ \t") {
		return nil, fmt.Errorf("namespace name %q: must be non-empty without '/' or spaces", name)
	}
	full := b.prefix + name
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return nil, fmt.Errorf("add namespace %s: test bed already closed", full)
	}
	b.mu.Unlock()

	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("create namespace %s: ip netns add: %v: %s", full, err, strings.TrimSpace(string(out)))
	}
	ns := &Namespace{name: name, full: full}
	b.mu.Lock()
	b.nss = append(b.nss, ns) // registered first so Close removes it even if the rest fails
	b.mu.Unlock()

	h, err := vnetns.GetFromName(full)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", full, err)
	}
	ns.handle = h
	ns.nl, err = netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("open netlink in namespace %s: %w", full, err)
	}
	if err := ns.SetUp("lo"); err != nil {
		return nil, err
	}
	// Without DAD, IPv6 addresses (link-local ones too, which neighbour
	// discovery needs when forwarding) are usable the moment a link is up.
	if err := ns.Sysctl(map[string]string{
		"net/ipv6/conf/all/accept_dad":     "0",
		"net/ipv6/conf/default/accept_dad": "0",
	}); err != nil {
		return nil, err
	}
	b.log.Debug("namespace created", "name", full)
	return ns, nil
}

// Namespaces lists the Bed's namespaces in creation order.
func (b *Bed) Namespaces() []*Namespace {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.nss)
}

// LinkOptions tune a veth pair; zero values mean kernel defaults.
type LinkOptions struct {
	MTU int
}

// Connect creates a veth pair with end aName in a and end bName in b, both
// up. Each end is created directly in its namespace, so nothing ever appears
// in the caller's namespace.
func (b *Bed) Connect(a *Namespace, aName string, c *Namespace, cName string, opt LinkOptions) error {
	for _, n := range []string{aName, cName} {
		if len(n) == 0 || len(n) >= unix.IFNAMSIZ {
			return fmt.Errorf("veth name %q: must be 1..%d characters", n, unix.IFNAMSIZ-1)
		}
	}
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:      aName,
			MTU:       opt.MTU,
			Namespace: netlink.NsFd(int(a.handle)),
		},
		PeerName:      cName,
		PeerNamespace: netlink.NsFd(int(c.handle)),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s -- %s/%s: %w", a.full, aName, c.full, cName, err)
	}
	if opt.MTU > 0 {
		if err := c.SetMTU(cName, opt.MTU); err != nil {
			return err
		}
	}
	if err := a.SetUp(aName); err != nil {
		return err
	}
	return c.SetUp(cName)
}

func (ns *Namespace) link(name string) (netlink.Link, error) {
	l, err := ns.nl.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("find link %s in namespace %s: %w", name, ns.full, err)
	}
	return l, nil
}

// SetUp sets link name up.
func (ns *Namespace) SetUp(name string) error {
	l, err := ns.link(name)
	if err != nil {
		return err
	}
	if err := ns.nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("set link %s up in namespace %s: %w", name, ns.full, err)
	}
	return nil
}

// SetMTU sets the MTU of link name.
func (ns *Namespace) SetMTU(name string, mtu int) error {
	l, err := ns.link(name)
	if err != nil {
		return err
	}
	if err := ns.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("set MTU %d on link %s in namespace %s: %w", mtu, name, ns.full, err)
	}
	return nil
}

// AddAddr assigns p (address and prefix length) to link name. IPv6 addresses
// skip duplicate address detection so they are usable at once.
func (ns *Namespace) AddAddr(name string, p netip.Prefix) error {
	l, err := ns.link(name)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: PrefixIPNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := ns.nl.AddrAdd(l, a); err != nil {
		return fmt.Errorf("add address %s to %s in namespace %s: %w", p, name, ns.full, err)
	}
	if p.Addr().Is6() && l.Attrs().Flags&net.FlagUp != 0 {
		// On a link whose carrier is still coming up the kernel installs
		// the address's local route later, from its address work; until
		// then neighbour solicitations for it go unanswered and the first
		// packets wait a second for a retry. Wait for the route instead.
		return ns.waitLocal(p.Addr())
	}
	return nil
}

// waitLocal waits (up to 2 s) until the kernel routes a to this namespace.
func (ns *Namespace) waitLocal(a netip.Addr) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		rs, err := ns.nl.RouteGet(net.IP(a.AsSlice()))
		if err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("address %s in namespace %s not usable after 2s", a, ns.full)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// AddRoute routes dst via gateway gw (which must be on a connected subnet).
// A zero dst prefix (0.0.0.0/0 or ::/0) is the default route.
func (ns *Namespace) AddRoute(dst netip.Prefix, gw netip.Addr) error {
	r := &netlink.Route{Dst: PrefixIPNet(dst.Masked()), Gw: net.IP(gw.AsSlice())}
	if err := ns.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("add route %s via %s in namespace %s: %w", dst, gw, ns.full, err)
	}
	return nil
}

// AddDeviceRoute routes dst straight out of link name (no gateway), as for a
// TUN device.
func (ns *Namespace) AddDeviceRoute(dst netip.Prefix, name string) error {
	l, err := ns.link(name)
	if err != nil {
		return err
	}
	r := &netlink.Route{Dst: PrefixIPNet(dst.Masked()), LinkIndex: l.Attrs().Index}
	if err := ns.nl.RouteAdd(r); err != nil {
		return fmt.Errorf("add route %s dev %s in namespace %s: %w", dst, name, ns.full, err)
	}
	return nil
}

// EnableForwarding turns on IPv4 and IPv6 forwarding in the namespace.
func (ns *Namespace) EnableForwarding() error {
	return ns.Sysctl(map[string]string{
		"net/ipv4/ip_forward":          "1",
		"net/ipv6/conf/all/forwarding": "1",
	})
}

// Sysctl writes values (keys relative to /proc/sys, e.g. "net/ipv4/ip_forward")
// inside the namespace. /proc/sys/net shows the namespace of the thread that
// opens it, so the writes run in Do.
func (ns *Namespace) Sysctl(values map[string]string) error {
	keys := slices.Sorted(maps.Keys(values))
	return ns.Do(func() error {
		for _, k := range keys {
			path := filepath.Join("/proc/sys", filepath.Clean("/"+k))
			if err := os.WriteFile(path, []byte(values[k]), 0o644); err != nil {
				return fmt.Errorf("set sysctl %s=%s in namespace %s: %w", k, values[k], ns.full, err)
			}
		}
		return nil
	})
}

// Do runs fn on a locked OS thread switched into the namespace, then
// switches the thread back. Sockets and TUN devices created in fn belong to
// the namespace and stay there after Do returns. Goroutines started by fn do
// not inherit the namespace.
func (ns *Namespace) Do(fn func() error) error {
	return Run(ns.handle, fn)
}

// Run runs fn on a locked OS thread inside the namespace h, restoring the
// thread's namespace afterwards (see nsrun.Run).
func Run(h vnetns.NsHandle, fn func() error) error { return nsrun.Run(h, fn) }

// Command returns a command that runs name with args inside the namespace
// (through `ip netns exec`). Start it with Bed.Start to have Close kill it.
func (ns *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.full, name}, args...)...)
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// Output runs name with args inside the namespace and returns its combined
// output; a failure includes that output in the error.
func (ns *Namespace) Output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := ns.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("run %s %s in namespace %s: %w: %s", name, strings.Join(args, " "), ns.full, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Start starts cmd (typically from Namespace.Command) and remembers it, so
// Close kills it if it is still running.
func (b *Bed) Start(cmd *exec.Cmd) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return errors.New("start command: test bed already closed")
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", strings.Join(cmd.Args, " "), err)
	}
	b.procs = append(b.procs, cmd)
	return nil
}

// Close kills the processes started with Start, kills any other process
// still inside the Bed's namespaces, and deletes the namespaces (and with
// them every veth and TUN inside). It is safe to call more than once.
func (b *Bed) Close() error {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return nil
	}
	b.done = true
	procs, nss := b.procs, b.nss
	b.mu.Unlock()

	var errs []error
	for _, p := range procs {
		if p.Process != nil && p.ProcessState == nil {
			_ = p.Process.Kill() // may have exited already; Wait below reaps it either way
			_ = p.Wait()
		}
	}
	for i := len(nss) - 1; i >= 0; i-- {
		ns := nss[i]
		if ns.nl != nil {
			ns.nl.Close()
		}
		if ns.handle.IsOpen() {
			ns.handle.Close()
		}
		if err := removeNamespace(ns.full); err != nil {
			errs = append(errs, err)
		}
	}
	b.log.Debug("test bed closed", "prefix", b.prefix, "namespaces", len(nss))
	return errors.Join(errs...)
}

// removeNamespace kills what still runs in the named namespace and deletes it.
func removeNamespace(name string) error {
	killNamespacePids(name)
	out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
	if err != nil {
		if _, statErr := os.Stat(filepath.Join(RunDir, name)); errors.Is(statErr, os.ErrNotExist) {
			return nil // already gone
		}
		return fmt.Errorf("delete namespace %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// killNamespacePids kills the processes living in namespace name: a process
// inside keeps the namespace (and its links) alive after `ip netns del`.
func killNamespacePids(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid == self {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL) // best effort: it may have exited already
	}
}

// List returns the names of the namespaces under /run/netns that start with
// prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces in %s: %w", RunDir, err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// RemoveLeftovers deletes every namespace whose name starts with prefix
// (killing the processes inside), e.g. after a crashed run, and returns the
// names it removed.
func RemoveLeftovers(prefix string) ([]string, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	if err := CheckPrerequisites(); err != nil {
		return nil, fmt.Errorf("remove leftover namespaces: %w", err)
	}
	names, err := List(prefix)
	if err != nil {
		return nil, err
	}
	var errs []error
	var removed []string
	for _, n := range names {
		if err := removeNamespace(n); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

// PrefixIPNet converts p to the net.IPNet form netlink wants, keeping the
// address bits (for interface addresses) as they are.
func PrefixIPNet(p netip.Prefix) *net.IPNet {
	bits := p.Addr().BitLen()
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}
