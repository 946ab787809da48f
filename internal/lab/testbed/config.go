package testbed

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// GatewayConfig is a gateway's config file as the lab writes it, for a Bed
// and for the beds with another far side. A zero field is left out, so the
// gateway's default holds.
type GatewayConfig struct {
	Local, Peer       netip.Addr
	Locals            []netip.Addr // local: as a list, in place of Local
	Engine, WanIO     string
	XDPMode           string // xdp-mode (empty: the gateway's default, auto)
	Pprof             string // the Go profiler's address (empty: off)
	Metrics           string
	TUN               string // the TUN device's name
	TUNMTU            int
	TUNAddrs, Routes  []netip.Prefix
	NoOffloads        bool
	OuterMTU, Workers int
	SAFile, StateDir  string // relative to the config's folder
	Control           string
	// Extra is YAML appended as it is (such as an ike: section).
	Extra string
}

// Write writes the config to path, the owner's only.
func (c GatewayConfig) Write(path string) error {
	if err := os.WriteFile(path, []byte(c.String()), 0o600); err != nil {
		return fmt.Errorf("write gateway config: %w", err)
	}
	return nil
}

// String is the config file's YAML.
func (c GatewayConfig) String() string {
	var b strings.Builder
	line := func(indent, key string, v any, set bool) {
		if set {
			fmt.Fprintf(&b, "%s%s: %v\n", indent, key, v)
		}
	}
	list := func(ps []netip.Prefix) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.String()
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	if len(c.Locals) > 0 {
		s := make([]string, len(c.Locals))
		for i, a := range c.Locals {
			s[i] = a.String()
		}
		line("", "local", "["+strings.Join(s, ", ")+"]", true)
	} else {
		line("", "local", c.Local, c.Local.IsValid())
	}
	line("", "peer", c.Peer, c.Peer.IsValid())
	line("", "engine", c.Engine, c.Engine != "")
	line("", "wan-io", c.WanIO, c.WanIO != "")
	line("", "xdp-mode", c.XDPMode, c.XDPMode != "")
	line("", "pprof", c.Pprof, c.Pprof != "")
	line("", "metrics", c.Metrics, c.Metrics != "")
	line("", "outer-mtu", c.OuterMTU, c.OuterMTU > 0)
	line("", "workers", c.Workers, c.Workers > 0)
	b.WriteString("tun:\n")
	line("  ", "name", c.TUN, c.TUN != "")
	line("  ", "mtu", c.TUNMTU, c.TUNMTU > 0)
	line("  ", "addresses", list(c.TUNAddrs), len(c.TUNAddrs) > 0)
	line("  ", "routes", list(c.Routes), len(c.Routes) > 0)
	line("  ", "offloads", false, c.NoOffloads)
	line("", "sa-file", c.SAFile, c.SAFile != "")
	line("", "state-dir", c.StateDir, c.StateDir != "")
	line("", "control", c.Control, c.Control != "")
	b.WriteString(c.Extra)
	return b.String()
}
