package main

import (
	"fmt"
	"io"

	"github.com/espgw/espgw/internal/lab/speed"
	"github.com/spf13/cobra"
)

// newSpeed is `espgw speed`: openssl speed's flags (single dash) and table
// for an offload engine. Its flags are parsed by package speed, since pflag
// cannot read single-dash long flags.
func newSpeed() *cobra.Command {
	return &cobra.Command{
		Use:                "speed [-evp ALG] [-engine NAME] [-multi N] [-seconds S] [-bytes N] [-batch N] [--vs-openssl] [--json]",
		Short:              "Time an offload engine like 'openssl speed -evp ALG'",
		Long:               speed.Usage,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := speed.ParseArgs(args)
			if err != nil {
				return fmt.Errorf("speed: %w", err)
			}
			out := cmd.OutOrStdout()
			if f.Help {
				fmt.Fprint(out, speed.Usage)
				return nil
			}
			return runSpeed(cmd, f, out)
		},
	}
}

func runSpeed(cmd *cobra.Command, f *speed.Flags, out io.Writer) error {
	ctx := cmd.Context()
	progress := func(line string) { fmt.Fprintln(cmd.ErrOrStderr(), line) }
	if f.JSON {
		progress = nil
	}
	res, err := speed.Run(ctx, f.Config, progress)
	if err != nil {
		return err
	}
	var cmp *speed.Compare
	if f.VsOpenSSL {
		if cmp, err = speed.RunOpenSSL(ctx, f.Config, res); err != nil {
			return err
		}
	}
	if f.JSON {
		return speed.WriteJSON(out, res, cmp)
	}
	speed.WriteTable(out, res, cmp)
	return nil
}
