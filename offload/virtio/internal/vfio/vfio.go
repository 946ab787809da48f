// Package vfio gives a user-space driver a PCI device through Linux's VFIO.
//
// It gives a user-space driver a PCI device through Linux's VFIO (type 1
// IOMMU): the device is bound to vfio-pci, its BARs are mapped into the
// process, and DMA memory is pinned and mapped at I/O virtual addresses the
// device can reach through the IOMMU, so a bad descriptor faults in the
// IOMMU instead of writing over the machine's memory.
//
// Everything it sets up is released by Close, and by the kernel when the
// process dies: closing the VFIO file descriptors unmaps the DMA memory and
// resets the device, so a crashed driver leaves no device writing into
// freed pages — the reason to prefer VFIO over uio_pci_generic, where the
// device would keep the physical addresses it was given.
package vfio

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl numbers of <linux/vfio.h>: _IO(VFIO_TYPE, VFIO_BASE + n), with
// VFIO_TYPE ';' and VFIO_BASE 100. x/sys/unix does not define them.
const (
	ioctlGetAPIVersion     = 0x3b00 + 100 + 0
	ioctlCheckExtension    = 0x3b00 + 100 + 1
	ioctlSetIOMMU          = 0x3b00 + 100 + 2
	ioctlGroupGetStatus    = 0x3b00 + 100 + 3
	ioctlGroupSetContainer = 0x3b00 + 100 + 4
	ioctlGroupGetDeviceFD  = 0x3b00 + 100 + 6
	ioctlDeviceGetInfo     = 0x3b00 + 100 + 7
	ioctlDeviceRegionInfo  = 0x3b00 + 100 + 8
	ioctlDeviceReset       = 0x3b00 + 100 + 11
	ioctlIOMMUMapDMA       = 0x3b00 + 100 + 13
	ioctlIOMMUUnmapDMA     = 0x3b00 + 100 + 14

	apiVersion  = 0
	type1IOMMU  = 1
	groupViable = 1 << 0

	regionRead  = 1 << 0
	regionWrite = 1 << 1
	regionMmap  = 1 << 2

	dmaRead  = 1 << 0
	dmaWrite = 1 << 1

	// ConfigRegion is the index of the PCI configuration space region.
	ConfigRegion = 7
	// DeviceResetFlag is vfio_device_info's VFIO_DEVICE_FLAGS_RESET.
	deviceFlagReset = 1 << 0
)

type groupStatus struct {
	argsz uint32
	flags uint32
}

type deviceInfo struct {
	argsz      uint32
	flags      uint32
	numRegions uint32
	numIRQs    uint32
}

type regionInfo struct {
	argsz     uint32
	flags     uint32
	index     uint32
	capOffset uint32
	size      uint64
	offset    uint64
}

type dmaMap struct {
	argsz uint32
	flags uint32
	vaddr uint64
	iova  uint64
	size  uint64
}

type dmaUnmap struct {
	argsz uint32
	flags uint32
	iova  uint64
	size  uint64
}

// Region is one of the device's regions (a BAR, or the configuration space).
type Region struct {
	Index  int
	Size   uint64
	Offset uint64 // where the region starts in the device file
	flags  uint32
	mem    []byte // mapped, for BARs that allow it
}

// Device is a PCI device opened through VFIO with its own IOMMU container.
type Device struct {
	Address   string // the PCI address, e.g. 0000:00:03.0
	container *os.File
	group     *os.File
	dev       *os.File
	regions   []Region
	dma       []*DMA
	nextIOVA  uint64
	canReset  bool
}

// Find returns the PCI addresses of every device with the given vendor and
// device IDs, in the order sysfs lists them.
func Find(vendor, device uint16) ([]string, error) {
	entries, err := os.ReadDir("/sys/bus/pci/devices")
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	var found []string
	for _, e := range entries {
		v, err1 := readHex(filepath.Join("/sys/bus/pci/devices", e.Name(), "vendor"))
		d, err2 := readHex(filepath.Join("/sys/bus/pci/devices", e.Name(), "device"))
		if err1 == nil && err2 == nil && uint16(v) == vendor && uint16(d) == device {
			found = append(found, e.Name())
		}
	}
	return found, nil
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
}

// Open opens the device at addr, already bound to vfio-pci (see Bind), in a
// container of its own, and maps every BAR that can be mapped.
func Open(addr string) (_ *Device, err error) {
	d := &Device{Address: addr, nextIOVA: 1 << 20}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	link, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", addr, "iommu_group"))
	if err != nil {
		return nil, fmt.Errorf("open %s: the device has no IOMMU group (no IOMMU, or intel_iommu=off): %w", addr, err)
	}
	group := filepath.Base(link)
	if d.container, err = os.OpenFile("/dev/vfio/vfio", os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("open %s: VFIO container: %w", addr, err)
	}
	if v, err := ioctlValue(d.container, ioctlGetAPIVersion, 0); err != nil || v != apiVersion {
		return nil, fmt.Errorf("open %s: VFIO API version %d (want %d): %v", addr, v, apiVersion, err)
	}
	if v, err := ioctlValue(d.container, ioctlCheckExtension, type1IOMMU); err != nil || v != 1 {
		return nil, fmt.Errorf("open %s: the kernel's VFIO has no type 1 IOMMU (vfio_iommu_type1): %v", addr, err)
	}
	if d.group, err = os.OpenFile("/dev/vfio/"+group, os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("open %s: VFIO group %s (bound to vfio-pci? in use by another process?): %w", addr, group, err)
	}
	st := groupStatus{argsz: uint32(unsafe.Sizeof(groupStatus{}))}
	if err := ioctlPtr(d.group, ioctlGroupGetStatus, unsafe.Pointer(&st)); err != nil {
		return nil, fmt.Errorf("open %s: group %s status: %w", addr, group, err)
	}
	if st.flags&groupViable == 0 {
		return nil, fmt.Errorf("open %s: IOMMU group %s is not viable: every device in it must be bound to vfio-pci", addr, group)
	}
	cfd := int32(d.container.Fd())
	if err := ioctlPtr(d.group, ioctlGroupSetContainer, unsafe.Pointer(&cfd)); err != nil {
		return nil, fmt.Errorf("open %s: put group %s in a container: %w", addr, group, err)
	}
	if _, err := ioctlValue(d.container, ioctlSetIOMMU, type1IOMMU); err != nil {
		hint := ""
		if errors.Is(err, unix.EPERM) {
			hint = " (the IOMMU has no interrupt remapping: enable it, or load vfio_iommu_type1 with allow_unsafe_interrupts=1)"
		}
		return nil, fmt.Errorf("open %s: set the type 1 IOMMU%s: %w", addr, hint, err)
	}
	name, err := unix.BytePtrFromString(addr)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", addr, err)
	}
	fd, err := ioctlValue(d.group, ioctlGroupGetDeviceFD, uintptr(unsafe.Pointer(name)))
	runtime.KeepAlive(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: get the device from group %s: %w", addr, group, err)
	}
	d.dev = os.NewFile(uintptr(fd), "vfio-device-"+addr)
	info := deviceInfo{argsz: uint32(unsafe.Sizeof(deviceInfo{}))}
	if err := ioctlPtr(d.dev, ioctlDeviceGetInfo, unsafe.Pointer(&info)); err != nil {
		return nil, fmt.Errorf("open %s: device info: %w", addr, err)
	}
	d.canReset = info.flags&deviceFlagReset != 0
	for i := uint32(0); i < info.numRegions; i++ {
		ri := regionInfo{argsz: uint32(unsafe.Sizeof(regionInfo{})), index: i}
		if err := ioctlPtr(d.dev, ioctlDeviceRegionInfo, unsafe.Pointer(&ri)); err != nil {
			// Regions past the config space (VGA) may be absent.
			d.regions = append(d.regions, Region{Index: int(i)})
			continue
		}
		r := Region{Index: int(i), Size: ri.size, Offset: ri.offset, flags: ri.flags}
		if i < ConfigRegion && ri.size > 0 && ri.flags&regionMmap != 0 {
			mem, err := unix.Mmap(int(d.dev.Fd()), int64(ri.offset), int(ri.size),
				unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				return nil, fmt.Errorf("open %s: map BAR %d (%d bytes): %w", addr, i, ri.size, err)
			}
			r.mem = mem
		}
		d.regions = append(d.regions, r)
	}
	return d, nil
}

// Reset resets the device (function-level reset) if VFIO can.
func (d *Device) Reset() error {
	if !d.canReset {
		return nil
	}
	if _, err := ioctlValue(d.dev, ioctlDeviceReset, 0); err != nil {
		return fmt.Errorf("reset %s: %w", d.Address, err)
	}
	return nil
}

// BAR returns the mapped memory of BAR i.
func (d *Device) BAR(i int) ([]byte, error) {
	if i < 0 || i >= len(d.regions) || i >= ConfigRegion {
		return nil, fmt.Errorf("%s: no BAR %d", d.Address, i)
	}
	if d.regions[i].mem == nil {
		return nil, fmt.Errorf("%s: BAR %d is not mappable (size %d)", d.Address, i, d.regions[i].Size)
	}
	return d.regions[i].mem, nil
}

// ReadConfig reads len(b) bytes of PCI configuration space at off.
func (d *Device) ReadConfig(b []byte, off int) error {
	r := d.regions[ConfigRegion]
	if _, err := d.dev.ReadAt(b, int64(r.Offset)+int64(off)); err != nil {
		return fmt.Errorf("%s: read config space at %#x: %w", d.Address, off, err)
	}
	return nil
}

// WriteConfig writes b to PCI configuration space at off.
func (d *Device) WriteConfig(b []byte, off int) error {
	r := d.regions[ConfigRegion]
	if _, err := d.dev.WriteAt(b, int64(r.Offset)+int64(off)); err != nil {
		return fmt.Errorf("%s: write config space at %#x: %w", d.Address, off, err)
	}
	return nil
}

// EnableBusMaster sets the command register's bus master bit, without which
// the device cannot DMA.
func (d *Device) EnableBusMaster() error {
	var cmd [2]byte
	if err := d.ReadConfig(cmd[:], 4); err != nil {
		return err
	}
	cmd[0] |= 1<<2 | 1<<1 // bus master, memory space
	return d.WriteConfig(cmd[:], 4)
}

// DMA is memory the device can read and write at IOVA.
type DMA struct {
	Mem  []byte
	IOVA uint64
}

// Addr is the I/O virtual address of Mem[off].
func (m *DMA) Addr(off int) uint64 { return m.IOVA + uint64(off) }

// AllocDMA allocates size bytes (rounded up to pages), pins them and maps
// them for the device to read and write.
func (d *Device) AllocDMA(size int) (*DMA, error) {
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("%s: allocate %d bytes of DMA memory: %w", d.Address, size, err)
	}
	m := dmaMap{argsz: uint32(unsafe.Sizeof(dmaMap{})), flags: dmaRead | dmaWrite,
		vaddr: uint64(uintptr(unsafe.Pointer(&mem[0]))), iova: d.nextIOVA, size: uint64(size)}
	if err := ioctlPtr(d.container, ioctlIOMMUMapDMA, unsafe.Pointer(&m)); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s: map %d bytes for DMA at IOVA %#x (RLIMIT_MEMLOCK?): %w", d.Address, size, m.iova, err)
	}
	dma := &DMA{Mem: mem, IOVA: m.iova}
	d.nextIOVA += uint64(size) + uint64(page) // a guard page between mappings
	d.dma = append(d.dma, dma)
	return dma, nil
}

// Close unmaps DMA memory and BARs and closes the device, its group and
// its container. The kernel resets the device when the last file closes.
func (d *Device) Close() error {
	var errs []error
	for _, m := range d.dma {
		u := dmaUnmap{argsz: uint32(unsafe.Sizeof(dmaUnmap{})), iova: m.IOVA, size: uint64(len(m.Mem))}
		if err := ioctlPtr(d.container, ioctlIOMMUUnmapDMA, unsafe.Pointer(&u)); err != nil {
			errs = append(errs, fmt.Errorf("unmap DMA at %#x: %w", m.IOVA, err))
		}
		if err := unix.Munmap(m.Mem); err != nil {
			errs = append(errs, err)
		}
	}
	d.dma = nil
	for i := range d.regions {
		if d.regions[i].mem != nil {
			unix.Munmap(d.regions[i].mem)
			d.regions[i].mem = nil
		}
	}
	for _, f := range []*os.File{d.dev, d.group, d.container} {
		if f != nil {
			f.Close()
		}
	}
	d.dev, d.group, d.container = nil, nil, nil
	if len(errs) > 0 {
		return fmt.Errorf("close %s: %w", d.Address, errors.Join(errs...))
	}
	return nil
}

func ioctlValue(f *os.File, req uint, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), arg)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

func ioctlPtr(f *os.File, req uint, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
