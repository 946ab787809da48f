package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/offload"
)

func newStats() *cobra.Command {
	var addr string
	var asJSON bool
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
			printStats(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", gateway.DefaultMetrics, "the gateway's metrics address")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	return cmd
}

// printStats writes a gateway's counters as tables.
func printStats(w io.Writer, st gateway.Stats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TUN in\tTUN out\twire in\twire out\tengine\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s (%d ops, %d queue full)\n", st.TunIn, st.TunOut, st.WireIn, st.WireOut, st.Engine.Name, st.Engine.Ops, st.Engine.QueueFull)
	tw.Flush()
	printDrivers(w, st.Engine.Drivers)
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SPI\tdir\tsuite\tmode\tsealed\topened\tlast seq\tdrops\n")
	for _, s := range st.SAs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.SPI, s.Direction, s.Suite, s.Mode, s.SealedPackets, s.OpenedPackets, s.LastSeq, esp.FormatCounts(s.Drops))
	}
	tw.Flush()
	if len(st.Drops) > 0 {
		fmt.Fprintf(w, "\ngateway drops: %s\n", esp.FormatCounts(st.Drops))
	}
	for _, k := range st.Sockets {
		fmt.Fprintf(w, "socket %s %s: in %d out %d; keepalives sent %d; ignored: keepalives=%d non-esp=%d short=%d truncated=%d; errors: send=%d receive=%d\n",
			k.Kind, k.Local, k.PacketsIn, k.PacketsOut, k.KeepalivesSent, k.Keepalives, k.NonESP, k.Short, k.Truncated, k.SendErrors, k.ReceiveErrors)
	}
	for _, x := range st.XDP {
		fmt.Fprintf(w, "af_xdp %s (%s, %d queues): in %d out %d kicks %d; through the raw socket %d (no neighbour %d); dropped: malformed=%d truncated=%d tx-ring-full=%d; kernel: rx-dropped=%d rx-ring-full=%d fill-ring-empty=%d\n",
			x.Device, x.Mode, x.Queues, x.PacketsIn, x.PacketsOut, x.Kicks, x.Fallback, x.NoNeighbor, x.Malformed, x.Truncated, x.TXRingFull, x.RxDropped, x.RxRingFull, x.RxFillRingEmptyDescs)
	}
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
