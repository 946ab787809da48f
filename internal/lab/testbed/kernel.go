package testbed

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
)

// SNMP reads the namespace's SNMP counters (gateway.ParseSNMP).
func SNMP(ns *netns.Namespace) (map[string]uint64, error) {
	var snmp, snmp6 []byte
	err := ns.Do(func() (err error) {
		if snmp, err = os.ReadFile("/proc/thread-self/net/snmp"); err != nil {
			return err
		}
		snmp6, err = os.ReadFile("/proc/thread-self/net/snmp6")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("SNMP counters of %s: %w", ns.Short(), err)
	}
	return gateway.ParseSNMP(snmp, snmp6), nil
}

// SNMPErrors keeps of the SNMP counters c those that name errors,
// discards or failures, and returns c.
func SNMPErrors(c map[string]uint64) map[string]uint64 {
	for k := range c {
		if !strings.Contains(k, "Err") && !strings.Contains(k, "Discard") && !strings.Contains(k, "Fail") && !strings.Contains(k, "NoPorts") &&
			!strings.Contains(k, "Trunc") && !strings.Contains(k, "NoRoute") && !strings.Contains(k, "Unknown") && !strings.Contains(k, "Reasm") {
			delete(c, k)
		}
	}
	return c
}

// KernelLosses are the counters of the places a namespace's kernel drops
// packets, by "namespace device.rx_dropped|tx_dropped" and "namespace
// SNMP-counter" (UdpRcvbufErrors, IpOutDiscards, …): where packets go
// that no process counts.
type KernelLosses map[string]uint64

// ReadKernelLosses reads the loss counters of the namespaces.
func ReadKernelLosses(nss ...*netns.Namespace) (KernelLosses, error) {
	out := KernelLosses{}
	for _, ns := range nss {
		snmp, err := SNMP(ns)
		if err != nil {
			return nil, err
		}
		for k, v := range SNMPErrors(snmp) {
			out[ns.Short()+" "+k] = v
		}
		links, err := ns.Netlink().LinkList()
		if err != nil {
			return nil, fmt.Errorf("links of %s: %w", ns.Short(), err)
		}
		for _, l := range links {
			if st := l.Attrs().Statistics; st != nil {
				out[ns.Short()+" "+l.Attrs().Name+".rx_dropped"] = st.RxDropped
				out[ns.Short()+" "+l.Attrs().Name+".tx_dropped"] = st.TxDropped
			}
		}
	}
	return out, nil
}

// Since is what grew from before to k, by counter.
func (k KernelLosses) Since(before KernelLosses) KernelLosses {
	out := KernelLosses{}
	for name, v := range k {
		if v > before[name] {
			out[name] = v - before[name]
		}
	}
	return out
}

// String lists the counters, sorted: "gw1 esp0.tx_dropped 40, …", or
// "none".
func (k KernelLosses) String() string {
	if len(k) == 0 {
		return "none"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(k)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, k[name]))
	}
	return strings.Join(parts, ", ")
}
