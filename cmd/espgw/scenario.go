package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/scenario"
)

func newScenario() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scenario",
		Short: "Run scenario files: topology, SAs, traffic, WAN faults and expectations",
	}
	cmd.AddCommand(newScenarioRun(), newScenarioList())
	return cmd
}

func newScenarioRun() *cobra.Command {
	var o scenario.Options
	var asJSON bool
	var junit string
	cmd := &cobra.Command{
		Use:   "run FILE|DIR ...",
		Short: "Run scenarios and print a verdict table",
		Long: `Run each scenario (a directory: every *.yaml in it; a file with a matrix:
every combination) on a fresh test bed — hostA — gw1 — wan — gw2 — hostB in
network namespaces, the wan namespace bridging the gateways through the
impairment relay — and check its expectations. The format is documented in
scenarios/README.md. Exits non-zero if any expectation failed or a scenario
could not run. Needs root. Removes everything it made, also on Ctrl-C.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := scenario.Files(args)
			if err != nil {
				return err
			}
			// Parse everything first: a malformed file stops the run before
			// any test bed is built.
			var all []*scenario.Scenario
			for _, f := range files {
				scs, err := scenario.Load(f)
				if err != nil {
					return err
				}
				all = append(all, scs...)
			}
			o.Progress = cmd.ErrOrStderr()
			var results []*scenario.Result
			for i, s := range all {
				if err := cmd.Context().Err(); err != nil {
					break
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "[%d/%d] %s\n", i+1, len(all), s.Name)
				r := scenario.Run(cmd.Context(), s, o)
				verdict := "FAIL"
				if r.Pass {
					verdict = "PASS"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "[%d/%d] %s %s (%.1fs)\n", i+1, len(all), verdict, s.Name, r.Seconds)
				results = append(results, r)
			}
			if asJSON {
				if err := scenario.WriteJSON(cmd.OutOrStdout(), results); err != nil {
					return err
				}
			} else {
				scenario.PrintTable(cmd.OutOrStdout(), results)
			}
			if junit != "" {
				if err := scenario.WriteJUnit(junit, results); err != nil {
					return err
				}
			}
			if err := cmd.Context().Err(); err != nil {
				return fmt.Errorf("interrupted after %d of %d scenarios", len(results), len(all))
			}
			failed := 0
			for _, r := range results {
				if !r.Pass {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d scenarios failed", failed, len(results))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the full report as JSON instead of the table")
	f.StringVar(&junit, "junit", "", "also write a JUnit XML report to this file")
	f.StringVar(&o.Captures, "captures", "", "write WAN and inner captures and an esp_sa file per scenario under this directory")
	f.StringVar(&o.Prefix, "prefix", "sc", "namespace name prefix")
	return cmd
}

func newScenarioList() *cobra.Command {
	return &cobra.Command{
		Use:   "list [FILE|DIR ...]",
		Short: "List the scenarios in files or directories (default: scenarios/)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"scenarios"}
			}
			files, err := scenario.Files(args)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tFILE\tSUITE\tMODE\tOUTER\tENGINES\tSTEPS\tDESCRIPTION")
			var errs []error
			for _, f := range files {
				scs, err := scenario.Load(f)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				for _, s := range scs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s/%s\t%d\t%s\n", s.Name, f, s.SA.Suite, s.SA.Mode, s.Topology.Outer,
						s.Engines.GW1, s.Engines.GW2, len(s.Traffic.Steps), s.Description)
				}
			}
			tw.Flush()
			for _, e := range errs {
				fmt.Fprintln(os.Stderr, e)
			}
			return errors.Join(errs...)
		},
	}
}
