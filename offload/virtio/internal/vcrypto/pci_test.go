package vcrypto

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/offload/virtio/internal/vfio"
)

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		vendor, device uint16
		class          uint32
		want           string
	}{
		{0x1af4, 0x1053, 0x078000, "1af4:1053 virtio-vsock"},
		{0x1af4, 0x1000, 0x020000, "1af4:1000 virtio-net (transitional)"},
		{0x1af4, 0x1054, 0x108000, "1af4:1054 virtio-crypto"},
		{0x1af4, 0x10ff, 0, "1af4:10ff (a virtio device of an ID this table lacks)"},
		{0x8086, 0x100e, 0x020000, "8086:100e network controller"},
		{0x144d, 0xa808, 0x010802, "144d:a808 mass storage controller"},
		{0x1234, 0x1111, 0xff0000, "1234:1111 (PCI class ff0000)"},
	} {
		if got := Describe(c.vendor, c.device, c.class); got != c.want {
			t.Errorf("Describe(%04x, %04x, %06x) = %q, want %q", c.vendor, c.device, c.class, got, c.want)
		}
	}
}

// TestCheckIdentityRefusesOthers reads (never writes) this machine's PCI
// devices: every one that is not virtio-crypto is refused by name, and a
// missing address is an error naming it.
func TestCheckIdentityRefusesOthers(t *testing.T) {
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	if len(devs) == 0 {
		t.Skip("no PCI devices in /sys/bus/pci/devices")
	}
	for _, d := range devs {
		addr := filepath.Base(d)
		v, dev, err := vfio.ID(addr)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckIdentity(addr)
		if v == VendorID && dev == DeviceID {
			if err != nil {
				t.Errorf("%s is virtio-crypto, refused: %v", addr, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), addr+" is ") || !strings.Contains(err.Error(), "not a virtio-crypto device") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if _, err := os.Stat("/sys/bus/pci/devices/0000:ff:1f.7"); err == nil {
		t.Skip("0000:ff:1f.7 exists here")
	}
	if err := CheckIdentity("0000:ff:1f.7"); err == nil || !strings.Contains(err.Error(), "no PCI device at 0000:ff:1f.7") {
		t.Errorf("missing device: %v", err)
	}
}
