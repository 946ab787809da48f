package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/internal/yamlwalk"
)

// IKESpec brings the tunnel up with IKEv2 (sa: {ike: …}): gw1 initiates,
// gw2 responds, each with a connection of its ike: section written by the
// runner (a pre-shared key made for the run). The CHILD_SA's SPIs, keys
// and suite are negotiated; the fields are named as in swanctl.conf.
type IKESpec struct {
	// Proposals are the IKE SA's, ESPProposals the CHILD_SA's, in
	// strongSwan's syntax (defaults aes128-sha256-x25519, aes128gcm16).
	Proposals    string `yaml:"proposals" json:"proposals"`
	ESPProposals string `yaml:"esp_proposals" json:"esp_proposals"`
	// RekeyTime rekeys the CHILD_SA (less a random part of RandTime); 0,
	// the default, not during a run. IKERekeyTime rekeys the IKE SA.
	RekeyTime time.Duration `yaml:"rekey_time" json:"rekey_time,omitempty"`
	RandTime  time.Duration `yaml:"rand_time" json:"rand_time,omitempty"`
	// LifeTime is when an unrekeyed CHILD_SA expires (default: 110% of
	// rekey_time, as in swanctl).
	LifeTime     time.Duration `yaml:"life_time" json:"life_time,omitempty"`
	IKERekeyTime time.Duration `yaml:"ike_rekey_time" json:"ike_rekey_time,omitempty"`
	// RekeyBy is who rekeys: gw1 (the default; gw2's timers are twice
	// as long, so it rekeys only what gw1 does not) or both, on the same
	// timers, whose rekeys then collide now and then (RFC 7296 §2.8.1).
	RekeyBy string `yaml:"rekey_by" json:"rekey_by,omitempty"`
	// DPDDelay is how often each side checks that the other answers (0:
	// never).
	DPDDelay time.Duration `yaml:"dpd_delay" json:"dpd_delay,omitempty"`
	// RetransmitTimeout and RetransmitTries are the wait for a response,
	// doubled after each send, and the sends (defaults 500ms and 5).
	RetransmitTimeout time.Duration `yaml:"retransmit_timeout" json:"retransmit_timeout,omitempty"`
	RetransmitTries   int           `yaml:"retransmit_tries" json:"retransmit_tries,omitempty"`
}

// ikeMetrics are the IKE metrics (ike.NAME).
var ikeMetrics = []string{"up", "established", "rekeys", "child_rekeys", "ike_rekeys", "retransmits", "dpd_failures",
	"failed", "rekeys_in_steps", "lost_during_rekey", "peer_moved", "peer_moved_by_esp"}

// sa fields the negotiation decides, refused beside ike:.
var ikeExclusive = []string{"suite", "mode", "encap", "esn", "replay-window", "initial-seq", "lifetimes", "keys", "dscp", "decap-dscp", "df", "ttl"}

// validateIKE checks sa.ike and what it rules out.
func (s *Scenario) validateIKE(perr func(int, string, error) error) error {
	k := s.SA.IKE
	at := func(path ...string) int { return lineOf(s.root, path...) }
	_, saNode := yamlwalk.Lookup(s.root, "sa")
	for _, f := range ikeExclusive {
		if kn, _ := yamlwalk.Lookup(saNode, f); kn != nil {
			return perr(kn.Line, "sa."+f, errors.New("with sa.ike the CHILD_SA's suite, keys, SPIs and settings are negotiated: leave it out (proposals and esp_proposals choose the suite)"))
		}
	}
	if s.Peer != PeerEspgw {
		return perr(at("sa", "ike"), "sa.ike", fmt.Errorf("with peer: %s the tunnel's keys are given; sa.ike negotiates them between two espgw gateways", s.Peer))
	}
	if s.Topology.Tunnels >= 1 {
		return perr(at("topology", "tunnels"), "topology.tunnels", errors.New("with sa.ike the tunnel is the one CHILD_SA"))
	}
	if s.Topology.NAT && s.Topology.Outer != "ipv4" {
		return perr(at("topology", "nat"), "topology.nat", errors.New("the NAT masquerades IPv4: needs topology.outer: ipv4"))
	}
	if _, imp := yamlwalk.Lookup(s.root, "impair"); imp != nil && s.Topology.NAT {
		return perr(at("impair"), "impair", errors.New("with topology.nat the wan namespace is a NAT router, not the impairment relay"))
	}
	for i, a := range s.Traffic.Actions {
		if a.Restart == "" && !a.NATRebind {
			return perr(at("traffic", "actions"), fmt.Sprintf("traffic.actions[%d]", i), fmt.Errorf("%s changes the given SAs through the control socket: with sa.ike only restart (rekeys come from ike.rekey_time)", a.kind()))
		}
	}
	for i, st := range s.Traffic.Steps {
		if st.UDP != nil && st.UDP.Spread {
			return perr(stepLine(s.root, i), fmt.Sprintf("traffic.steps[%d].udp.spread", i), errors.New("spread goes through topology.tunnels: not with sa.ike"))
		}
	}
	for _, p := range []struct {
		field, text string
		proto       ike.ProtocolID
	}{{"proposals", k.Proposals, ike.ProtoIKE}, {"esp_proposals", k.ESPProposals, ike.ProtoESP}} {
		if strings.ContainsAny(p.text, "\n:#{}[]'\"") {
			return perr(at("sa", "ike", p.field), "sa.ike."+p.field, errors.New("want proposals such as aes128-sha256-x25519,aes256gcm16"))
		}
		if _, err := ike.ParseProposals(p.proto, p.text); err != nil {
			return perr(at("sa", "ike", p.field), "sa.ike."+p.field, errors.New(secret.Scrub(err.Error())))
		}
	}
	for _, d := range []struct {
		field  string
		v      time.Duration
		lo, hi time.Duration
	}{
		{"rekey_time", k.RekeyTime, 0, 24 * time.Hour},
		{"rand_time", k.RandTime, 0, 24 * time.Hour},
		{"life_time", k.LifeTime, 0, 24 * time.Hour},
		{"ike_rekey_time", k.IKERekeyTime, 0, 24 * time.Hour},
		{"dpd_delay", k.DPDDelay, 0, time.Hour},
		{"retransmit_timeout", k.RetransmitTimeout, 100 * time.Millisecond, time.Minute},
	} {
		if d.v < d.lo || d.v > d.hi {
			return perr(at("sa", "ike", d.field), "sa.ike."+d.field, fmt.Errorf("%v: want %v..%v", d.v, d.lo, d.hi))
		}
	}
	switch {
	case k.RekeyBy != "gw1" && k.RekeyBy != "both":
		return perr(at("sa", "ike", "rekey_by"), "sa.ike.rekey_by", fmt.Errorf("%s: want gw1 or both", secret.Word(k.RekeyBy, "gw1", "both")))
	case k.RekeyTime > 0 && k.RekeyTime < time.Second:
		return perr(at("sa", "ike", "rekey_time"), "sa.ike.rekey_time", fmt.Errorf("%v: want at least 1s (0: no rekey)", k.RekeyTime))
	case k.IKERekeyTime > 0 && k.IKERekeyTime < time.Second:
		return perr(at("sa", "ike", "ike_rekey_time"), "sa.ike.ike_rekey_time", fmt.Errorf("%v: want at least 1s (0: no rekey)", k.IKERekeyTime))
	case k.RandTime > 0 && k.RandTime >= k.RekeyTime:
		return perr(at("sa", "ike", "rand_time"), "sa.ike.rand_time", fmt.Errorf("%v is not less than rekey_time %v", k.RandTime, k.RekeyTime))
	case k.LifeTime > 0 && k.LifeTime <= k.RekeyTime:
		return perr(at("sa", "ike", "life_time"), "sa.ike.life_time", fmt.Errorf("%v is not after rekey_time %v: the CHILD_SA would expire before it is rekeyed", k.LifeTime, k.RekeyTime))
	case k.LifeTime > 0 && k.RekeyTime == 0:
		return perr(at("sa", "ike", "life_time"), "sa.ike.life_time", errors.New("a life_time without rekey_time would end the tunnel: set rekey_time too"))
	case k.DPDDelay > 0 && k.DPDDelay < 500*time.Millisecond:
		return perr(at("sa", "ike", "dpd_delay"), "sa.ike.dpd_delay", fmt.Errorf("%v: want at least 500ms (0: no liveness checks)", k.DPDDelay))
	case k.RetransmitTries < 1 || k.RetransmitTries > 20:
		return perr(at("sa", "ike", "retransmit_tries"), "sa.ike.retransmit_tries", fmt.Errorf("%d: want 1..20", k.RetransmitTries))
	}
	return nil
}

func (k *IKESpec) defaults() {
	if k.Proposals == "" {
		k.Proposals = "aes128-sha256-x25519"
	}
	if k.ESPProposals == "" {
		k.ESPProposals = "aes128gcm16"
	}
	if k.RetransmitTimeout == 0 {
		k.RetransmitTimeout = 500 * time.Millisecond
	}
	if k.RetransmitTries == 0 {
		k.RetransmitTries = 5
	}
	if k.RekeyBy == "" {
		k.RekeyBy = "gw1"
	}
}

// ikeRun is what the runner keeps of an IKE tunnel: the key file, and
// the CHILD_SAs gw1 had in force while the steps ran.
type ikeRun struct {
	dir string // holds the pre-shared key, the owner's only
	psk string
	mu  sync.Mutex
	// seen is when the sampler first saw each of gw1's inbound SPIs.
	seen map[uint32]time.Time
	// first are the SPIs in force when the traffic started.
	first map[uint32]bool
}

const ikeConnName = "scenario"

// newIKERun makes the run's pre-shared key and writes it to a file of
// its own.
func newIKERun(prefix string) (*ikeRun, error) {
	dir, err := os.MkdirTemp("", "espgw-"+prefix+"-ike-")
	if err != nil {
		return nil, fmt.Errorf("sa.ike: folder for the key: %w", err)
	}
	b := make([]byte, 24)
	rand.Read(b)
	k := &ikeRun{dir: dir, psk: hex.EncodeToString(b), seen: map[uint32]time.Time{}, first: map[uint32]bool{}}
	if err := secret.WriteFile(filepath.Join(dir, "psk"), []byte(k.psk+"\n")); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sa.ike: pre-shared key file: %w", err)
	}
	return k, nil
}

func (k *ikeRun) remove() { os.RemoveAll(k.dir) }

// sections are the ike: sections of gw1 (the initiator, which also
// writes Wireshark's tables) and gw2, for the bed's addresses.
func (k *ikeRun) sections(spec *IKESpec, outer [2]netip.Addr, remote [2]string, lan [2][]netip.Prefix) [2]string {
	var out [2]string
	list := func(ps []netip.Prefix) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.String()
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	for i := range out {
		me, peer := i, 1-i
		rekey, ikeRekey, life := spec.RekeyTime, spec.IKERekeyTime, spec.LifeTime
		if i == 1 && spec.RekeyBy == "gw1" {
			rekey, ikeRekey, life = 2*rekey, 2*ikeRekey, 2*life
		}
		lifeTime := ""
		if life > 0 {
			lifeTime = fmt.Sprintf("          life_time: %v\n", life)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "ike:\n  retransmit_timeout: %v\n  retransmit_tries: %d\n", spec.RetransmitTimeout, spec.RetransmitTries)
		if i == 0 {
			b.WriteString("  decryption_table: ikev2_decryption_table\n  esp_sa_file: esp_sa\n")
		}
		start := "start"
		if i == 1 {
			start = "none"
		}
		fmt.Fprintf(&b, `  connections:
    %s:
      local_addrs: [%s]
      remote_addrs: [%s]
      local: {id: gw%d.scenario.example, auth: psk}
      remote: {id: gw%d.scenario.example, auth: psk}
      proposals: %s
      psk_file: %s
      rekey_time: %v
      dpd_delay: %v
      children:
        net:
          local_ts: %s
          remote_ts: %s
          esp_proposals: %s
          start_action: %s
          rekey_time: %v
          rand_time: %v
%s`, ikeConnName, outer[me], remote[me], me+1, peer+1, spec.Proposals, filepath.Join(k.dir, "psk"), ikeRekey, spec.DPDDelay,
			list(lan[me]), list(lan[peer]), spec.ESPProposals, start, rekey, spec.RandTime, lifeTime)
		out[i] = b.String()
	}
	return out
}

// ikeSections are the ike: sections of the scenario's gateways on the
// standard topology.
func (r *runner) ikeSections() [2]string {
	a := netns.StandardAddresses()
	outer := [2]netip.Addr{a.GW1WAN4.Addr(), a.GW2WAN4.Addr()}
	if r.s.Topology.Outer == "ipv6" {
		outer = [2]netip.Addr{a.GW1WAN6.Addr(), a.GW2WAN6.Addr()}
	}
	remote := [2]string{outer[1].String(), outer[0].String()}
	if r.s.Topology.NAT {
		remote[1] = natAddr(a) // gw2 sees gw1 behind the NAT
	}
	return r.ike.sections(r.s.SA.IKE, outer, remote, [2][]netip.Prefix{{a.LANA4, a.LANA6}, {a.LANB4, a.LANB6}})
}

// ikeEstablished is gw i's established IKE SA with a CHILD_SA, if any.
func ikeEstablished(st gateway.Stats) (gateway.IKESAStats, bool) {
	if st.IKE == nil {
		return gateway.IKESAStats{}, false
	}
	for _, c := range st.IKE.Connections {
		for i := len(c.SAs) - 1; i >= 0; i-- {
			if s := c.SAs[i]; s.State == "established" && len(s.ChildSAs) > 0 {
				return s, true
			}
		}
	}
	return gateway.IKESAStats{}, false
}

// waitIKE waits until both gateways hold the same established IKE SA
// with a CHILD_SA in force whose SPIs pair up (at most limit), and
// returns how long that took.
func (r *runner) waitIKE(ctx context.Context, limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	deadline := t0.Add(limit)
	var last string
	for {
		var st [2]gateway.Stats
		var err error
		for i := range st {
			if st[i], err = r.bed.Stats(ctx, i); err != nil {
				break
			}
		}
		if err == nil {
			s1, ok1 := ikeEstablished(st[0])
			s2, ok2 := ikeEstablished(st[1])
			if ok1 && ok2 && s1.SPIi == s2.SPIi && s1.SPIr == s2.SPIr && pairs(s1, s2) {
				return time.Since(t0), nil
			}
			last = fmt.Sprintf("gw1 %s, gw2 %s", ikeSummary(st[0]), ikeSummary(st[1]))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("sa.ike: no CHILD_SA in force on both gateways within %v (%s)\n%s", limit, last, r.gatewayLogs())
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("sa.ike: waiting for the CHILD_SA: %w", context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sharedChild says whether the gateways hold one established IKE SA
// with a CHILD_SA of the two paired (its SPIs crossed), whichever of a
// rekey's CHILD_SAs the traffic takes at the moment.
func sharedChild(a, b gateway.Stats) bool {
	if a.IKE == nil || b.IKE == nil {
		return false
	}
	for _, ca := range a.IKE.Connections {
		for _, x := range ca.SAs {
			for _, cb := range b.IKE.Connections {
				for _, y := range cb.SAs {
					if x.State != "established" || y.State != "established" || x.SPIi != y.SPIi || x.SPIr != y.SPIr {
						continue
					}
					for _, u := range x.ChildSAs {
						for _, v := range y.ChildSAs {
							if u.InSPI == v.OutSPI && u.OutSPI == v.InSPI {
								return true
							}
						}
					}
				}
			}
		}
	}
	return false
}

// pairs says whether a CHILD_SA of gw1 is one of gw2's, its SPIs
// crossed.
func pairs(a, b gateway.IKESAStats) bool {
	for _, x := range a.ChildSAs {
		for _, y := range b.ChildSAs {
			if x.InSPI == y.OutSPI && x.OutSPI == y.InSPI && x.Outbound && y.Outbound {
				return true
			}
		}
	}
	return false
}

func ikeSummary(st gateway.Stats) string {
	if st.IKE == nil {
		return "no IKE"
	}
	var parts []string
	for _, c := range st.IKE.Connections {
		parts = append(parts, fmt.Sprintf("%d IKE SAs (%d half-open), %d failed", len(c.SAs), c.HalfOpen, c.Failed))
	}
	return strings.Join(parts, "; ")
}

// gatewayLogs are the last lines of both gateways' output, for an
// error.
func (r *runner) gatewayLogs() string {
	var b strings.Builder
	for _, g := range r.bed.GW {
		if g == nil {
			continue
		}
		out := g.Output()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		lines = lines[max(0, len(lines)-60):]
		fmt.Fprintf(&b, "%s:\n  %s\n", g.Name, strings.Join(lines, "\n  "))
	}
	return strings.ReplaceAll(b.String(), r.ike.psk, "(the pre-shared key)")
}

// sample notes gw1's CHILD_SAs every interval until ctx ends: when a new
// one came into force is when a rekey (or re-establishment) happened.
func (r *runner) sample(ctx context.Context, every time.Duration) {
	first := true
	for {
		st, err := r.bed.Stats(ctx, 0)
		if err == nil && st.IKE != nil {
			now := time.Now()
			r.ike.mu.Lock()
			for _, c := range st.IKE.Connections {
				for _, s := range c.SAs {
					for _, ch := range s.ChildSAs {
						if _, ok := r.ike.seen[ch.InSPI]; !ok {
							r.ike.seen[ch.InSPI] = now.Add(-min(ch.Age, every))
							if first {
								r.ike.first[ch.InSPI] = true
							}
						}
					}
				}
			}
			r.ike.mu.Unlock()
			first = false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// rekeyTimes are when CHILD_SAs came into force during the steps.
func (k *ikeRun) rekeyTimes() []time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []time.Time
	for spi, t := range k.seen {
		if !k.first[spi] {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// ikeCounts are one gateway's IKE counts summed over its connections.
type ikeCounts struct {
	established, childRekeys, ikeRekeys, retransmits, dpd, failed, moved, movedByESP float64
}

func ikeCountsOf(st gateway.Stats) ikeCounts {
	var c ikeCounts
	if st.IKE == nil {
		return c
	}
	for _, cs := range st.IKE.Connections {
		c.established += float64(cs.Established)
		c.childRekeys += float64(cs.ChildRekeys)
		c.ikeRekeys += float64(cs.IKERekeys)
		c.retransmits += float64(cs.Retransmits())
		c.dpd += float64(cs.DPDFailures)
		c.failed += float64(cs.Failed)
		c.moved += float64(cs.Events["peer moved behind its NAT"])
		c.movedByESP += float64(cs.Events["peer's new NAT port found by ESP"])
	}
	return c
}

func (c ikeCounts) minus(b ikeCounts) ikeCounts {
	return ikeCounts{c.established - b.established, c.childRekeys - b.childRekeys, c.ikeRekeys - b.ikeRekeys,
		c.retransmits - b.retransmits, c.dpd - b.dpd, c.failed - b.failed, c.moved - b.moved, c.movedByESP - b.movedByESP}
}

func (c ikeCounts) plus(b ikeCounts) ikeCounts {
	return ikeCounts{c.established + b.established, c.childRekeys + b.childRekeys, c.ikeRekeys + b.ikeRekeys,
		c.retransmits + b.retransmits, c.dpd + b.dpd, c.failed + b.failed, c.moved + b.moved, c.movedByESP + b.movedByESP}
}

// ikeMetrics are the ike.* metrics of the traffic: what both gateways
// counted between the snapshots (a restarted gateway's counts before
// and after its restart), whether the tunnel is up at the end, and the
// packets the steps that saw a rekey lost.
func (r *runner) ikeMetrics(m Metrics, before, after snapshot, steps []StepResult, windows []stepWindow) {
	if r.ike == nil {
		return
	}
	for _, k := range ikeMetrics {
		m["ike."+k] += 0
	}
	var d ikeCounts
	for i := range after.GW {
		c := ikeCountsOf(after.GW[i])
		for _, pre := range r.restarted[i] {
			c = c.plus(ikeCountsOf(pre))
		}
		c = c.minus(ikeCountsOf(before.GW[i]))
		d = d.plus(c)
		if i == 0 {
			// gw1 initiates: its new IKE SAs are the re-establishments
			// and IKE SA rekeys (gw2 counts the same ones again).
			m["ike.established"] = c.established
		}
	}
	m["ike.child_rekeys"], m["ike.ike_rekeys"] = d.childRekeys, d.ikeRekeys
	m["ike.rekeys"] = d.childRekeys + d.ikeRekeys
	m["ike.retransmits"], m["ike.dpd_failures"], m["ike.failed"] = d.retransmits, d.dpd, d.failed
	m["ike.peer_moved"], m["ike.peer_moved_by_esp"] = d.moved, d.movedByESP
	m["ike.up"] = b2f(sharedChild(after.GW[0], after.GW[1]))
	rekeys := r.ike.rekeyTimes()
	for i, w := range windows {
		if i >= len(steps) {
			break
		}
		hit := slices.ContainsFunc(rekeys, func(t time.Time) bool { return !t.Before(w.start) && !t.After(w.end) })
		if hit && steps[i].Sent > 0 {
			m["ike.rekeys_in_steps"]++
			m["ike.lost_during_rekey"] += float64(max(steps[i].Sent-steps[i].Received, 0))
		}
	}
}

// stepWindow is when a step ran.
type stepWindow struct{ start, end time.Time }

// copyIKETables copies the tables gw1 wrote (Wireshark's esp_sa of every
// CHILD_SA it had, and its ikev2_decryption_table) beside the captures.
func (r *runner) copyIKETables(dir string) error {
	for _, f := range []string{"esp_sa", "ikev2_decryption_table"} {
		b, err := os.ReadFile(filepath.Join(r.bed.Dir, f))
		if err != nil {
			return fmt.Errorf("sa.ike: gw1's %s: %w", f, err)
		}
		if err := secret.WriteFile(filepath.Join(dir, f), b); err != nil {
			return fmt.Errorf("sa.ike: %s beside the captures: %w", f, err)
		}
	}
	return nil
}
