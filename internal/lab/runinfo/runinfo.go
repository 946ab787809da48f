// Package runinfo describes the machine and build a measurement ran on.
package runinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is where a run ran: enough to tell whether two runs are
// comparable.
type Machine struct {
	Host    string `json:"host"`
	Kernel  string `json:"kernel"`
	CPU     string `json:"cpu_model"`
	CPUs    int    `json:"cpus"`
	LoadAvg string `json:"loadavg"` // /proc/loadavg when the run started
	Version string `json:"espgw_version"`
	Go      string `json:"go_version"`
}

// Describe reads this machine and this build.
func Describe() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Version: Version(), LoadAvg: LoadAvg()}
	m.Host, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	m.CPU = cpuModel()
	return m
}

// String is m on one line, for the text reports.
func (m Machine) String() string {
	return fmt.Sprintf("%s, kernel %s, %s (%d CPUs), espgw %s, %s", m.Host, m.Kernel, m.CPU, m.CPUs, m.Version, m.Go)
}

// SameMachine reports whether m and o describe the same host and hardware.
func (m Machine) SameMachine(o Machine) bool {
	return m.Host == o.Host && m.CPU == o.CPU && m.CPUs == o.CPUs
}

// Version is espgw's module version and VCS revision, as the build
// recorded them ("(devel)" when it recorded none).
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		v += " " + rev[:min(12, len(rev))] + dirty
	}
	return v
}

// LoadAvg is /proc/loadavg: how busy the machine is ("" where unknown).
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
