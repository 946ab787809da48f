// Package tun creates and drives the gateway's TUN device.
//
// It owns the gateway's TUN device: creating it (in the current or a given
// network namespace) through golang.zx2c4.com/wireguard/tun, batch reads and
// writes at a headroom offset, the vnet-hdr offloads that make a userspace
// tunnel fast, and the device's link setup (addresses, routes, MTU, up)
// through netlink. It also computes the inner MTU that keeps ESP packets
// within the outer path MTU. It knows nothing of ESP itself.
//
// # Offloads
//
// With IFF_VNET_HDR and TUNSETOFFLOAD (TSO4/TSO6/CSUM, plus USO on Linux ≥
// 6.2), the kernel hands the device TCP (and UDP) super-packets of up to 64
// KiB; Read splits them into MTU-sized packets (GSO split), and Write
// coalesces consecutive TCP/UDP segments of one flow back into
// super-packets (GRO) before handing them to the kernel. On this project's
// test bed that is the difference between ≈2.7 and ≈0.95 Gbit/s for a
// userspace tunnel. Device.Offloads reports whether they are on (and
// Device.UDPOffloads whether the UDP ones are too); when the
// kernel refuses them, Create falls back to a plain TUN (one packet per
// Read, BatchSize 1) and logs why.
//
// GRO on Write coalesces into the spare capacity of the first buffer of
// each flow: buffers handed to Write need cap ≥ offset+MaxSegment for it to
// happen. With tighter buffers the packets are still written, one by one,
// and the kernel behind the device handles one skb per packet again.
package tun

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"github.com/espgw/espgw/internal/nsrun"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// WriteOffset is the least headroom Write needs in front of each packet:
// with offloads on, the 10-byte virtio-net header is written there.
const WriteOffset = 10

// MaxSegment is the largest packet (or super-packet) a TUN device hands over
// or takes. Give Write buffers this much capacity past the offset so GRO can
// coalesce into them.
const MaxSegment = 65535

// OffloadMode selects whether Create asks for vnet-hdr offloads.
type OffloadMode int

const (
	// OffloadAuto asks for offloads and falls back to a plain TUN when the
	// kernel refuses them.
	OffloadAuto OffloadMode = iota
	// OffloadOff creates a plain TUN: one packet per Read and Write call.
	// Useful to measure what the offloads are worth.
	OffloadOff
	// OffloadRequired fails Create when offloads are not available.
	OffloadRequired
)

// Options for Create. The zero value creates a device with offloads (if the
// kernel has them) and MTU 1500 in the calling thread's namespace.
type Options struct {
	// MTU of the device; 0 means 1500. Use InnerMTU to derive it.
	MTU      int
	Offloads OffloadMode
	// Namespace, when set (a handle > 0), is where the device is created
	// and configured; the zero value (or netns.None()) means the calling
	// thread's current namespace, e.g. the one `ip netns exec` started the
	// process in. Create locks the OS thread while it switches.
	Namespace vnetns.NsHandle
	// QueueLen is the device's transmit queue (txqueuelen): the packets
	// the kernel holds for the reader before it drops what it routes to
	// the device (tx_dropped). 0 means DefaultQueueLen.
	QueueLen int
	Log      *slog.Logger
}

// DefaultQueueLen is the transmit queue a device gets unless told: the
// kernel gives a TUN 500 packets, which at 130 000 small packets a second
// is under 4 ms of a reader that lost its CPU — on a shared machine the
// bench's 64-byte losses were all there — where 1000 (an Ethernet
// device's default) holds twice that.
const DefaultQueueLen = 1000

// MaxQueueLen bounds QueueLen: the kernel allocates the queue's ring up
// front.
const MaxQueueLen = 65536

// Device is a TUN device with its link configuration. Read and Write may be
// called concurrently with each other, but each of them from one goroutine
// at a time (the underlying device serialises them).
type Device struct {
	dev      wgtun.Device
	name     string
	offloads bool
	udpGSO   bool
	nl       *netlink.Handle
	index    int
	// fd is the device's descriptor, for Pending's poll. Taken once through
	// SyscallConn: File().Fd() would switch the file to blocking mode.
	fd int
}

// Create creates (or attaches to a persistent) TUN device called name.
func Create(name string, opt Options) (*Device, error) {
	if len(name) == 0 || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("create TUN %q: name must be 1..%d characters", name, unix.IFNAMSIZ-1)
	}
	if opt.MTU == 0 {
		opt.MTU = 1500
	}
	if opt.MTU < 68 || opt.MTU > MaxSegment {
		return nil, fmt.Errorf("create TUN %s: MTU %d outside 68..%d", name, opt.MTU, MaxSegment)
	}
	if opt.QueueLen < 0 || opt.QueueLen > MaxQueueLen {
		return nil, fmt.Errorf("create TUN %s: queue %d outside 0..%d", name, opt.QueueLen, MaxQueueLen)
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var d *Device
	create := func() error {
		var err error
		d, err = create(name, opt, log)
		return err
	}
	var err error
	if opt.Namespace > 0 {
		err = nsrun.Run(opt.Namespace, create)
	} else {
		err = create()
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

func create(name string, opt Options, log *slog.Logger) (*Device, error) {
	var (
		dev wgtun.Device
		err error
	)
	if opt.Offloads != OffloadOff {
		// wireguard's CreateTUN always asks for IFF_VNET_HDR and enables
		// the TCP offloads; it fails if the kernel refuses either.
		dev, err = wgtun.CreateTUN(name, opt.MTU)
		if err != nil {
			if opt.Offloads == OffloadRequired {
				return nil, fmt.Errorf("create TUN %s with vnet-hdr offloads: %w", name, err)
			}
			log.Warn("TUN offloads unavailable, falling back to a plain TUN (about a third of the TCP throughput)", "device", name, "err", err)
		}
	}
	if dev == nil {
		dev, err = createPlain(name, opt.MTU)
		if err != nil {
			return nil, err
		}
	}
	d := &Device{dev: dev, name: name}
	// wireguard sets BatchSize > 1 exactly when vnet-hdr is on; the flags
	// check confirms the kernel really kept IFF_VNET_HDR.
	flags, err := deviceFlags(dev.File())
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("read flags of TUN %s: %w", name, err)
	}
	d.fd = -1
	if rc, err := dev.File().SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { d.fd = int(fd) })
	}
	d.offloads = dev.BatchSize() > 1 && flags&unix.IFF_VNET_HDR != 0
	if d.offloads {
		d.udpGSO = probeUDPOffloads(dev.File())
	}
	if opt.Offloads == OffloadRequired && !d.offloads {
		dev.Close()
		return nil, fmt.Errorf("create TUN %s: kernel did not enable vnet-hdr offloads", name)
	}
	// Netlink handle for the namespace we are in now (the device's).
	ns, err := vnetns.Get()
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("get namespace of TUN %s: %w", name, err)
	}
	defer ns.Close()
	// Only rtnetlink: a kernel without nfnetlink or xfrm (which a handle of
	// every family would also open) still runs a gateway.
	d.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("open netlink for TUN %s: %w", name, err)
	}
	l, err := d.nl.LinkByName(name)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("find link of TUN %s: %w", name, err)
	}
	d.index = l.Attrs().Index
	if opt.QueueLen == 0 {
		opt.QueueLen = DefaultQueueLen
	}
	if l.Attrs().TxQLen != opt.QueueLen {
		if err := d.nl.LinkSetTxQLen(l, opt.QueueLen); err != nil {
			d.Close()
			return nil, fmt.Errorf("set the transmit queue of TUN %s to %d: %w", name, opt.QueueLen, err)
		}
	}
	log.Debug("TUN created", "device", name, "offloads", d.offloads, "batch", dev.BatchSize(), "mtu", opt.MTU)
	return d, nil
}

// createPlain opens a TUN without IFF_VNET_HDR and wraps it in wireguard's
// device, which then reads one packet per call.
func createPlain(name string, mtu int) (wgtun.Device, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create TUN %s: open /dev/net/tun: %w", name, err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN %s: TUNSETIFF: %w", name, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN %s: set non-blocking: %w", name, err)
	}
	dev, err := wgtun.CreateTUNFromFile(os.NewFile(uintptr(fd), "/dev/net/tun"), mtu)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create TUN %s: %w", name, err)
	}
	return dev, nil
}

func deviceFlags(f *os.File) (uint16, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var flags uint16
	var ioErr error
	err = sc.Control(func(fd uintptr) {
		var ifr [unix.IFNAMSIZ + 64]byte
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(unix.TUNGETIFF), uintptr(unsafe.Pointer(&ifr[0])))
		if errno != 0 {
			ioErr = errno
			return
		}
		flags = *(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ]))
	})
	if err != nil {
		return 0, err
	}
	return flags, ioErr
}

// TUN offload flags, as wireguard's tun package sets them.
const (
	tcpOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	udpOffloads = unix.TUN_F_USO4 | unix.TUN_F_USO6
)

// probeUDPOffloads reports whether the device takes UDP segmentation
// offload (Linux ≥ 6.2). wireguard asked for exactly these flags already
// and keeps no public record of the answer; repeating the request is
// harmless: it either sets what is set, or fails (EINVAL) changing nothing.
func probeUDPOffloads(f *os.File) bool {
	sc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	sc.Control(func(fd uintptr) {
		ok = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tcpOffloads|udpOffloads) == nil
	})
	return ok
}

// Name is the device's interface name.
func (d *Device) Name() string { return d.name }

// Offloads reports whether vnet-hdr offloads (GSO split on Read, GRO on
// Write) are on.
func (d *Device) Offloads() bool { return d.offloads }

// UDPOffloads reports whether UDP segmentation offload is on too (Linux ≥
// 6.2): UDP GSO super-packets from local senders then reach Read whole and
// are split there, and Write coalesces UDP flows as well as TCP ones.
func (d *Device) UDPOffloads() bool { return d.udpGSO }

// BatchSize is the most packets one Read returns (and the number of buffers
// to pass it): 128 with offloads, 1 without.
func (d *Device) BatchSize() int { return d.dev.BatchSize() }

// Read reads one or more packets into bufs[i][offset:], setting sizes[i],
// and returns how many it read. With offloads one kernel read may yield a
// super-packet split into up to BatchSize packets, so pass BatchSize buffers,
// each with room for offset+MTU bytes.
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := d.dev.Read(bufs, sizes, offset)
	if err != nil {
		return n, fmt.Errorf("read TUN %s: %w", d.name, err)
	}
	return n, nil
}

// Pending reports, without blocking, whether a packet is waiting to be read:
// a reader that got one packet can take those queued behind it into the same
// batch. It reports false when it cannot tell.
func (d *Device) Pending() bool {
	if d.fd < 0 {
		return false
	}
	// A poll with a zero timeout never blocks, so it is made as a raw
	// system call: the runtime's bookkeeping around a blocking one (and
	// the wake-up of its monitor thread after an idle spell) costs as
	// much as the poll itself, once for every packet a reader drains.
	fds := [1]unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLIN}}
	var zero unix.Timespec
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	return errno == 0 && n > 0 && fds[0].Revents&unix.POLLIN != 0
}

// Write writes the packets bufs[i][offset:] and returns how many bytes it
// wrote. offset must be at least WriteOffset; the bytes in front of it may
// be overwritten. With offloads, consecutive segments of one TCP or UDP flow
// are coalesced into the capacity of the first buffer of the flow, and the
// buffers' contents are changed.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	if offset < WriteOffset {
		return 0, fmt.Errorf("write TUN %s: offset %d below the %d bytes of headroom Write needs", d.name, offset, WriteOffset)
	}
	n, err := d.dev.Write(bufs, offset)
	if err != nil {
		return n, fmt.Errorf("write TUN %s: %w", d.name, err)
	}
	return n, nil
}

// File is the device's file (for poll-based integration and tests).
func (d *Device) File() *os.File { return d.dev.File() }

// Close closes the device; a non-persistent TUN disappears with it.
func (d *Device) Close() error {
	if d.nl != nil {
		d.nl.Close()
	}
	if err := d.dev.Close(); err != nil {
		return fmt.Errorf("close TUN %s: %w", d.name, err)
	}
	return nil
}

func (d *Device) link() (netlink.Link, error) {
	l, err := d.nl.LinkByIndex(d.index)
	if err != nil {
		return nil, fmt.Errorf("find link of TUN %s: %w", d.name, err)
	}
	return l, nil
}

// MTU is the device's current MTU.
func (d *Device) MTU() (int, error) {
	l, err := d.link()
	if err != nil {
		return 0, err
	}
	return l.Attrs().MTU, nil
}

// SetMTU sets the device's MTU.
func (d *Device) SetMTU(mtu int) error {
	l, err := d.link()
	if err != nil {
		return err
	}
	if err := d.nl.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("set MTU %d on TUN %s: %w", mtu, d.name, err)
	}
	return nil
}

// upSettle bounds how long Up waits for the kernel to install the local
// routes of the device's IPv6 addresses.
const upSettle = 2 * time.Second

// Up sets the link up. IPv6 addresses added while the link was down only
// become local (accepted as destinations) when the kernel's address work
// runs after the link comes up; Up waits for that, so the first packet
// written to the device for such an address is not dropped.
func (d *Device) Up() error {
	l, err := d.link()
	if err != nil {
		return err
	}
	if err := d.nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("set TUN %s up: %w", d.name, err)
	}
	addrs, err := d.nl.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("list IPv6 addresses of TUN %s: %w", d.name, err)
	}
	deadline := time.Now().Add(upSettle)
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		for !d.isLocal(a.IP) {
			if time.Now().After(deadline) {
				return fmt.Errorf("set TUN %s up: address %s not usable after %v", d.name, a.IP, upSettle)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// LinkLocal lists the device's IPv6 link-local addresses.
func (d *Device) LinkLocal() ([]netip.Addr, error) {
	l, err := d.link()
	if err != nil {
		return nil, err
	}
	addrs, err := d.nl.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return nil, fmt.Errorf("list IPv6 addresses of TUN %s: %w", d.name, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// isLocal reports whether the kernel routes ip to this host.
func (d *Device) isLocal(ip net.IP) bool {
	rs, err := d.nl.RouteGet(ip)
	return err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL
}

// AddAddress assigns p (address with prefix length), IPv4 or IPv6, to the
// device. IPv6 addresses skip duplicate address detection.
func (d *Device) AddAddress(p netip.Prefix) error {
	l, err := d.link()
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: ipNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := d.nl.AddrAdd(l, a); err != nil {
		return fmt.Errorf("add address %s to TUN %s: %w", p, d.name, err)
	}
	return nil
}

// Route is a route out of the device.
type Route struct {
	Dst netip.Prefix
	// Src, if valid, is the preferred source address for the route.
	Src netip.Addr
	// MTU, if non-zero, caps the path MTU of the route (locked).
	MTU int
	// Metric orders routes to the same destination; 0 is the kernel default.
	Metric int
}

// AddRoute routes r.Dst out of the device.
func (d *Device) AddRoute(r Route) error {
	nr := &netlink.Route{
		LinkIndex: d.index,
		Dst:       ipNet(r.Dst.Masked()),
		Scope:     netlink.SCOPE_LINK,
		MTU:       r.MTU,
		Priority:  r.Metric,
	}
	if r.Src.IsValid() {
		nr.Src = net.IP(r.Src.AsSlice())
	}
	if r.MTU > 0 {
		nr.MTULock = true
	}
	if err := d.nl.RouteAdd(nr); err != nil {
		return fmt.Errorf("add route %s via TUN %s: %w", r.Dst, d.name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// DelRoute removes a route AddRoute added.
func (d *Device) DelRoute(r Route) error {
	nr := &netlink.Route{LinkIndex: d.index, Dst: ipNet(r.Dst.Masked()), Scope: netlink.SCOPE_LINK, Priority: r.Metric}
	if err := d.nl.RouteDel(nr); err != nil {
		return fmt.Errorf("delete route %s via TUN %s: %w", r.Dst, d.name, err)
	}
	return nil
}
