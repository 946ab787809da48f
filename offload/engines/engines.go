// Package engines builds offload engines by name: the one registry that the
// CLI, gateway configs and scenarios use, so an engine is named the same way
// everywhere ("cpu", "ring", "emul:ubsec-2014", …).
package engines

import (
	"fmt"
	"strings"

	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/aesni"
	"github.com/espgw/espgw/offload/cpu"
)

// Options tune the engines that have knobs; zero values mean the engine's
// defaults.
type Options struct {
	Workers     int // goroutines standing in for the card's units
	QueueDepth  int // request queue length (ubsec: 60)
	Aggregation int // ops per command record (ubsec: 5)
}

// Names lists the engines New knows, profiles spelled out.
func Names() []string {
	return []string{cpu.Name, aesni.Name}
}

// New builds the engine called name.
func New(name string, opts Options) (offload.Engine, error) {
	base, _, _ := strings.Cut(name, ":")
	switch base {
	case cpu.Name:
		return cpu.New(), nil
	case aesni.Name:
		return aesni.New(), nil
	}
	return nil, fmt.Errorf("unknown offload engine %q (known: %s)", name, strings.Join(Names(), ", "))
}
