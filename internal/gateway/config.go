package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/errlist"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/internal/yamlwalk"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
	"github.com/espgw/espgw/tun"
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
	// Engine names the offload engine, one Catalog knows.
	Engine string
	// Catalog is the engines the configuration may name; Start opens
	// Engine from it.
	Catalog engines.Catalog
	Workers int
	Batch   int
	// Inline is gateway.Options.Inline (0: the default; -1: never).
	Inline int
	// Metrics is the address of the /metrics and /stats endpoint
	// (default 127.0.0.1:9478; "off" disables it).
	Metrics string
	// Pprof is the address of the Go profiler (/debug/pprof/), off unless
	// set: it is served apart from the metrics, without authentication.
	Pprof string
	// StateDir keeps outbound sequence reservations across restarts
	// (default DefaultStateRoot/<namespace>; StateDirOff turns them off).
	StateDir string
	// SequenceSkip is Options.SequenceSkip: not a setting of the file but
	// of the command that starts the gateway (espgw run --sequence-skip).
	SequenceSkip uint64
	// Control is the path of the control socket (espgw sa|policy …);
	// empty: none.
	Control string
	// PMTUExpiry is how long a path MTU learned from ICMP holds (0: the
	// default, DefaultPMTUExpiry).
	PMTUExpiry time.Duration
	// Reassembly bounds the kernel's reassembly of outer fragments in the
	// gateway's namespace (zero: the kernel's settings).
	Reassembly ReassemblyLimits
	// WanIO is how raw ESP crosses the WAN interface: WanIOSocket (raw
	// sockets), WanIOXDP (AF_XDP, an error where it cannot attach) or
	// WanIOAuto (AF_XDP where it can attach, raw sockets elsewhere, saying
	// why). UDP-encapsulated ESP always uses its socket.
	WanIO WanIO
	// XDPMode is how the AF_XDP program attaches when wan-io puts raw ESP
	// on it (xdp.ModeAuto, the default: the driver's best, generic on
	// veth; xdp.ModeNative; xdp.ModeGeneric).
	XDPMode xdp.Mode
	// NATKeepalive is the nat-keepalive setting: auto (the default) sends
	// RFC 3948 keepalives every DefaultNATKeepalive on UDP-encapsulated
	// SAs from a local address behind a NAT (BehindNAT), a duration on
	// every UDP-encapsulated SA at that interval, off none.
	NATKeepalive NATKeepalive

	// SAFile and SetkeyFile name where the SAs come from, when not inline.
	SAFile, SetkeyFile string
	SAs                []*sa.SA
	SPD                []sa.Policy
	// IKE, when set, is the ike: section: connections whose CHILD_SAs the
	// gateway negotiates and puts in force itself.
	IKE *IKEConfig
}

// TUNConfig is the inner device.
type TUNConfig struct {
	Name      string
	Addresses []netip.Prefix
	Routes    []netip.Prefix
	MTU       int  // 0: computed
	Offloads  bool // vnet-hdr GSO/GRO (default on)
	Queue     int  // transmit queue in packets (0: tun.DefaultQueueLen)
}

// WanIO is the wan-io setting: how raw ESP crosses the WAN interface.
type WanIO string

// The wan-io settings.
const (
	WanIOAuto   WanIO = "auto"
	WanIOXDP    WanIO = "xdp"
	WanIOSocket WanIO = "socket"
)

// DefaultMetrics is where the gateway serves /metrics unless told otherwise.
const DefaultMetrics = "127.0.0.1:9478"

// LoadConfig reads and validates a gateway configuration file, and the SA
// file it names, if any; the engine it names must be one of cat's.
func LoadConfig(path string, cat engines.Catalog) (*Config, error) {
	data, err := sa.ReadFileAtMost(path, sa.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read gateway config: %w", err)
	}
	return ParseConfig(path, data, cat)
}

// configSettings are the top-level settings of a gateway configuration.
var configSettings = []string{"local", "peer", "tun", "outer-mtu", "engine", "workers", "batch", "inline", "metrics", "pprof", "sa", "spd", "sa-file", "setkey-file", "state-dir", "pmtu-expires", "reassembly", "control", "wan-io", "xdp-mode", "nat-keepalive", "ike"}

// ParseConfig reads a gateway configuration; relative SA file names are
// taken from the config file's directory. A setting given twice, a
// mapping where a value belongs and a configuration that can never carry
// a packet (a TUN MTU or tfc-pad the outer MTU cannot carry) are errors.
// Errors quote what the file says only through package secret: a key
// pasted into the wrong setting is never printed. The engine the
// configuration names must be one of cat's (nil: engines.Product).
func ParseConfig(path string, data []byte, cat engines.Catalog) (*Config, error) {
	if cat == nil {
		cat = engines.Product{}
	}
	if err := sa.CheckYAMLNodes(path, data, sa.MaxYAMLNodes); err != nil {
		return nil, err
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: want a mapping of gateway settings (local, tun, sa-file, …)", path)
		}
		return nil, fmt.Errorf("%s: %s", path, secret.Scrub(err.Error()))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("%s:%d: more than one YAML document", path, extra.Line)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping of gateway settings", path)
	}
	c := &Config{File: path, OuterMTU: 1500, WanIO: WanIOSocket, XDPMode: xdp.ModeAuto, Engine: "cpu", Catalog: cat, Metrics: DefaultMetrics, NATKeepalive: NATKeepalive{Every: DefaultNATKeepalive}, TUN: TUNConfig{Name: "espgw0", Offloads: true}}
	p := &cfgParser{file: path}
	var saNode, spdNode, ikeNode *yaml.Node
	m := doc.Content[0]
	p.each(m, "", configSettings, func(k, v *yaml.Node) {
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
			if name, ok := p.scalar(v, "engine"); ok {
				c.Engine = name
				if err := cat.Check(name); err != nil {
					p.failf(v, "engine", "%s: %v", secret.Word(name, cat.Names()...), err)
				}
			}
		case "workers":
			c.Workers = p.int(v, "workers", 1, 256)
		case "batch":
			c.Batch = p.int(v, "batch", 1, 1024)
		case "inline":
			c.Inline = p.int(v, "inline", -1, 1024)
		case "metrics":
			c.Metrics = p.listenAddr(v, "metrics", true)
		case "pprof":
			c.Pprof = p.listenAddr(v, "pprof", true)
		case "ike":
			ikeNode = v
		case "sa":
			saNode = v
		case "spd":
			spdNode = v
		case "state-dir":
			c.StateDir, _ = p.scalar(v, "state-dir")
		case "pmtu-expires":
			if s, ok := p.scalar(v, "pmtu-expires"); ok {
				d, err := time.ParseDuration(s)
				if err != nil || d < time.Second || d > 24*time.Hour {
					p.failf(v, "pmtu-expires", "%s: want a duration from 1s to 24h (like 10m)", secret.Number(s))
				}
				c.PMTUExpiry = d
			}
		case "reassembly":
			p.reassembly(v, &c.Reassembly)
		case "wan-io":
			if s, ok := p.scalar(v, "wan-io"); ok {
				switch WanIO(s) {
				case WanIOAuto, WanIOXDP, WanIOSocket:
					c.WanIO = WanIO(s)
				default:
					p.failf(v, "wan-io", "%s: want auto, xdp or socket", secret.Word(s, "auto", "xdp", "socket"))
				}
			}
		case "xdp-mode":
			if s, ok := p.scalar(v, "xdp-mode"); ok {
				switch xdp.Mode(s) {
				case xdp.ModeAuto, xdp.ModeNative, xdp.ModeGeneric:
					c.XDPMode = xdp.Mode(s)
				default:
					p.failf(v, "xdp-mode", "%s: want auto, native or generic", secret.Word(s, "auto", "native", "generic"))
				}
			}
		case "nat-keepalive":
			if s, ok := p.scalar(v, "nat-keepalive"); ok {
				switch s {
				case "auto":
				case "off":
					c.NATKeepalive = NATKeepalive{}
				default:
					d, err := time.ParseDuration(s)
					if err != nil || d < time.Second || d > time.Hour {
						p.failf(v, "nat-keepalive", "%s: want auto, off or a duration from 1s to 1h (like 20s)", secret.Word(s, "auto", "off"))
					}
					c.NATKeepalive = NATKeepalive{Every: d, All: true}
				}
			}
		case "control":
			if c.Control, _ = p.scalar(v, "control"); c.Control == "" {
				p.failf(v, "control", "want the path of the control socket")
			}
		case "sa-file":
			c.SAFile, _ = p.scalar(v, "sa-file")
		case "setkey-file":
			c.SetkeyFile, _ = p.scalar(v, "setkey-file")
		}
	})
	if len(c.Local) == 0 {
		p.failf(m, "local", "missing: the gateway's outer address")
	}
	sources := 0
	for _, set := range []bool{saNode != nil, c.SAFile != "", c.SetkeyFile != ""} {
		if set {
			sources++
		}
	}
	if ikeNode != nil && len(c.Local) > 0 {
		c.IKE = p.ike(ikeNode, c)
	}
	switch {
	case sources == 0 && ikeNode != nil:
	case sources != 1:
		p.failf(m, "sa", "give exactly one of sa:, sa-file: or setkey-file: (got %d), or ike:", sources)
	}
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	if sources > 0 {
		if err := c.loadSAs(saNode, spdNode); err != nil {
			return nil, err
		}
	}
	if err := c.checkMTU(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkMTU refuses what the outer MTU can never carry: a tfc-pad that pads
// every packet beyond it (every packet a send error). A TUN MTU above what
// an SA fits into outer-mtu is allowed: the larger inner packets get ICMP
// "fragmentation needed" / "packet too big" with the MTU that fits, or,
// IPv4 without DF, leave as outer fragments (header.go).
func (c *Config) checkMTU() error { return c.CheckSAs(c.SAs) }

// CheckSAs refuses SAs this gateway could never send with (see checkMTU):
// the file loader's check, which the control socket's additions get too.
func (c *Config) CheckSAs(sas []*sa.SA) error {
	var errs errlist.List
	for _, s := range sas {
		if !slices.Contains(c.Local, s.Src) {
			continue
		}
		inner, err := InnerMTU(c.OuterMTU, s)
		if err != nil {
			errs.Add(fmt.Errorf("%s: outer-mtu %d: SA %#x: %w", c.File, c.OuterMTU, s.SPI, err))
			continue
		}
		if s.Mode == sa.Tunnel && s.TFCPad > inner {
			errs.Add(fmt.Errorf("%s: SA %#x: tfc-pad %d pads every packet beyond the %d bytes outer-mtu %d carries (every packet would fail to send); at most %d", c.File, s.SPI, s.TFCPad, inner, c.OuterMTU, inner))
		}
	}
	return errs.Err()
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
func (c *Config) Reload() (*Config, error) { return LoadConfig(c.File, c.Catalog) }

// ControlPath is where the control socket is, empty when there is none.
func (c *Config) ControlPath() string {
	if c.Control == "" {
		return ""
	}
	return c.rel(c.Control)
}

func (c *Config) rel(name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(filepath.Dir(c.File), name)
}

type cfgParser struct {
	file string
	errs errlist.List
	walk yamlwalk.Walker
}

func (p *cfgParser) failf(n *yaml.Node, field, format string, args ...any) {
	if field == "" {
		p.errs.Add(fmt.Errorf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...)))
		return
	}
	p.errs.Add(fmt.Errorf("%s:%d: %s: %s", p.file, n.Line, field, fmt.Sprintf(format, args...)))
}

// each calls fn for every setting of the mapping m, after refusing
// unknown settings and settings given twice (YAML's last-wins would
// silently drop the first).
func (p *cfgParser) each(m *yaml.Node, prefix string, known []string, fn func(k, v *yaml.Node)) {
	fs, probs := p.walk.Fields(m, known, yamlwalk.Options{Noun: "setting", Prefix: prefix})
	for _, pr := range probs {
		p.failf(pr.Node, pr.Field, "%s", pr.Msg)
	}
	for _, f := range fs {
		fn(f.Key, f.Val)
	}
}

func kindName(n *yaml.Node) string { return yamlwalk.KindName(n) }

// scalar is a setting's single value; a mapping or a list is an error.
func (p *cfgParser) scalar(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.failf(n, field, "want a single value, got a %s", kindName(n))
		return "", false
	}
	return n.Value, true
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
		s, ok := p.scalar(v, field)
		if !ok {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			p.failf(v, field, "%s is not an IP address", secret.Number(s))
			continue
		}
		out = append(out, a)
	}
	return out
}

func (p *cfgParser) prefixes(n *yaml.Node, field string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range p.list(n) {
		s, ok := p.scalar(v, field)
		if !ok {
			continue
		}
		pr, err := netip.ParsePrefix(s)
		if err != nil {
			p.failf(v, field, "%s is not an address/prefix-length", secret.Number(s))
			continue
		}
		out = append(out, pr)
	}
	return out
}

func (p *cfgParser) int(n *yaml.Node, field string, lo, hi int) int {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		p.failf(n, field, "%s is not a whole number in %d…%d", secret.Number(s), lo, hi)
	}
	return v
}

// reassembly reads reassembly: {memory: 4M, timeout: 30s}.
func (p *cfgParser) reassembly(n *yaml.Node, r *ReassemblyLimits) {
	if n.Kind != yaml.MappingNode {
		p.failf(n, "reassembly", "want a mapping (memory, timeout)")
		return
	}
	p.each(n, "reassembly.", []string{"memory", "timeout"}, func(k, v *yaml.Node) {
		s, ok := p.scalar(v, "reassembly."+k.Value)
		if !ok {
			return
		}
		switch k.Value {
		case "memory":
			num, mult := strings.ToUpper(s), uint64(1)
			for suffix, m := range map[string]uint64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30} {
				if strings.HasSuffix(num, suffix) {
					num, mult = strings.TrimSuffix(num, suffix), m
				}
			}
			b, err := strconv.ParseUint(num, 10, 64)
			if err != nil || b > 1<<30 || b*mult < 64<<10 || b*mult > 1<<30 {
				p.failf(v, "reassembly.memory", "%s: want bytes from 64K to 1G (like 4M)", secret.Number(s))
			}
			r.Memory = b * mult
		case "timeout":
			d, err := time.ParseDuration(s)
			if err != nil || d < time.Second || d > 10*time.Minute {
				p.failf(v, "reassembly.timeout", "%s: want a duration from 1s to 10m (like 30s)", secret.Number(s))
			}
			r.Timeout = d
		}
	})
}

// listenAddr reads host:port, or off when allowed.
func (p *cfgParser) listenAddr(n *yaml.Node, field string, offOK bool) string {
	s, ok := p.scalar(n, field)
	if !ok {
		return "off"
	}
	if offOK && (s == "off" || s == "") {
		return "off"
	}
	host, port, err := net.SplitHostPort(s)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err == nil && host != "" {
		if _, perr := netip.ParseAddr(host); perr != nil && host != "localhost" {
			err = errors.New("not a numeric address")
		}
	}
	if err != nil {
		p.failf(n, field, "%s: want ADDRESS:PORT (such as 127.0.0.1:9478) or off", secret.Number(s))
		return "off"
	}
	return s
}

func (p *cfgParser) tun(n *yaml.Node, t *TUNConfig) {
	if n.Kind != yaml.MappingNode {
		p.failf(n, "tun", "want a mapping (name, addresses, routes, mtu, offloads, queue)")
		return
	}
	p.each(n, "tun.", []string{"name", "addresses", "routes", "mtu", "offloads", "queue"}, func(k, v *yaml.Node) {
		switch k.Value {
		case "name":
			name, ok := p.scalar(v, "tun.name")
			if ok && (len(name) == 0 || len(name) > 15 || strings.ContainsAny(name, "/ \t\n%")) {
				p.failf(v, "tun.name", "%s: want 1…15 characters, no / or spaces", secret.Word(name))
			}
			t.Name = name
		case "addresses":
			t.Addresses = p.prefixes(v, "tun.addresses")
		case "routes":
			t.Routes = p.prefixes(v, "tun.routes")
		case "mtu":
			if v.Kind != yaml.ScalarNode || v.Value != "auto" {
				t.MTU = p.int(v, "tun.mtu", 576, 65535)
			}
		case "queue":
			t.Queue = p.int(v, "tun.queue", 1, tun.MaxQueueLen)
		case "offloads":
			s, _ := p.scalar(v, "tun.offloads")
			t.Offloads = slices.Contains([]string{"true", "on", "yes"}, s)
			if !t.Offloads && !slices.Contains([]string{"false", "off", "no"}, s) {
				p.failf(v, "tun.offloads", "%s: want true or false", secret.Word(s, "true", "false", "on", "off", "yes", "no"))
			}
		}
	})
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
	check("tun.queue", c.TUN.Queue == next.TUN.Queue)
	check("outer-mtu", c.OuterMTU == next.OuterMTU)
	check("engine", c.Engine == next.Engine)
	check("workers", c.Workers == next.Workers)
	check("batch", c.Batch == next.Batch)
	check("inline", c.Inline == next.Inline)
	check("metrics", c.Metrics == next.Metrics)
	check("state-dir", c.StateDir == next.StateDir)
	check("pmtu-expires", c.PMTUExpiry == next.PMTUExpiry)
	check("reassembly", c.Reassembly == next.Reassembly)
	check("control", c.Control == next.Control)
	check("wan-io", c.WanIO == next.WanIO)
	check("xdp-mode", c.XDPMode == next.XDPMode)
	check("nat-keepalive", c.NATKeepalive == next.NATKeepalive)
	check("ike", c.IKE.same(next.IKE))
	if len(changed) > 0 {
		return fmt.Errorf("%s changed: restart the gateway to apply it (nothing was changed)", strings.Join(changed, ", "))
	}
	return nil
}
