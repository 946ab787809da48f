package gateway

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Outer fragments are reassembled by the host kernel before any socket
// sees them (ip_local_deliver and ipv6_frag_rcv run ahead of raw and UDP
// delivery alike), per network namespace, in memory bounded by
// net.ipv4.ipfrag_high_thresh (net.ipv6.ip6frag_high_thresh) and with a
// timeout of ipfrag_time (ip6frag_time). The gateway reads the kernel's
// counters for its namespace into its stats, and can set the bounds
// (Config.Reassembly).

// ReassemblyStats are the kernel's reassembly counters and bounds in the
// gateway's network namespace.
type ReassemblyStats struct {
	IPv4 ReassemblyCounters `json:"ipv4"`
	IPv6 ReassemblyCounters `json:"ipv6"`
}

// ReassemblyCounters are one family's (RFC 4293 ipSystemStats names).
type ReassemblyCounters struct {
	Reqds   uint64 `json:"reqds"`   // fragments received that needed reassembly
	OKs     uint64 `json:"oks"`     // packets reassembled
	Fails   uint64 `json:"fails"`   // reassembly failures (overlaps, memory, …)
	Timeout uint64 `json:"timeout"` // packets whose fragments did not all come in time
	// Memory and Timeout are the bounds: bytes held at most, seconds.
	Memory  uint64 `json:"memory"`
	Seconds uint64 `json:"seconds"`
}

// ReadReassembly reads the counters of the calling thread's namespace.
func ReadReassembly() (ReassemblyStats, error) {
	// thread-self: /proc/net is the thread group leader's namespace,
	// and a thread may have entered another (nsrun).
	dir := "/proc/thread-self/net/"
	if _, err := os.Stat(dir); err != nil {
		dir = "/proc/net/"
	}
	snmp, err := os.ReadFile(dir + "snmp")
	if err != nil {
		return ReassemblyStats{}, fmt.Errorf("read IPv4 reassembly counters: %w", err)
	}
	snmp6, _ := os.ReadFile(dir + "snmp6") // absent without IPv6
	r := ParseReassembly(snmp, snmp6)
	r.IPv4.Memory, _ = readSysctl("net/ipv4/ipfrag_high_thresh")
	r.IPv4.Seconds, _ = readSysctl("net/ipv4/ipfrag_time")
	r.IPv6.Memory, _ = readSysctl("net/ipv6/ip6frag_high_thresh")
	r.IPv6.Seconds, _ = readSysctl("net/ipv6/ip6frag_time")
	return r, nil
}

// ParseReassembly reads the reassembly counters out of the contents of
// /proc/net/snmp and /proc/net/snmp6 (any host's: a kernel peer's too).
func ParseReassembly(snmp, snmp6 []byte) ReassemblyStats {
	c := ParseSNMP(snmp, snmp6)
	return ReassemblyStats{
		IPv4: ReassemblyCounters{Reqds: c["IpReasmReqds"], OKs: c["IpReasmOKs"], Fails: c["IpReasmFails"], Timeout: c["IpReasmTimeout"]},
		IPv6: ReassemblyCounters{Reqds: c["Ip6ReasmReqds"], OKs: c["Ip6ReasmOKs"], Fails: c["Ip6ReasmFails"], Timeout: c["Ip6ReasmTimeout"]},
	}
}

// ParseSNMP reads the contents of /proc/net/snmp (per protocol a line of
// names, then one of values, each led by "Proto:") and /proc/net/snmp6 (a
// name and a value a line) into one map, keyed as snmp6 names its
// counters: protocol and counter, "IpReasmOKs", "UdpRcvbufErrors",
// "Ip6ReasmOKs".
func ParseSNMP(snmp, snmp6 []byte) map[string]uint64 {
	out := map[string]uint64{}
	names := map[string][]string{}
	for _, line := range strings.Split(string(snmp), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		proto := strings.TrimSuffix(f[0], ":")
		if names[proto] == nil {
			names[proto] = f[1:]
			continue
		}
		for i, v := range f[1:] {
			if i < len(names[proto]) {
				out[proto+names[proto][i]], _ = strconv.ParseUint(v, 10, 64)
			}
		}
	}
	for _, line := range strings.Split(string(snmp6), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			out[f[0]], _ = strconv.ParseUint(f[1], 10, 64)
		}
	}
	return out
}

func readSysctl(name string) (uint64, error) {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// ReassemblyLimits bound the kernel's reassembly of outer fragments in the
// gateway's namespace; zero fields leave the kernel's setting.
type ReassemblyLimits struct {
	Memory  uint64        // bytes of fragments held at most, per family
	Timeout time.Duration // how long a packet's fragments may take
}

// Apply writes the limits as sysctls of the calling thread's namespace.
func (l ReassemblyLimits) Apply() error {
	var errs []error
	write := func(name string, v uint64) {
		if err := os.WriteFile("/proc/sys/"+name, []byte(strconv.FormatUint(v, 10)), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("set %s: %w", strings.ReplaceAll(name, "/", "."), err))
		}
	}
	if l.Memory > 0 {
		for _, fam := range []string{"net/ipv4/ipfrag", "net/ipv6/ip6frag"} {
			// The low mark must stay below the high one: order the writes
			// so each one is valid against the other's current value.
			low := l.Memory * 3 / 4
			cur, _ := readSysctl(fam + "_high_thresh")
			if l.Memory >= cur {
				write(fam+"_high_thresh", l.Memory)
				write(fam+"_low_thresh", low)
			} else {
				write(fam+"_low_thresh", low)
				write(fam+"_high_thresh", l.Memory)
			}
		}
	}
	if l.Timeout > 0 {
		s := uint64(max(l.Timeout.Round(time.Second)/time.Second, 1))
		write("net/ipv4/ipfrag_time", s)
		write("net/ipv6/ip6frag_time", s)
	}
	return errors.Join(errs...)
}
