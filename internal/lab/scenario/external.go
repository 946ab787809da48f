package scenario

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/yamlwalk"
	"github.com/espgw/espgw/sa"
)

// External describes a device under test that espgw did not build
// (peer: external): reached through this machine's interfaces, holding
// SAs configured by its own tools. espgw runs gw1, hostA, hostB, the
// traffic and the WAN relay, and judges the device by what comes out.
type External struct {
	// Netns is the network namespace holding the interfaces; empty means
	// this machine's own (the initial namespace).
	Netns string `yaml:"netns" json:"netns,omitempty"`
	// WAN is the link to the device's outer (ESP) side: Address is gw1's
	// outer address on it, DUT the device's.
	WAN ExternalLink `yaml:"wan" json:"wan"`
	// LAN is the link to the device's inner side, where hostB lives:
	// Address is hostB's address, DUT the device's (hostB's gateway).
	LAN ExternalLink `yaml:"lan" json:"lan"`
	// Near is the network behind gw1 that the device's policies protect;
	// hostA gets its 10th address, gw1 its first.
	Near string `yaml:"near" json:"near"`
	// SAFile holds the SAs the device holds, in any format espgw reads
	// (YAML, setkey, ip xfrm state output or commands, esp_sa, charon's
	// log); relative to the scenario file. gw1 uses the same SAs.
	SAFile string `yaml:"sa-file" json:"sa_file"`
	// Counters, if set, is a shell command that prints the device's
	// counters; it runs before and after the traffic. Output in the form
	// of `ip -s xfrm state` gives gw2.* metrics as with linux-xfrm.
	Counters string `yaml:"counters" json:"counters,omitempty"`
	// IKE, in place of SAFile, has gw1 negotiate the SAs with the
	// device's own IKE daemon (IKEv2, a pre-shared key).
	IKE *ExternalIKE `yaml:"ike" json:"ike,omitempty"`
	// Setup, if set, is a shell command run on this machine before each
	// run's traffic, once the interfaces are wired: it configures the
	// device for the run — typically flushes its SAs and installs the
	// run's. With it every run uses fresh SPIs espgw derives for the run,
	// which setup learns from its environment (ESPGW_SPI_OUT, ESPGW_SPI_IN,
	// ESPGW_SA_FILE, ESPGW_IP_XFRM; see setupEnv). Without it the SA file's
	// SPIs are used as they are.
	Setup string `yaml:"setup" json:"setup,omitempty"`
	// Reset, if set, runs after each run (passed or failed), with the same
	// environment: it takes the run's SAs off the device.
	Reset string `yaml:"reset" json:"reset,omitempty"`

	wan, lan   netip.Prefix
	wanDUT     netip.Addr
	lanDUT     netip.Addr
	near       netip.Prefix
	out, in    *sa.SA // gw1 → device, device → gw1
	saFilePath string
}

// ExternalLink is one interface toward the device.
type ExternalLink struct {
	Interface string `yaml:"interface" json:"interface"`
	Address   string `yaml:"address" json:"address"`
	DUT       string `yaml:"dut" json:"dut"`
}

// keyInListing is a key as iproute2 prints one.
var keyInListing = regexp.MustCompile(`0[xX][0-9a-fA-F]{16,}`)

// PeerExternal is a device under test reached through interfaces.
const PeerExternal = "external"

// validateExternal checks the external: section and loads the SA file.
func (s *Scenario) validateExternal(perr func(int, string, error) error) error {
	e := s.External
	at := func(path ...string) int { return lineOf(s.root, append([]string{"external"}, path...)...) }
	if e == nil {
		return perr(at(), "external", errors.New("missing: peer: external needs the interfaces, addresses and SA file of the device"))
	}
	var err error
	type link struct {
		name string
		link ExternalLink
		pfx  *netip.Prefix
		dut  *netip.Addr
	}
	checkLink := func(l link) error {
		if l.link.Interface == "" || len(l.link.Interface) > 15 {
			return perr(at(l.name, "interface"), "external."+l.name+".interface", fmt.Errorf("%s: want an interface name of 1..15 bytes", secret.Quote(l.link.Interface)))
		}
		if l.name == "wan" {
			if *l.pfx, err = netip.ParsePrefix(l.link.Address); err != nil || l.pfx.Addr().Zone() != "" || l.pfx.Addr().Is4In6() {
				return perr(at(l.name, "address"), "external."+l.name+".address", fmt.Errorf("%s: want gw1's outer address with its prefix length, IPv4 or IPv6, e.g. 198.51.100.1/24 or 2001:db8:5::1/64", secret.Quote(l.link.Address)))
			}
		} else if *l.pfx, err = netip.ParsePrefix(l.link.Address); err != nil || !l.pfx.Addr().Is4() {
			return perr(at(l.name, "address"), "external."+l.name+".address", fmt.Errorf("%s: want hostB's IPv4 address with its prefix length, e.g. 203.0.113.10/24 (the traffic is IPv4 against an external device)", secret.Quote(l.link.Address)))
		}
		if *l.dut, err = netip.ParseAddr(l.link.DUT); err != nil || !l.pfx.Contains(*l.dut) || *l.dut == l.pfx.Addr() {
			return perr(at(l.name, "dut"), "external."+l.name+".dut", fmt.Errorf("%s: want the device's address in %s", secret.Quote(l.link.DUT), l.pfx.Masked()))
		}
		return nil
	}
	if err := checkLink(link{"wan", e.WAN, &e.wan, &e.wanDUT}); err != nil {
		return err
	}
	// lanSide checks lan: and near:, which a tunnel needs and transport
	// mode (gw1 and the device alone) refuses.
	lanSide := func(transport bool) error {
		if transport {
			return s.noLAN(perr)
		}
		if err := checkLink(link{"lan", e.LAN, &e.lan, &e.lanDUT}); err != nil {
			return err
		}
		var err error
		if e.near, err = netip.ParsePrefix(e.Near); err != nil || !e.near.Addr().Is4() || e.near.Bits() > 28 {
			return perr(at("near"), "external.near", fmt.Errorf("%s: want the IPv4 network behind gw1 (at most /28), e.g. 192.0.2.0/24", secret.Quote(e.Near)))
		}
		e.near = e.near.Masked()
		return nil
	}
	if e.IKE != nil {
		if m := e.IKE.Mode; m != "" && m != "tunnel" && m != "transport" {
			return perr(lineOf(s.root, "external", "ike", "mode"), "external.ike.mode", fmt.Errorf("%s: want tunnel or transport", secret.Word(m, "tunnel", "transport")))
		}
		if err := lanSide(e.IKE.Mode == "transport"); err != nil {
			return err
		}
		if err := s.validateExternalIKE(perr); err != nil {
			return err
		}
		return s.validateExternalRest(perr)
	}
	if e.SAFile == "" {
		return perr(at("sa-file"), "external.sa-file", errors.New("missing: the SAs the device holds (sa-file), or ike: to negotiate them with the device's IKE daemon"))
	}
	e.saFilePath = e.SAFile
	if !filepath.IsAbs(e.saFilePath) {
		e.saFilePath = filepath.Join(filepath.Dir(s.File), e.SAFile)
	}
	cfg, err := sa.Load(e.saFilePath)
	if err != nil {
		return perr(at("sa-file"), "external.sa-file", err)
	}
	gw1 := e.wan.Addr()
	for _, x := range cfg.SAs {
		switch {
		case x.Src == gw1 && x.Dst == e.wanDUT && e.out == nil:
			e.out = x
		case x.Src == e.wanDUT && x.Dst == gw1 && e.in == nil:
			e.in = x
		}
	}
	if e.out == nil || e.in == nil {
		return perr(at("sa-file"), "external.sa-file", fmt.Errorf("want an SA from %s to %s and one back (the file has %d SAs)", gw1, e.wanDUT, len(cfg.SAs)))
	}
	if e.out.Mode != e.in.Mode {
		return perr(at("sa-file"), "external.sa-file", fmt.Errorf("SA %#x is %s mode, SA %#x %s mode: want both in one mode", e.out.SPI, e.out.Mode, e.in.SPI, e.in.Mode))
	}
	if err := lanSide(e.out.Mode == sa.Transport); err != nil {
		return err
	}
	// What `scenario list` and the progress lines show.
	s.SA.Suite, s.SA.Mode, s.SA.Encap = e.out.Suite.String(), e.out.Mode.String(), e.out.Encap.String()
	s.SA.mode = e.out.Mode
	return s.validateExternalRest(perr)
}

// noLAN refuses lan: and near: for a transport-mode run: its SAs
// protect what gw1 and the device send each other, no LAN behind either.
func (s *Scenario) noLAN(perr func(int, string, error) error) error {
	_, ext := yamlwalk.Lookup(s.root, "external")
	for _, f := range []string{"lan", "near"} {
		if k, _ := yamlwalk.Lookup(ext, f); k != nil {
			return perr(k.Line, "external."+f, errors.New("transport-mode SAs carry traffic between gw1 and the device itself: no LAN is part of the run, leave lan: and near: out"))
		}
	}
	return nil
}

// validateExternalRest checks what goes with the device's SAs, from a
// file or negotiated: the steps, the fields it leaves no room for, the
// families.
func (s *Scenario) validateExternalRest(perr func(int, string, error) error) error {
	e := s.External
	for i, st := range s.Traffic.Steps {
		if st.Pcap != nil {
			return perr(stepLine(s.root, i), fmt.Sprintf("traffic.steps[%d].pcap", i), errors.New("captures are replayed between addresses no host owns, which needs neighbour entries on the device: not against an external device"))
		}
	}
	for _, f := range []string{"sa", "engines"} {
		if k, _ := yamlwalk.Lookup(s.root, f); k != nil {
			return perr(k.Line, f, errors.New("with peer: external the SAs come from external.sa-file or external.ike and gw2 is the device"))
		}
	}
	// The outer family is the WAN addresses'.
	outer := "ipv4"
	if e.wan.Addr().Is6() {
		outer = "ipv6"
	}
	_, topo := yamlwalk.Lookup(s.root, "topology")
	for _, f := range []string{"outer", "family"} {
		if k, _ := yamlwalk.Lookup(topo, f); k != nil && s.Topology.Outer != outer {
			return perr(k.Line, "topology."+f, fmt.Errorf("outer %s, but external.wan's addresses are %s: leave the outer family to them", s.Topology.Outer, outer))
		}
	}
	s.Topology.Outer = outer
	if s.SA.mode == sa.Transport {
		return s.transportSteps(perr, outer)
	}
	if s.Topology.Inner != "ipv4" {
		return perr(lineOf(s.root, "topology"), "topology.inner", errors.New("IPv4 traffic only against an external device"))
	}
	return nil
}

// transportSteps makes the steps of a transport-mode run against a device
// pings from gw1 to the device (its address is the SAs' end), the ends a
// step leaves out included: the device answers echo requests through its
// SAs, and runs no receiver of espgw's for other traffic.
func (s *Scenario) transportSteps(perr func(int, string, error) error, outer string) error {
	_, tr := yamlwalk.Lookup(s.root, "traffic")
	_, steps := yamlwalk.Lookup(tr, "steps")
	for i := range s.Traffic.Steps {
		st := &s.Traffic.Steps[i]
		field, line := fmt.Sprintf("traffic.steps[%d]", i), stepLine(s.root, i)
		if st.Ping == nil {
			return perr(line, field, errors.New("transport mode against an external device: ping steps only (from gw1 to gw2, the device, which answers through its SAs and runs no receiver for other traffic)"))
		}
		var body *yaml.Node
		if steps != nil && i < len(steps.Content) {
			_, body = yamlwalk.Lookup(steps.Content[i], "ping")
		}
		kf, _ := yamlwalk.Lookup(body, "from")
		kt, _ := yamlwalk.Lookup(body, "to")
		if kf == nil && kt == nil {
			st.Ping.From, st.Ping.To = "gw1", "gw2"
		}
		if kfam, _ := yamlwalk.Lookup(body, "family"); kfam == nil {
			st.Ping.Family = outer
		}
		if st.Ping.From != "gw1" || st.Ping.To != "gw2" {
			return perr(line, field, fmt.Errorf("from %s to %s: transport mode against an external device pings from gw1 to gw2 (the device)", secret.Word(st.Ping.From, "gw1"), secret.Word(st.Ping.To, "gw2")))
		}
	}
	return nil
}

// externalAddresses are the standard topology's addresses with the
// device's put in: gw1's outer address and the device's, hostB's and the
// device's LAN address, the network behind gw1.
func (e *External) addresses() *netns.Addresses {
	a := netns.StandardAddresses()
	bits := e.wan.Bits()
	// The wan namespace's router addresses are gone once the relay runs;
	// they only need to be free addresses of the WAN subnet meanwhile.
	free := freeAddrs(e.wan.Masked(), 2, e.wan.Addr(), e.wanDUT)
	if e.wan.Addr().Is6() {
		a.GW1WAN6 = e.wan
		a.GW2WAN6 = netip.PrefixFrom(e.wanDUT, bits)
		a.WANToGW16, a.WANToGW26 = netip.PrefixFrom(free[0], bits), netip.PrefixFrom(free[1], bits)
	} else {
		a.GW1WAN4 = e.wan
		a.GW2WAN4 = netip.PrefixFrom(e.wanDUT, bits)
		a.WANToGW14, a.WANToGW24 = netip.PrefixFrom(free[0], bits), netip.PrefixFrom(free[1], bits)
	}
	if !e.lan.IsValid() {
		return &a // transport mode: the LANs are the bed's own, not the device's
	}
	a.LANB4 = e.lan.Masked()
	a.HostB4 = e.lan
	a.GW2LAN4 = netip.PrefixFrom(e.lanDUT, e.lan.Bits())
	a.LANA4 = e.near
	first := e.near.Addr().Next()
	a.GW1LAN4 = netip.PrefixFrom(first, e.near.Bits())
	hostA := first
	for range 9 {
		hostA = hostA.Next()
	}
	a.HostA4 = netip.PrefixFrom(hostA, e.near.Bits())
	return &a
}

// freeAddrs picks n addresses of p, from its top (below the last, IPv4's
// broadcast), other than taken.
func freeAddrs(p netip.Prefix, n int, taken ...netip.Addr) []netip.Addr {
	var out []netip.Addr
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	for a := last.Prev(); p.Contains(a) && len(out) < n; a = a.Prev() {
		ok := a != p.Addr()
		for _, t := range taken {
			ok = ok && a != t
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
}

// attachExternal stops the bed's espgw gw2 and bridges gw2's WAN and LAN
// links to the device's interfaces, moved into gw2's namespace for the
// run: gw1's ESP reaches the device through the relay, hostB's traffic
// through the device's LAN port.
func (r *runner) attachExternal(ctx context.Context) error {
	if _, err := r.bed.StopGateway(1, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop espgw's gw2: %w", err)
	}
	r.external.gw2 = r.bed.Topo.GW2
	return r.external.attach(ctx)
}

// externalGW2 is the device in gw2's place.
type externalGW2 struct {
	e     *External
	gw2   *netns.Namespace
	moved []string
	// found is how each interface was before the run, to be restored.
	found map[string]linkState
	// out and in are this run's SAs: the file's, with fresh SPIs when a
	// setup command installs them.
	out, in *sa.SA
	// dir holds the run's SA files for the setup and reset commands.
	dir string
	// current, with external.ike, reads the CHILD_SA gw1 sends through;
	// spis are the pairs (out/in) the snapshots found.
	current func(context.Context) (out, in uint32, ok bool)
	spis    []string
}

// newExternalGW2 picks the run's SAs: fresh SPIs when setup is given.
func newExternalGW2(e *External) (*externalGW2, error) {
	if e.IKE != nil {
		return &externalGW2{e: e}, nil // negotiateExternal sets the SAs
	}
	out, in := *e.out, *e.in
	x := &externalGW2{e: e, out: &out, in: &in}
	if e.Setup == "" {
		return x, nil
	}
	for {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("derive the run's SPIs: %w", err)
		}
		// SPIs 1..255 are reserved (RFC 4303 §2.1).
		out.SPI, in.SPI = binary.BigEndian.Uint32(b[:4]), binary.BigEndian.Uint32(b[4:])
		if out.SPI >= 256 && in.SPI >= 256 && out.SPI != in.SPI {
			return x, nil
		}
	}
}

// linkState is what a run changes on an interface it borrows.
type linkState struct {
	up    bool
	mtu   int
	addrs []string // address/prefix, as ip addr add takes them
}

func (x *externalGW2) ip(ctx context.Context, args ...string) ([]byte, error) {
	argv := append(x.home(), args...)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// linkStateOf reads an interface's state in its home namespace.
func (x *externalGW2) linkStateOf(ctx context.Context, ifname string) (linkState, error) {
	out, err := x.ip(ctx, "-j", "addr", "show", "dev", ifname)
	if err != nil {
		return linkState{}, fmt.Errorf("read the state of %s: %w", ifname, err)
	}
	var links []struct {
		Flags    []string `json:"flags"`
		MTU      int      `json:"mtu"`
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return linkState{}, fmt.Errorf("read the state of %s: ip -j addr show printed %q (%v)", ifname, out, err)
	}
	l := links[0]
	st := linkState{up: slices.Contains(l.Flags, "UP"), mtu: l.MTU}
	for _, a := range l.AddrInfo {
		if a.Scope == "link" && strings.HasPrefix(a.Local, "fe80:") {
			continue // the kernel makes it again when the link comes up
		}
		st.addrs = append(st.addrs, fmt.Sprintf("%s/%d", a.Local, a.PrefixLen))
	}
	return st, nil
}

// restore puts an interface back as it was found: MTU, addresses, up or
// down. (Moving an interface between namespaces takes its addresses and
// sets it down.)
func (x *externalGW2) restore(ctx context.Context, ifname string, st linkState) error {
	var errs []error
	if _, err := x.ip(ctx, "link", "set", "dev", ifname, "mtu", strconv.Itoa(st.mtu)); err != nil {
		errs = append(errs, err)
	}
	for _, a := range st.addrs {
		if out, err := x.ip(ctx, "addr", "add", a, "dev", ifname); err != nil && !strings.Contains(string(out), "File exists") {
			errs = append(errs, err)
		}
	}
	state := "down"
	if st.up {
		state = "up"
	}
	if _, err := x.ip(ctx, "link", "set", "dev", ifname, state); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("restore %s as it was: %w", ifname, errors.Join(errs...))
	}
	return nil
}

func (x *externalGW2) home() []string {
	if x.e.Netns == "" {
		return []string{"ip"}
	}
	return []string{"ip", "-n", x.e.Netns}
}

func (x *externalGW2) attach(ctx context.Context) error {
	target := x.gw2.Name()
	x.found = map[string]linkState{}
	ifnames := []string{x.e.WAN.Interface}
	if x.e.lan.IsValid() {
		ifnames = append(ifnames, x.e.LAN.Interface)
	}
	for _, ifname := range ifnames {
		st, err := x.linkStateOf(ctx, ifname)
		if err != nil {
			return fmt.Errorf("move %s into the test bed: %w", ifname, err)
		}
		if _, err := x.ip(ctx, "link", "set", ifname, "netns", target); err != nil {
			return fmt.Errorf("move %s into the test bed: %w", ifname, err)
		}
		x.found[ifname] = st
		x.moved = append(x.moved, ifname)
	}
	lan := ""
	if x.e.lan.IsValid() {
		lan = x.e.LAN.Interface
	}
	return bridgeGW2(ctx, x.gw2, "the device", x.e.WAN.Interface, lan, 0)
}

// bridgeGW2 makes gw2's namespace a bump in two wires for a gateway that
// is not espgw: no addresses, no forwarding, no IPv6 of its own (its MLD
// and ND would cross the bridges), gw2's WAN link bridged to wan and its
// LAN link to lan (both already moved into the namespace; with no lan,
// hostB's link stays unbridged); mtu, when not 0, is wan's.
func bridgeGW2(ctx context.Context, gw2 *netns.Namespace, what, wan, lan string, mtu int) error {
	if err := gw2.Sysctl(map[string]string{
		"net/ipv4/ip_forward": "0", "net/ipv6/conf/all/forwarding": "0",
		"net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1",
		"net/ipv6/conf/wan0/disable_ipv6": "1", "net/ipv6/conf/lan0/disable_ipv6": "1",
	}); err != nil {
		return fmt.Errorf("bridge gw2 to %s: %w", what, err)
	}
	cmds := [][]string{
		{"ip", "addr", "flush", "dev", "wan0"}, {"ip", "addr", "flush", "dev", "lan0"},
		{"ip", "link", "add", "brwan", "type", "bridge", "forward_delay", "0", "mcast_snooping", "0"},
		{"ip", "link", "add", "brlan", "type", "bridge", "forward_delay", "0", "mcast_snooping", "0"},
	}
	if mtu > 0 {
		cmds = append(cmds, []string{"ip", "link", "set", wan, "mtu", strconv.Itoa(mtu)})
	}
	cmds = append(cmds,
		[]string{"ip", "link", "set", "wan0", "master", "brwan"}, []string{"ip", "link", "set", wan, "master", "brwan"},
		[]string{"ip", "link", "set", wan, "up"}, []string{"ip", "link", "set", "brwan", "up"})
	if lan != "" {
		cmds = append(cmds,
			[]string{"ip", "link", "set", "lan0", "master", "brlan"}, []string{"ip", "link", "set", lan, "master", "brlan"},
			[]string{"ip", "link", "set", lan, "up"}, []string{"ip", "link", "set", "brlan", "up"})
	}
	for _, c := range cmds {
		if out, err := gw2.Output(ctx, c[0], c[1:]...); err != nil {
			return fmt.Errorf("bridge gw2 to %s (%s): %w: %s", what, strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// unbridgeGW2 takes ifnames out of gw2's bridges and moves them to the
// namespace dst (a name, or a process id).
func unbridgeGW2(gw2 *netns.Namespace, dst string, ifnames []string) error {
	var errs []error
	for _, ifname := range ifnames {
		gw2.Output(context.Background(), "ip", "link", "set", ifname, "nomaster")
		if out, err := gw2.Output(context.Background(), "ip", "link", "set", ifname, "netns", dst); err != nil {
			errs = append(errs, fmt.Errorf("move %s out of gw2: %w: %s", ifname, err, out))
		}
	}
	return errors.Join(errs...)
}

// detach gives the interfaces back to where they were, as they were.
func (x *externalGW2) detach() error {
	if len(x.moved) == 0 {
		return nil
	}
	dst := "1" // the initial namespace, by its first process
	if x.e.Netns != "" {
		dst = x.e.Netns
	}
	errs := []error{unbridgeGW2(x.gw2, dst, x.moved)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ifname := range x.moved {
		errs = append(errs, x.restore(ctx, ifname, x.found[ifname]))
	}
	x.moved = nil
	return errors.Join(errs...)
}

// hookEnv is the environment of the setup and reset commands: the run's
// SPIs and addresses, and its SAs as espgw's YAML (ESPGW_SA_FILE) and as
// the `ip xfrm` commands that install them on a Linux device
// (ESPGW_IP_XFRM, what `espgw sa convert --to ip-xfrm --local DUT`
// writes). The files hold the keys; they are readable by their owner only
// and removed after the run.
func (x *externalGW2) hookEnv() ([]string, error) {
	if x.dir == "" {
		dir, err := os.MkdirTemp("", "espgw-external-")
		if err != nil {
			return nil, fmt.Errorf("the run's SA files: %w", err)
		}
		x.dir = dir
		cfg := &sa.Config{SAs: []*sa.SA{x.out, x.in}}
		if err := sa.WriteFile(filepath.Join(dir, "sas.yaml"), cfg); err != nil {
			return nil, fmt.Errorf("the run's SA files: %w", err)
		}
		script, err := sa.MarshalXFRMFor(hostSelectors(cfg), x.e.wanDUT)
		if err != nil {
			return nil, fmt.Errorf("the run's SA files: %w", err)
		}
		script = append(ndBypass(x.out), script...)
		if err := secret.WriteFile(filepath.Join(dir, "ip-xfrm.sh"), script); err != nil {
			return nil, fmt.Errorf("the run's SA files: %w", err)
		}
	}
	return append(os.Environ(),
		fmt.Sprintf("ESPGW_SPI_OUT=%#08x", x.out.SPI), fmt.Sprintf("ESPGW_SPI_IN=%#08x", x.in.SPI),
		"ESPGW_GW1="+x.e.wan.Addr().String(), "ESPGW_DUT="+x.e.wanDUT.String(),
		"ESPGW_SA_FILE="+filepath.Join(x.dir, "sas.yaml"), "ESPGW_IP_XFRM="+filepath.Join(x.dir, "ip-xfrm.sh"),
	), nil
}

// hostSelectors is cfg with each transport-mode SA that names no selectors
// given the one between its two ends (every protocol), so the `ip xfrm`
// commands carry the device's policies too.
func hostSelectors(cfg *sa.Config) *sa.Config {
	out := &sa.Config{SPD: cfg.SPD}
	for _, s := range cfg.SAs {
		if s.Mode == sa.Transport && len(s.Selectors) == 0 {
			c := *s
			c.Selectors = []sa.Selector{{Src: netip.PrefixFrom(s.Src, s.Src.BitLen()), Dst: netip.PrefixFrom(s.Dst, s.Dst.BitLen())}}
			s = &c
		}
		out.SAs = append(out.SAs, s)
	}
	return out
}

// ndBypass are, for IPv6 transport-mode SAs, the `ip xfrm` policies that
// let the neighbour solicitations and advertisements between the two ends
// (ICMPv6 135 and 136) pass in clear, put in before the SAs' own: the
// host-to-host policies would otherwise want ESP for the device's unicast
// solicitations and advertisements and refuse gw1's clear ones, and the
// neighbours would never resolve. They name the same two addresses as the
// SAs' policies, so the kernel keeps them in the same list, where of equal
// priority the first put in wins.
func ndBypass(out *sa.SA) []byte {
	if out.Mode != sa.Transport || !out.Dst.Is6() {
		return nil
	}
	gw1, dut := out.Src.String()+"/128", out.Dst.String()+"/128"
	var b strings.Builder
	b.WriteString("# Neighbour discovery between the two ends in clear, before their transport-mode policies.\n")
	for _, t := range []int{135, 136} {
		fmt.Fprintf(&b, "ip xfrm policy add src %s dst %s proto 58 type %d dir out action allow\n", dut, gw1, t)
		fmt.Fprintf(&b, "ip xfrm policy add src %s dst %s proto 58 type %d dir in action allow\n", gw1, dut, t)
	}
	return []byte(b.String())
}

// hook runs the setup or reset command (at most two minutes).
func (x *externalGW2) hook(ctx context.Context, field, command string) error {
	env, err := x.hookEnv()
	if err != nil {
		return fmt.Errorf("external.%s: %w", field, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		shown := keyInListing.ReplaceAllString(strings.TrimSpace(string(out)), "<key hidden>")
		return fmt.Errorf("external.%s: %w: %s", field, err, tailOf(shown, 2000))
	}
	return nil
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// removeFiles removes the run's SA files.
func (x *externalGW2) removeFiles() {
	if x.dir != "" {
		os.RemoveAll(x.dir)
		x.dir = ""
	}
}

// hint says, for a run that failed, what the device's counters show and
// what that usually means; found says whether the counters listed the
// run's SAs.
func (x *externalGW2) hint(m Metrics, found bool) string {
	spi := fmt.Sprintf("%#x", x.out.SPI)
	if x.e.IKE != nil {
		switch {
		case x.e.Counters == "":
			return "the device's counters are unknown (no external.counters command)"
		case x.rekeyed():
			return fmt.Sprintf("a rekey replaced the CHILD_SA during the run (%s): the device's counters of the one before went with it, so gw2.* are not known", strings.Join(x.spis, " then "))
		case !found:
			return fmt.Sprintf("the device's counters list no state with SPI %s, which gw1 negotiated with it: its IKE daemon keeps the CHILD_SA somewhere the counters command does not read", spi)
		}
	}
	if x.e.Counters == "" {
		h := "the device's counters are unknown (no external.counters command)"
		if x.e.Setup == "" {
			h += "; a device keeps each SA's replay window from one run to the next while gw1 starts at sequence 1 every run, " +
				"so a run after the first fails unless the SAs are installed again: give external.setup (see scenarios/external/)"
		}
		return h
	}
	opened, replay, window, icv := m["gw2.opened"], m["gw2.replay"], m["gw2.outside-window"], m["gw2.bad-icv"]
	switch {
	case !found:
		if x.e.Setup != "" {
			return fmt.Sprintf("the device's counters list no state with SPI %s: external.setup did not install this run's SAs "+
				"(the SPIs are fresh every run: use ESPGW_SPI_OUT/ESPGW_SPI_IN or ESPGW_IP_XFRM)", spi)
		}
		return fmt.Sprintf("the device's counters list no state with SPI %s toward %s: it does not hold the SA file's SAs", spi, x.e.wanDUT)
	case replay+window > 0:
		h := fmt.Sprintf("the device's counters show replay=%d outside-window=%d opened=%d on SPI %s: ", int64(replay), int64(window), int64(opened), spi)
		if x.e.Setup == "" {
			return h + "it dropped gw1's packets as replays, which usually means it kept the SA's replay window from an earlier run " +
				"(gw1 starts at sequence 1 every run): install its SAs again before each run, by hand or with external.setup"
		}
		return h + "setup installed fresh SAs, so these are replays within this run (the WAN impairments, or the device's window is too small)"
	case icv > 0 && opened == 0:
		return fmt.Sprintf("the device's counters show bad-icv=%d and nothing opened on SPI %s: its keys or algorithms differ from the SA file's", int64(icv), spi)
	case opened == 0:
		return fmt.Sprintf("the device's counters show nothing opened on SPI %s: gw1's ESP did not reach it, or its policy does not match", spi)
	}
	return fmt.Sprintf("the device's counters show opened=%d replay=%d outside-window=%d bad-icv=%d on SPI %s",
		int64(opened), int64(replay), int64(window), int64(icv), spi)
}

// stats runs the counters command; a listing in `ip -s xfrm state` form
// gives the device's per-SA counters under espgw's names (as for
// linux-xfrm); anything else gives nothing to compare.
func (x *externalGW2) stats(ctx context.Context) (gateway.Stats, string, error) {
	x.refreshChild(ctx)
	if x.e.Counters == "" {
		return gateway.Stats{}, "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", x.e.Counters).Output()
	if err != nil {
		return gateway.Stats{}, string(out), fmt.Errorf("external.counters: %w", err)
	}
	// The output goes into the report: a listing made without nokeys
	// would carry the keys, which are cut out.
	shown := keyInListing.ReplaceAllString(string(out), "<key hidden>")
	states, err := sa.ParseXFRMStates("external.counters", out)
	if err != nil {
		return gateway.Stats{}, shown, nil // not a listing: kept in the report only
	}
	return kernelAsGateway(kernelpeer.Counters{States: states}, [2]*sa.SA{x.out, x.in}), shown, nil
}

// externalSAs puts the run's SAs into the SA file gw1 (and, until it is
// stopped, gw2) reads.
func (r *runner) externalSAs(cfg *sa.Config) error {
	if r.external.e.IKE != nil {
		return nil // gw1 starts on the bed's own SAs until it negotiates
	}
	cfg.SAs[0], cfg.SAs[1] = r.external.out, r.external.in
	return nil
}
