package vfio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	pciDevices = "/sys/bus/pci/devices"
	vfioPCI    = "vfio-pci"
)

// StateDir is where Bind records, per device, the driver the device had
// before it was handed to vfio-pci, so that a later process can give it
// back when the one that took it died without doing so.
const StateDir = "/run/espgw/vfio"

// Record is what StateDir keeps for one device taken from its driver.
type Record struct {
	Address string `json:"address"`
	// Driver is the driver the device was bound to; empty when it had none.
	Driver string `json:"driver"`
	// Override is the driver_override the device had (usually none).
	Override string `json:"driver_override,omitempty"`
	// PID is the process that took the device last.
	PID int `json:"pid"`
}

// Claim is a device Bind handed to vfio-pci; Release gives it back.
type Claim struct {
	Record
	// keep is set when the device was on vfio-pci already and not by
	// espgw: Release leaves it there.
	keep bool
}

// Process is one process holding a device's VFIO group open.
type Process struct {
	PID     int
	Command string
}

func (p Process) String() string { return fmt.Sprintf("pid %d (%s)", p.PID, p.Command) }

// ID returns the vendor and device IDs of the PCI device at addr.
func ID(addr string) (vendor, device uint16, err error) {
	dir := filepath.Join(pciDevices, addr)
	v, err := readHex(filepath.Join(dir, "vendor"))
	if err != nil {
		return 0, 0, fmt.Errorf("read the IDs of PCI device %s: %w", addr, noDevice(addr, err))
	}
	d, err := readHex(filepath.Join(dir, "device"))
	if err != nil {
		return 0, 0, fmt.Errorf("read the IDs of PCI device %s: %w", addr, noDevice(addr, err))
	}
	return uint16(v), uint16(d), nil
}

// Class returns the PCI class code (base class, subclass, interface) of
// the device at addr.
func Class(addr string) (uint32, error) {
	c, err := readHex(filepath.Join(pciDevices, addr, "class"))
	if err != nil {
		return 0, fmt.Errorf("read the class of PCI device %s: %w", addr, noDevice(addr, err))
	}
	return uint32(c), nil
}

func noDevice(addr string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no PCI device at %s (see %s)", addr, pciDevices)
	}
	return err
}

// Driver returns the name of the driver the device at addr is bound to,
// or "" when it has none.
func Driver(addr string) (string, error) {
	dir := filepath.Join(pciDevices, addr)
	if _, err := os.Stat(dir); err != nil {
		return "", noDevice(addr, err)
	}
	link, err := os.Readlink(filepath.Join(dir, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the driver of %s: %w", addr, err)
	}
	return filepath.Base(link), nil
}

// Holders lists the processes that hold the VFIO group of the device at
// addr open: while one does, the device is in use and must not be moved.
func Holders(addr string) ([]Process, error) {
	link, err := os.Readlink(filepath.Join(pciDevices, addr, "iommu_group"))
	if err != nil {
		return nil, nil // no IOMMU group: nobody can hold it through VFIO
	}
	want := "/dev/vfio/" + filepath.Base(link)
	fds, err := filepath.Glob("/proc/[0-9]*/fd/*")
	if err != nil {
		return nil, fmt.Errorf("find who holds %s: %w", want, err)
	}
	var out []Process
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err != nil || target != want {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
		if err != nil || slices.ContainsFunc(out, func(p Process) bool { return p.PID == pid }) {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out = append(out, Process{PID: pid, Command: strings.TrimSpace(string(comm))})
	}
	return out, nil
}

// ReadRecord returns the record StateDir keeps for addr, or nil.
func ReadRecord(addr string) (*Record, error) {
	b, err := os.ReadFile(recordPath(addr))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of %s: %w", addr, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.Address != addr {
		return nil, fmt.Errorf("read the record of %s: %s is damaged (%v); remove it and bind the device to its driver by hand", addr, recordPath(addr), err)
	}
	return &r, nil
}

// Records returns every record in StateDir.
func Records() ([]Record, error) {
	entries, err := os.ReadDir(StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", StateDir, err)
	}
	var out []Record
	for _, e := range entries {
		r, err := ReadRecord(e.Name())
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

func recordPath(addr string) string { return filepath.Join(StateDir, addr) }

func writeRecord(r Record) error {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return fmt.Errorf("record the driver of %s: %w", r.Address, err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("record the driver of %s: %w", r.Address, err)
	}
	tmp := recordPath(r.Address) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record the driver of %s: %w", r.Address, err)
	}
	if err := os.Rename(tmp, recordPath(r.Address)); err != nil {
		return fmt.Errorf("record the driver of %s: %w", r.Address, err)
	}
	return nil
}

func override(addr string) (string, error) {
	b, err := os.ReadFile(filepath.Join(pciDevices, addr, "driver_override"))
	if err != nil {
		return "", fmt.Errorf("read the driver_override of %s: %w", addr, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "(null)" {
		s = ""
	}
	return s, nil
}

func setOverride(addr, driver string) error {
	// A lone newline clears it.
	if err := os.WriteFile(filepath.Join(pciDevices, addr, "driver_override"), []byte(driver+"\n"), 0); err != nil {
		return fmt.Errorf("set the driver_override of %s to %q: %w", addr, driver, err)
	}
	return nil
}

func unbind(addr string) error {
	drv, err := Driver(addr)
	if err != nil || drv == "" {
		return err
	}
	if err := os.WriteFile(filepath.Join(pciDevices, addr, "driver", "unbind"), []byte(addr), 0); err != nil {
		return fmt.Errorf("unbind %s from %s: %w", addr, drv, err)
	}
	return nil
}

func probe(addr string) error {
	if err := os.WriteFile("/sys/bus/pci/drivers_probe", []byte(addr), 0); err != nil {
		return fmt.Errorf("probe %s: %w", addr, err)
	}
	return nil
}

// Bind hands the PCI device at addr to vfio-pci, as `driverctl
// set-override` does: it records the driver the device has in StateDir,
// sets driver_override, unbinds the driver and asks the kernel to probe
// the device again. A device already on vfio-pci is refused while a
// process holds it; one a dead process left there keeps the record of
// the driver it had before; one put there by someone else stays there
// when the claim is released.
func Bind(addr string) (*Claim, error) {
	cur, err := Driver(addr)
	if err != nil {
		return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
	}
	rec, err := ReadRecord(addr)
	if err != nil {
		return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
	}
	if cur == vfioPCI {
		holders, err := Holders(addr)
		if err != nil {
			return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
		}
		if len(holders) > 0 {
			return nil, fmt.Errorf("bind %s to vfio-pci: the device is in use by %s", addr, holders[0])
		}
		if rec == nil {
			return &Claim{Record: Record{Address: addr, Driver: vfioPCI, PID: os.Getpid()}, keep: true}, nil
		}
		rec.PID = os.Getpid()
		if err := writeRecord(*rec); err != nil {
			return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
		}
		return &Claim{Record: *rec}, nil
	}
	if _, err := os.Stat("/sys/bus/pci/drivers/vfio-pci"); err != nil {
		return nil, fmt.Errorf("bind %s to vfio-pci: the vfio-pci driver is not loaded (modprobe vfio-pci): %w", addr, err)
	}
	prior, err := override(addr)
	if err != nil {
		return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
	}
	if prior == vfioPCI && rec != nil {
		// A process died between setting the override and unbinding.
		prior = rec.Override
	}
	c := &Claim{Record: Record{Address: addr, Driver: cur, Override: prior, PID: os.Getpid()}}
	if err := writeRecord(c.Record); err != nil {
		return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
	}
	if err := c.take(); err != nil {
		if rerr := c.Release(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, fmt.Errorf("bind %s to vfio-pci: %w", addr, err)
	}
	return c, nil
}

func (c *Claim) take() error {
	if err := setOverride(c.Address, vfioPCI); err != nil {
		return err
	}
	if err := unbind(c.Address); err != nil {
		return err
	}
	if err := probe(c.Address); err != nil {
		return err
	}
	if cur, _ := Driver(c.Address); cur != vfioPCI {
		return fmt.Errorf("the device is not bound to vfio-pci after probing (is there an IOMMU? the kernel needs intel_iommu=on)")
	}
	return nil
}

// Release gives the device back to the driver it had when it was taken:
// driver_override restored, vfio-pci unbound, the device probed again,
// and the record removed. Close the device first.
func (c *Claim) Release() error {
	if c.keep {
		return nil
	}
	if err := release(c.Record); err != nil {
		return fmt.Errorf("give %s back to %s: %w", c.Address, orNone(c.Driver), err)
	}
	return nil
}

func release(r Record) error {
	if err := setOverride(r.Address, r.Override); err != nil {
		return err
	}
	if cur, err := Driver(r.Address); err != nil {
		return err
	} else if cur != r.Driver {
		if err := unbind(r.Address); err != nil {
			return err
		}
		if r.Driver != "" {
			if err := probe(r.Address); err != nil {
				return err
			}
			if cur, _ := Driver(r.Address); cur != r.Driver {
				// A driver that does not claim the device by its IDs (it
				// had been bound by hand) is asked directly.
				bind := filepath.Join("/sys/bus/pci/drivers", r.Driver, "bind")
				if err := os.WriteFile(bind, []byte(r.Address), 0); err != nil {
					return fmt.Errorf("after probing the device has driver %s; binding %s: %w", orNone(cur), r.Driver, err)
				}
			}
		}
	}
	if err := os.Remove(recordPath(r.Address)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", recordPath(r.Address), err)
	}
	return nil
}

func orNone(driver string) string {
	if driver == "" {
		return "no driver"
	}
	return driver
}

// Release gives the device at addr back to the driver its record in
// StateDir names; without a record it clears driver_override and lets the
// kernel probe the device (its default driver takes it). It refuses while
// a process holds the device. It returns the driver the device has after.
func Release(addr string) (string, error) {
	holders, err := Holders(addr)
	if err != nil {
		return "", fmt.Errorf("give %s back: %w", addr, err)
	}
	if len(holders) > 0 {
		return "", fmt.Errorf("give %s back: the device is in use by %s; stop that process first", addr, holders[0])
	}
	rec, err := ReadRecord(addr)
	if err != nil {
		return "", fmt.Errorf("give %s back: %w", addr, err)
	}
	if rec == nil {
		cur, err := Driver(addr)
		if err != nil {
			return "", fmt.Errorf("give %s back: %w", addr, err)
		}
		if cur != vfioPCI {
			return cur, nil
		}
		if err := setOverride(addr, ""); err != nil {
			return "", fmt.Errorf("give %s back: %w", addr, err)
		}
		if err := unbind(addr); err != nil {
			return "", fmt.Errorf("give %s back: %w", addr, err)
		}
		if err := probe(addr); err != nil {
			return "", fmt.Errorf("give %s back: %w", addr, err)
		}
	} else if err := release(*rec); err != nil {
		return "", fmt.Errorf("give %s back to %s: %w", addr, orNone(rec.Driver), err)
	}
	return Driver(addr)
}

// ReleaseStale gives back every recorded device no process holds — those
// left on vfio-pci by a process that died — except the one at skip, and
// returns their addresses.
func ReleaseStale(skip string) ([]string, error) {
	recs, err := Records()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, r := range recs {
		if r.Address == skip {
			continue
		}
		if holders, err := Holders(r.Address); err != nil || len(holders) > 0 || alive(r.PID) {
			continue
		}
		if _, err := os.Stat(filepath.Join(pciDevices, r.Address)); err != nil {
			os.Remove(recordPath(r.Address)) // the device is gone
			continue
		}
		if err := release(r); err != nil {
			errs = append(errs, fmt.Errorf("give %s back to %s: %w", r.Address, orNone(r.Driver), err))
			continue
		}
		done = append(done, r.Address)
	}
	return done, errors.Join(errs...)
}

// alive says whether a process other than this one runs as pid (one that
// is binding a device holds no VFIO group yet).
func alive(pid int) bool {
	if pid == os.Getpid() || pid <= 0 {
		return false
	}
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}
