// Package cli holds the espgw commands a gateway needs: run, stats, sa,
// policy, device, ike and version.
//
// It links none of the lab: the engine names run accepts come from the
// catalog it is handed, and cmd/espgw adds the lab's commands to Root.
package cli

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/offload/engines"
)

// Root is the espgw command with the gateway's subcommands; engines named
// in gateway configurations are opened from cat.
func Root(cat engines.Catalog) *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:           "espgw",
		Short:         "IPsec ESP data-plane test bed",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log debug messages")
	root.AddCommand(
		newVersion(),
		newRun(cat),
		newStats(),
		newSA(),
		newPolicy(),
		newDevice(),
		newIKE(),
	)
	return root
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintln(cmd.OutOrStdout(), "espgw", v)
		},
	}
}

// PrintJSON writes v to the command's output as indented JSON.
func PrintJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	return nil
}
