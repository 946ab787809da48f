// Package engines opens the product's offload engines by name.
//
// Engines are named the same way everywhere: the CLI, gateway configs and
// scenarios ("cpu", "aesni", "afalg:DRIVER", "virtio:ADDRESS"). A Catalog is
// what callers are handed; Product is the product's own, and the lab wraps
// it to add its emulated cards.
package engines

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni"
	"github.com/espgw/espgw/offload/afalg"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/virtio"
)

// Options tune the engines that have knobs; zero values mean the engine's
// defaults.
type Options struct {
	Workers     int // goroutines or sockets standing in for the card's units
	QueueDepth  int // request queue length
	Aggregation int // ops per command record, for engines that group them
}

// Catalog names engines and opens them by name.
type Catalog interface {
	// Names lists the engines Open knows, profiles spelled out.
	Names() []string
	// Check reports whether Open knows name, without opening it.
	Check(name string) error
	// Open builds the engine called name.
	Open(name string, opts Options) (offload.Engine, error)
}

// Product is the catalog of the product's engines: cpu, aesni and the
// device engines afalg and virtio.
type Product struct{}

// Names lists the software engines, then the device engines.
func (Product) Names() []string { return append(Product{}.Software(), Product{}.Devices()...) }

// Software lists the engines that run on any machine.
func (Product) Software() []string { return []string{cpu.Name, aesni.Name} }

// Devices lists the engines that need a crypto device (or the kernel's
// door to one); each fails to open, saying why, on a machine without one.
// afalg also takes a driver: afalg:DRIVER.
func (Product) Devices() []string { return []string{afalg.Name, virtio.Name} }

// Check reports whether Open knows name.
func (p Product) Check(name string) error { return Check(name, p.Names()) }

// Open builds the engine called name.
func (p Product) Open(name string, opts Options) (offload.Engine, error) {
	base, arg, hasArg := strings.Cut(name, ":")
	switch {
	case base == cpu.Name && !hasArg:
		return cpu.New(), nil
	case base == aesni.Name && !hasArg:
		return aesni.New(), nil
	case base == afalg.Name:
		// afalg:DRIVER binds the kernel driver DRIVER; the engine's own
		// error says what the kernel lacks.
		if hasArg && arg == "" {
			return nil, fmt.Errorf("offload engine %q: name a kernel driver after the colon (see /proc/crypto), or use %q", name, afalg.Name)
		}
		e, err := afalg.New(afalg.Options{Driver: arg, Sockets: opts.Workers, QueueDepth: opts.QueueDepth})
		if err != nil {
			return nil, err
		}
		return e, nil
	case base == virtio.Name:
		// virtio:ADDRESS names the PCI device; plain virtio takes the first.
		if hasArg && !pciAddress.MatchString(arg) {
			return nil, fmt.Errorf("offload engine %s: %s is not a PCI address (want DDDD:BB:DD.F in hex, such as 0000:00:04.0; see lspci -D)", secret.Quote(name), secret.Quote(arg))
		}
		e, err := virtio.Open(virtio.Config{Device: arg, QueueSize: 2 * opts.QueueDepth})
		if err != nil {
			return nil, fmt.Errorf("offload engine %q: %w", name, err)
		}
		return e, nil
	}
	return nil, Unknown(name, p.Names())
}

// ErrUnknown is the error for an engine name a catalog does not know.
var ErrUnknown = errors.New("unknown offload engine")

// Unknown is ErrUnknown for name, listing the names known.
func Unknown(name string, known []string) error {
	return fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(known, ", "))
}

// Check reports whether name is one of known, or a known base name with an
// argument of its own (such as a driver name). Configuration files are
// checked with it at load, so an unknown engine is refused before anything
// runs.
func Check(name string, known []string) error {
	if slices.Contains(known, name) {
		return nil
	}
	if base, _, ok := strings.Cut(name, ":"); ok && slices.Contains(known, base) {
		return nil
	}
	return fmt.Errorf("%w (known: %s)", ErrUnknown, strings.Join(known, ", "))
}

// pciAddress is a PCI address as sysfs names devices: domain, bus, device
// (0..1f) and function (0..7), in lower-case hex.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$`)
