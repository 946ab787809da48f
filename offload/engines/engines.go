// Package engines builds offload engines by name: the one registry that the
// CLI, gateway configs and scenarios use, so an engine is named the same way
// everywhere ("cpu", "ring", "emul:ubsec-2014", …).
package engines

import (
	"fmt"
	"github.com/espgw/espgw/internal/secret"
	"regexp"
	"strings"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni"
	"github.com/espgw/espgw/offload/afalg"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/offload/emul"
	"github.com/espgw/espgw/offload/ring"
	"github.com/espgw/espgw/offload/virtio"
)

// Options tune the engines that have knobs; zero values mean the engine's
// defaults.
type Options struct {
	Workers     int // goroutines standing in for the card's units
	QueueDepth  int // request queue length (ubsec: 60)
	Aggregation int // ops per command record (ubsec: 5)
	// ModelledTime runs an emulated engine's model on its own clock, apart
	// from the host's load (emul.Options.Virtual); for measurements.
	ModelledTime bool
}

// Names lists the engines New knows, profiles spelled out.
func Names() []string {
	return append(Software(), Devices()...)
}

// Software lists the engines that run on any machine: the CPU's
// instructions and the models. Tests that go through every engine take
// these; the device engines are proven where their device is
// (internal/lab/cryptoguest).
func Software() []string {
	names := []string{cpu.Name, aesni.Name, ring.Name}
	for _, p := range emul.ProfileNames() {
		names = append(names, emul.Prefix+":"+p)
	}
	return names
}

// Devices lists the engines that need a crypto device (or the kernel's
// door to one), each of which fails to open, saying why, on a machine
// without one. afalg also takes a driver: afalg:DRIVER.
func Devices() []string { return []string{afalg.Name, virtio.Name} }

// New builds the engine called name.
func New(name string, opts Options) (offload.Engine, error) {
	base, profile, hasProfile := strings.Cut(name, ":")
	switch {
	case base == cpu.Name && !hasProfile:
		return cpu.New(), nil
	case base == ring.Name && !hasProfile:
		return ring.New(ring.Config{Units: opts.Workers, QueueDepth: opts.QueueDepth, Aggregation: opts.Aggregation}), nil
	case base == emul.Prefix:
		e, err := emul.New(profile, emul.Options{QueueDepth: opts.QueueDepth, Aggregation: opts.Aggregation, Virtual: opts.ModelledTime})
		if err != nil {
			return nil, fmt.Errorf("offload engine %q: %w", name, err)
		}
		return e, nil
	case base == aesni.Name && !hasProfile:
		return aesni.New(), nil
	case base == afalg.Name:
		// afalg:DRIVER binds the kernel driver DRIVER; the engine's own
		// error says what the kernel lacks.
		if hasProfile && profile == "" {
			return nil, fmt.Errorf("offload engine %q: name a kernel driver after the colon (see /proc/crypto), or use %q", name, afalg.Name)
		}
		e, err := afalg.New(afalg.Options{Driver: profile, Sockets: opts.Workers, QueueDepth: opts.QueueDepth})
		if err != nil {
			return nil, err
		}
		return e, nil
	case base == virtio.Name:
		// virtio:ADDRESS names the PCI device; plain virtio takes the first.
		if hasProfile && !pciAddress.MatchString(profile) {
			return nil, fmt.Errorf("offload engine %s: %s is not a PCI address (want DDDD:BB:DD.F in hex, such as 0000:00:04.0; see lspci -D)", secret.Quote(name), secret.Quote(profile))
		}
		e, err := virtio.Open(virtio.Config{Device: profile, QueueSize: 2 * opts.QueueDepth})
		if err != nil {
			return nil, fmt.Errorf("offload engine %q: %w", name, err)
		}
		return e, nil
	}
	return nil, fmt.Errorf("unknown offload engine %q (known: %s)", name, strings.Join(Names(), ", "))
}

// pciAddress is a PCI address as sysfs names devices: domain, bus, device
// (0..1f) and function (0..7), in lower-case hex.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$`)
