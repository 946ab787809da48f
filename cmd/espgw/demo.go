package main

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/lab/demo"
	"github.com/espgw/espgw/internal/lab/report"
)

func newDemo() *cobra.Command {
	var o demo.Options
	var encap string
	var asJSON bool
	var page string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Build the whole test bed, push traffic through a tunnel, and report",
		Long: `Build hostA — gw1 — wan — gw2 — hostB in network namespaces, start two
gateways with fresh random keys, ping across in many sizes over IPv4 and
IPv6, run an iperf3 TCP burst, decrypt a capture of the WAN with tshark and
the same SAs, and report what was sent, what came out and why anything did
not. Needs root. Removes everything it made, also on failure and Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Encap, err = parseEncap("--encap", encap); err != nil {
				return err
			}
			if !asJSON {
				o.Progress = cmd.ErrOrStderr()
			}
			r, err := demo.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if err := printReport(cmd, r, r.Print, asJSON, ""); err != nil {
				return err
			}
			if page != "" {
				if err := writeReport(page, []*report.Run{report.DemoRun(filepath.Base(page), r)}); err != nil {
					return err
				}
			}
			if !r.OK() {
				return errors.New("demo: traffic did not all come out (see the report)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Suite, "suite", "aes-cbc-128+hmac-sha1-96", "ESP suite: CIPHER[-BITS][+AUTH], e.g. aes-gcm-16, 3des-cbc+hmac-sha1-96")
	f.StringVar(&o.Engine, "engine", "cpu", "offload engine for both gateways")
	f.StringVar(&encap, "encap", "none", "outer encapsulation: none (raw ESP) or udp (RFC 3948)")
	f.BoolVar(&o.OuterV6, "ipv6-outer", false, "carry the tunnel over IPv6")
	f.DurationVar(&o.Duration, "duration", 3*time.Second, "length of the iperf3 TCP burst")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&page, "report", "", "also write the report as a self-contained HTML page to this file (as espgw report does)")
	return cmd
}
