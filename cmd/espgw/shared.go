package main

// What several commands share: report output, the progress bar, flag values.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/cli"
	"github.com/espgw/espgw/sa"
)

// printReport saves rep as JSON to the file save (when set) and prints it:
// as JSON with asJSON, else as print writes it.
func printReport(cmd *cobra.Command, rep any, print func(io.Writer), asJSON bool, save string) error {
	if save != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(save, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("save the report: %w", err)
		}
	}
	if asJSON {
		return cli.PrintJSON(cmd, rep)
	}
	print(cmd.OutOrStdout())
	return nil
}

// progressBar draws a long run's progress on the command's stderr: what it
// is doing and how far it is. finish clears the bar.
func progressBar(cmd *cobra.Command, extra ...progressbar.Option) (progress func(what string, done, total int), finish func()) {
	opts := append([]progressbar.Option{progressbar.OptionSetWriter(cmd.ErrOrStderr()), progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(), progressbar.OptionSetElapsedTime(true), progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100 * time.Millisecond)}, extra...)
	bar := progressbar.NewOptions(1, opts...)
	return func(what string, done, total int) {
		if total > 0 && bar.GetMax() != total {
			bar.ChangeMax(total)
		}
		bar.Describe(what)
		bar.Set(done)
	}, func() { bar.Finish() }
}

// parseEncap reads an --encap(s) value: none (or raw) or udp.
func parseEncap(flag, v string) (sa.Encap, error) {
	switch v {
	case "none", "raw":
		return sa.EncapNone, nil
	case "udp":
		return sa.EncapUDP, nil
	}
	return 0, fmt.Errorf("%s %q: want none or udp", flag, v)
}
