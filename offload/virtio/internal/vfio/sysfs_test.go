package vfio

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The sysfs readers agree with what sysfs says of every PCI device of this
// machine, read here on their own; nothing is written.
func TestReadsSysfs(t *testing.T) {
	entries, err := os.ReadDir(pciDevices)
	if err != nil || len(entries) == 0 {
		t.Skipf("no PCI devices in %s: %v", pciDevices, err)
	}
	for _, e := range entries {
		addr := e.Name()
		var wantV, wantD uint16
		var wantC uint32
		for _, f := range []struct {
			name string
			v    any
		}{{"vendor", &wantV}, {"device", &wantD}, {"class", &wantC}} {
			b, err := os.ReadFile(filepath.Join(pciDevices, addr, f.name))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "0x%x", f.v); err != nil {
				t.Fatalf("%s %s: %q: %v", addr, f.name, b, err)
			}
		}
		v, d, err := ID(addr)
		if err != nil || v != wantV || d != wantD {
			t.Errorf("ID(%s) = %04x:%04x, %v; sysfs says %04x:%04x", addr, v, d, err, wantV, wantD)
		}
		if c, err := Class(addr); err != nil || c != wantC {
			t.Errorf("Class(%s) = %06x, %v; sysfs says %06x", addr, c, err, wantC)
		}
		found, err := Find(wantV, wantD)
		if err != nil || !slices.Contains(found, addr) {
			t.Errorf("Find(%04x, %04x) = %v, %v: want %s among them", wantV, wantD, found, err, addr)
		}
		wantDriver := ""
		if link, err := os.Readlink(filepath.Join(pciDevices, addr, "driver")); err == nil {
			wantDriver = filepath.Base(link)
		}
		if drv, err := Driver(addr); err != nil || drv != wantDriver {
			t.Errorf("Driver(%s) = %q, %v; sysfs says %q", addr, drv, err, wantDriver)
		}
		if _, err := os.Readlink(filepath.Join(pciDevices, addr, "iommu_group")); err != nil {
			if hs, err := Holders(addr); err != nil || hs != nil {
				t.Errorf("Holders(%s) without an IOMMU group = %v, %v", addr, hs, err)
			}
		}
	}
}

// A device that does not exist is named in every reader's error.
func TestNoSuchDevice(t *testing.T) {
	const addr = "ffff:ff:1f.7"
	if _, _, err := ID(addr); err == nil || !strings.Contains(err.Error(), "no PCI device at "+addr) {
		t.Errorf("ID: %v", err)
	}
	if _, err := Class(addr); err == nil || !strings.Contains(err.Error(), "no PCI device at "+addr) {
		t.Errorf("Class: %v", err)
	}
	if _, err := Driver(addr); err == nil || !strings.Contains(err.Error(), "no PCI device at "+addr) {
		t.Errorf("Driver: %v", err)
	}
	if found, err := Find(0xffff, 0xffff); err != nil || len(found) != 0 {
		t.Errorf("Find(ffff, ffff) = %v, %v", found, err)
	}
	if r, err := ReadRecord(addr); r != nil || err != nil {
		t.Errorf("ReadRecord(%s) = %v, %v: want no record", addr, r, err)
	}
	if _, err := Open(addr); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("Open(%s): %v", addr, err)
	}
}

func TestProcessString(t *testing.T) {
	if got := (Process{PID: 42, Command: "espgw"}).String(); got != "pid 42 (espgw)" {
		t.Errorf("got %q", got)
	}
}
