// Package scenario reads and runs espgw scenario files.
//
// It reads espgw scenario files and runs them: a topology, a pair of SAs, an
// engine per gateway, traffic steps (pcap replay, iperf3, ping sweeps,
// generated UDP flows), WAN impairments, and expectations that are checked
// against what the gateways, the WAN relay and the receiving hosts counted.
// The file format is documented in scenarios/README.md; this package owns
// parsing (with file, line and field in every error), the expectation
// language, the runner and the reports.
package scenario

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/lab/capture"
	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/labyaml"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/yamlwalk"
	"github.com/espgw/espgw/sa"
)

// Scenario is one runnable scenario: a file's contents with one combination
// of its matrix applied.
type Scenario struct {
	// File is the scenario file; Name its name, with the matrix values in
	// brackets when the file has a matrix.
	File        string `yaml:"-" json:"file"`
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description,omitempty"`
	// Peer is gw2: espgw (the default), or linux-xfrm, the Linux kernel's
	// own ESP (Debian's kernel under QEMU, see KernelPeer).
	Peer string `yaml:"peer" json:"peer,omitempty"`
	// External is the device under test when Peer is external.
	External *External     `yaml:"external" json:"external,omitempty"`
	Topology Topology      `yaml:"topology" json:"topology"`
	SA       SASpec        `yaml:"sa" json:"sa"`
	Engine   string        `yaml:"engine" json:"engine,omitempty"`
	Engines  Engines       `yaml:"engines" json:"engines"`
	Impair   Impairments   `yaml:"impair" json:"impair"`
	Traffic  Traffic       `yaml:"traffic" json:"traffic"`
	Expect   []Expectation `yaml:"-" json:"expect"`
	// Timeout bounds the whole run (default 2m).
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Matrix holds this run's matrix values (field path → value).
	Matrix map[string]string `yaml:"-" json:"matrix,omitempty"`

	ExpectNode yaml.Node  `yaml:"expect" json:"-"`
	MatrixNode yaml.Node  `yaml:"matrix" json:"-"`
	root       *yaml.Node // the document, for line numbers
	fsys       fs.FS      // where pcap files are read from (nil: the OS)
}

// The peers gw2 can be.
const (
	PeerEspgw     = "espgw"
	PeerLinuxXFRM = "linux-xfrm"
)

// Topology picks the address families; the namespaces are always the
// standard hostA — gw1 — wan — gw2 — hostB, with the wan namespace bridging
// the two gateways through the impairment relay.
type Topology struct {
	// Family sets Outer and Inner at once: ipv4, ipv6 or mixed (outer IPv4,
	// traffic over both families).
	Family string `yaml:"family" json:"family,omitempty"`
	Outer  string `yaml:"outer" json:"outer"` // ipv4 (default) | ipv6: the tunnel's outer family
	Inner  string `yaml:"inner" json:"inner"` // ipv4 (default) | ipv6 | mixed: default family of the traffic
	// WANMTU is the MTU of the WAN links and the gateways' outer MTU
	// (default 1500): 1600 lets 1500-byte inner packets through.
	WANMTU int `yaml:"wan-mtu" json:"wan_mtu,omitempty"`
	// Tunnels, when set, makes that many SA pairs, each carrying its own
	// inner prefix pair with a policy each way (the first is the LANs'):
	// spread UDP steps go through all of them, and per-tunnel metrics
	// count them. 0: the one tunnel of two SAs and no policy.
	Tunnels int `yaml:"tunnels" json:"tunnels,omitempty"`
	// TUNMTU, when set, is the gateways' TUN MTU instead of the one that
	// fits the outer MTU, so larger inner packets reach the gateways.
	TUNMTU int `yaml:"tun-mtu" json:"tun_mtu,omitempty"`
	// Offloads turns the TUN devices' vnet-hdr offloads (GSO/GRO) on.
	// Default: on, except in scenarios that replay a capture, whose TCP
	// segments GRO would merge on the way (as LRO on a NIC does) and so
	// deliver bytes that are no longer packet-for-packet the capture's.
	Offloads *bool `yaml:"offloads" json:"offloads,omitempty"`
	// NAT puts gw1 behind a NAT: the wan namespace routes between the
	// gateways (no relay, so no impairments) and masquerades gw1's UDP
	// toward gw2 (iptables MASQUERADE). Needs sa.ike over IPv4.
	NAT bool `yaml:"nat" json:"nat,omitempty"`
}

// SASpec describes the two SAs (gw1→gw2 SPI 0x1001, gw2→gw1 SPI 0x2001),
// or the IKEv2 negotiation that makes them.
type SASpec struct {
	Suite        string    `yaml:"suite" json:"suite"` // CIPHER[-BITS][+AUTH], see testbed.ParseSuite
	Mode         string    `yaml:"mode" json:"mode"`   // tunnel | transport
	Encap        string    `yaml:"encap" json:"encap"` // none | udp
	ESN          bool      `yaml:"esn" json:"esn"`
	ReplayWindow int       `yaml:"replay-window" json:"replay_window"`
	InitialSeq   uint64    `yaml:"initial-seq" json:"initial_seq"`
	Lifetimes    Lifetimes `yaml:"lifetimes" json:"lifetimes"`
	// Outer-header options of both SAs, as in the SA file (sa/header.go):
	// dscp copy | 0..63, decap-dscp keep | copy, df copy | set | clear, ttl.
	DSCP      string `yaml:"dscp" json:"dscp,omitempty"`
	DecapDSCP string `yaml:"decap-dscp" json:"decap_dscp,omitempty"`
	DF        string `yaml:"df" json:"df,omitempty"`
	TTL       int    `yaml:"ttl" json:"ttl,omitempty"`
	// Keys is "random" (default) or two entries, gw1→gw2 then gw2→gw1.
	Keys Keys `yaml:"keys" json:"-"`
	// IKE, when set, has the gateways negotiate the tunnel with IKEv2
	// instead (ike.go): SPIs, keys and suite are theirs.
	IKE *IKESpec `yaml:"ike" json:"ike,omitempty"`

	suite   sa.Suite
	aesBits int
	mode    sa.Mode
	encap   sa.Encap
	keys    [2][2]sa.Key // the given keys, read: per SA, enc then auth
}

// Lifetimes bound both SAs.
type Lifetimes struct {
	Soft Lifetime `yaml:"soft" json:"soft"`
	Hard Lifetime `yaml:"hard" json:"hard"`
}

// Lifetime is one bound; zero fields do not bound.
type Lifetime struct {
	Packets uint64        `yaml:"packets" json:"packets,omitempty"`
	Bytes   uint64        `yaml:"bytes" json:"bytes,omitempty"`
	Time    time.Duration `yaml:"time" json:"time,omitempty"`
}

func (l Lifetime) sa() sa.Lifetime {
	return sa.Lifetime{Packets: l.Packets, Bytes: l.Bytes, Time: l.Time}
}

// Keys are given keys for the two SAs, or none for random keys.
type Keys struct {
	Random bool
	Given  []KeyPair
}

// KeyPair is one SA's keys, in hex.
type KeyPair struct {
	Enc  string `yaml:"enc-key"`
	Auth string `yaml:"auth-key"`
}

// UnmarshalYAML reads `random` or a list of two key pairs.
func (k *Keys) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Value != "random" {
			// The value is most likely a key written where the list belongs.
			return fmt.Errorf("line %d: keys: want random or a list of two {enc-key, auth-key}, got %s", n.Line, secret.Word(n.Value, "random"))
		}
		k.Random = true
		return nil
	}
	if err := n.Decode(&k.Given); err != nil {
		return err
	}
	if len(k.Given) != 2 {
		return fmt.Errorf("line %d: keys: want two entries (gw1→gw2, gw2→gw1), got %d", n.Line, len(k.Given))
	}
	return nil
}

// Engines name each gateway's offload engine (overriding Scenario.Engine).
type Engines struct {
	GW1 string `yaml:"gw1" json:"gw1"`
	GW2 string `yaml:"gw2" json:"gw2"`
}

// Impairments are the WAN relay's stages, one per direction.
type Impairments struct {
	GW1ToGW2 *impair.Config `yaml:"gw1-to-gw2" json:"gw1_to_gw2,omitempty"`
	GW2ToGW1 *impair.Config `yaml:"gw2-to-gw1" json:"gw2_to_gw1,omitempty"`
}

// Traffic is the steps, run one after another or all at once.
type Traffic struct {
	Together bool `yaml:"together" json:"together"`
	// Actions change the running gateways at given times during the
	// steps: rekey a tunnel, add or delete tunnels.
	Actions []Action `yaml:"actions" json:"actions,omitempty"`
	Steps   []Step   `yaml:"steps" json:"steps"`
}

// Step is one traffic source; exactly one of its kinds is set.
type Step struct {
	Name string `yaml:"name" json:"name"`
	// AfterActions starts the step once every action has run to its end
	// (a restarted gateway's tunnel back up), not right after the step
	// before.
	AfterActions bool       `yaml:"after-actions" json:"after_actions,omitempty"`
	Ping         *PingStep  `yaml:"ping" json:"ping,omitempty"`
	UDP          *UDPStep   `yaml:"udp" json:"udp,omitempty"`
	Pcap         *PcapStep  `yaml:"pcap" json:"pcap,omitempty"`
	Iperf3       *IperfStep `yaml:"iperf3" json:"iperf3,omitempty"`
}

// Ends say where a step's traffic goes: hostA, hostB, gw1 or gw2 (the
// gateways' outer addresses, for transport mode), and in which family.
type Ends struct {
	From   string `yaml:"from" json:"from"`
	To     string `yaml:"to" json:"to"`
	Family string `yaml:"family" json:"family"` // ipv4 | ipv6 (default: topology inner; mixed: both)
}

// PingStep is a ping sweep over sizes.
type PingStep struct {
	Ends     `yaml:",inline"`
	Sizes    []int         `yaml:"sizes" json:"sizes"`       // ICMP payload bytes (default [56])
	Count    int           `yaml:"count" json:"count"`       // per size (default 5)
	Interval time.Duration `yaml:"interval" json:"interval"` // default 10ms
	// DF forbids fragmentation (IPv4 -M do); default true.
	DF *bool `yaml:"df" json:"df,omitempty"`
	// Marks sets the requests' TOS / traffic class and TTL (ping -Q, -t).
	Marks `yaml:",inline"`
}

// Marks are the IP header fields a step's sender writes (header.go). TOS
// and TrafficClass are the same byte — DSCP in the top six bits, ECN in
// the low two — by its IPv4 and IPv6 names; set one.
type Marks struct {
	TOS          *int `yaml:"tos" json:"tos,omitempty"`
	TrafficClass *int `yaml:"traffic-class" json:"traffic_class,omitempty"`
	TTL          int  `yaml:"ttl" json:"ttl,omitempty"` // TTL / hop limit (0: the host's default)
}

// UDPStep is a generated UDP flow: Packets datagrams at Rate per second,
// each Size bytes of IP packet, stamped to measure one-way latency.
type UDPStep struct {
	Ends    `yaml:",inline"`
	Packets int     `yaml:"packets" json:"packets"` // default 1000
	Rate    float64 `yaml:"rate" json:"rate"`       // packets per second (default 1000; 0 in the file means default)
	Size    int     `yaml:"size" json:"size"`       // IP packet bytes (default 200)
	Port    int     `yaml:"port" json:"port"`       // default 9000
	// Spread sends the datagrams round-robin through every tunnel of
	// topology.tunnels, each from and to that tunnel's own addresses.
	Spread bool `yaml:"spread" json:"spread,omitempty"`
	// DF, when set, forbids (true) or allows (false) fragmentation of the
	// datagrams (IP_MTU_DISCOVER do / dont; IPv6: IPV6_DONTFRAG); default:
	// the host's (DF set, fragments by the sender only).
	DF    *bool `yaml:"df" json:"df,omitempty"`
	Marks `yaml:",inline"`
	// ExtHeaders has IPv6 datagrams carry a hop-by-hop and a destination
	// options header (PadN options), which the receiver checks.
	ExtHeaders bool `yaml:"ext-headers" json:"ext_headers,omitempty"`
}

// PcapStep replays a capture: addresses rewritten onto hostA/hostB,
// checksums fixed, timing kept (divided by Speed) or as fast as possible.
type PcapStep struct {
	File   string  `yaml:"file" json:"file"`     // relative to the scenario file
	Timing string  `yaml:"timing" json:"timing"` // keep (default) | fast
	Speed  float64 `yaml:"speed" json:"speed"`   // rate multiplier for keep (default 1)
	path   string
}

// IperfStep is an iperf3 run.
type IperfStep struct {
	Ends     `yaml:",inline"`
	Protocol string        `yaml:"protocol" json:"protocol"` // tcp (default) | udp
	Duration time.Duration `yaml:"duration" json:"duration"` // default 1s
	Bitrate  string        `yaml:"bitrate" json:"bitrate"`   // UDP target, e.g. 20M (default 10M)
	Length   int           `yaml:"length" json:"length"`     // datagram / write size
	Streams  int           `yaml:"streams" json:"streams"`
	Window   string        `yaml:"window" json:"window,omitempty"` // socket buffers (iperf3 -w), e.g. 4M
}

// Expectation is one check: a metric, a comparison and what it is compared
// with (see expr.go).
type Expectation struct {
	Metric string `json:"metric"`
	Expr   string `json:"expr"`
	Line   int    `json:"line"`
	check  check
}

// ParseError is a malformed scenario: file, line and field.
type ParseError = labyaml.Error

// Load reads a scenario file and expands its matrix: one Scenario per
// combination, in the file's order.
func Load(path string) ([]*Scenario, error) {
	data, err := sa.ReadFileAtMost(path, sa.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return Parse(path, data)
}

// LoadFS reads a scenario file from fsys (such as the bundled scenarios,
// github.com/espgw/espgw/scenarios.Bundled); its pcap files come from fsys
// too.
func LoadFS(fsys fs.FS, path string) ([]*Scenario, error) {
	if fi, err := fs.Stat(fsys, path); err == nil && fi.Size() > sa.MaxFileSize {
		return nil, fmt.Errorf("read scenario: %s is %d bytes, larger than the %d bytes such a file may be", path, fi.Size(), sa.MaxFileSize)
	}
	data, err := fs.ReadFile(fsys, path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return parse(fsys, path, data)
}

// Parse reads a scenario document; path names it in errors and anchors
// relative pcap files.
func Parse(path string, data []byte) ([]*Scenario, error) { return parse(nil, path, data) }

func parse(fsys fs.FS, path string, data []byte) ([]*Scenario, error) {
	if err := sa.CheckYAMLNodes(path, data, sa.MaxYAMLNodes); err != nil {
		return nil, &ParseError{File: path, Err: err}
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ParseError{File: path, Err: errors.New("empty file: want a mapping (name, sa, traffic, expect, ...)")}
		}
		return nil, labyaml.Wrap(path, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, &ParseError{File: path, Line: 1, Err: errors.New("want a mapping (name, sa, traffic, expect, ...)")}
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; !slices.Contains(topFields, k.Value) {
			return nil, &ParseError{File: path, Line: k.Line, Field: k.Value, Err: fmt.Errorf("unknown field (want one of %s)", strings.Join(topFields, ", "))}
		}
	}
	// Strict decoding of the text as written gives unknown nested fields
	// and wrong types with their true lines; the matrix copies below are
	// decoded from nodes, which keep lines too.
	var probe Scenario
	if err := labyaml.Decode(path, data, &probe); err != nil {
		return nil, err
	}
	_, matrixNode := yamlwalk.Lookup(root, "matrix")
	combos, err := matrixCombos(path, matrixNode)
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	for _, combo := range combos {
		r := deepCopy(root)
		for _, kv := range combo {
			if err := setPath(r, kv.path, kv.value); err != nil {
				return nil, &ParseError{File: path, Line: kv.line, Field: "matrix." + kv.path, Err: err}
			}
		}
		s, err := parseOne(fsys, path, r)
		if err != nil {
			return nil, err
		}
		if len(combo) > 0 {
			s.Matrix = map[string]string{}
			var parts []string
			for _, kv := range combo {
				s.Matrix[kv.path] = kv.value.Value
				// peer: espgw is the default: a file that also runs against
				// the kernel keeps its plain names for the espgw runs.
				if kv.path != "peer" || kv.value.Value != PeerEspgw {
					parts = append(parts, kv.value.Value)
				}
			}
			if len(parts) > 0 {
				s.Name += "[" + strings.Join(parts, ",") + "]"
			}
		}
		out = append(out, s)
	}
	return out, nil
}

var topFields = []string{"name", "description", "peer", "external", "topology", "sa", "engine", "engines", "impair", "traffic", "expect", "timeout", "matrix"}

func parseOne(fsys fs.FS, path string, root *yaml.Node) (*Scenario, error) {
	perr := func(line int, field string, err error) error {
		return &ParseError{File: path, Line: line, Field: field, Err: err}
	}
	s := &Scenario{File: path, fsys: fsys}
	if err := root.Decode(s); err != nil {
		return nil, labyaml.Wrap(path, err)
	}
	s.root = root
	_, expectNode := yamlwalk.Lookup(root, "expect")
	s.defaults()
	if err := s.validate(perr); err != nil {
		return nil, err
	}
	if err := s.validateTunnels(perr); err != nil {
		return nil, err
	}
	if s.SA.IKE != nil {
		if err := s.validateIKE(perr); err != nil {
			return nil, err
		}
	}
	if expectNode == nil {
		return nil, perr(1, "expect", errors.New("missing: a scenario must check something"))
	}
	if expectNode.Kind != yaml.MappingNode {
		return nil, perr(expectNode.Line, "expect", errors.New("want a mapping of metric: expression"))
	}
	for i := 0; i+1 < len(expectNode.Content); i += 2 {
		k, v := expectNode.Content[i], expectNode.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return nil, perr(v.Line, "expect."+k.Value, errors.New("want an expression such as \"== 0\" or \">= 0.99\""))
		}
		c, err := parseCheck(k.Value, v.Value, v.Tag)
		if err != nil {
			return nil, perr(v.Line, "expect."+k.Value, err)
		}
		if err := s.knownMetrics(c); err != nil {
			return nil, perr(v.Line, "expect."+k.Value, err)
		}
		s.Expect = append(s.Expect, Expectation{Metric: k.Value, Expr: c.String(), Line: v.Line, check: c})
	}
	if len(s.Expect) == 0 {
		return nil, perr(expectNode.Line, "expect", errors.New("empty: a scenario must check something"))
	}
	return s, nil
}

func (s *Scenario) defaults() {
	s.Name = cmp.Or(s.Name, strings.TrimSuffix(filepath.Base(s.File), filepath.Ext(s.File)))
	s.Peer = cmp.Or(s.Peer, "espgw")
	t := &s.Topology
	switch t.Family {
	case "ipv4", "ipv6":
		t.Outer = cmp.Or(t.Outer, t.Family)
		t.Inner = cmp.Or(t.Inner, t.Family)
	case "mixed":
		t.Outer = cmp.Or(t.Outer, "ipv4")
		t.Inner = cmp.Or(t.Inner, "mixed")
	}
	t.Outer = cmp.Or(t.Outer, "ipv4")
	t.Inner = cmp.Or(t.Inner, "ipv4")
	s.SA.Suite = cmp.Or(s.SA.Suite, "aes-cbc-128+hmac-sha1-96")
	s.SA.Mode = cmp.Or(s.SA.Mode, "tunnel")
	s.SA.Encap = cmp.Or(s.SA.Encap, "none")
	s.SA.ReplayWindow = cmp.Or(s.SA.ReplayWindow, 64)
	s.Engine = cmp.Or(s.Engine, "cpu")
	s.Engines.GW1 = cmp.Or(s.Engines.GW1, s.Engine)
	s.Engines.GW2 = cmp.Or(s.Engines.GW2, s.Engine)
	s.Timeout = cmp.Or(s.Timeout, 2*time.Minute)
	if _, saNode := yamlwalk.Lookup(s.root, "sa"); saNode != nil && s.SA.IKE == nil {
		if k, _ := yamlwalk.Lookup(saNode, "ike"); k != nil {
			s.SA.IKE = &IKESpec{} // ike: with nothing after it: every default
		}
	}
	if s.SA.IKE != nil {
		s.SA.IKE.defaults()
	}
	transport := s.SA.Mode == "transport"
	for i := range s.Traffic.Steps {
		st := &s.Traffic.Steps[i]
		ends := func(e *Ends) {
			if e.From == "" && e.To == "" {
				e.From, e.To = "hostA", "hostB"
				if transport {
					e.From, e.To = "gw1", "gw2"
				}
			}
			if e.Family == "" {
				e.Family = t.Inner
				if (e.From == "gw1" || e.From == "gw2") && t.Inner == "mixed" {
					e.Family = t.Outer
				}
			}
		}
		switch {
		case st.Ping != nil:
			ends(&st.Ping.Ends)
			if len(st.Ping.Sizes) == 0 {
				st.Ping.Sizes = []int{56}
			}
			st.Ping.Count = cmp.Or(st.Ping.Count, 5)
			st.Ping.Interval = cmp.Or(st.Ping.Interval, 10*time.Millisecond)
			if st.Ping.DF == nil {
				df := true
				st.Ping.DF = &df
			}
		case st.UDP != nil:
			ends(&st.UDP.Ends)
			st.UDP.Packets = cmp.Or(st.UDP.Packets, 1000)
			st.UDP.Rate = cmp.Or(st.UDP.Rate, 1000)
			st.UDP.Size = cmp.Or(st.UDP.Size, 200)
			st.UDP.Port = cmp.Or(st.UDP.Port, 9000)
		case st.Pcap != nil:
			st.Pcap.Timing = cmp.Or(st.Pcap.Timing, "keep")
			st.Pcap.Speed = cmp.Or(st.Pcap.Speed, 1)
			st.Pcap.path = st.Pcap.File
			if s.fsys != nil {
				st.Pcap.path = path.Join(path.Dir(s.File), st.Pcap.File)
			} else if !filepath.IsAbs(st.Pcap.path) {
				st.Pcap.path = filepath.Join(filepath.Dir(s.File), st.Pcap.File)
			}
		case st.Iperf3 != nil:
			ends(&st.Iperf3.Ends)
			st.Iperf3.Protocol = cmp.Or(st.Iperf3.Protocol, "tcp")
			st.Iperf3.Duration = cmp.Or(st.Iperf3.Duration, time.Second)
			st.Iperf3.Bitrate = cmp.Or(st.Iperf3.Bitrate, "10M")
		}
		st.Name = cmp.Or(st.Name, fmt.Sprintf("%s%d", st.kind(), i+1))
	}
}

func (s *Scenario) stat(name string) (fs.FileInfo, error) {
	if s.fsys != nil {
		return fs.Stat(s.fsys, name)
	}
	return os.Stat(name)
}

func (s *Scenario) open(name string) (fs.File, error) {
	if s.fsys != nil {
		return s.fsys.Open(name)
	}
	return os.Open(name)
}

// offloads says whether the TUN devices use vnet-hdr offloads.
func (s *Scenario) offloads() bool {
	if s.Topology.Offloads != nil {
		return *s.Topology.Offloads
	}
	return !slices.ContainsFunc(s.Traffic.Steps, func(st Step) bool { return st.Pcap != nil })
}

func (st *Step) kind() string {
	switch {
	case st.Ping != nil:
		return "ping"
	case st.UDP != nil:
		return "udp"
	case st.Pcap != nil:
		return "pcap"
	case st.Iperf3 != nil:
		return "iperf3"
	}
	return "step"
}

// validate checks the values; errors point at the field's line.
func (s *Scenario) validate(perr func(int, string, error) error) error {
	at := func(path ...string) int { return lineOf(s.root, path...) }
	oneOf := func(v string, field []string, allowed ...string) error {
		if !slices.Contains(allowed, v) {
			return perr(at(field...), strings.Join(field, "."), fmt.Errorf("%s: want one of %s", secret.Word(v, allowed...), strings.Join(allowed, ", ")))
		}
		return nil
	}
	if err := oneOf(s.Peer, []string{"peer"}, PeerEspgw, PeerLinuxXFRM, PeerExternal); err != nil {
		return err
	}
	if s.Peer != PeerExternal && s.External != nil {
		return perr(at("external"), "external", errors.New("only with peer: external"))
	}
	checks := []error{
		oneOf(s.Topology.Family, []string{"topology", "family"}, "", "ipv4", "ipv6", "mixed"),
		oneOf(s.Topology.Outer, []string{"topology", "outer"}, "ipv4", "ipv6"),
		oneOf(s.Topology.Inner, []string{"topology", "inner"}, "ipv4", "ipv6", "mixed"),
		oneOf(s.SA.Mode, []string{"sa", "mode"}, "tunnel", "transport"),
		oneOf(s.SA.Encap, []string{"sa", "encap"}, "none", "udp"),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	var err error
	if s.SA.suite, s.SA.aesBits, err = testbed.ParseSuite(s.SA.Suite); err != nil {
		return perr(at("sa", "suite"), "sa.suite", err)
	}
	s.SA.mode, s.SA.encap = sa.Tunnel, sa.EncapNone
	if s.SA.Mode == "transport" {
		s.SA.mode = sa.Transport
	}
	if s.SA.Encap == "udp" {
		s.SA.encap = sa.EncapUDP
	}
	var probe sa.SA
	if err := s.SA.header(&probe); err != nil {
		return perr(at("sa"), "sa", err)
	}
	if m := s.Topology.TUNMTU; m != 0 && (m < 1280 || m > 9000) {
		return perr(at("topology", "tun-mtu"), "topology.tun-mtu", fmt.Errorf("%d: want 1280..9000", m))
	}
	if m := s.Topology.WANMTU; m != 0 && (m < 1280 || m > 9000) {
		return perr(at("topology", "wan-mtu"), "topology.wan-mtu", fmt.Errorf("%d: want 1280..9000", m))
	}
	if w := s.SA.ReplayWindow; w < 0 || w > sa.MaxReplayWindow {
		return perr(at("sa", "replay-window"), "sa.replay-window", fmt.Errorf("%d: want 1..%d", w, sa.MaxReplayWindow))
	}
	if s.Timeout < 0 || s.Timeout > MaxTimeout {
		return perr(at("timeout"), "timeout", fmt.Errorf("%v: want a duration above 0 and at most %v", s.Timeout, MaxTimeout))
	}

	if !s.SA.ESN && s.SA.InitialSeq > 0xffffffff {
		return perr(at("sa", "initial-seq"), "sa.initial-seq", fmt.Errorf("%#x does not fit 32 bits: set esn: true", s.SA.InitialSeq))
	}
	if len(s.SA.Keys.Given) > 0 {
		enc, auth, err := sa.RandomKeys(s.SA.suite, s.SA.aesBits)
		if err != nil {
			return perr(at("sa", "keys"), "sa.keys", err)
		}
		for i, kp := range s.SA.Keys.Given {
			for j, k := range []struct {
				name, v string
				want    int
			}{{"enc-key", kp.Enc, len(enc)}, {"auth-key", kp.Auth, len(auth)}} {
				if k.v == "" && k.want == 0 {
					continue
				}
				field := fmt.Sprintf("sa.keys[%d].%s", i, k.name)
				key, err := sa.ParseKeyHex(k.v)
				if err != nil {
					return perr(at("sa", "keys"), field, err)
				}
				if len(key) != k.want {
					return perr(at("sa", "keys"), field, fmt.Errorf("%d bytes, %s wants %d", len(key), s.SA.Suite, k.want))
				}
				s.SA.keys[i][j] = key
			}
		}
	}
	if err := s.checkSA(); err != nil {
		field := "sa"
		if name, _, ok := strings.Cut(err.Error(), ":"); ok && !strings.ContainsAny(name, " ") {
			field = "sa." + name // the SA model names its field first
		}
		return perr(at(strings.Split(field, ".")...), field, err)
	}
	for _, g := range []struct{ name, engine string }{{"gw1", s.Engines.GW1}, {"gw2", s.Engines.GW2}} {
		if g.engine == "" {
			return perr(at("engines", g.name), "engines."+g.name, errors.New("empty engine name"))
		}
		if err := (sim.Engines{}).Check(g.engine); err != nil {
			field, line := "engines."+g.name, at("engines", g.name)
			if _, given := yamlwalk.Lookup(s.root, "engines"); given == nil {
				field, line = "engine", at("engine")
			}
			return perr(line, field, fmt.Errorf("%s: %w", secret.Word(g.engine, (sim.Engines{}).Names()...), err))
		}
	}
	for _, ic := range []struct {
		name string
		c    *impair.Config
	}{{"gw1-to-gw2", s.Impair.GW1ToGW2}, {"gw2-to-gw1", s.Impair.GW2ToGW1}} {
		if ic.c != nil {
			if err := ic.c.Validate(); err != nil {
				return perr(at("impair", ic.name), "impair."+ic.name, err)
			}
		}
	}
	if len(s.Traffic.Steps) == 0 {
		return perr(at("traffic"), "traffic.steps", errors.New("no traffic: give at least one step"))
	}
	if s.Peer != PeerEspgw {
		// Both change gw2 through espgw's control socket, or give it many
		// SA pairs: an espgw gw2 only.
		if s.Topology.Tunnels >= 1 {
			return perr(at("topology", "tunnels"), "topology.tunnels", fmt.Errorf("with peer: %s gw2 holds the one tunnel of two SAs and no policies", s.Peer))
		}
		if len(s.Traffic.Actions) > 0 {
			return perr(at("traffic", "actions"), "traffic.actions", fmt.Errorf("actions change an espgw gw2 through its control socket: not with peer: %s", s.Peer))
		}
	}
	if s.Peer == PeerExternal {
		if err := s.validateExternal(perr); err != nil {
			return err
		}
	}
	if s.Peer == PeerLinuxXFRM {
		if _, engines := yamlwalk.Lookup(s.root, "engines"); engines != nil {
			if k, _ := yamlwalk.Lookup(engines, "gw2"); k != nil {
				return perr(k.Line, "engines.gw2", errors.New("gw2 is the Linux kernel (peer: linux-xfrm): its crypto is the kernel's own"))
			}
		}
		if s.SA.ESN && s.SA.ReplayWindow == 0 {
			return perr(at("sa", "replay-window"), "sa.replay-window", errors.New("the Linux kernel does ESN only with a replay window"))
		}
	}
	names := map[string]bool{}
	hosts := []string{"hostA", "hostB", "gw1", "gw2"}
	for i, st := range s.Traffic.Steps {
		field := fmt.Sprintf("traffic.steps[%d]", i)
		line := stepLine(s.root, i)
		n := 0
		for _, set := range []bool{st.Ping != nil, st.UDP != nil, st.Pcap != nil, st.Iperf3 != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return perr(line, field, errors.New("want exactly one of ping, udp, pcap, iperf3"))
		}
		if names[st.Name] {
			return perr(line, field+".name", fmt.Errorf("%q used twice", st.Name))
		}
		names[st.Name] = true
		var e *Ends
		switch {
		case st.Ping != nil:
			e = &st.Ping.Ends
			for _, sz := range st.Ping.Sizes {
				if sz < 0 || sz > 65000 {
					return perr(line, field+".ping.sizes", fmt.Errorf("%d: want 0..65000", sz))
				}
			}
			if st.Ping.Count < 1 || st.Ping.Count > 10000 {
				return perr(line, field+".ping.count", fmt.Errorf("%d: want 1..10000", st.Ping.Count))
			}
			if err := st.Ping.Marks.check(); err != nil {
				return perr(line, field+".ping", err)
			}
			// ping(8) refuses intervals below 2 ms for all but root, and
			// a negative one would be taken as its default.
			if st.Ping.Interval < time.Millisecond || st.Ping.Interval > 10*time.Second {
				return perr(line, field+".ping.interval", fmt.Errorf("%v: want 1ms..10s", st.Ping.Interval))
			}
		case st.UDP != nil:
			e = &st.UDP.Ends
			if st.UDP.Packets < 1 || st.UDP.Packets > 1_000_000 {
				return perr(line, field+".udp.packets", fmt.Errorf("%d: want 1..1000000", st.UDP.Packets))
			}
			if st.UDP.Rate < 0 || st.UDP.Rate > 1_000_000 {
				return perr(line, field+".udp.rate", fmt.Errorf("%v: want 1..1000000 packets per second", st.UDP.Rate))
			}
			if st.UDP.Size < 48 || st.UDP.Size > 9000 {
				return perr(line, field+".udp.size", fmt.Errorf("%d: want 48..9000 bytes of IP packet", st.UDP.Size))
			}
			if st.UDP.Port < 1 || st.UDP.Port > 65535 {
				return perr(line, field+".udp.port", fmt.Errorf("%d: want 1..65535", st.UDP.Port))
			}
			if err := st.UDP.Marks.check(); err != nil {
				return perr(line, field+".udp", err)
			}
		case st.Pcap != nil:
			if st.Pcap.File == "" {
				return perr(line, field+".pcap.file", errors.New("missing"))
			}
			if err := oneOf(st.Pcap.Timing, nil, "keep", "fast"); err != nil {
				return perr(line, field+".pcap.timing", fmt.Errorf("%s: want keep or fast", secret.Word(st.Pcap.Timing, "keep", "fast")))
			}
			if st.Pcap.Speed <= 0 {
				return perr(line, field+".pcap.speed", fmt.Errorf("%v: want a factor > 0", st.Pcap.Speed))
			}
			if err := s.checkCapture(st.Pcap.path); err != nil {
				return perr(line, field+".pcap.file", err)
			}
			if s.SA.Mode == "transport" {
				return perr(line, field+".pcap", errors.New("a replay runs between hostA and hostB: not through transport-mode SAs"))
			}
		case st.Iperf3 != nil:
			e = &st.Iperf3.Ends
			if st.Iperf3.Protocol != "tcp" && st.Iperf3.Protocol != "udp" {
				return perr(line, field+".iperf3.protocol", fmt.Errorf("%s: want tcp or udp", secret.Word(st.Iperf3.Protocol, "tcp", "udp")))
			}
			if st.Iperf3.Duration < 100*time.Millisecond || st.Iperf3.Duration > 5*time.Minute {
				return perr(line, field+".iperf3.duration", fmt.Errorf("%v: want 100ms..5m", st.Iperf3.Duration))
			}
		}
		if e != nil && s.Peer == PeerExternal && s.SA.mode != sa.Transport && e.From != "hostA" && e.From != "hostB" {
			return perr(line, field, errors.New("against an external device, traffic runs between hostA and hostB"))
		}
		if e != nil && s.Peer == PeerLinuxXFRM {
			if e.From == "gw2" || e.To == "gw2" && st.Ping == nil {
				return perr(line, field, errors.New("gw2 is the Linux kernel guest (peer: linux-xfrm): it answers pings but runs no traffic of its own"))
			}
		}
		if e != nil {
			if !slices.Contains(hosts, e.From) || !slices.Contains(hosts, e.To) || e.From == e.To {
				return perr(line, field, fmt.Errorf("from %s to %s: want two different of %s", secret.Word(e.From, hosts...), secret.Word(e.To, hosts...), strings.Join(hosts, ", ")))
			}
			if err := oneOf(e.Family, nil, "ipv4", "ipv6", "mixed"); err != nil {
				return perr(line, field+".family", fmt.Errorf("%s: want ipv4, ipv6 or mixed", secret.Word(e.Family, "ipv4", "ipv6", "mixed")))
			}
			gwEnds := e.From == "gw1" || e.From == "gw2" || e.To == "gw1" || e.To == "gw2"
			if gwEnds && s.SA.Mode != "transport" {
				return perr(line, field, errors.New("gw1/gw2 as an end needs sa.mode: transport (tunnel-mode traffic runs between hostA and hostB)"))
			}
			if !gwEnds && s.SA.Mode == "transport" {
				return perr(line, field, errors.New("transport-mode SAs carry traffic between gw1 and gw2: set from/to to gw1/gw2"))
			}
			if gwEnds && e.Family != s.Topology.Outer {
				return perr(line, field+".family", fmt.Errorf("%s: gateway-to-gateway traffic uses the outer family %s", e.Family, s.Topology.Outer))
			}
		}
	}
	return nil
}

// MaxTimeout bounds a scenario's timeout.
const MaxTimeout = 24 * time.Hour

// checkSA builds an SA as the runner will (gw1→gw2, the given or random
// keys, the lifetimes) and validates it, so that what the SA model refuses
// (a negative or inverted lifetime, an initial-seq with no room, a window
// beyond sa.MaxReplayWindow) is refused at parse, not after the test bed is
// built.
func (s *Scenario) checkSA() error {
	spec := s.SA
	c := &sa.SA{SPI: 0x1001, Mode: spec.mode, Encap: spec.encap, Suite: spec.suite, ESN: spec.ESN,
		ReplayWindow: spec.ReplayWindow, InitialSeq: spec.InitialSeq,
		Soft: spec.Lifetimes.Soft.sa(), Hard: spec.Lifetimes.Hard.sa(),
		Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	if s.Topology.Outer == "ipv6" {
		c.Src, c.Dst = netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	}
	if c.Encap == sa.EncapUDP {
		c.SrcPort, c.DstPort = sa.DefaultNATTPort, sa.DefaultNATTPort
	}
	var err error
	if c.EncKey, c.AuthKey, err = sa.RandomKeys(spec.suite, spec.aesBits); err != nil {
		return err
	}
	return c.Validate()
}

// checkCapture makes sure a replay's capture is a readable pcap or pcapng
// file (not a directory, not something else) before anything runs.
func (s *Scenario) checkCapture(name string) error {
	fi, err := s.stat(name)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a file (a %s)", name, fileKind(fi))
	}
	f, err := s.open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := capture.NewReader(f, name); err != nil {
		return err
	}
	return nil
}

func fileKind(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "directory"
	case fi.Mode()&fs.ModeNamedPipe != 0:
		return "named pipe"
	case fi.Mode()&fs.ModeDevice != 0:
		return "device"
	case fi.Mode()&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// lineOf is the line of the deepest field of path present in the document.
func lineOf(root *yaml.Node, path ...string) int {
	line, n := root.Line, root
	for _, p := range path {
		k, v := yamlwalk.Lookup(n, p)
		if k == nil {
			break
		}
		line, n = k.Line, v
	}
	return line
}

func stepLine(root *yaml.Node, i int) int {
	_, tr := yamlwalk.Lookup(root, "traffic")
	_, steps := yamlwalk.Lookup(tr, "steps")
	if steps != nil && steps.Kind == yaml.SequenceNode && i < len(steps.Content) {
		return steps.Content[i].Line
	}
	return lineOf(root, "traffic")
}

func deepCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, ch := range n.Content {
		c.Content[i] = deepCopy(ch)
	}
	return &c
}

// setPath sets a dotted field path (e.g. sa.suite) to value, making the
// mappings it needs.
func setPath(root *yaml.Node, path string, value *yaml.Node) error {
	parts := strings.Split(path, ".")
	n := root
	for i, p := range parts {
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is not a mapping", strings.Join(parts[:i], "."))
		}
		_, v := yamlwalk.Lookup(n, p)
		if i == len(parts)-1 {
			val := deepCopy(value)
			if v != nil {
				*v = *val
			} else {
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p, Line: value.Line}, val)
			}
			return nil
		}
		if v == nil {
			v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: value.Line}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p, Line: value.Line}, v)
		}
		n = v
	}
	return nil
}

type matrixValue struct {
	path  string
	value *yaml.Node
	line  int
}

// MaxMatrix bounds the scenarios one file's matrix expands into: each
// builds a test bed of its own, so even this many take hours.
const MaxMatrix = 256

// matrixCombos expands `matrix: {field.path: [v1, v2], ...}` into every
// combination, the first field varying slowest.
func matrixCombos(path string, m *yaml.Node) ([][]matrixValue, error) {
	if m == nil {
		return [][]matrixValue{nil}, nil
	}
	if m.Kind != yaml.MappingNode || len(m.Content) == 0 {
		return nil, &ParseError{File: path, Line: m.Line, Field: "matrix", Err: errors.New("want a mapping of field path to a list of values")}
	}
	// The number of combinations is checked before any is built: a few
	// short lists multiply into more scenarios than memory holds.
	total := 1
	for i := 0; i+1 < len(m.Content); i += 2 {
		if v := m.Content[i+1]; v.Kind == yaml.SequenceNode && len(v.Content) > 0 {
			total *= len(v.Content)
		}
		if total > MaxMatrix {
			return nil, &ParseError{File: path, Line: m.Line, Field: "matrix", Err: fmt.Errorf("more than %d combinations: split the file, or shorten the lists", MaxMatrix)}
		}
	}
	combos := [][]matrixValue{nil}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return nil, &ParseError{File: path, Line: v.Line, Field: "matrix." + k.Value, Err: errors.New("want a non-empty list of values")}
		}
		top, _, _ := strings.Cut(k.Value, ".")
		if !slices.Contains(topFields, top) || top == "matrix" || top == "expect" {
			return nil, &ParseError{File: path, Line: k.Line, Field: "matrix." + k.Value, Err: errors.New("not a scenario field path (e.g. sa.suite, topology.family, engine)")}
		}
		var next [][]matrixValue
		for _, c := range combos {
			for _, val := range v.Content {
				next = append(next, append(slices.Clip(c), matrixValue{path: k.Value, value: val, line: val.Line}))
			}
		}
		combos = next
	}
	return combos, nil
}

// Files lists the scenario files in paths: files as given, directories
// searched (not recursively) for *.yaml, sorted.
func Files(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("scenario path: %w", err)
		}
		if !fi.IsDir() {
			out = append(out, p)
			continue
		}
		m, err := filepath.Glob(filepath.Join(p, "*.yaml"))
		if err != nil {
			return nil, err
		}
		sort.Strings(m)
		out = append(out, m...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario files in %s", strings.Join(paths, ", "))
	}
	return out, nil
}

// check validates the marks.
func (m *Marks) check() error {
	if m.TOS != nil && m.TrafficClass != nil {
		return errors.New("tos and traffic-class are the same byte: set one")
	}
	if v := m.byteValue(); v < -1 || v > 255 {
		return fmt.Errorf("tos / traffic-class %d: want 0..255 (DSCP << 2 | ECN)", v)
	}
	if m.TTL < 0 || m.TTL > 255 {
		return fmt.Errorf("ttl %d: want 1..255 (0: the host's default)", m.TTL)
	}
	return nil
}

// byteValue is the TOS / traffic class asked for, or -1.
func (m *Marks) byteValue() int {
	switch {
	case m.TOS != nil:
		return *m.TOS
	case m.TrafficClass != nil:
		return *m.TrafficClass
	}
	return -1
}
