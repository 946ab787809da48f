package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/pprof"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/transport"
	"github.com/espgw/espgw/internal/xdp"
	"github.com/espgw/espgw/offload"
)

// Stats is a point-in-time copy of every counter of a gateway.
type Stats struct {
	TunIn   uint64            `json:"tun_in"`
	TunOut  uint64            `json:"tun_out"`
	WireIn  uint64            `json:"wire_in"`
	WireOut uint64            `json:"wire_out"`
	Drops   map[string]uint64 `json:"drops"` // gateway-level, by reason
	SAs     []SAStats         `json:"sas"`
	Engine  EngineStats       `json:"engine"`
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
	Suite     string `json:"suite"`
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
		TunIn: c.TunIn.Load(), TunOut: c.TunOut.Load(), WireIn: c.WireIn.Load(), WireOut: c.WireOut.Load(),
		Drops:  map[string]uint64{},
		Engine: engineStats(g.engine),
		PMTU:   PMTUStats{Updates: g.pmtu.Updates.Load(), Ignored: g.pmtu.Ignored.Load()},
	}
	if r, err := ReadReassembly(); err == nil {
		out.Reassembly = &r
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
		if slices.Contains(st.in[s.SPI()], s) {
			dir += "in"
		}
		if dir == "outin" {
			dir = "both"
		}
		path := 0
		if h := headerOf(s); h != nil {
			path = int(h.path.mtu.Load())
		}
		out.SAs = append(out.SAs, SAStats{
			SPI: fmt.Sprintf("%#x", s.SPI()), Direction: dir, Suite: s.Config.Suite.String(), Mode: s.Config.Mode.String(),
			Expired: s.Expired(), LastSeq: s.LastSeq(), Highest: s.HighestAccepted(), PathMTU: path, Snapshot: s.Snapshot(),
		})
	}
	g.retired.mu.Lock()
	defer g.retired.mu.Unlock()
	var retiring []SAStats
	for s, dir := range g.retired.live {
		retiring = append(retiring, SAStats{SPI: fmt.Sprintf("%#x", s.SPI()), Direction: dir, Suite: s.Config.Suite.String(), Mode: s.Config.Mode.String(),
			Expired: s.Expired(), LastSeq: s.LastSeq(), Highest: s.HighestAccepted(), Retired: true, Snapshot: s.Snapshot()})
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

// Handler serves /metrics (Prometheus) and /stats (the Stats as JSON, which
// `espgw stats` reads).
func (g *Gateway) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{g})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := writeStats(w, g.Stats()); err != nil {
			g.log.Debug("write /stats", "err", err)
		}
	})
	return mux
}

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
// nothing for metrics.
type collector struct{ g *Gateway }

var (
	descPackets = prometheus.NewDesc("espgw_packets_total", "Packets by place: tun_in, tun_out, wire_in, wire_out.", []string{"place"}, nil)
	descDrops   = prometheus.NewDesc("espgw_drops_total", "Packets dropped by the gateway with no SA to blame, by reason.", []string{"reason"}, nil)
	descSAPkts  = prometheus.NewDesc("espgw_sa_packets_total", "Packets sealed or opened per SA.", []string{"spi", "op"}, nil)
	descSABytes = prometheus.NewDesc("espgw_sa_bytes_total", "Bytes sealed or opened per SA.", []string{"spi", "op"}, nil)
	descSADrops = prometheus.NewDesc("espgw_sa_drops_total", "Packets dropped per SA, by reason.", []string{"spi", "reason"}, nil)
	descSocket  = prometheus.NewDesc("espgw_socket_packets_total", "Outer socket counters: datagrams ignored or refused.", []string{"kind", "counter"}, nil)
	descXDP     = prometheus.NewDesc("espgw_xdp_packets_total", "AF_XDP counters (wan-io): through the rings, beside them, dropped, and the kernel's XDP_STATISTICS.", []string{"device", "counter"}, nil)
	descEngine  = prometheus.NewDesc("espgw_engine_ops_total", "Offload engine counters.", []string{"engine", "counter"}, nil)
	descQueue   = prometheus.NewDesc("espgw_engine_queue_depth", "Offload engine ops in flight: now, and the most seen.", []string{"engine", "which"}, nil)
	descDriver  = prometheus.NewDesc("espgw_engine_driver_info", "The drivers that do an engine's work (afalg: the kernel's, from /proc/crypto).", []string{"engine", "algorithm", "driver", "module"}, nil)
)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descDrops, descSAPkts, descSABytes, descSADrops, descSocket, descXDP, descEngine, descQueue, descDriver} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descPackets, s.TunIn, "tun_in")
	counter(descPackets, s.TunOut, "tun_out")
	counter(descPackets, s.WireIn, "wire_in")
	counter(descPackets, s.WireOut, "wire_out")
	for r := Reason(0); r < NumReasons; r++ {
		counter(descDrops, s.Drops[r.String()], r.String())
	}
	// SAs out of force are one series, "retired": a retiring SA may share
	// its SPI with the one that replaced it.
	retired := SAStats{SPI: "retired", Snapshot: esp.Snapshot{Drops: map[string]uint64{}}}
	sas := make([]SAStats, 0, len(s.SAs)+1)
	for _, sa := range s.SAs {
		if !sa.Retired {
			sas = append(sas, sa)
			continue
		}
		retired.Add(sa.Snapshot)
	}
	if len(sas) < len(s.SAs) {
		sas = append(sas, retired)
	}
	for _, sa := range sas {
		counter(descSAPkts, sa.SealedPackets, sa.SPI, "seal")
		counter(descSAPkts, sa.OpenedPackets, sa.SPI, "open")
		counter(descSABytes, sa.SealedBytes, sa.SPI, "seal")
		counter(descSABytes, sa.OpenedBytes, sa.SPI, "open")
		for r := esp.Reason(1); r < esp.NumReasons; r++ {
			counter(descSADrops, sa.Drops[r.String()], sa.SPI, r.String())
		}
	}
	for _, k := range s.Sockets {
		for name, v := range map[string]uint64{
			"keepalives": k.Keepalives, "non_esp": k.NonESP, "short": k.Short, "truncated": k.Truncated,
			"send_errors": k.SendErrors, "receive_errors": k.ReceiveErrors,
		} {
			counter(descSocket, v, k.Kind, name)
		}
	}
	for _, x := range s.XDP {
		for name, v := range map[string]uint64{
			"packets_in": x.PacketsIn, "packets_out": x.PacketsOut, "kicks": x.Kicks, "fallback": x.Fallback,
			"no_neighbor": x.NoNeighbor, "malformed": x.Malformed, "truncated": x.Truncated,
			"tx_ring_full": x.TXRingFull, "send_errors": x.SendErrors, "rx_dropped": x.RxDropped,
			"rx_ring_full": x.RxRingFull, "rx_fill_ring_empty_descs": x.RxFillRingEmptyDescs,
			"rx_invalid_descs": x.RxInvalidDescs, "tx_invalid_descs": x.TxInvalidDescs, "tx_ring_empty_descs": x.TxRingEmptyDescs,
		} {
			counter(descXDP, v, x.Device, name)
		}
	}
	e := s.Engine
	for name, v := range map[string]uint64{
		"ops": e.Ops, "bytes": e.Bytes, "batches": e.Batches, "records": e.Records, "interrupts": e.Interrupts,
		"queue_full": e.QueueFull, "mcr_full": e.MCRFull, "errors": e.Errors, "bad_icv": e.BadICV,
		"doorbells": e.Doorbells, "completions": e.Completions,
	} {
		counter(descEngine, v, e.Name, name)
	}
	ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(e.QueueDepth), e.Name, "now")
	ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(e.MaxQueue), e.Name, "max")
	for _, d := range e.Drivers {
		ch <- prometheus.MustNewConstMetric(descDriver, prometheus.GaugeValue, 1, e.Name, d.Algorithm, d.Driver, d.Module)
	}
}
