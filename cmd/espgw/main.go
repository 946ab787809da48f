// Command espgw is an IPsec ESP data-plane test bed.
//
// It runs gateways that form an ESP tunnel over TUN devices (package cli
// holds those commands) and the lab's commands: offline pcap sealing and
// opening, scenarios, speed tables, the bench, reports and the demo. Each
// lab subcommand lives in its own file; the work is done by the packages
// they call.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/cli"
	"github.com/espgw/espgw/internal/lab/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "espgw:", err)
		os.Exit(1)
	}
}

// newRoot is the gateway's commands (package cli), which open engines
// from the lab's catalog so that the emulated cards can be named, and the
// lab's commands.
func newRoot() *cobra.Command {
	root := cli.Root(sim.Engines{})
	root.AddCommand(
		newDemo(),
		newPcap(),
		newSpeed(),
		newScenario(),
		newBench(),
		newReport(),
	)
	return root
}
