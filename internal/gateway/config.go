package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/sa"
)

// Config is a gateway configuration file (documented in the README).
type Config struct {
	File string

	// Local are this gateway's outer addresses; Peers the far gateways'.
	Local, Peers []netip.Addr
	TUN          TUNConfig
	// OuterMTU is the path MTU between the gateways (default 1500); the
	// TUN MTU is computed from it and the SAs' overhead.
	OuterMTU int
	Engine   string
	Workers  int
	Batch    int
	// Inline is gateway.Options.Inline (0: the default; -1: never).
	Inline int
	// Metrics is the address of the /metrics and /stats endpoint
	// (default 127.0.0.1:9478; "off" disables it).
	Metrics string
	// StateDir keeps outbound sequence reservations across restarts.
	StateDir string

	// SAFile and SetkeyFile name where the SAs come from, when not inline.
	SAFile, SetkeyFile string
	SAs                []*sa.SA
	SPD                []sa.Policy
}

// TUNConfig is the inner device.
type TUNConfig struct {
	Name      string
	Addresses []netip.Prefix
	Routes    []netip.Prefix
	MTU       int  // 0: computed
	Offloads  bool // vnet-hdr GSO/GRO (default on)
}

// DefaultMetrics is where the gateway serves /metrics unless told otherwise.
const DefaultMetrics = "127.0.0.1:9478"

// LoadConfig reads and validates a gateway configuration file, and the SA
// file it names, if any.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read gateway config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig reads a gateway configuration; relative SA file names are
// taken from the config file's directory.
func ParseConfig(path string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping of gateway settings", path)
	}
	c := &Config{File: path, OuterMTU: 1500, Engine: "cpu", Metrics: DefaultMetrics, TUN: TUNConfig{Name: "espgw0", Offloads: true}}
	p := &cfgParser{file: path}
	var saNode, spdNode *yaml.Node
	m := doc.Content[0]
	known := []string{"local", "peer", "tun", "outer-mtu", "engine", "workers", "batch", "inline", "metrics", "sa", "spd", "sa-file", "setkey-file", "state-dir"}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch k.Value {
		case "local":
			c.Local = p.addrs(v, "local")
		case "peer":
			c.Peers = p.addrs(v, "peer")
		case "tun":
			p.tun(v, &c.TUN)
		case "outer-mtu":
			c.OuterMTU = p.int(v, "outer-mtu", 576, 65535)
		case "engine":
			c.Engine = v.Value
		case "workers":
			c.Workers = p.int(v, "workers", 1, 256)
		case "batch":
			c.Batch = p.int(v, "batch", 1, 1024)
		case "inline":
			c.Inline = p.int(v, "inline", -1, 1024)
		case "metrics":
			c.Metrics = v.Value
		case "sa":
			saNode = v
		case "spd":
			spdNode = v
		case "state-dir":
			c.StateDir = v.Value
		case "sa-file":
			c.SAFile = v.Value
		case "setkey-file":
			c.SetkeyFile = v.Value
		default:
			p.failf(k, "", "unknown setting %q (want one of %s)", k.Value, strings.Join(known, ", "))
		}
	}
	if len(c.Local) == 0 {
		p.failf(m, "local", "missing: the gateway's outer address")
	}
	sources := 0
	for _, set := range []bool{saNode != nil, c.SAFile != "", c.SetkeyFile != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		p.failf(m, "sa", "give exactly one of sa:, sa-file: or setkey-file: (got %d)", sources)
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	if err := c.loadSAs(saNode, spdNode); err != nil {
		return nil, err
	}
	return c, nil
}

// loadSAs reads the SAs from wherever the config says they are.
func (c *Config) loadSAs(saNode, spdNode *yaml.Node) error {
	var set *sa.Config
	var err error
	switch {
	case saNode != nil:
		set, err = sa.ParseNodes(c.File, saNode, spdNode)
	case c.SAFile != "":
		set, err = sa.Load(c.rel(c.SAFile))
	default:
		set, err = sa.Load(c.rel(c.SetkeyFile))
	}
	if err != nil {
		return err
	}
	c.SAs, c.SPD = set.SAs, set.SPD
	if spdNode != nil && saNode == nil {
		extra, err := sa.ParseNodes(c.File, nil, spdNode)
		if err != nil {
			return err
		}
		c.SPD = append(c.SPD, extra.SPD...)
	}
	return nil
}

// Reload reads the SAs again from the same place: the config file itself
// for inline SAs.
func (c *Config) Reload() (*Config, error) { return LoadConfig(c.File) }

func (c *Config) rel(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(filepath.Dir(c.File), name)
}

type cfgParser struct {
	file string
	errs []error
}

func (p *cfgParser) failf(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: %s", p.file, n.Line, field, fmt.Sprintf(format, args...)))
}

func (p *cfgParser) list(n *yaml.Node) []*yaml.Node {
	if n.Kind == yaml.SequenceNode {
		return n.Content
	}
	return []*yaml.Node{n}
}

func (p *cfgParser) addrs(n *yaml.Node, field string) []netip.Addr {
	var out []netip.Addr
	for _, v := range p.list(n) {
		a, err := netip.ParseAddr(v.Value)
		if err != nil {
			p.failf(v, field, "%q is not an IP address", v.Value)
			continue
		}
		out = append(out, a)
	}
	return out
}

func (p *cfgParser) prefixes(n *yaml.Node, field string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range p.list(n) {
		pr, err := netip.ParsePrefix(v.Value)
		if err != nil {
			p.failf(v, field, "%q is not an address/prefix-length", v.Value)
			continue
		}
		out = append(out, pr)
	}
	return out
}

func (p *cfgParser) int(n *yaml.Node, field string, lo, hi int) int {
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < lo || v > hi {
		p.failf(n, field, "%q is not a whole number in %d…%d", n.Value, lo, hi)
	}
	return v
}

func (p *cfgParser) tun(n *yaml.Node, t *TUNConfig) {
	if n.Kind != yaml.MappingNode {
		p.failf(n, "tun", "want a mapping (name, addresses, routes, mtu, offloads)")
		return
	}
	known := []string{"name", "addresses", "routes", "mtu", "offloads"}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			if len(v.Value) == 0 || len(v.Value) > 15 {
				p.failf(v, "tun.name", "%q: want 1…15 characters", v.Value)
			}
			t.Name = v.Value
		case "addresses":
			t.Addresses = p.prefixes(v, "tun.addresses")
		case "routes":
			t.Routes = p.prefixes(v, "tun.routes")
		case "mtu":
			if v.Value != "auto" {
				t.MTU = p.int(v, "tun.mtu", 576, 65535)
			}
		case "offloads":
			t.Offloads = slices.Contains([]string{"true", "on", "yes"}, v.Value)
			if !t.Offloads && !slices.Contains([]string{"false", "off", "no"}, v.Value) {
				p.failf(v, "tun.offloads", "%q: want true or false", v.Value)
			}
		default:
			p.failf(k, "tun", "unknown setting %q (want one of %s)", k.Value, strings.Join(known, ", "))
		}
	}
}

// restartOnly reports the settings of next that differ from c and that only
// a restart applies: everything but the SAs, the policies, the TUN routes
// and the informational peer list.
func (c *Config) restartOnly(next *Config) error {
	var changed []string
	check := func(name string, same bool) {
		if !same {
			changed = append(changed, name)
		}
	}
	check("local", slices.Equal(c.Local, next.Local))
	check("tun.name", c.TUN.Name == next.TUN.Name)
	check("tun.addresses", slices.Equal(c.TUN.Addresses, next.TUN.Addresses))
	check("tun.mtu", c.TUN.MTU == next.TUN.MTU)
	check("tun.offloads", c.TUN.Offloads == next.TUN.Offloads)
	check("outer-mtu", c.OuterMTU == next.OuterMTU)
	check("engine", c.Engine == next.Engine)
	check("workers", c.Workers == next.Workers)
	check("batch", c.Batch == next.Batch)
	check("inline", c.Inline == next.Inline)
	check("metrics", c.Metrics == next.Metrics)
	check("state-dir", c.StateDir == next.StateDir)
	if len(changed) > 0 {
		return fmt.Errorf("%s changed: restart the gateway to apply it (nothing was changed)", strings.Join(changed, ", "))
	}
	return nil
}
