package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/pprof"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/transport"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/offload"
)

// Stats is a point-in-time copy of every counter of a gateway.
type Stats struct {
	TunIn   uint64 `json:"tun_in"`
	TunOut  uint64 `json:"tun_out"`
	WireIn  uint64 `json:"wire_in"`
	WireOut uint64 `json:"wire_out"`
	// Held are the inbound ESP packets kept for a CHILD_SA being
	// negotiated, opened when it went in force (or counted unknown-spi
	// when it did not in time).
	Held   uint64            `json:"held"`
	Drops  map[string]uint64 `json:"drops"` // gateway-level, by reason
	SAs    []SAStats         `json:"sas"`
	Engine EngineStats       `json:"engine"`
	// Batches are the sizes of the batches the engine was handed.
	Batches DirectionBatches `json:"batches"`
	// Sockets are the outer sockets' own counts: NAT keepalives and
	// non-ESP datagrams ignored, runts, send and receive errors.
	Sockets []SocketStats `json:"sockets,omitempty"`
	// XDP are the AF_XDP connections' counts (wan-io): packets through
	// the rings and beside them, ring-full drops, the kernel's
	// XDP_STATISTICS.
	XDP []xdp.Stats `json:"xdp,omitempty"`
	// PMTU counts ICMP reports about the outer path (header.go).
	PMTU PMTUStats `json:"pmtu"`
	// Reassembly is the host kernel's reassembly of outer fragments in the
	// gateway's network namespace (it reassembles before any socket sees
	// them), when the gateway could read it.
	Reassembly *ReassemblyStats `json:"reassembly,omitempty"`
	// IKE are the IKE connections and their IKE SAs, when the gateway
	// negotiates its SAs (the ike: section).
	IKE *IKEStats `json:"ike,omitempty"`
}

// SA is the counters of the SA in force with spi (not a retired one), or
// nil when there is none.
func (st Stats) SA(spi uint32) *SAStats {
	want := fmt.Sprintf("%#x", spi)
	for i := range st.SAs {
		if st.SAs[i].SPI == want && !st.SAs[i].Retired {
			return &st.SAs[i]
		}
	}
	return nil
}

// PMTUStats are the counts of ICMP reports about the outer path.
type PMTUStats struct {
	Updates uint64 `json:"updates"` // lowered an SA's path MTU
	Ignored uint64 `json:"ignored"` // about no outbound SA of ours, or not lower
}

// SocketStats are one outer socket's counters.
type SocketStats struct {
	Kind  string `json:"kind"`
	Local string `json:"local"`
	transport.Stats
}

// SAStats are one SA's counters.
type SAStats struct {
	SPI       string `json:"spi"`
	Direction string `json:"direction"` // out, in, or both
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	Suite     string `json:"suite"` // with the AES key size: aes-cbc-256+hmac-sha1-96
	Mode      string `json:"mode"`
	Expired   bool   `json:"expired"`
	LastSeq   uint64 `json:"last_seq"`
	Highest   uint64 `json:"highest_accepted"`
	// PathMTU is the outer path MTU learned from ICMP, 0 when none holds.
	PathMTU int `json:"path_mtu"`
	// Retired marks an SA taken out of force whose session stays open a
	// moment for packets in flight; the entries with SPI "retired" are the
	// sums of the SAs since closed, one per direction.
	Retired bool `json:"retired,omitempty"`
	esp.Snapshot
}

// EngineStats names the engine next to its counters, and, for an engine
// that hands the work to drivers (afalg), which drivers and modules did it.
type EngineStats struct {
	Name string `json:"name"`
	offload.Stats
	Drivers []offload.Driver `json:"drivers,omitempty"`
}

func engineStats(e offload.Engine) EngineStats {
	s := EngineStats{Name: e.Name(), Stats: e.Stats()}
	if d, ok := e.(offload.DriverReporter); ok {
		s.Drivers = d.Drivers()
	}
	return s
}

// Stats copies the counters.
func (g *Gateway) Stats() Stats {
	sas := g.SAs()
	c := &g.counters
	out := Stats{
		TunIn: c.TunIn.Load(), TunOut: c.TunOut.Load(), WireIn: c.WireIn.Load(), WireOut: c.WireOut.Load(), Held: g.held.held.Load(),
		Drops:   map[string]uint64{},
		Engine:  engineStats(g.engine),
		PMTU:    PMTUStats{Updates: g.pmtu.Updates.Load(), Ignored: g.pmtu.Ignored.Load()},
		Batches: DirectionBatches{Outbound: c.Sealed.Snapshot(), Inbound: c.Opened.Snapshot()},
	}
	if r, err := ReadReassembly(); err == nil {
		out.Reassembly = &r
	}
	if f := g.ikeStats.Load(); f != nil {
		out.IKE = (*f)()
	}
	for r := Reason(0); r < NumReasons; r++ {
		if n := c.Drops[r].Load(); n > 0 {
			out.Drops[r.String()] = n
		}
	}
	for _, c := range g.Conns() {
		switch w := c.(type) {
		case *transport.Conn:
			out.Sockets = append(out.Sockets, SocketStats{Kind: w.Kind().String(), Local: w.LocalAddr().String(), Stats: w.Stats()})
		case *xdp.Conn:
			out.XDP = append(out.XDP, w.Stats())
		}
	}
	slices.SortFunc(out.Sockets, func(a, b SocketStats) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Local, b.Local)) })
	st := g.view()
	defer g.release()
	for _, s := range sas {
		dir := ""
		if st.out[s.SPI()] == s {
			dir = "out"
		}
		if st.in.Has(s.SPI(), s) {
			dir += "in"
		}
		if dir == "outin" {
			dir = "both"
		}
		path := 0
		if h := headerOf(s); h != nil {
			path = int(h.path.mtu.Load())
		}
		st := saStats(s, dir)
		st.PathMTU = path
		out.SAs = append(out.SAs, st)
	}
	g.retired.mu.Lock()
	defer g.retired.mu.Unlock()
	var retiring []SAStats
	for s, dir := range g.retired.live {
		st := saStats(s, dir)
		st.Retired = true
		retiring = append(retiring, st)
	}
	slices.SortFunc(retiring, func(a, b SAStats) int { return cmp.Compare(a.SPI, b.SPI) })
	out.SAs = append(out.SAs, retiring...)
	for _, dir := range []string{"out", "in", "both"} {
		if t := g.retired.totals[dir]; t != nil {
			snap := *t
			snap.Drops = maps.Clone(t.Drops)
			out.SAs = append(out.SAs, SAStats{SPI: "retired", Direction: dir, Retired: true, Snapshot: snap})
		}
	}
	return out
}

// saStats copies one SA's counters, dir being its direction.
func saStats(s *esp.SA, dir string) SAStats {
	return SAStats{
		SPI: fmt.Sprintf("%#x", s.SPI()), Direction: dir, Src: s.Config.Src.String(), Dst: s.Config.Dst.String(),
		Suite: s.Config.Suite.NameWithBits(s.Config.KeyBits()), Mode: s.Config.Mode.String(),
		Expired: s.Expired(), LastSeq: s.LastSeq(), Highest: s.HighestAccepted(), Snapshot: s.Snapshot(),
	}
}

// Handler serves /metrics (Prometheus) and /stats (the Stats as JSON, which
// `espgw stats` reads).
func (g *Gateway) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{g})
	mux := http.NewServeMux()
	// A collection error (none is known) is logged and the rest served:
	// monitoring must not go dark over one series.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ErrorLog: slogPrinter{g.log}}))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := writeStats(w, g.Stats()); err != nil {
			g.log.Debug("write /stats", "err", err)
		}
	})
	return mux
}

// slogPrinter hands promhttp's errors to the gateway's log.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("serve /metrics", "err", fmt.Sprint(v...)) }

// writeStats writes st as json.Encoder would, but its SAs one at a time:
// encoding/json keeps each encoding's buffer for reuse, and the one of a
// whole 100,000-SA gateway (40 MB) would stay in the heap long after, as
// the data path allocates nothing that would make the collector run.
func writeStats(w io.Writer, st Stats) error {
	sas := st.SAs
	st.SAs = nil
	head, err := json.Marshal(st)
	if err != nil {
		return err
	}
	const hole = `"sas":null`
	i := bytes.Index(head, []byte(hole))
	if i < 0 || sas == nil {
		_, err := w.Write(append(head, '\n'))
		return err
	}
	bw := bufio.NewWriter(w)
	bw.Write(head[:i])
	bw.WriteString(`"sas":[`)
	for k := range sas {
		one, err := json.Marshal(&sas[k])
		if err != nil {
			return err
		}
		if k > 0 {
			bw.WriteByte(',')
		}
		bw.Write(one)
	}
	bw.WriteByte(']')
	bw.Write(head[i+len(hole):])
	bw.WriteByte('\n')
	return bw.Flush()
}

// ProfileHandler serves Go's profiler (/debug/pprof/). It is apart from
// Handler, on its own opt-in address (the pprof: setting): a profile shows
// the process's memory and goroutines, keys included, and the endpoints
// have no authentication, so they must never ride along on a metrics
// address a user opened to a network.
func ProfileHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// collector reads the counters at scrape time, so the data path pays
// nothing for metrics. Every family counts one unit; every SA's series
// carry the labels that tell it from every other SA (two SAs may share an
// SPI).
type collector struct{ g *Gateway }

// saLabels name an SA's series: SAs of one direction differ in SPI and
// destination, the remote address of an inbound SA and the local one of
// an outbound SA.
var saLabels = []string{"spi", "direction", "local", "remote", "suite"}

func labels(ls []string, more ...string) []string { return append(slices.Clip(ls), more...) }

var (
	descPackets = prometheus.NewDesc("espgw_packets_total", "Packets by place: tun_in, tun_out, wire_in, wire_out, held (inbound ESP kept for a CHILD_SA being negotiated).", []string{"place"}, nil)
	descDrops   = prometheus.NewDesc("espgw_drops_total", "Packets dropped by the gateway with no SA to blame, by reason.", []string{"reason"}, nil)
	descPMTU    = prometheus.NewDesc("espgw_pmtu_reports_total", "ICMP reports about the outer path: updates lowered an SA's path MTU, ignored did not.", []string{"result"}, nil)

	descSAPkts  = prometheus.NewDesc("espgw_sa_packets_total", "Packets sealed or opened per SA.", labels(saLabels, "op"), nil)
	descSABytes = prometheus.NewDesc("espgw_sa_bytes_total", "Bytes sealed or opened per SA.", labels(saLabels, "op"), nil)
	descSADrops = prometheus.NewDesc("espgw_sa_drops_total", "Packets dropped per SA, by reason.", labels(saLabels, "reason"), nil)
	descSASeq   = prometheus.NewDesc("espgw_sa_sequence_number", "The last sequence number an outbound SA sent (64 bits with ESN).", saLabels, nil)
	descSATop   = prometheus.NewDesc("espgw_sa_replay_window_top", "The highest sequence number an inbound SA accepted: the top of its replay window.", saLabels, nil)
	descSAPMTU  = prometheus.NewDesc("espgw_sa_path_mtu_bytes", "The outer path MTU learned from ICMP for an outbound SA (0 when none holds).", saLabels, nil)

	descSockPkts   = prometheus.NewDesc("espgw_socket_packets_total", "ESP packets through an outer socket, by direction.", []string{"kind", "local", "direction"}, nil)
	descSockBytes  = prometheus.NewDesc("espgw_socket_bytes_total", "ESP bytes through an outer socket, by direction.", []string{"kind", "local", "direction"}, nil)
	descSockIgnore = prometheus.NewDesc("espgw_socket_ignored_total", "Datagrams an outer socket received and did not pass on, by reason: keepalive, non_esp, short, truncated.", []string{"kind", "local", "reason"}, nil)
	descSockKeep   = prometheus.NewDesc("espgw_socket_keepalives_sent_total", "RFC 3948 NAT keepalives sent from an outer socket (nat-keepalive).", []string{"kind", "local"}, nil)
	descSockErrors = prometheus.NewDesc("espgw_socket_errors_total", "Failed socket calls: send (packets the kernel refused), receive (failed receive calls).", []string{"kind", "local", "op"}, nil)

	descXDPPkts     = prometheus.NewDesc("espgw_xdp_packets_total", "ESP packets through the AF_XDP rings (wan-io), by direction.", []string{"device", "direction"}, nil)
	descXDPBytes    = prometheus.NewDesc("espgw_xdp_bytes_total", "ESP bytes through the AF_XDP rings (wan-io), by direction.", []string{"device", "direction"}, nil)
	descXDPKicks    = prometheus.NewDesc("espgw_xdp_kicks_total", "sendto calls that woke the kernel for a batch of the TX ring.", []string{"device"}, nil)
	descXDPFallback = prometheus.NewDesc("espgw_xdp_fallback_packets_total", "Packets sent through the raw socket beside the rings (no neighbour yet, fragments).", []string{"device"}, nil)
	descXDPNoNeigh  = prometheus.NewDesc("espgw_xdp_no_neighbor_packets_total", "Of the fallback packets, those whose next hop was not resolved.", []string{"device"}, nil)
	descXDPDrops    = prometheus.NewDesc("espgw_xdp_drops_total", "Packets the AF_XDP path dropped, by reason: malformed, truncated, tx_ring_full, and the kernel's rx_dropped, rx_ring_full, rx_fill_ring_empty.", []string{"device", "reason"}, nil)
	descXDPErrors   = prometheus.NewDesc("espgw_xdp_send_errors_total", "Kicks of the TX ring the kernel refused.", []string{"device"}, nil)
	descXDPRetries  = prometheus.NewDesc("espgw_xdp_kick_retries_total", "Kicks made again, with a backoff, for frames a kick left in the TX ring.", []string{"device"}, nil)
	descXDPStalls   = prometheus.NewDesc("espgw_xdp_kick_stalls_total", "Times the kernel took no frames from the TX ring through a second of retries (each logged).", []string{"device"}, nil)
	descXDPInvalid  = prometheus.NewDesc("espgw_xdp_invalid_descriptors_total", "Ring descriptors the kernel found invalid (XDP_STATISTICS), by ring.", []string{"device", "ring"}, nil)
	descXDPTxEmpty  = prometheus.NewDesc("espgw_xdp_tx_ring_empty_total", "Times the kernel found the TX ring empty (XDP_STATISTICS tx_ring_empty_descs).", []string{"device"}, nil)

	descEngOps        = prometheus.NewDesc("espgw_engine_ops_total", "Ops the offload engine completed.", []string{"engine"}, nil)
	descEngBytes      = prometheus.NewDesc("espgw_engine_bytes_total", "Packet bytes the offload engine processed.", []string{"engine"}, nil)
	descEngBatches    = prometheus.NewDesc("espgw_engine_batches_total", "Batches submitted to the offload engine.", []string{"engine"}, nil)
	descEngRecords    = prometheus.NewDesc("espgw_engine_records_total", "Command records (MCRs) issued to the card.", []string{"engine"}, nil)
	descEngMCRFull    = prometheus.NewDesc("espgw_engine_full_records_total", "Command records that went out with the maximum aggregation.", []string{"engine"}, nil)
	descEngInterrupts = prometheus.NewDesc("espgw_engine_interrupts_total", "Completion interrupts delivered.", []string{"engine"}, nil)
	descEngDoorbells  = prometheus.NewDesc("espgw_engine_doorbells_total", "Notifications that announced new requests to a device.", []string{"engine"}, nil)
	descEngCompl      = prometheus.NewDesc("espgw_engine_completions_total", "Completions reaped from a device's used ring.", []string{"engine"}, nil)
	descEngQueueFull  = prometheus.NewDesc("espgw_engine_queue_full_total", "Submissions refused or held because the engine's queue was full.", []string{"engine"}, nil)
	descEngErrors     = prometheus.NewDesc("espgw_engine_errors_total", "Ops that failed in the engine.", []string{"engine"}, nil)
	descEngBadICV     = prometheus.NewDesc("espgw_engine_bad_icv_total", "Opens the engine found with a bad ICV.", []string{"engine"}, nil)
	descQueue         = prometheus.NewDesc("espgw_engine_queue_depth", "Offload engine ops in flight now.", []string{"engine"}, nil)
	descQueueMax      = prometheus.NewDesc("espgw_engine_queue_depth_max", "The most offload engine ops in flight seen.", []string{"engine"}, nil)
	descBatchMax      = prometheus.NewDesc("espgw_engine_record_ops_max", "The largest aggregation of ops into one command record seen.", []string{"engine"}, nil)
	descBatchSize     = prometheus.NewDesc("espgw_engine_batch_ops", "Ops per batch the gateway handed the engine, by direction (out: sealed, in: opened).", []string{"direction"}, nil)
	descDriver        = prometheus.NewDesc("espgw_engine_driver_info", "The drivers that do an engine's work (afalg: the kernel's, from /proc/crypto).", []string{"engine", "algorithm", "driver", "module"}, nil)

	descIKESAs         = prometheus.NewDesc("espgw_ike_sas", "IKE SAs of a connection now, by state.", []string{"connection", "state"}, nil)
	descIKEChildren    = prometheus.NewDesc("espgw_ike_child_sas", "CHILD_SAs of a connection in force now.", []string{"connection"}, nil)
	descIKEAge         = prometheus.NewDesc("espgw_ike_sa_age_seconds", "Time since an IKE SA was established.", []string{"connection", "spi_i", "spi_r"}, nil)
	descIKERekeyIn     = prometheus.NewDesc("espgw_ike_sa_rekey_in_seconds", "Time until an IKE SA is rekeyed (rekey_time).", []string{"connection", "spi_i", "spi_r"}, nil)
	descIKEChildRekey  = prometheus.NewDesc("espgw_ike_child_sa_rekey_in_seconds", "Time until a CHILD_SA is rekeyed (rekey_time).", []string{"connection", "spi_in", "spi_out"}, nil)
	descIKEChildExpiry = prometheus.NewDesc("espgw_ike_child_sa_expires_in_seconds", "Time until a CHILD_SA reaches its life_time.", []string{"connection", "spi_in", "spi_out"}, nil)
	descIKERekeys      = prometheus.NewDesc("espgw_ike_rekeys_total", "Rekeys of a connection, by what was rekeyed (ike, child) and who started it (local, peer).", []string{"connection", "sa", "by"}, nil)
	descIKECollisions  = prometheus.NewDesc("espgw_ike_rekey_collisions_total", "Simultaneous rekeys of one SA by both sides (RFC 7296 §2.8.1) settled, by what was rekeyed (ike, child).", []string{"connection", "sa"}, nil)
	descIKERetrans     = prometheus.NewDesc("espgw_ike_retransmits_total", "IKE requests of a connection sent again for want of a response.", []string{"connection"}, nil)
	descIKEEstablished = prometheus.NewDesc("espgw_ike_established_total", "IKE SAs of a connection established, either side initiating, rekeyed ones included.", []string{"connection"}, nil)
	descIKEFailures    = prometheus.NewDesc("espgw_ike_failures_total", "What went wrong on a connection, by reason: initiations that failed, peers gone (dpd), CHILD_SAs expired, and the IKE messages dropped and why.", []string{"connection", "reason"}, nil)
	descIKEDropped     = prometheus.NewDesc("espgw_ike_dropped_total", "IKE datagrams no connection took, by reason: queue_full, unknown_peer.", []string{"reason"}, nil)
)

// ikeEvents are the IKE endpoint's counts that are not failures.
var ikeEvents = map[string]bool{"IKE SA established": true, "CHILD_SA established": true, "CHILD_SA rekeyed": true,
	"CHILD_SA rekeyed by the peer": true, "IKE SA rekeyed": true, "IKE SA rekeyed by the peer": true, "retransmitted request": true,
	"CHILD_SA deleted by the peer": true, "IKE SA deleted by the peer": true, "NAT-T keepalive": true, "COOKIE returned": true,
	"COOKIE asked for": true, "INVALID_KE_PAYLOAD received": true, "INVALID_KE_PAYLOAD sent": true, "retransmitted request answered again": true,
	ike.EventChildCollision: true, ike.EventIKECollision: true, "CHILD_SA deleted by both sides at once": true}

// ikeSeries sends the series of the IKE connections.
func ikeSeries(st *IKEStats, ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descIKEDropped, st.QueueFull, "queue_full")
	counter(descIKEDropped, st.UnknownPeer, "unknown_peer")
	for _, c := range st.Connections {
		states := map[string]int{"established": 0, "half-open": int(c.HalfOpen)}
		children := 0
		for _, s := range c.SAs {
			states[s.State]++
			spii, spir := fmt.Sprintf("%016x", s.SPIi), fmt.Sprintf("%016x", s.SPIr)
			gauge(descIKEAge, s.Age.Seconds(), c.Name, spii, spir)
			if s.RekeyIn > 0 {
				gauge(descIKERekeyIn, s.RekeyIn.Seconds(), c.Name, spii, spir)
			}
			for _, k := range s.ChildSAs {
				children++
				in, out := fmt.Sprintf("%#x", k.InSPI), fmt.Sprintf("%#x", k.OutSPI)
				if k.RekeyIn > 0 {
					gauge(descIKEChildRekey, k.RekeyIn.Seconds(), c.Name, in, out)
				}
				if k.ExpiresIn > 0 {
					gauge(descIKEChildExpiry, k.ExpiresIn.Seconds(), c.Name, in, out)
				}
			}
		}
		for state, n := range states {
			gauge(descIKESAs, float64(n), c.Name, state)
		}
		gauge(descIKEChildren, float64(children), c.Name)
		counter(descIKERekeys, c.Events["CHILD_SA rekeyed"], c.Name, "child", "local")
		counter(descIKERekeys, c.Events["CHILD_SA rekeyed by the peer"], c.Name, "child", "peer")
		counter(descIKERekeys, c.Events["IKE SA rekeyed"], c.Name, "ike", "local")
		counter(descIKERekeys, c.Events["IKE SA rekeyed by the peer"], c.Name, "ike", "peer")
		counter(descIKECollisions, c.Events[ike.EventChildCollision], c.Name, "child")
		counter(descIKECollisions, c.Events[ike.EventIKECollision], c.Name, "ike")
		counter(descIKERetrans, c.Retransmits(), c.Name)
		counter(descIKEEstablished, c.Established, c.Name)
		counter(descIKEFailures, c.Failed, c.Name, "initiation failed")
		counter(descIKEFailures, c.DPDFailures, c.Name, "peer gone (dpd)")
		counter(descIKEFailures, c.Expired, c.Name, "CHILD_SA expired")
		counter(descIKEFailures, c.InstallFailures, c.Name, "CHILD_SA not put in force")
		for reason, n := range c.Events {
			if !ikeEvents[reason] {
				counter(descIKEFailures, n, c.Name, reason)
			}
		}
	}
}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descPackets, descDrops, descPMTU,
		descSAPkts, descSABytes, descSADrops, descSASeq, descSATop, descSAPMTU,
		descSockPkts, descSockBytes, descSockIgnore, descSockKeep, descSockErrors,
		descXDPPkts, descXDPBytes, descXDPKicks, descXDPFallback, descXDPNoNeigh, descXDPDrops, descXDPErrors, descXDPRetries, descXDPStalls, descXDPInvalid, descXDPTxEmpty,
		descEngOps, descEngBytes, descEngBatches, descEngRecords, descEngMCRFull, descEngInterrupts, descEngDoorbells, descEngCompl,
		descEngQueueFull, descEngErrors, descEngBadICV, descQueue, descQueueMax, descBatchMax, descBatchSize, descDriver,
		descIKESAs, descIKEChildren, descIKEAge, descIKERekeyIn, descIKEChildRekey, descIKEChildExpiry, descIKERekeys,
		descIKERetrans, descIKECollisions, descIKEEstablished, descIKEFailures, descIKEDropped,
	} {
		ch <- d
	}
}

// saSeries are the label values of an SA's series.
func saSeries(sa SAStats) []string {
	local, remote := sa.Src, sa.Dst
	if sa.Direction == "in" {
		local, remote = sa.Dst, sa.Src
	}
	return []string{sa.SPI, sa.Direction, local, remote, sa.Suite}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.Stats()
	if s.IKE != nil {
		ikeSeries(s.IKE, ch)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter(descPackets, s.TunIn, "tun_in")
	counter(descPackets, s.TunOut, "tun_out")
	counter(descPackets, s.WireIn, "wire_in")
	counter(descPackets, s.WireOut, "wire_out")
	counter(descPackets, s.Held, "held")
	for r := Reason(0); r < NumReasons; r++ {
		counter(descDrops, s.Drops[r.String()], r.String())
	}
	counter(descPMTU, s.PMTU.Updates, "update")
	counter(descPMTU, s.PMTU.Ignored, "ignored")
	// SAs out of force are one series per direction, spi "retired": a
	// retiring SA may share its SPI and addresses with the one that
	// replaced it.
	retired := map[string]*esp.Snapshot{}
	for _, sa := range s.SAs {
		if sa.Retired {
			t := retired[sa.Direction]
			if t == nil {
				t = &esp.Snapshot{Drops: map[string]uint64{}}
				retired[sa.Direction] = t
			}
			t.Add(sa.Snapshot)
			continue
		}
		l := saSeries(sa)
		c.saCounters(ch, sa.Snapshot, l)
		if sa.Direction != "in" {
			gauge(descSASeq, sa.LastSeq, l...)
			gauge(descSAPMTU, uint64(sa.PathMTU), l...)
		}
		if sa.Direction != "out" {
			gauge(descSATop, sa.Highest, l...)
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(retired)) {
		c.saCounters(ch, *retired[dir], []string{"retired", dir, "", "", ""})
	}
	for _, k := range s.Sockets {
		kind, local := k.Kind, k.Local
		counter(descSockPkts, k.PacketsIn, kind, local, "in")
		counter(descSockPkts, k.PacketsOut, kind, local, "out")
		counter(descSockBytes, k.BytesIn, kind, local, "in")
		counter(descSockBytes, k.BytesOut, kind, local, "out")
		counter(descSockIgnore, k.Keepalives, kind, local, "keepalive")
		counter(descSockIgnore, k.NonESP, kind, local, "non_esp")
		counter(descSockIgnore, k.Short, kind, local, "short")
		counter(descSockIgnore, k.Truncated, kind, local, "truncated")
		counter(descSockKeep, k.KeepalivesSent, kind, local)
		counter(descSockErrors, k.SendErrors, kind, local, "send")
		counter(descSockErrors, k.ReceiveErrors, kind, local, "receive")
	}
	for _, x := range s.XDP {
		d := x.Device
		counter(descXDPPkts, x.PacketsIn, d, "in")
		counter(descXDPPkts, x.PacketsOut, d, "out")
		counter(descXDPBytes, x.BytesIn, d, "in")
		counter(descXDPBytes, x.BytesOut, d, "out")
		counter(descXDPKicks, x.Kicks, d)
		counter(descXDPFallback, x.Fallback, d)
		counter(descXDPNoNeigh, x.NoNeighbor, d)
		counter(descXDPErrors, x.SendErrors, d)
		counter(descXDPRetries, x.KickRetries, d)
		counter(descXDPStalls, x.KickStalls, d)
		for reason, v := range map[string]uint64{
			"malformed": x.Malformed, "truncated": x.Truncated, "tx_ring_full": x.TXRingFull,
			"rx_dropped": x.RxDropped, "rx_ring_full": x.RxRingFull, "rx_fill_ring_empty": x.RxFillRingEmptyDescs,
		} {
			counter(descXDPDrops, v, d, reason)
		}
		counter(descXDPInvalid, x.RxInvalidDescs, d, "rx")
		counter(descXDPInvalid, x.TxInvalidDescs, d, "tx")
		counter(descXDPTxEmpty, x.TxRingEmptyDescs, d)
	}
	e := s.Engine
	for d, v := range map[*prometheus.Desc]uint64{
		descEngOps: e.Ops, descEngBytes: e.Bytes, descEngBatches: e.Batches, descEngRecords: e.Records, descEngMCRFull: e.MCRFull,
		descEngInterrupts: e.Interrupts, descEngDoorbells: e.Doorbells, descEngCompl: e.Completions,
		descEngQueueFull: e.QueueFull, descEngErrors: e.Errors, descEngBadICV: e.BadICV,
	} {
		counter(d, v, e.Name)
	}
	gauge(descQueue, e.QueueDepth, e.Name)
	gauge(descQueueMax, e.MaxQueue, e.Name)
	gauge(descBatchMax, e.MaxBatch, e.Name)
	for dir, b := range map[string]BatchStats{"out": s.Batches.Outbound, "in": s.Batches.Inbound} {
		ch <- prometheus.MustNewConstHistogram(descBatchSize, b.Batches, float64(b.Ops), b.cumulative(), dir)
	}
	for _, d := range e.Drivers {
		gauge(descDriver, 1, e.Name, d.Algorithm, d.Driver, d.Module)
	}
}

// saCounters sends one SA's (or the retired SAs') counters under labels l.
func (collector) saCounters(ch chan<- prometheus.Metric, snap esp.Snapshot, l []string) {
	counter := func(d *prometheus.Desc, v uint64, more string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels(l, more)...)
	}
	counter(descSAPkts, snap.SealedPackets, "seal")
	counter(descSAPkts, snap.OpenedPackets, "open")
	counter(descSABytes, snap.SealedBytes, "seal")
	counter(descSABytes, snap.OpenedBytes, "open")
	for r := esp.Reason(1); r < esp.NumReasons; r++ {
		counter(descSADrops, snap.Drops[r.String()], r.String())
	}
}
