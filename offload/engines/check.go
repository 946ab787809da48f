package engines

import (
	"fmt"
	"slices"
	"strings"
)

// Check reports whether New knows the engine called name, without building
// it: a name in Names, or a known base name with an argument of its own
// (such as a driver name). Configuration files are checked with it at load,
// so an unknown engine is refused before anything runs.
func Check(name string) error {
	names := Names()
	if slices.Contains(names, name) {
		return nil
	}
	if base, _, ok := strings.Cut(name, ":"); ok && slices.Contains(names, base) {
		return nil
	}
	return fmt.Errorf("unknown offload engine (known: %s)", strings.Join(names, ", "))
}
