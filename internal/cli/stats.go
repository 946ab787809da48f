package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/offload"
)

func newStats() *cobra.Command {
	var addr string
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show a running gateway's counters per SA and drop reason",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err := client.Get("http://" + addr + "/stats")
			if err != nil {
				return fmt.Errorf("read stats from the gateway at %s (is `espgw run` up with metrics on?): %w", addr, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				return fmt.Errorf("read stats from %s: status %s: %v", addr, resp.Status, err)
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var st gateway.Stats
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("decode stats from %s: %w", addr, err)
			}
			printStats(cmd.OutOrStdout(), st, all)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", gateway.DefaultMetrics, "the gateway's metrics address")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	cmd.Flags().BoolVar(&all, "all", false, fmt.Sprintf("list every SA (beyond %d SAs the table shows the totals, the %d with the most traffic and every SA with drops)", saRowLimit, topSAs))
	return cmd
}

// saRowLimit is how many SAs printStats lists row by row; a gateway with
// more gets a summary (unless all): the totals, the topSAs SAs with the
// most traffic and every SA with drops.
const (
	saRowLimit = 50
	topSAs     = 10
)

// printStats writes a gateway's counters as tables: every SA's row when
// all is set or the gateway has at most saRowLimit SAs, else a summary.
func printStats(w io.Writer, st gateway.Stats, all bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TUN in\tTUN out\twire in\twire out\tengine\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s (%d ops, %d queue full)\n", st.TunIn, st.TunOut, st.WireIn, st.WireOut, st.Engine.Name, st.Engine.Ops, st.Engine.QueueFull)
	tw.Flush()
	printDrivers(w, st.Engine.Drivers)
	fmt.Fprintln(w)
	rows := st.SAs
	if !all && len(rows) > saRowLimit {
		rows = summarizeSAs(w, st.SAs)
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SPI\tdir\tsrc -> dst\tsuite\tmode\tsealed\topened\tlast seq\tdrops\n")
	for _, s := range rows {
		ends := "-"
		if s.Src != "" {
			ends = s.Src + " -> " + s.Dst
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.SPI, s.Direction, ends, s.Suite, s.Mode, s.SealedPackets, s.OpenedPackets, s.LastSeq, esp.FormatCounts(s.Drops))
	}
	tw.Flush()
	if len(rows) < len(st.SAs) {
		fmt.Fprintf(w, "(%d more SAs, none with drops: --all lists every SA)\n", len(st.SAs)-len(rows))
	}
	if len(st.Drops) > 0 {
		fmt.Fprintf(w, "\ngateway drops: %s\n", esp.FormatCounts(st.Drops))
	}
	for _, k := range st.Sockets {
		fmt.Fprintf(w, "socket %s %s: in %d out %d; keepalives sent %d; ignored: keepalives=%d non-esp=%d short=%d truncated=%d; errors: send=%d receive=%d\n",
			k.Kind, k.Local, k.PacketsIn, k.PacketsOut, k.KeepalivesSent, k.Keepalives, k.NonESP, k.Short, k.Truncated, k.SendErrors, k.ReceiveErrors)
	}
	for _, x := range st.XDP {
		fmt.Fprintf(w, "af_xdp %s (%s, %d queues, for %s): in %d out %d (IPv4 %d/%d, IPv6 %d/%d) kicks %d (refused %d, retried %d, stalls %d); through the raw socket %d (no neighbour %d); dropped: malformed=%d truncated=%d tx-ring-full=%d; kernel: rx-dropped=%d rx-ring-full=%d fill-ring-empty=%d\n",
			x.Device, x.Mode, x.Queues, strings.Join(x.Local, " "), x.PacketsIn, x.PacketsOut, x.IPv4.PacketsIn, x.IPv4.PacketsOut, x.IPv6.PacketsIn, x.IPv6.PacketsOut,
			x.Kicks, x.SendErrors, x.KickRetries, x.KickStalls, x.Fallback, x.NoNeighbor, x.Malformed, x.Truncated, x.TXRingFull, x.RxDropped, x.RxRingFull, x.RxFillRingEmptyDescs)
	}
	if st.IKE != nil {
		printIKE(w, st.IKE)
	}
}

// summarizeSAs writes the totals over sas and returns the SAs to list: the
// topSAs with the most packets, busiest first, then every other SA with
// drops in the gateway's order.
func summarizeSAs(w io.Writer, sas []gateway.SAStats) []gateway.SAStats {
	var sum esp.Snapshot
	sum.Drops = map[string]uint64{}
	dirs := map[string]int{}
	withDrops := 0
	for _, s := range sas {
		sum.Add(s.Snapshot)
		if s.SPI != "retired" {
			dirs[s.Direction]++
		}
		if dropped(s) {
			withDrops++
		}
	}
	fmt.Fprintf(w, "%d SAs (out %d, in %d, both %d), %d with drops: sealed %d packets (%d bytes), opened %d packets (%d bytes); drops: %s\n",
		len(sas), dirs["out"], dirs["in"], dirs["both"], withDrops, sum.SealedPackets, sum.SealedBytes, sum.OpenedPackets, sum.OpenedBytes, cmp.Or(esp.FormatCounts(sum.Drops), "none"))
	byTraffic := make([]int, len(sas))
	for i := range byTraffic {
		byTraffic[i] = i
	}
	traffic := func(i int) uint64 { return sas[i].SealedPackets + sas[i].OpenedPackets }
	slices.SortStableFunc(byTraffic, func(a, b int) int { return cmp.Compare(traffic(b), traffic(a)) })
	top := byTraffic[:min(topSAs, len(sas))]
	shown := make([]bool, len(sas))
	var out []gateway.SAStats
	for _, i := range top {
		shown[i] = true
		out = append(out, sas[i])
	}
	for i, s := range sas {
		if !shown[i] && dropped(s) {
			out = append(out, s)
		}
	}
	fmt.Fprintf(w, "the %d SAs with the most traffic, then every other SA with drops:\n", len(top))
	return out
}

// dropped reports whether an SA dropped any packet.
func dropped(s gateway.SAStats) bool {
	for _, n := range s.Drops {
		if n > 0 {
			return true
		}
	}
	return false
}

// printDrivers says which drivers did an engine's work (afalg: the
// kernel's, as /proc/crypto names them), and any caveat about them.
func printDrivers(w io.Writer, ds []offload.Driver) {
	for _, d := range ds {
		fmt.Fprintf(w, "engine driver: %s by %s (%s)\n", d.Algorithm, d.Driver, d.Module)
		if d.Note != "" {
			fmt.Fprintf(w, "engine note: %s\n", d.Note)
		}
	}
}
