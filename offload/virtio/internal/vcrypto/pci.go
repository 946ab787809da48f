// Package vcrypto drives a virtio-crypto device's queues from user space.
//
// It drives a virtio-crypto device (virtio 1.x, modern PCI transport, split
// virtqueues) from user space: the device's capabilities and feature
// negotiation, its queues, sessions created and destroyed on the control
// queue, and cipher requests on a data queue with their completions polled
// from the used ring — the device protocol layer, under the engine in
// package virtio and above the PCI access in package vfio.
//
// The layout follows the virtio 1.2 specification (§4.1 PCI transport,
// §2.7 split virtqueues, §5.9 crypto device) and Linux's
// include/uapi/linux/virtio_crypto.h.
package vcrypto

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/espgw/espgw/offload/virtio/internal/vfio"
)

// PCI IDs: the Red Hat virtio vendor, and modern device ID 0x1040 + 20.
// virtio-crypto came with virtio 1.0, so it has no transitional ID.
const (
	VendorID = 0x1af4
	DeviceID = 0x1054
)

// virtioNames names virtio devices by PCI device ID: the transitional IDs
// (0x1000…) and the modern ones, 0x1040 + the virtio device ID (virtio 1.2
// §5).
var virtioNames = map[uint16]string{
	0x1000: "virtio-net (transitional)", 0x1001: "virtio-blk (transitional)",
	0x1002: "virtio-balloon (transitional)", 0x1003: "virtio-console (transitional)",
	0x1004: "virtio-scsi (transitional)", 0x1005: "virtio-rng (transitional)",
	0x1009: "virtio-9p (transitional)",
	0x1041: "virtio-net", 0x1042: "virtio-blk", 0x1043: "virtio-console", 0x1044: "virtio-rng",
	0x1045: "virtio-balloon", 0x1048: "virtio-scsi", 0x1049: "virtio-9p", 0x1050: "virtio-gpu",
	0x1052: "virtio-input", 0x1053: "virtio-vsock", 0x1054: "virtio-crypto", 0x1057: "virtio-iommu",
	0x1058: "virtio-mem", 0x1059: "virtio-sound", 0x105a: "virtio-fs", 0x105b: "virtio-pmem",
}

// pciClasses names PCI base classes, for devices of other vendors.
var pciClasses = map[uint8]string{
	0x01: "mass storage controller", 0x02: "network controller", 0x03: "display controller",
	0x04: "multimedia controller", 0x05: "memory controller", 0x06: "bridge",
	0x07: "communication controller", 0x08: "system peripheral", 0x09: "input device",
	0x0c: "serial bus controller", 0x10: "encryption controller", 0x12: "processing accelerator",
}

// Describe names a PCI device for a person: "1af4:1053 virtio-vsock", or
// "8086:100e network controller" for another vendor's.
func Describe(vendor, device uint16, class uint32) string {
	id := fmt.Sprintf("%04x:%04x", vendor, device)
	if vendor == VendorID {
		if name, ok := virtioNames[device]; ok {
			return id + " " + name
		}
		return id + " (a virtio device of an ID this table lacks)"
	}
	if name, ok := pciClasses[uint8(class>>16)]; ok {
		return id + " " + name
	}
	return fmt.Sprintf("%s (PCI class %06x)", id, class)
}

// CheckIdentity refuses the PCI device at addr unless its IDs are
// virtio-crypto's, saying what it is and which driver has it.
func CheckIdentity(addr string) error {
	vendor, device, err := vfio.ID(addr)
	if err != nil {
		return err
	}
	if vendor == VendorID && device == DeviceID {
		return nil
	}
	class, _ := vfio.Class(addr)
	held := "no driver"
	if drv, _ := vfio.Driver(addr); drv != "" {
		held = "driver " + drv
	}
	return fmt.Errorf("%s is %s (%s), not a virtio-crypto device (%04x:%04x); it was left as it is",
		addr, Describe(vendor, device, class), held, VendorID, DeviceID)
}

// virtio PCI capability types (virtio 1.2 §4.1.4).
const (
	capCommon = 1
	capNotify = 2
	capISR    = 3
	capDevice = 4
)

// Device status bits (§2.1).
const (
	statusAcknowledge = 1
	statusDriver      = 2
	statusDriverOK    = 4
	statusFeaturesOK  = 8
	statusNeedsReset  = 64
	statusFailed      = 128
)

// Feature bits (§6).
const (
	featureVersion1       = 32
	featureAccessPlatform = 33
)

// Offsets in the common configuration structure (§4.1.4.3).
const (
	ccDeviceFeatureSelect = 0
	ccDeviceFeature       = 4
	ccDriverFeatureSelect = 8
	ccDriverFeature       = 12
	ccNumQueues           = 18
	ccDeviceStatus        = 20
	ccQueueSelect         = 22
	ccQueueSize           = 24
	ccQueueMSIXVector     = 26
	ccQueueEnable         = 28
	ccQueueNotifyOff      = 30
	ccQueueDesc           = 32
	ccQueueDriver         = 40
	ccQueueDevice         = 48
)

const noVector = 0xffff

// mmio is a window of a mapped BAR. Its accessors make one access of the
// field's width each, as device registers need, and are not inlined so that
// the compiler neither merges nor hoists them out of polling loops.
type mmio struct{ b []byte }

//go:noinline
func (m mmio) read8(off int) uint8 { return *(*uint8)(unsafe.Pointer(&m.b[off])) }

//go:noinline
func (m mmio) write8(off int, v uint8) { *(*uint8)(unsafe.Pointer(&m.b[off])) = v }

//go:noinline
func (m mmio) read16(off int) uint16 { return *(*uint16)(unsafe.Pointer(&m.b[off])) }

//go:noinline
func (m mmio) write16(off int, v uint16) { *(*uint16)(unsafe.Pointer(&m.b[off])) = v }

func (m mmio) read32(off int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&m.b[off])))
}

func (m mmio) write32(off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m.b[off])), v)
}

func (m mmio) write64(off int, v uint64) {
	m.write32(off, uint32(v))
	m.write32(off+4, uint32(v>>32))
}

// transport is a virtio device's modern PCI transport.
type transport struct {
	dev        *vfio.Device
	common     mmio
	device     mmio
	notify     mmio
	notifyMult uint32
}

// capability is one virtio vendor-specific PCI capability.
type capability struct {
	cfgType uint8
	bar     uint8
	offset  uint32
	length  uint32
	mult    uint32 // notify_off_multiplier, for the notify capability
}

// findCapabilities walks the PCI capability list for virtio's.
func findCapabilities(dev *vfio.Device) (map[uint8]capability, error) {
	var hdr [64]byte
	if err := dev.ReadConfig(hdr[:], 0); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint16(hdr[6:])&(1<<4) == 0 {
		return nil, fmt.Errorf("%s: no PCI capability list (a legacy-only virtio device? start it with disable-legacy=on)", dev.Address)
	}
	caps := map[uint8]capability{}
	ptr := int(hdr[0x34]) &^ 3
	for seen := 0; ptr != 0 && seen < 48; seen++ {
		var c [20]byte
		if err := dev.ReadConfig(c[:], ptr); err != nil {
			return nil, err
		}
		if c[0] == 0x09 { // vendor-specific: a virtio capability
			cp := capability{cfgType: c[3], bar: c[4],
				offset: binary.LittleEndian.Uint32(c[8:]), length: binary.LittleEndian.Uint32(c[12:])}
			if cp.cfgType == capNotify {
				cp.mult = binary.LittleEndian.Uint32(c[16:])
			}
			if _, dup := caps[cp.cfgType]; !dup { // the first of a type is the preferred one
				caps[cp.cfgType] = cp
			}
		}
		ptr = int(c[1]) &^ 3
	}
	for _, t := range []uint8{capCommon, capNotify, capDevice} {
		if _, ok := caps[t]; !ok {
			return nil, fmt.Errorf("%s: virtio capability %d missing: not a modern virtio device", dev.Address, t)
		}
	}
	return caps, nil
}

func newTransport(dev *vfio.Device) (*transport, error) {
	caps, err := findCapabilities(dev)
	if err != nil {
		return nil, err
	}
	window := func(c capability) (mmio, error) {
		bar, err := dev.BAR(int(c.bar))
		if err != nil {
			return mmio{}, err
		}
		if uint64(c.offset)+uint64(c.length) > uint64(len(bar)) {
			return mmio{}, fmt.Errorf("%s: virtio capability %d lies outside BAR %d", dev.Address, c.cfgType, c.bar)
		}
		return mmio{bar[c.offset : c.offset+c.length]}, nil
	}
	t := &transport{dev: dev, notifyMult: caps[capNotify].mult}
	if t.common, err = window(caps[capCommon]); err != nil {
		return nil, err
	}
	if t.device, err = window(caps[capDevice]); err != nil {
		return nil, err
	}
	if t.notify, err = window(caps[capNotify]); err != nil {
		return nil, err
	}
	return t, nil
}

// reset writes 0 to the device status and waits until the device reads
// back 0 (§4.1.4.3.2): it drops every queue and session a previous driver
// — e.g. one that crashed — left behind.
func (t *transport) reset() error {
	t.common.write8(ccDeviceStatus, 0)
	deadline := time.Now().Add(2 * time.Second)
	for t.common.read8(ccDeviceStatus) != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: virtio device did not reset", t.dev.Address)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

func (t *transport) setStatus(bits uint8) {
	t.common.write8(ccDeviceStatus, t.common.read8(ccDeviceStatus)|bits)
}

func (t *transport) status() uint8 { return t.common.read8(ccDeviceStatus) }

// negotiate accepts VERSION_1 and, when the device is behind an IOMMU,
// ACCESS_PLATFORM; it refuses a device without VERSION_1.
func (t *transport) negotiate() error {
	t.common.write32(ccDeviceFeatureSelect, 0)
	lo := t.common.read32(ccDeviceFeature)
	t.common.write32(ccDeviceFeatureSelect, 1)
	hi := t.common.read32(ccDeviceFeature)
	offered := uint64(hi)<<32 | uint64(lo)
	if offered&(1<<featureVersion1) == 0 {
		return fmt.Errorf("%s: device does not offer VIRTIO_F_VERSION_1 (legacy only)", t.dev.Address)
	}
	want := uint64(1<<featureVersion1) | offered&(1<<featureAccessPlatform)
	t.common.write32(ccDriverFeatureSelect, 0)
	t.common.write32(ccDriverFeature, uint32(want))
	t.common.write32(ccDriverFeatureSelect, 1)
	t.common.write32(ccDriverFeature, uint32(want>>32))
	t.setStatus(statusFeaturesOK)
	if t.status()&statusFeaturesOK == 0 {
		return fmt.Errorf("%s: device refused features %#x", t.dev.Address, want)
	}
	return nil
}

// queueMax is the largest size the device allows for queue i.
func (t *transport) queueMax(i int) int {
	t.common.write16(ccQueueSelect, uint16(i))
	return int(t.common.read16(ccQueueSize))
}

// enableQueue tells the device where queue i's rings are and returns the
// offset of its doorbell in the notify window.
func (t *transport) enableQueue(i int, q *queue) int {
	t.common.write16(ccQueueSelect, uint16(i))
	t.common.write16(ccQueueSize, uint16(q.size))
	t.common.write16(ccQueueMSIXVector, noVector) // completions are polled
	t.common.write64(ccQueueDesc, q.mem.Addr(q.descOff))
	t.common.write64(ccQueueDriver, q.mem.Addr(q.availOff))
	t.common.write64(ccQueueDevice, q.mem.Addr(q.usedOff))
	t.common.write16(ccQueueEnable, 1)
	return int(t.common.read16(ccQueueNotifyOff)) * int(t.notifyMult)
}

func (t *transport) kick(doorbell, queue int) { t.notify.write16(doorbell, uint16(queue)) }
