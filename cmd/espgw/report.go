package main

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/lab/report"
)

func newReport() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN.json [RUN.json …] -o report.html",
		Short: "Write bench, scenario and demo results as one self-contained HTML page, runs compared",
		Long: `Read the JSON that espgw bench --save/--json (also --tunnels), espgw scenario
run --json and espgw demo --json write, and write one HTML file with
everything embedded (it opens offline): the verdicts first, then each run's
machine, tables and charts. With several runs of a kind, the figures stand
side by side with their ratio to the first run, flagged as a regression or
an improvement only when the runs' own recorded spreads (repeated TCP runs,
the zero-loss search's bracket) do not overlap; runs from different
machines are warned about.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("-o: name the HTML file to write")
			}
			runs, err := report.Load(args...)
			if err != nil {
				return err
			}
			return writeReport(out, runs)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write")
	return cmd
}

// writeReport renders runs into the HTML file out.
func writeReport(out string, runs []*report.Run) error {
	var b bytes.Buffer
	if err := report.Write(&b, runs, time.Now()); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}
