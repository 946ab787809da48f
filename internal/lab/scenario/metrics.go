package scenario

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/lab/wanrelay"
)

// minus is what happened between two snapshots (last sequence numbers are
// kept as they are at the end).
func (s snapshot) minus(b snapshot) snapshot {
	var d snapshot
	for i := range s.GW {
		d.GW[i] = statsMinus(s.GW[i], b.GW[i])
	}
	for i := range s.TUNDrops {
		d.TUNDrops[i] = s.TUNDrops[i] - b.TUNDrops[i]
		d.RcvbufDrops[i] = s.RcvbufDrops[i] - b.RcvbufDrops[i]
	}
	for i := range s.KernelDrops {
		d.KernelDrops[i] = s.KernelDrops[i] - b.KernelDrops[i]
	}
	d.KernelXfrm, d.KernelDevices = mapMinus(s.KernelXfrm, b.KernelXfrm), mapMinus(s.KernelDevices, b.KernelDevices)
	d.WAN = s.WAN
	subtract(reflect.ValueOf(&d.WAN).Elem(), reflect.ValueOf(b.WAN))
	d.WAN.AToB.InFlight, d.WAN.BToA.InFlight = s.WAN.AToB.InFlight, s.WAN.BToA.InFlight
	d.WAN.AToB.IKEInFlight, d.WAN.BToA.IKEInFlight = s.WAN.AToB.IKEInFlight, s.WAN.BToA.IKEInFlight
	return d
}

func statsMinus(a, b gateway.Stats) gateway.Stats {
	d := a
	d.TunIn -= b.TunIn
	d.TunOut -= b.TunOut
	d.WireIn -= b.WireIn
	d.WireOut -= b.WireOut
	d.Drops = mapMinus(a.Drops, b.Drops)
	d.PMTU.Updates -= b.PMTU.Updates
	d.PMTU.Ignored -= b.PMTU.Ignored
	if a.Reassembly != nil && b.Reassembly != nil {
		r := *a.Reassembly
		subtract(reflect.ValueOf(&r).Elem(), reflect.ValueOf(*b.Reassembly))
		d.Reassembly = &r
	}
	d.Sockets = nil
	for _, s := range a.Sockets {
		for _, o := range b.Sockets {
			if o.Kind == s.Kind && o.Local == s.Local {
				subtract(reflect.ValueOf(&s.Stats).Elem(), reflect.ValueOf(o.Stats))
			}
		}
		d.Sockets = append(d.Sockets, s)
	}
	d.SAs = nil
	for _, s := range a.SAs {
		for _, o := range b.SAs {
			if o.SPI == s.SPI && o.Direction == s.Direction {
				s.SealedPackets -= o.SealedPackets
				s.SealedBytes -= o.SealedBytes
				s.OpenedPackets -= o.OpenedPackets
				s.OpenedBytes -= o.OpenedBytes
				s.Drops = mapMinus(s.Drops, o.Drops)
			}
		}
		d.SAs = append(d.SAs, s)
	}
	// An SA in force at b and closed by a (a rekey's old SA) has its
	// counts, those before b too, in a's retired totals of its
	// direction: what it counted before b comes off them.
	for _, o := range b.SAs {
		if o.SPI == "retired" || slices.ContainsFunc(a.SAs, func(s gateway.SAStats) bool { return s.SPI == o.SPI && s.Direction == o.Direction }) {
			continue
		}
		for i := range d.SAs {
			if s := &d.SAs[i]; s.SPI == "retired" && s.Direction == o.Direction {
				s.SealedPackets -= o.SealedPackets
				s.SealedBytes -= o.SealedBytes
				s.OpenedPackets -= o.OpenedPackets
				s.OpenedBytes -= o.OpenedBytes
				s.Drops = mapMinus(s.Drops, o.Drops)
			}
		}
	}
	d.Engine.Stats = a.Engine.Stats
	subtract(reflect.ValueOf(&d.Engine.Stats).Elem(), reflect.ValueOf(b.Engine.Stats))
	return d
}

// statsPlus is the counts of a gateway restarted after pre (its counts
// then) with now's counts since: the process's own counters summed, an
// SA of both lives (a given SPI) merged. What the kernel counts for the
// namespace (reassembly) is now's alone; so is the IKE state.
func statsPlus(pre, now gateway.Stats) gateway.Stats {
	d := now
	d.TunIn += pre.TunIn
	d.TunOut += pre.TunOut
	d.WireIn += pre.WireIn
	d.WireOut += pre.WireOut
	d.Drops = mapPlus(now.Drops, pre.Drops)
	d.PMTU.Updates += pre.PMTU.Updates
	d.PMTU.Ignored += pre.PMTU.Ignored
	d.Sockets = slices.Clone(now.Sockets)
	for _, o := range pre.Sockets {
		i := slices.IndexFunc(d.Sockets, func(s gateway.SocketStats) bool { return s.Kind == o.Kind && s.Local == o.Local })
		if i < 0 {
			d.Sockets = append(d.Sockets, o)
			continue
		}
		add(reflect.ValueOf(&d.Sockets[i].Stats).Elem(), reflect.ValueOf(o.Stats))
	}
	d.SAs = slices.Clone(now.SAs)
	for _, o := range pre.SAs {
		i := slices.IndexFunc(d.SAs, func(s gateway.SAStats) bool { return s.SPI == o.SPI && s.Direction == o.Direction })
		if i < 0 {
			o.Retired = true // the process that had it in force is gone
			d.SAs = append(d.SAs, o)
			continue
		}
		s := &d.SAs[i]
		snap := s.Snapshot
		snap.Drops = mapPlus(snap.Drops, nil)
		snap.Add(o.Snapshot)
		s.Snapshot = snap
	}
	add(reflect.ValueOf(&d.Engine.Stats).Elem(), reflect.ValueOf(pre.Engine.Stats))
	return d
}

func mapPlus(a, b map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range a {
		out[k] += v
	}
	for k, v := range b {
		out[k] += v
	}
	return out
}

// add adds b's unsigned counters to a's, field by field.
func add(a, b reflect.Value) {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Field(i).CanSet() {
				add(a.Field(i), b.Field(i))
			}
		}
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		a.SetUint(a.Uint() + b.Uint())
	}
}

func mapMinus(a, b map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range a {
		if n := v - b[k]; n > 0 {
			out[k] = n
		}
	}
	return out
}

// subtract takes b's unsigned counters off a's, field by field.
func subtract(a, b reflect.Value) {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Field(i).CanSet() {
				subtract(a.Field(i), b.Field(i))
			}
		}
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		a.SetUint(a.Uint() - b.Uint())
	}
}

// metrics turns a run's counters into the names expectations use, and
// balances the packets: every packet that entered a gateway or the WAN
// either came out or was counted under a reason.
func (r *runner) metrics(d snapshot, steps []StepResult) (Metrics, []Balance) {
	m := Metrics{}
	add := func(k string, v float64) { m[k] += v }
	var lat []float64
	for _, st := range steps {
		p := "steps." + st.Name + "."
		m[p+"sent"] = float64(st.Sent)
		m[p+"received"] = float64(st.Received)
		m[p+"mismatched"] = float64(st.Mismatched)
		m[p+"bytes"] = float64(st.Bytes)
		m[p+"bps"] = st.BPS
		m[p+"retransmits"] = float64(st.Retransmit)
		if st.Sent > 0 {
			m[p+"delivered"] = float64(st.Received) / float64(st.Sent)
		}
		m[p+"exact"] = b2f(st.Mismatched == 0 && st.Received == st.Sent && st.Sent > 0)
		st.Headers.metrics(p, m)
		for k, v := range latencyMetricsOf(st.Latencies) {
			m[p+k] = v
		}
		lat = append(lat, st.Latencies...)
		add("sent", float64(st.Sent))
		add("received", float64(st.Received))
		add("mismatched", float64(st.Mismatched))
	}
	if m["sent"] > 0 {
		m["delivered"] = m["received"] / m["sent"]
	}
	m["exact"] = b2f(m["mismatched"] == 0 && m["received"] == m["sent"] && m["sent"] > 0)
	for k, v := range latencyMetricsOf(lat) {
		m[k] = v
	}
	for i, g := range d.GW {
		p := fmt.Sprintf("gw%d.", i+1)
		var sealed, opened, drops float64
		for _, s := range g.SAs {
			sealed += float64(s.SealedPackets)
			opened += float64(s.OpenedPackets)
			for k, v := range s.Drops {
				m[p+k] += float64(v)
				drops += float64(v)
			}
			if strings.Contains(s.Direction, "out") || s.Direction == "both" {
				m[p+"last_seq"] = float64(s.LastSeq)
			}
		}
		for k, v := range g.Drops {
			m[p+k] += float64(v)
			drops += float64(v)
		}
		m[p+"tun-queue"] = float64(d.TUNDrops[i])
		drops += float64(d.TUNDrops[i])
		m[p+"sealed"], m[p+"opened"], m[p+"drops"] = sealed, opened, drops
		m[p+"tun_in"], m[p+"tun_out"] = float64(g.TunIn), float64(g.TunOut)
		// The outer path (header.go): ICMP reports that lowered a path MTU,
		// the lowest path MTU an SA holds, outer fragments sent, and the
		// kernel's reassembly of the ones received.
		m[p+"pmtu-updates"], m[p+"pmtu-ignored"] = float64(g.PMTU.Updates), float64(g.PMTU.Ignored)
		for _, s := range g.SAs {
			if s.PathMTU > 0 && (m[p+"path-mtu"] == 0 || float64(s.PathMTU) < m[p+"path-mtu"]) {
				m[p+"path-mtu"] = float64(s.PathMTU)
			}
		}
		for _, k := range g.Sockets {
			m[p+"fragmented"] += float64(k.Fragmented)
			m[p+"fragments-out"] += float64(k.FragmentsOut)
		}
		if r := g.Reassembly; r != nil {
			m[p+"reasm-oks"] = float64(r.IPv4.OKs + r.IPv6.OKs)
			m[p+"reasm-fails"] = float64(r.IPv4.Fails + r.IPv6.Fails)
			m[p+"reasm-timeout"] = float64(r.IPv4.Timeout + r.IPv6.Timeout)
		}
		m[p+"wire_in"], m[p+"wire_out"], m[p+"held"] = float64(g.WireIn), float64(g.WireOut), float64(g.Held)
	}
	for _, k := range append(dropReasons(), "tun-queue", "sealed", "opened", "drops", "tun_in", "tun_out", "wire_in", "wire_out") {
		m[k] = m["gw1."+k] + m["gw2."+k]
	}
	for _, dir := range []struct {
		name string
		c    wanrelay.Direction
	}{{"gw1-to-gw2", d.WAN.AToB}, {"gw2-to-gw1", d.WAN.BToA}} {
		v := reflect.ValueOf(dir.c.Impair)
		t := v.Type()
		for i := range t.NumField() {
			name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
			m[dir.name+"."+name] = float64(v.Field(i).Uint())
			if slices.Contains(impairCounters, name) { // not received: that is the hosts'
				// Under wan.: a bare name is a gateway's (truncated is
				// also an ESP drop reason) or the steps'.
				m["wan."+name] += float64(v.Field(i).Uint())
			}
		}
	}
	m["hostA.udp-rcvbuf"], m["hostB.udp-rcvbuf"] = float64(d.RcvbufDrops[0]), float64(d.RcvbufDrops[1])
	m["udp-rcvbuf"] = m["hostA.udp-rcvbuf"] + m["hostB.udp-rcvbuf"]
	for i, n := range []string{"hostA", "gw1", "gw2", "hostB"} {
		m[n+".kernel"] = float64(d.KernelDrops[i])
		m["kernel"] += float64(d.KernelDrops[i])
	}
	for k, v := range d.KernelXfrm {
		m["gw2.xfrm_stat."+k] = float64(v)
	}
	for k, v := range d.KernelDevices {
		m["gw2."+k] = float64(v)
	}
	// The WAN equations need gw2's ESP counts: an external device gives
	// them only through a counters command printing ip -s xfrm state.
	bal := balances(d, r.kernel != nil || r.external != nil, r.external != nil && len(d.GW[1].SAs) == 0)
	var unaccounted int64
	for _, b := range bal {
		if b.In > b.Out {
			unaccounted += b.In - b.Out
		} else {
			unaccounted += b.Out - b.In
		}
	}
	m["unaccounted"] = float64(unaccounted)
	m["conservation"] = b2f(unaccounted == 0)
	return m, bal
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// balances are the conservation equations of a run, per gateway and per
// WAN direction:
//
//	gateway, outbound:  tun_in  == sealed + outbound drops (SA and gateway)
//	gateway, send:      sealed  == wire_out + send-error + no-socket
//	WAN direction:      sent by one gateway + duplicated + replayed
//	                      == received by the other + lost + burst_lost + overflow + oversize + in flight
//	gateway, inbound:   wire_in == opened + inbound drops (SA, unknown-spi, runt, wrong-source, wrong-encap)
//	gateway, delivery:  opened  == tun_out + tun-write
//
// With the kernel or an external device as gw2 (kernel true), gw2's own
// four equations are not
// checked (an external device, which reports nothing unless a counters
// command prints an ip -s xfrm state listing, also leaves the WAN
// equations out: noWAN): the kernel counts its ESP only as opened, sealed and dropped by
// reason (gw2's wire_in and wire_out are made of those counts, see
// kernelAsGateway), and its interface counters mix the tunnel's packets
// with its own ARP and neighbour discovery. The WAN equations then check
// the kernel's counters against the relay's and gw1's.
func balances(d snapshot, kernel, noWAN bool) []Balance {
	var out []Balance
	outboundReasons := []string{"no-policy", "policy-discard", "bypass", "no-sa", "not-ip", "too-big"}
	for i, g := range d.GW {
		name := fmt.Sprintf("gw%d", i+1)
		if i == 1 && kernel {
			continue
		}
		var sealed, opened, outDrops, inDrops int64
		var outTerms, inTerms []string
		for _, s := range g.SAs {
			sealed += int64(s.SealedPackets)
			opened += int64(s.OpenedPackets)
			for k, v := range s.Drops {
				if s.Direction == "out" {
					outDrops += int64(v)
					outTerms = append(outTerms, fmt.Sprintf("%s %s %d", s.SPI, k, v))
				} else {
					inDrops += int64(v)
					inTerms = append(inTerms, fmt.Sprintf("%s %s %d", s.SPI, k, v))
				}
			}
		}
		for _, k := range outboundReasons {
			if v := g.Drops[k]; v > 0 {
				outDrops += int64(v)
				outTerms = append(outTerms, fmt.Sprintf("%s %d", k, v))
			}
		}
		for _, k := range []string{"unknown-spi", "runt", "wrong-source", "wrong-encap"} {
			if v := g.Drops[k]; v > 0 {
				inDrops += int64(v)
				inTerms = append(inTerms, fmt.Sprintf("%s %d", k, v))
			}
		}
		sendErr := int64(g.Drops["send-error"] + g.Drops["no-socket"])
		// Dropped after opening: the TUN refused it, or RFC 6040 says an
		// outer CE over an inner Not-ECT packet must not be delivered.
		tunWrite := int64(g.Drops["tun-write"] + g.Drops["ecn-ce-not-ect"])
		out = append(out,
			Balance{Where: name + " outbound", In: int64(g.TunIn), Out: sealed + outDrops,
				Terms: fmt.Sprintf("tun_in %d = sealed %d + drops %d %v", g.TunIn, sealed, outDrops, outTerms)},
			Balance{Where: name + " send", In: sealed, Out: int64(g.WireOut) + sendErr,
				Terms: fmt.Sprintf("sealed %d = wire_out %d + send-error and no-socket %d", sealed, g.WireOut, sendErr)},
			Balance{Where: name + " inbound", In: int64(g.WireIn), Out: opened + inDrops,
				Terms: fmt.Sprintf("wire_in %d = opened %d + drops %d %v", g.WireIn, opened, inDrops, inTerms)},
			Balance{Where: name + " delivery", In: opened, Out: int64(g.TunOut) + tunWrite,
				Terms: fmt.Sprintf("opened %d = tun_out %d + tun-write and ecn-ce-not-ect %d", opened, g.TunOut, tunWrite)},
		)
	}
	for _, dir := range []struct {
		name     string
		from, to int
		c        wanrelay.Direction
	}{{"wan gw1→gw2", 0, 1, d.WAN.AToB}, {"wan gw2→gw1", 1, 0, d.WAN.BToA}} {
		if noWAN {
			break
		}
		// IKE messages the relay impaired (match: ike) are none of the
		// gateways' ESP counts: their drops and copies stay out.
		ic := dir.c.Impair
		dup, dropped := ic.Duplicated-ic.IKEDuplicated, ic.Dropped()-ic.IKEDropped
		inFlight := dir.c.InFlight - dir.c.IKEInFlight
		in := int64(d.GW[dir.from].WireOut + dup + ic.Replayed)
		out = append(out, Balance{Where: dir.name, In: in,
			Out: int64(d.GW[dir.to].WireIn+dropped) + int64(inFlight),
			Terms: fmt.Sprintf("wire_out %d + duplicated %d + replayed %d = wire_in %d + relay drops %d + in flight %d",
				d.GW[dir.from].WireOut, dup, ic.Replayed, d.GW[dir.to].WireIn, dropped, inFlight)})
	}
	return out
}
