package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/lab/scenario"
	"github.com/espgw/espgw/internal/overwrite"
	"github.com/espgw/espgw/scenarios"
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
	var asJSON, bundled bool
	var junit, peer string
	cmd := &cobra.Command{
		Use:   "run FILE|DIR ... | run --bundled [NAME ...]",
		Short: "Run scenarios and print a verdict table",
		Long: `Run each scenario (a directory: every *.yaml in it; a file with a matrix:
every combination) on a fresh test bed — hostA — gw1 — wan — gw2 — hostB in
network namespaces, the wan namespace bridging the gateways through the
impairment relay — and check its expectations. The format is documented in
scenarios/README.md. Scenarios with peer: linux-xfrm (the kernel-peer section)
run last, with the Linux kernel's ESP as gw2: one QEMU guest booted for all of
them. Exits non-zero if any expectation failed or a scenario could not run.
Needs root. Removes everything it made, also on Ctrl-C.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !bundled {
				return errors.New("name scenario files or directories, or give --bundled")
			}
			// Parse everything first, and check where the reports go: a
			// malformed file or an unwritable --junit stops the run before
			// any test bed is built.
			all, err := loadScenarios(args, bundled)
			if err != nil {
				return err
			}
			if junit != "" {
				var inputs []overwrite.File
				for _, s := range all {
					if !bundled {
						inputs = append(inputs, overwrite.File{Role: "the scenario file", Path: s.File})
					}
				}
				if err := overwrite.Check([]overwrite.File{{Role: "--junit", Path: junit}}, inputs...); err != nil {
					return err
				}
				if err := checkWritable(junit); err != nil {
					return fmt.Errorf("--junit: %w", err)
				}
			}
			if o.Captures != "" {
				if err := os.MkdirAll(o.Captures, 0o755); err != nil {
					return fmt.Errorf("--captures: %w", err)
				}
			}
			o.Progress = cmd.ErrOrStderr()
			if peer != "" {
				all = slices.DeleteFunc(all, func(s *scenario.Scenario) bool { return s.Peer != peer })
				if len(all) == 0 {
					return fmt.Errorf("no scenario with peer %s", peer)
				}
			}
			// The espgw-peer scenarios first, then the kernel-peer section:
			// its scenarios share one boot of the kernel guest.
			slices.SortStableFunc(all, func(a, b *scenario.Scenario) int {
				return strings.Compare(peerOrder(a.Peer), peerOrder(b.Peer))
			})
			for _, s := range all {
				if s.Peer == scenario.PeerLinuxXFRM && o.Kernel == nil {
					o.Kernel = scenario.NewKernelPeer(o.Prefix+"k", nil)
					defer o.Kernel.Close()
				}
			}
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
	f.BoolVar(&bundled, "bundled", false, "run the scenarios built into espgw (NAME: a file name such as replay-attack; none: all)")
	f.StringVar(&peer, "peer", "", "run only the scenarios against this gw2: espgw or linux-xfrm (the kernel-peer section)")
	return cmd
}

// peerOrder sorts the espgw-peer scenarios before the kernel-peer section.
func peerOrder(p string) string {
	if p == scenario.PeerEspgw {
		return ""
	}
	return p
}

// loadScenarios reads the scenarios of files and directories, or of the
// bundled files named (all when none is).
func loadScenarios(args []string, bundled bool) ([]*scenario.Scenario, error) {
	var all []*scenario.Scenario
	if bundled {
		names, err := scenario.BundledFiles(scenarios.Bundled)
		if err != nil {
			return nil, err
		}
		for _, a := range args {
			if !slices.Contains(names, strings.TrimSuffix(a, ".yaml")+".yaml") {
				return nil, fmt.Errorf("no bundled scenario file %q (have %s)", a, strings.Join(names, ", "))
			}
		}
		for _, n := range names {
			if len(args) > 0 && !slices.Contains(args, n) && !slices.Contains(args, strings.TrimSuffix(n, ".yaml")) {
				continue
			}
			scs, err := scenario.LoadFS(scenarios.Bundled, n)
			if err != nil {
				return nil, err
			}
			all = append(all, scs...)
		}
		return all, nil
	}
	files, err := scenario.Files(args)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		scs, err := scenario.Load(f)
		if err != nil {
			return nil, err
		}
		all = append(all, scs...)
	}
	return all, nil
}

func newScenarioList() *cobra.Command {
	var bundled bool
	cmd := &cobra.Command{
		Use:   "list [FILE|DIR ...] | list --bundled",
		Short: "List the scenarios in files or directories, or those built into espgw",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && !bundled {
				bundled = true
			}
			all, err := loadScenarios(args, bundled)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tFILE\tPEER\tSUITE\tMODE\tOUTER\tENGINES\tSTEPS\tDESCRIPTION")
			for _, s := range all {
				from := s.File
				if bundled {
					from = "bundled:" + s.File
				}
				suite := s.SA.Suite
				if s.SA.IKE != nil {
					suite = "ike: " + s.SA.IKE.ESPProposals // negotiated
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%d\t%s\n", s.Name, from, s.Peer, suite, s.SA.Mode, s.Topology.Outer,
					s.Engines.GW1, s.Engines.GW2, len(s.Traffic.Steps), s.Description)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&bundled, "bundled", false, "list the scenarios built into espgw (the default with no arguments)")
	return cmd
}

// checkWritable makes sure a report can be written to path at the end of
// a run: its directory exists and takes a new file, and path is not a
// directory. Nothing is left behind.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%q is a directory", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".espgw-report-*")
	if err != nil {
		return fmt.Errorf("cannot write %q: %w", path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
