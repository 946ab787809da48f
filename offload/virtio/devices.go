package virtio

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/espgw/espgw/offload/virtio/internal/vcrypto"
	"github.com/espgw/espgw/offload/virtio/internal/vfio"
)

// DeviceState is who has one virtio-crypto device.
type DeviceState struct {
	Address string
	// Driver is the PCI driver bound to it ("" none): virtio-pci when the
	// kernel has it, vfio-pci when a user-space driver can.
	Driver string
	// VirtioDriver is the driver of the virtio device virtio-pci made of
	// it (virtio_crypto), when there is one.
	VirtioDriver string
	// Holders are the processes that hold it through VFIO.
	Holders []vfio.Process
	// Taken is espgw's record of the driver it took the device from; nil
	// when espgw did not take it.
	Taken *vfio.Record
}

// Stale says whether espgw took the device and no process holds it: the
// one that took it died before giving it back.
func (s DeviceState) Stale() bool { return s.Taken != nil && len(s.Holders) == 0 }

// Devices lists every virtio-crypto device on the machine, and every
// device espgw has a record of having taken, with who has each.
func Devices() ([]DeviceState, error) {
	addrs, err := vfio.Find(vcrypto.VendorID, vcrypto.DeviceID)
	if err != nil {
		return nil, fmt.Errorf("list virtio-crypto devices: %w", err)
	}
	recs, err := vfio.Records()
	if err != nil {
		return nil, fmt.Errorf("list virtio-crypto devices: %w", err)
	}
	for _, r := range recs {
		if !slices.Contains(addrs, r.Address) {
			addrs = append(addrs, r.Address)
		}
	}
	var out []DeviceState
	for _, a := range addrs {
		st := DeviceState{Address: a}
		if st.Driver, err = vfio.Driver(a); err != nil {
			return nil, fmt.Errorf("list virtio-crypto devices: %w", err)
		}
		if m, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", a, "virtio*", "driver")); len(m) > 0 {
			if link, err := os.Readlink(m[0]); err == nil {
				st.VirtioDriver = filepath.Base(link)
			}
		}
		if st.Holders, err = vfio.Holders(a); err != nil {
			return nil, fmt.Errorf("list virtio-crypto devices: %w", err)
		}
		if st.Taken, err = vfio.ReadRecord(a); err != nil {
			return nil, fmt.Errorf("list virtio-crypto devices: %w", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// Release gives the virtio-crypto device at addr back to the driver it had
// before espgw took it (or, with no record, to the kernel's choice), and
// returns the driver it has after. It refuses a device a process holds,
// and one that is not virtio-crypto and that espgw did not take.
func Release(addr string) (string, error) {
	rec, err := vfio.ReadRecord(addr)
	if err != nil {
		return "", err
	}
	if rec == nil {
		if err := vcrypto.CheckIdentity(addr); err != nil {
			return "", err
		}
	}
	return vfio.Release(addr)
}
