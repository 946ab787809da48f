package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/yamlwalk"
	"github.com/espgw/espgw/sa"
)

// ExternalIKE is external.ike: gw1 negotiates the SAs with the device's
// own IKE daemon by IKEv2, in place of an SA file. The names are those of
// the gateway's ike: section (and swanctl.conf's): what gw1's connection
// to the device is.
type ExternalIKE struct {
	// RemoteAddrs is where the device speaks IKE (default: wan.dut).
	RemoteAddrs []string `yaml:"remote_addrs" json:"remote_addrs,omitempty"`
	// Local and Remote are the identities (default: the addresses).
	Local  ExternalIKEEnd `yaml:"local" json:"local,omitempty"`
	Remote ExternalIKEEnd `yaml:"remote" json:"remote,omitempty"`
	// PSKFile (relative to the scenario file) or PSKEnv hold the
	// pre-shared key the device is configured with.
	PSKFile string `yaml:"psk_file" json:"psk_file,omitempty"`
	PSKEnv  string `yaml:"psk_env" json:"psk_env,omitempty"`
	// Proposals and ESPProposals are in strongSwan's syntax (default:
	// the gateway's defaults).
	Proposals    string `yaml:"proposals" json:"proposals,omitempty"`
	ESPProposals string `yaml:"esp_proposals" json:"esp_proposals,omitempty"`
	// LocalTS and RemoteTS are the CHILD_SA's traffic selectors (default:
	// near and the LAN's network).
	LocalTS  []string `yaml:"local_ts" json:"local_ts,omitempty"`
	RemoteTS []string `yaml:"remote_ts" json:"remote_ts,omitempty"`
	// Mode is the CHILD_SA's, tunnel (default) or transport: in
	// transport mode the selectors are gw1's and the device's own
	// addresses, no LAN is part of the run and the steps are pings from
	// gw1 to the device.
	Mode string `yaml:"mode" json:"mode,omitempty"`
	// RekeyTime is when gw1 rekeys the CHILD_SA (default 1h: none in a
	// run); a few seconds rekey it during the traffic.
	RekeyTime string `yaml:"rekey_time" json:"rekey_time,omitempty"`
	// Timeout bounds the wait for the CHILD_SA (default 30s).
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// Secrets are gw1's private keys, named as the gateway's ike.secrets
	// (private-NAME, ecdsa-NAME, rsa-NAME): with local.auth pubkey, the key
	// of local.certs' certificate.
	Secrets map[string]ExternalIKESecret `yaml:"secrets" json:"secrets,omitempty"`

	pskPath           string
	localTS, remoteTS []netip.Prefix
	remoteAddrs       []netip.Addr
}

// ExternalIKEEnd is one side's identity and how it authenticates, as the
// gateway's local: and remote: say it: auth psk (the default) or pubkey,
// gw1's certificate files (local.certs) and the CAs of the device's
// (remote.cacerts), relative to the scenario file.
type ExternalIKEEnd struct {
	ID      string   `yaml:"id" json:"id,omitempty"`
	Auth    string   `yaml:"auth" json:"auth,omitempty"`
	Certs   []string `yaml:"certs" json:"certs,omitempty"`
	CACerts []string `yaml:"cacerts" json:"cacerts,omitempty"`
}

// ExternalIKESecret is a private key of external.ike.secrets: a PEM file
// (relative to the scenario file).
type ExternalIKESecret struct {
	File string `yaml:"file" json:"file"`
}

// externalIKEMetrics are the ike.* metrics of a run against a device
// negotiated with: gw1's counts over the traffic.
var externalIKEMetrics = []string{"rekeys", "retransmits", "established", "failed"}

// validateExternalIKE checks external.ike: the device must be a tunnel
// with a LAN behind it, the key readable, the proposals espgw's.
func (s *Scenario) validateExternalIKE(perr func(int, string, error) error) error {
	e, x := s.External, s.External.IKE
	at := func(path ...string) int { return lineOf(s.root, append([]string{"external", "ike"}, path...)...) }
	if e.SAFile != "" {
		return perr(lineOf(s.root, "external", "sa-file"), "external.sa-file", errors.New("give the SA file or ike, not both: with ike the SAs are negotiated"))
	}
	for _, f := range []string{"setup", "reset"} {
		_, ext := yamlwalk.Lookup(s.root, "external")
		if k, _ := yamlwalk.Lookup(ext, f); k != nil {
			return perr(k.Line, "external."+f, errors.New("with ike the device's IKE daemon installs the SAs, which setup and reset would install and flush: leave them out"))
		}
	}
	if len(x.RemoteAddrs) == 0 {
		x.remoteAddrs = []netip.Addr{e.wanDUT}
	}
	for _, a := range x.RemoteAddrs {
		addr, err := netip.ParseAddr(a)
		if err != nil || addr.Is6() != e.wanDUT.Is6() {
			return perr(at("remote_addrs"), "external.ike.remote_addrs", fmt.Errorf("%s: want the device's IKE address, of wan's family", secret.Quote(a)))
		}
		x.remoteAddrs = append(x.remoteAddrs, addr)
	}
	for _, end := range []struct {
		name string
		id   string
	}{{"local", x.Local.ID}, {"remote", x.Remote.ID}} {
		if end.id != "" {
			if _, err := ike.ParseIdentity(end.id); err != nil {
				return perr(at(end.name, "id"), "external.ike."+end.name+".id", errors.New(secret.Scrub(err.Error())))
			}
		}
	}
	switch {
	case x.PSKFile != "" && x.PSKEnv != "":
		return perr(at("psk_file"), "external.ike", errors.New("give one of psk_file and psk_env, not both"))
	case x.PSKFile != "":
		x.pskPath = x.PSKFile
		if !filepath.IsAbs(x.pskPath) {
			x.pskPath = filepath.Join(filepath.Dir(s.File), x.PSKFile)
		}
		if x.pskPath, _ = filepath.Abs(x.pskPath); x.pskPath == "" {
			x.pskPath = x.PSKFile
		}
		st, err := os.Stat(x.pskPath)
		if err != nil {
			return perr(at("psk_file"), "external.ike.psk_file", fmt.Errorf("the pre-shared key: %w", errors.Unwrap(err)))
		}
		if st.Size() == 0 {
			return perr(at("psk_file"), "external.ike.psk_file", fmt.Errorf("%s is empty", secret.Quote(x.PSKFile)))
		}
	case x.PSKEnv != "":
		if v, ok := os.LookupEnv(x.PSKEnv); !ok || v == "" {
			return perr(at("psk_env"), "external.ike.psk_env", fmt.Errorf("the environment variable %s is not set or empty", secret.Quote(x.PSKEnv)))
		}
	case x.Local.Auth == "pubkey" && (x.Remote.Auth == "pubkey" || x.Remote.Auth == "" && len(x.Remote.CACerts) > 0):
	default:
		return perr(at(), "external.ike", errors.New("no pre-shared key: give psk_file or psk_env (the key the device is configured with), or certificates (local: {auth: pubkey, certs}, remote: {auth: pubkey, cacerts}, secrets)"))
	}
	if err := x.resolveFiles(filepath.Dir(s.File), at, perr); err != nil {
		return err
	}
	for _, p := range []struct {
		field, text string
		proto       ike.ProtocolID
	}{{"proposals", x.Proposals, ike.ProtoIKE}, {"esp_proposals", x.ESPProposals, ike.ProtoESP}} {
		if p.text == "" || p.text == "default" {
			continue
		}
		if _, err := ike.ParseProposals(p.proto, p.text); err != nil {
			return perr(at(p.field), "external.ike."+p.field, errors.New(secret.Scrub(err.Error())))
		}
	}
	ts := func(field string, given []string, def netip.Prefix) ([]netip.Prefix, error) {
		if len(given) == 0 {
			return []netip.Prefix{def}, nil
		}
		var out []netip.Prefix
		for _, g := range given {
			p, err := netip.ParsePrefix(g)
			if err != nil {
				return nil, perr(at(field), "external.ike."+field, fmt.Errorf("%s: want a prefix such as 192.0.2.0/24", secret.Quote(g)))
			}
			out = append(out, p.Masked())
		}
		return out, nil
	}
	mode := sa.Tunnel
	localTS, remoteTS := e.near, e.lan.Masked()
	if x.Mode == "transport" { // validateExternal checked the mode
		mode = sa.Transport
		gw1 := e.wan.Addr()
		localTS, remoteTS = netip.PrefixFrom(gw1, gw1.BitLen()), netip.PrefixFrom(e.wanDUT, e.wanDUT.BitLen())
	}
	var err error
	if x.localTS, err = ts("local_ts", x.LocalTS, localTS); err != nil {
		return err
	}
	if x.remoteTS, err = ts("remote_ts", x.RemoteTS, remoteTS); err != nil {
		return err
	}
	if mode == sa.Transport && (len(x.localTS) != 1 || x.localTS[0] != localTS || len(x.remoteTS) != 1 || x.remoteTS[0] != remoteTS) {
		return perr(at("local_ts"), "external.ike", fmt.Errorf("transport mode protects gw1's and the device's own traffic: the selectors are %s and %s (leave local_ts and remote_ts out)", localTS, remoteTS))
	}
	if x.RekeyTime != "" {
		if _, err := time.ParseDuration(x.RekeyTime); err != nil {
			return perr(at("rekey_time"), "external.ike.rekey_time", fmt.Errorf("%s: want a duration such as 10s or 1h", secret.Number(x.RekeyTime)))
		}
	}
	if x.Timeout == 0 {
		x.Timeout = 30 * time.Second
	}
	if x.Timeout < time.Second || x.Timeout > 10*time.Minute {
		return perr(at("timeout"), "external.ike.timeout", fmt.Errorf("%s: want 1s to 10m", x.Timeout))
	}
	s.SA.Suite, s.SA.Mode, s.SA.Encap = "ike", mode.String(), sa.EncapNone.String()
	s.SA.mode = mode
	// gw1 must take its connection: what the gateway refuses (a key that
	// is not the certificate's, a file that is no certificate) is said
	// now, not when gw1 restarts in the middle of the run.
	section, err := x.gatewayIKE(e.wan.Addr(), "")
	if err != nil {
		return perr(at(), "external.ike", err)
	}
	conf := testbed.GatewayConfig{Local: e.wan.Addr(), TUN: "esp0", Extra: section}.String()
	if _, err := gateway.ParseConfig("gw1.yaml", []byte(conf), sim.Engines{}); err != nil {
		return perr(at(), "external.ike", fmt.Errorf("gw1's connection to the device (ike.connections.device) would be refused: %s", secret.Scrub(err.Error())))
	}
	return nil
}

// resolveFiles makes the certificate and key files absolute (gw1's
// configuration lives elsewhere) and checks that each can be read.
func (x *ExternalIKE) resolveFiles(dir string, at func(...string) int, perr func(int, string, error) error) error {
	abs := func(f string) string {
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		if a, err := filepath.Abs(f); err == nil {
			return a
		}
		return f
	}
	check := func(files []string, path ...string) error {
		for i, f := range files {
			files[i] = abs(f)
			if _, err := os.Stat(files[i]); err != nil {
				return perr(at(path...), "external.ike."+strings.Join(path, "."), fmt.Errorf("%s: %w", secret.Quote(f), errors.Unwrap(err)))
			}
		}
		return nil
	}
	if err := check(x.Local.Certs, "local", "certs"); err != nil {
		return err
	}
	if err := check(x.Remote.CACerts, "remote", "cacerts"); err != nil {
		return err
	}
	for name, sec := range x.Secrets {
		files := []string{sec.File}
		if err := check(files, "secrets", name); err != nil {
			return err
		}
		x.Secrets[name] = ExternalIKESecret{File: files[0]}
	}
	return nil
}

// gatewayIKE is gw1's ike: section for the device (YAML, the key
// included): one connection that initiates at start, its CHILD_SA
// between near and the LAN; with captures, the decryption tables beside
// them.
func (x *ExternalIKE) gatewayIKE(gw1 netip.Addr, capDir string) (string, error) {
	child := map[string]any{"local_ts": prefixStrings(x.localTS), "remote_ts": prefixStrings(x.remoteTS), "start_action": "start"}
	if x.ESPProposals != "" {
		child["esp_proposals"] = x.ESPProposals
	}
	if x.Mode != "" {
		child["mode"] = x.Mode
	}
	if x.RekeyTime != "" {
		child["rekey_time"] = x.RekeyTime
		if d, _ := time.ParseDuration(x.RekeyTime); d > 0 && d < time.Minute {
			child["rand_time"] = (d / 10).String()
		}
	}
	remotes := make([]string, len(x.remoteAddrs))
	for i, a := range x.remoteAddrs {
		remotes[i] = a.String()
	}
	conn := map[string]any{"local_addrs": []string{gw1.String()}, "remote_addrs": remotes, "children": map[string]any{"net": child}}
	for _, end := range []struct {
		name string
		e    ExternalIKEEnd
	}{{"local", x.Local}, {"remote", x.Remote}} {
		m := map[string]any{}
		if end.e.ID != "" {
			m["id"] = end.e.ID
		}
		if end.e.Auth != "" {
			m["auth"] = end.e.Auth
		}
		if len(end.e.Certs) > 0 {
			m["certs"] = end.e.Certs
		}
		if len(end.e.CACerts) > 0 {
			m["cacerts"] = end.e.CACerts
		}
		if len(m) > 0 {
			conn[end.name] = m
		}
	}
	if x.Proposals != "" {
		conn["proposals"] = x.Proposals
	}
	switch {
	case x.pskPath != "":
		conn["psk_file"] = x.pskPath
	case x.PSKEnv != "":
		conn["psk_env"] = x.PSKEnv
	}
	sec := map[string]any{"connections": map[string]any{"device": conn}}
	if len(x.Secrets) > 0 {
		secrets := map[string]any{}
		for name, k := range x.Secrets {
			secrets[name] = map[string]string{"file": k.File}
		}
		sec["secrets"] = secrets
	}
	if capDir != "" {
		sec["decryption_table"] = filepath.Join(capDir, "ikev2_decryption_table")
		sec["esp_sa_file"] = filepath.Join(capDir, "esp_sa")
	}
	out, err := yaml.Marshal(map[string]any{"ike": sec})
	if err != nil {
		return "", fmt.Errorf("gw1's ike: section: %w", err)
	}
	return string(out), nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// negotiateExternal restarts gw1 with an IKE connection to the device in
// place of its SA file, and waits for the CHILD_SA: its SPIs are the
// run's SAs (the device's counters are looked up by them).
func (r *runner) negotiateExternal(ctx context.Context, capDir string) error {
	x := r.s.External.IKE
	gw1 := r.s.External.wan.Addr()
	section, err := x.gatewayIKE(gw1, capDir)
	if err != nil {
		return err
	}
	r.opts.progress("%s: gw1 negotiates with the device by IKE (%s)", r.s.Name, x.remoteAddrs[0])
	if err := r.bed.Reconfigure(ctx, 0, func(c *testbed.GatewayConfig) { c.SAFile, c.Extra = "", section }); err != nil {
		return fmt.Errorf("gw1 with IKE: %w", err)
	}
	deadline := time.Now().Add(x.Timeout)
	var last gateway.Stats
	for {
		st, err := r.bed.Stats(ctx, 0)
		if err == nil {
			last = st
			if out, in, ok := outboundChild(st); ok {
				r.external.setChild(out, in)
				r.external.current = func(ctx context.Context) (uint32, uint32, bool) {
					st, err := r.bed.Stats(ctx, 0)
					if err != nil {
						return 0, 0, false
					}
					return outboundChild(st)
				}
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no CHILD_SA with the device within %s: %s", x.Timeout, ikeState(last))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// endExternalIKE stops gw1 while the device is still wired to it, so
// that gw1's Delete reaches the device: no run leaves IKE SAs or
// CHILD_SAs on it.
func (r *runner) endExternalIKE() error {
	if _, err := r.bed.StopGateway(0, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop gw1, which deletes its IKE SA with the device: %w", err)
	}
	return nil
}

// outboundChild is the CHILD_SA gw1's policies send through.
func outboundChild(st gateway.Stats) (out, in uint32, ok bool) {
	if st.IKE == nil {
		return 0, 0, false
	}
	for _, c := range st.IKE.Connections {
		for _, s := range c.SAs {
			for _, ch := range s.ChildSAs {
				if ch.Outbound && s.State == "established" {
					return ch.OutSPI, ch.InSPI, true
				}
			}
		}
	}
	return 0, 0, false
}

// ikeState says what gw1's IKE connection did, for a negotiation that
// failed: its counts and events (the reasons of failures among them).
func ikeState(st gateway.Stats) string {
	if st.IKE == nil || len(st.IKE.Connections) == 0 {
		return "gw1 reports no IKE connection"
	}
	c := st.IKE.Connections[0]
	return fmt.Sprintf("gw1 initiated %d times, %d IKE SAs established, %d failed, %d half-open; events %v (gw1's log has the details)",
		c.Initiated, c.Established, c.Failed, c.HalfOpen, c.Events)
}

// setChild makes the negotiated CHILD_SA the run's SAs.
func (x *externalGW2) setChild(out, in uint32) {
	gw1, dut := x.e.wan.Addr(), x.e.wanDUT
	mode := sa.Tunnel
	if x.e.IKE.Mode == "transport" {
		mode = sa.Transport
	}
	x.out = &sa.SA{SPI: out, Mode: mode, Src: gw1, Dst: dut}
	x.in = &sa.SA{SPI: in, Mode: mode, Src: dut, Dst: gw1}
}

// refreshChild follows a rekey: the run's SAs become the CHILD_SA in
// force now, and a pair not seen last is noted in spis.
func (x *externalGW2) refreshChild(ctx context.Context) {
	if x.current != nil {
		if out, in, ok := x.current(ctx); ok {
			x.setChild(out, in)
		}
	}
	if x.out == nil {
		return
	}
	if p := fmt.Sprintf("0x%08x/0x%08x", x.out.SPI, x.in.SPI); len(x.spis) == 0 || x.spis[len(x.spis)-1] != p {
		x.spis = append(x.spis, p)
	}
}

// rekeyed says whether the run's snapshots found different CHILD_SAs:
// the device's counters of the one before are gone with it, so its
// counts before and after compare nothing.
func (x *externalGW2) rekeyed() bool {
	return len(x.spis) > 1 && slices.ContainsFunc(x.spis, func(p string) bool { return p != x.spis[0] })
}

// externalIKE adds the ike.* metrics: gw1's counts between the
// snapshots.
func (r *runner) externalIKE(m Metrics, before, after gateway.Stats) {
	if r.external == nil || r.s.External.IKE == nil {
		return
	}
	count := func(st gateway.Stats) (v [4]uint64) {
		if st.IKE == nil {
			return v
		}
		for _, c := range st.IKE.Connections {
			v[0] += c.ChildRekeys + c.Events["CHILD_SA rekeyed by the peer"]
			v[1] += c.Retransmits()
			v[2] += c.Established
			v[3] += c.Failed
		}
		return v
	}
	b, a := count(before), count(after)
	for i, n := range externalIKEMetrics {
		m["ike."+n] = float64(a[i] - b[i])
	}
}
