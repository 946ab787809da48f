package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/espgw/espgw/internal/gateway"
)

// printIKE writes the IKE connections of a gateway: their IKE SAs with
// state and lifetimes, the CHILD_SAs in force, and the counts.
func printIKE(w io.Writer, st *gateway.IKEStats) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "IKE connection\tIKE SA (SPIi_SPIr)\tstate\tage\trekey in\tCHILD_SA child in/out\tage\trekey in\texpires in\n")
	round := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return d.Round(time.Second).String()
	}
	for _, c := range st.Connections {
		if len(c.SAs) == 0 {
			fmt.Fprintf(tw, "%s\t-\tnone\t\t\t\t\t\t\n", c.Name)
		}
		for _, s := range c.SAs {
			nat := ""
			if s.NAT {
				nat = " (NAT)"
			}
			first := fmt.Sprintf("%s\t%016x_%016x\t%s%s\t%s\t%s", c.Name, s.SPIi, s.SPIr, s.State, nat, round(s.Age), round(s.RekeyIn))
			if len(s.ChildSAs) == 0 {
				fmt.Fprintf(tw, "%s\t-\t\t\t\n", first)
			}
			for i, k := range s.ChildSAs {
				if i > 0 {
					first = "\t\t\t\t"
				}
				out := ""
				if k.Outbound {
					out = " *"
				}
				fmt.Fprintf(tw, "%s\t%s %#x/%#x%s\t%s\t%s\t%s\n", first, k.Name, k.InSPI, k.OutSPI, out, round(k.Age), round(k.RekeyIn), round(k.ExpiresIn))
			}
		}
	}
	tw.Flush()
	for _, c := range st.Connections {
		fmt.Fprintf(w, "IKE %s: initiated %d, established %d, failed %d; rekeys by this side: CHILD_SA %d, IKE SA %d; retransmits %d; peers gone (dpd) %d; CHILD_SAs expired %d; "+
			"CHILD_SAs by CREATE_CHILD_SA %d; this side's redundant of simultaneous rekeys %d; trap acquires %d\n",
			c.Name, c.Initiated, c.Established, c.Failed, c.ChildRekeys, c.IKERekeys, c.Retransmits(), c.DPDFailures, c.Expired,
			c.ChildrenCreated, c.RedundantChildSAs, c.Acquires)
		if len(c.Events) > 0 {
			fmt.Fprintf(w, "  events:")
			for _, k := range slices.Sorted(maps.Keys(c.Events)) {
				fmt.Fprintf(w, " %s=%d;", k, c.Events[k])
			}
			fmt.Fprintln(w)
		}
	}
	if st.QueueFull > 0 || st.UnknownPeer > 0 {
		fmt.Fprintf(w, "IKE datagrams dropped: queue full %d, from a peer no connection names %d\n", st.QueueFull, st.UnknownPeer)
	}
}
