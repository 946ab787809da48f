package sha

import (
	"os"
	"runtime"
	"strings"
)

// hasSHAExtensions reads /proc/cpuinfo for the sha_ni flag on amd64 Linux
// in a build without the purego tag.
func hasSHAExtensions() bool {
	if runtime.GOARCH != "amd64" || purego {
		return false
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			return strings.Contains(line+" ", " sha_ni ")
		}
	}
	return false
}
