// Package scenario reads espgw scenario files and runs them: a topology, a
// pair of SAs, an engine per gateway, traffic steps (pcap replay, iperf3,
// ping sweeps, generated UDP flows), WAN impairments, and expectations that
// are checked against what the gateways, the WAN relay and the receiving
// hosts counted. The file format is documented in scenarios/README.md; this
// package owns parsing (with file, line and field in every error), the
// expectation language, the runner and the reports.
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/lab/impair"
	"github.com/espgw/espgw/internal/lab/testbed"
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
	Peer     string        `yaml:"peer" json:"peer,omitempty"`
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
	// Offloads turns the TUN devices' vnet-hdr offloads (GSO/GRO) on.
	// Default: on, except in scenarios that replay a capture, whose TCP
	// segments GRO would merge on the way (as LRO on a NIC does) and so
	// deliver bytes that are no longer packet-for-packet the capture's.
	Offloads *bool `yaml:"offloads" json:"offloads,omitempty"`
}

// SASpec describes the two SAs (gw1→gw2 SPI 0x1001, gw2→gw1 SPI 0x2001).
type SASpec struct {
	Suite        string    `yaml:"suite" json:"suite"` // CIPHER[-BITS][+AUTH], see testbed.ParseSuite
	Mode         string    `yaml:"mode" json:"mode"`   // tunnel | transport
	Encap        string    `yaml:"encap" json:"encap"` // none | udp
	ESN          bool      `yaml:"esn" json:"esn"`
	ReplayWindow int       `yaml:"replay-window" json:"replay_window"`
	InitialSeq   uint64    `yaml:"initial-seq" json:"initial_seq"`
	Lifetimes    Lifetimes `yaml:"lifetimes" json:"lifetimes"`
	// Keys is "random" (default) or two entries, gw1→gw2 then gw2→gw1.
	Keys Keys `yaml:"keys" json:"-"`

	suite   sa.Suite
	aesBits int
	mode    sa.Mode
	encap   sa.Encap
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
			return fmt.Errorf("line %d: keys: want random or a list of two {enc-key, auth-key}, got %q", n.Line, n.Value)
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
	Together bool   `yaml:"together" json:"together"`
	Steps    []Step `yaml:"steps" json:"steps"`
}

// Step is one traffic source; exactly one of its kinds is set.
type Step struct {
	Name   string     `yaml:"name" json:"name"`
	Ping   *PingStep  `yaml:"ping" json:"ping,omitempty"`
	UDP    *UDPStep   `yaml:"udp" json:"udp,omitempty"`
	Pcap   *PcapStep  `yaml:"pcap" json:"pcap,omitempty"`
	Iperf3 *IperfStep `yaml:"iperf3" json:"iperf3,omitempty"`
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
}

// UDPStep is a generated UDP flow: Packets datagrams at Rate per second,
// each Size bytes of IP packet, stamped to measure one-way latency.
type UDPStep struct {
	Ends    `yaml:",inline"`
	Packets int     `yaml:"packets" json:"packets"` // default 1000
	Rate    float64 `yaml:"rate" json:"rate"`       // packets per second (default 1000; 0 in the file means default)
	Size    int     `yaml:"size" json:"size"`       // IP packet bytes (default 200)
	Port    int     `yaml:"port" json:"port"`       // default 9000
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
type ParseError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

// Load reads a scenario file and expands its matrix: one Scenario per
// combination, in the file's order.
func Load(path string) ([]*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return Parse(path, data)
}

// LoadFS reads a scenario file from fsys (such as the bundled scenarios,
// github.com/espgw/espgw/scenarios.Bundled); its pcap files come from fsys
// too.
func LoadFS(fsys fs.FS, path string) ([]*Scenario, error) {
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
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, &ParseError{File: path, Err: err}
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
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true)
	if err := d.Decode(&probe); err != nil {
		return nil, yamlError(path, err)
	}
	_, matrixNode := lookup(root, "matrix")
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

var topFields = []string{"name", "description", "peer", "topology", "sa", "engine", "engines", "impair", "traffic", "expect", "timeout", "matrix"}

func parseOne(fsys fs.FS, path string, root *yaml.Node) (*Scenario, error) {
	perr := func(line int, field string, err error) error {
		return &ParseError{File: path, Line: line, Field: field, Err: err}
	}
	s := &Scenario{File: path, fsys: fsys}
	if err := root.Decode(s); err != nil {
		return nil, yamlError(path, err)
	}
	s.root = root
	_, expectNode := lookup(root, "expect")
	s.defaults()
	if err := s.validate(perr); err != nil {
		return nil, err
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
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(s.File), filepath.Ext(s.File))
	}
	if s.Peer == "" {
		s.Peer = "espgw"
	}
	t := &s.Topology
	switch t.Family {
	case "ipv4", "ipv6":
		if t.Outer == "" {
			t.Outer = t.Family
		}
		if t.Inner == "" {
			t.Inner = t.Family
		}
	case "mixed":
		if t.Outer == "" {
			t.Outer = "ipv4"
		}
		if t.Inner == "" {
			t.Inner = "mixed"
		}
	}
	if t.Outer == "" {
		t.Outer = "ipv4"
	}
	if t.Inner == "" {
		t.Inner = "ipv4"
	}
	if s.SA.Suite == "" {
		s.SA.Suite = "aes-cbc-128+hmac-sha1-96"
	}
	if s.SA.Mode == "" {
		s.SA.Mode = "tunnel"
	}
	if s.SA.Encap == "" {
		s.SA.Encap = "none"
	}
	if s.SA.ReplayWindow == 0 {
		s.SA.ReplayWindow = 64
	}
	if s.Engine == "" {
		s.Engine = "cpu"
	}
	if s.Engines.GW1 == "" {
		s.Engines.GW1 = s.Engine
	}
	if s.Engines.GW2 == "" {
		s.Engines.GW2 = s.Engine
	}
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Minute
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
			if st.Ping.Count == 0 {
				st.Ping.Count = 5
			}
			if st.Ping.Interval == 0 {
				st.Ping.Interval = 10 * time.Millisecond
			}
			if st.Ping.DF == nil {
				df := true
				st.Ping.DF = &df
			}
		case st.UDP != nil:
			ends(&st.UDP.Ends)
			if st.UDP.Packets == 0 {
				st.UDP.Packets = 1000
			}
			if st.UDP.Rate == 0 {
				st.UDP.Rate = 1000
			}
			if st.UDP.Size == 0 {
				st.UDP.Size = 200
			}
			if st.UDP.Port == 0 {
				st.UDP.Port = 9000
			}
		case st.Pcap != nil:
			if st.Pcap.Timing == "" {
				st.Pcap.Timing = "keep"
			}
			if st.Pcap.Speed == 0 {
				st.Pcap.Speed = 1
			}
			st.Pcap.path = st.Pcap.File
			if s.fsys != nil {
				st.Pcap.path = path.Join(path.Dir(s.File), st.Pcap.File)
			} else if !filepath.IsAbs(st.Pcap.path) {
				st.Pcap.path = filepath.Join(filepath.Dir(s.File), st.Pcap.File)
			}
		case st.Iperf3 != nil:
			ends(&st.Iperf3.Ends)
			if st.Iperf3.Protocol == "" {
				st.Iperf3.Protocol = "tcp"
			}
			if st.Iperf3.Duration == 0 {
				st.Iperf3.Duration = time.Second
			}
			if st.Iperf3.Bitrate == "" {
				st.Iperf3.Bitrate = "10M"
			}
		}
		if st.Name == "" {
			st.Name = fmt.Sprintf("%s%d", st.kind(), i+1)
		}
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
	for _, st := range s.Traffic.Steps {
		if st.Pcap != nil {
			return false
		}
	}
	return true
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
			return perr(at(field...), strings.Join(field, "."), fmt.Errorf("%q: want one of %s", v, strings.Join(allowed, ", ")))
		}
		return nil
	}
	if err := oneOf(s.Peer, []string{"peer"}, PeerEspgw, PeerLinuxXFRM); err != nil {
		return err
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
	if m := s.Topology.WANMTU; m != 0 && (m < 1280 || m > 9000) {
		return perr(at("topology", "wan-mtu"), "topology.wan-mtu", fmt.Errorf("%d: want 1280..9000", m))
	}
	if w := s.SA.ReplayWindow; w < 0 || w > 1<<20 {
		return perr(at("sa", "replay-window"), "sa.replay-window", fmt.Errorf("%d: want 1..%d", w, 1<<20))
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
			for _, k := range []struct {
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
			}
		}
	}
	for name, e := range map[string]string{"gw1": s.Engines.GW1, "gw2": s.Engines.GW2} {
		if e == "" {
			return perr(at("engines", name), "engines."+name, errors.New("empty engine name"))
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
	if s.Peer == PeerLinuxXFRM {
		if _, engines := lookup(s.root, "engines"); engines != nil {
			if k, _ := lookup(engines, "gw2"); k != nil {
				return perr(k.Line, "engines.gw2", errors.New("gw2 is the Linux kernel (peer: linux-xfrm): its crypto is the kernel's own"))
			}
		}
		if s.SA.ESN && s.SA.ReplayWindow == 0 {
			return perr(at("sa", "replay-window"), "sa.replay-window", errors.New("the Linux kernel does ESN only with a replay window"))
		}
		if s.SA.ReplayWindow > sa.MaxReplayWindow {
			return perr(at("sa", "replay-window"), "sa.replay-window", fmt.Errorf("%d: the kernel peer's window is at most %d", s.SA.ReplayWindow, sa.MaxReplayWindow))
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
		case st.Pcap != nil:
			if st.Pcap.File == "" {
				return perr(line, field+".pcap.file", errors.New("missing"))
			}
			if _, err := s.stat(st.Pcap.path); err != nil {
				return perr(line, field+".pcap.file", err)
			}
			if err := oneOf(st.Pcap.Timing, nil, "keep", "fast"); err != nil {
				return perr(line, field+".pcap.timing", fmt.Errorf("%q: want keep or fast", st.Pcap.Timing))
			}
			if st.Pcap.Speed <= 0 {
				return perr(line, field+".pcap.speed", fmt.Errorf("%v: want a factor > 0", st.Pcap.Speed))
			}
			if s.SA.Mode == "transport" {
				return perr(line, field+".pcap", errors.New("a replay runs between hostA and hostB: not through transport-mode SAs"))
			}
		case st.Iperf3 != nil:
			e = &st.Iperf3.Ends
			if st.Iperf3.Protocol != "tcp" && st.Iperf3.Protocol != "udp" {
				return perr(line, field+".iperf3.protocol", fmt.Errorf("%q: want tcp or udp", st.Iperf3.Protocol))
			}
			if st.Iperf3.Duration < 100*time.Millisecond || st.Iperf3.Duration > 5*time.Minute {
				return perr(line, field+".iperf3.duration", fmt.Errorf("%v: want 100ms..5m", st.Iperf3.Duration))
			}
		}
		if e != nil && s.Peer == PeerLinuxXFRM {
			if e.From == "gw2" || e.To == "gw2" && st.Ping == nil {
				return perr(line, field, errors.New("gw2 is the Linux kernel guest (peer: linux-xfrm): it answers pings but runs no traffic of its own"))
			}
		}
		if e != nil {
			if !slices.Contains(hosts, e.From) || !slices.Contains(hosts, e.To) || e.From == e.To {
				return perr(line, field, fmt.Errorf("from %q to %q: want two different of %s", e.From, e.To, strings.Join(hosts, ", ")))
			}
			if err := oneOf(e.Family, nil, "ipv4", "ipv6", "mixed"); err != nil {
				return perr(line, field+".family", fmt.Errorf("%q: want ipv4, ipv6 or mixed", e.Family))
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

// yamlError turns a yaml.v3 error ("yaml: unmarshal errors:\n  line 3: ...")
// into a ParseError with the line.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		var line int
		if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
			msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
		}
		return &ParseError{File: path, Line: line, Err: errors.New(msg)}
	}
	msg := err.Error()
	var line int
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &line)
	}
	return &ParseError{File: path, Line: line, Err: errors.New(strings.TrimPrefix(msg, "yaml: "))}
}

func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// lineOf is the line of the deepest field of path present in the document.
func lineOf(root *yaml.Node, path ...string) int {
	line, n := root.Line, root
	for _, p := range path {
		k, v := lookup(n, p)
		if k == nil {
			break
		}
		line, n = k.Line, v
	}
	return line
}

func stepLine(root *yaml.Node, i int) int {
	_, tr := lookup(root, "traffic")
	_, steps := lookup(tr, "steps")
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
		_, v := lookup(n, p)
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

// matrixCombos expands `matrix: {field.path: [v1, v2], ...}` into every
// combination, the first field varying slowest.
func matrixCombos(path string, m *yaml.Node) ([][]matrixValue, error) {
	if m == nil {
		return [][]matrixValue{nil}, nil
	}
	if m.Kind != yaml.MappingNode || len(m.Content) == 0 {
		return nil, &ParseError{File: path, Line: m.Line, Field: "matrix", Err: errors.New("want a mapping of field path to a list of values")}
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
