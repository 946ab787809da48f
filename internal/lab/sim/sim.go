// Package sim is the lab's engine catalog: the product's engines and the
// emulated cards (ring, emul:PROFILE).
//
// The emulated cards live under sim so that the product never links them;
// commands that accept their names are handed an Engines catalog.
package sim

import (
	"errors"
	"fmt"
	"strings"

	"github.com/espgw/espgw/internal/lab/sim/emul"
	"github.com/espgw/espgw/internal/lab/sim/ring"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
)

// Engines is the product's catalog with the emulated cards added.
type Engines struct {
	// ModelledTime runs an emulated card's model on its own clock, apart
	// from the host's load (emul.Options.Virtual); for measurements.
	ModelledTime bool
}

var _ engines.Catalog = Engines{}

// Names lists the software engines, then the device engines.
func (e Engines) Names() []string {
	return append(e.Software(), engines.Product{}.Devices()...)
}

// Software lists the engines that run on any machine: the CPU's
// instructions and the models. Tests that go through every engine take
// these; the device engines are proven where their device is
// (internal/lab/cryptoguest).
func (Engines) Software() []string {
	names := append(engines.Product{}.Software(), ring.Name)
	for _, p := range emul.ProfileNames() {
		names = append(names, emul.Prefix+":"+p)
	}
	return names
}

// Check reports whether Open knows name.
func (e Engines) Check(name string) error { return engines.Check(name, e.Names()) }

// Open builds the engine called name: an emulated card here, any other
// through the product's catalog.
func (e Engines) Open(name string, opts engines.Options) (offload.Engine, error) {
	base, profile, hasProfile := strings.Cut(name, ":")
	switch {
	case base == ring.Name && !hasProfile:
		return ring.New(ring.Config{Units: opts.Workers, QueueDepth: opts.QueueDepth, Aggregation: opts.Aggregation}), nil
	case base == emul.Prefix:
		eng, err := emul.New(profile, emul.Options{QueueDepth: opts.QueueDepth, Aggregation: opts.Aggregation, Virtual: e.ModelledTime})
		if err != nil {
			return nil, fmt.Errorf("offload engine %q: %w", name, err)
		}
		return eng, nil
	}
	eng, err := engines.Product{}.Open(name, opts)
	if errors.Is(err, engines.ErrUnknown) {
		return nil, engines.Unknown(name, e.Names())
	}
	return eng, err
}
