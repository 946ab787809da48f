package scenario

import (
	"context"
	"errors"
	"fmt"
	"github.com/espgw/espgw/internal/secret"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/lab/netns"
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
	for _, l := range []struct {
		name string
		link ExternalLink
		pfx  *netip.Prefix
		dut  *netip.Addr
	}{{"wan", e.WAN, &e.wan, &e.wanDUT}, {"lan", e.LAN, &e.lan, &e.lanDUT}} {
		if l.link.Interface == "" || len(l.link.Interface) > 15 {
			return perr(at(l.name, "interface"), "external."+l.name+".interface", fmt.Errorf("%s: want an interface name of 1..15 bytes", secret.Quote(l.link.Interface)))
		}
		if *l.pfx, err = netip.ParsePrefix(l.link.Address); err != nil || !l.pfx.Addr().Is4() {
			return perr(at(l.name, "address"), "external."+l.name+".address", fmt.Errorf("%s: want an IPv4 address with its prefix length, e.g. 198.51.100.1/24 (IPv6 is not supported against external devices yet)", secret.Quote(l.link.Address)))
		}
		if *l.dut, err = netip.ParseAddr(l.link.DUT); err != nil || !l.pfx.Contains(*l.dut) || *l.dut == l.pfx.Addr() {
			return perr(at(l.name, "dut"), "external."+l.name+".dut", fmt.Errorf("%s: want the device's address in %s", secret.Quote(l.link.DUT), l.pfx.Masked()))
		}
	}
	if e.near, err = netip.ParsePrefix(e.Near); err != nil || !e.near.Addr().Is4() || e.near.Bits() > 28 {
		return perr(at("near"), "external.near", fmt.Errorf("%s: want the IPv4 network behind gw1 (at most /28), e.g. 192.0.2.0/24", secret.Quote(e.Near)))
	}
	e.near = e.near.Masked()
	if e.SAFile == "" {
		return perr(at("sa-file"), "external.sa-file", errors.New("missing: the SAs the device holds"))
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
	// What `scenario list` and the progress lines show.
	s.SA.Suite, s.SA.Mode, s.SA.Encap = e.out.Suite.String(), e.out.Mode.String(), e.out.Encap.String()
	if e.out.Mode != sa.Tunnel || e.in.Mode != sa.Tunnel {
		return perr(at("sa-file"), "external.sa-file", errors.New("tunnel-mode SAs only against an external device (hostA and hostB behind the two ends)"))
	}
	for i, st := range s.Traffic.Steps {
		if st.Pcap != nil {
			return perr(stepLine(s.root, i), fmt.Sprintf("traffic.steps[%d].pcap", i), errors.New("captures are replayed between addresses no host owns, which needs neighbour entries on the device: not against an external device"))
		}
	}
	for _, f := range []string{"sa", "engines"} {
		if k, _ := lookup(s.root, f); k != nil {
			return perr(k.Line, f, errors.New("with peer: external the SAs come from external.sa-file and gw2 is the device"))
		}
	}
	if s.Topology.Inner != "ipv4" || s.Topology.Outer != "ipv4" {
		return perr(lineOf(s.root, "topology"), "topology", errors.New("IPv4 only against an external device"))
	}
	return nil
}

// externalAddresses are the standard topology's addresses with the
// device's put in: gw1's outer address and the device's, hostB's and the
// device's LAN address, the network behind gw1.
func (e *External) addresses() *netns.Addresses {
	a := netns.StandardAddresses()
	bits := e.wan.Bits()
	a.GW1WAN4 = e.wan
	a.GW2WAN4 = netip.PrefixFrom(e.wanDUT, bits)
	// The wan namespace's router addresses are gone once the relay runs;
	// they only need to be free addresses of the WAN subnet meanwhile.
	free := freeAddrs(e.wan.Masked(), 2, e.wan.Addr(), e.wanDUT)
	a.WANToGW14, a.WANToGW24 = netip.PrefixFrom(free[0], bits), netip.PrefixFrom(free[1], bits)
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

// freeAddrs picks n addresses of p, from its top, other than taken.
func freeAddrs(p netip.Prefix, n int, taken ...netip.Addr) []netip.Addr {
	var out []netip.Addr
	last := p.Addr()
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		last = a
	}
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
	e := r.s.External
	if _, err := r.bed.StopGateway(1, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop espgw's gw2: %w", err)
	}
	r.external = &externalGW2{e: e, gw2: r.bed.Topo.GW2}
	return r.external.attach(ctx)
}

// externalGW2 is the device in gw2's place.
type externalGW2 struct {
	e     *External
	gw2   *netns.Namespace
	moved []string
}

func (x *externalGW2) home() []string {
	if x.e.Netns == "" {
		return []string{"ip"}
	}
	return []string{"ip", "-n", x.e.Netns}
}

func (x *externalGW2) attach(ctx context.Context) error {
	target := x.gw2.Name()
	for _, ifname := range []string{x.e.WAN.Interface, x.e.LAN.Interface} {
		args := append(x.home(), "link", "set", ifname, "netns", target)
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("move %s into the test bed: %w: %s", ifname, err, strings.TrimSpace(string(out)))
		}
		x.moved = append(x.moved, ifname)
	}
	return bridgeGW2(ctx, x.gw2, "the device", x.e.WAN.Interface, x.e.LAN.Interface, 0)
}

// bridgeGW2 makes gw2's namespace a bump in two wires for a gateway that
// is not espgw: no addresses, no forwarding, no IPv6 of its own (its MLD
// and ND would cross the bridges), gw2's WAN link bridged to wan and its
// LAN link to lan (both already moved into the namespace); mtu, when not
// 0, is wan's.
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
		[]string{"ip", "link", "set", "lan0", "master", "brlan"}, []string{"ip", "link", "set", lan, "master", "brlan"},
		[]string{"ip", "link", "set", wan, "up"}, []string{"ip", "link", "set", lan, "up"},
		[]string{"ip", "link", "set", "brwan", "up"}, []string{"ip", "link", "set", "brlan", "up"})
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

// detach gives the interfaces back to where they were.
func (x *externalGW2) detach() error {
	dst := "1" // the initial namespace, by its first process
	if x.e.Netns != "" {
		dst = x.e.Netns
	}
	err := unbridgeGW2(x.gw2, dst, x.moved)
	x.moved = nil
	return err
}

// stats runs the counters command; a listing in `ip -s xfrm state` form
// gives the device's per-SA counters under espgw's names (as for
// linux-xfrm); anything else gives nothing to compare.
func (x *externalGW2) stats(ctx context.Context) (gateway.Stats, string, error) {
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
	return kernelAsGateway(kernelpeer.Counters{States: states}, [2]*sa.SA{x.e.out, x.e.in}), shown, nil
}

// externalSAs puts the device's SAs into the SA file gw1 (and, until it
// is stopped, gw2) reads.
func (r *runner) externalSAs(cfg *sa.Config) error {
	e := r.s.External
	cfg.SAs[0], cfg.SAs[1] = e.out, e.in
	return nil
}
