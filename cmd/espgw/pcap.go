package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/lab/capture"
)

func newPcap() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pcap",
		Short: "Seal or open a packet capture offline with the SAs of an SA file",
		Long: `pcap seals every IP packet of a capture into ESP, or opens every ESP packet of a
capture back into its inner packet, with the SAs of an SA file. Input captures
are pcap or pcapng with Ethernet, raw IP or Linux SLL link types; output is a
pcap of raw IP packets (or Ethernet with --link ethernet).`,
	}
	cmd.AddCommand(newPcapSeal(), newPcapOpen())
	return cmd
}

// pcapFlags are the flags seal and open share.
func pcapFlags(cmd *cobra.Command, opts *capture.Options, link *string) {
	cmd.Flags().StringVar(&opts.SAFile, "sa", "", "SA file (YAML or setkey(8) lines)")
	cmd.Flags().StringVar(&opts.Engine, "engine", "cpu", "offload engine")
	cmd.Flags().StringVar(link, "link", "raw", "link type of the output capture: raw or ethernet")
	cmd.Flags().StringVar(&opts.WiresharkSA, "wireshark-sa", "", "also write Wireshark's esp_sa lines for the SAs to this file (holds the keys)")
	cmd.MarkFlagRequired("sa")
}

func newPcapSeal() *cobra.Command {
	var opts capture.Options
	var link, spi string
	cmd := &cobra.Command{
		Use:   "seal --sa FILE [--spi SPI] IN OUT",
		Short: "Seal every IP packet of capture IN into ESP, written to OUT",
		Long: `seal turns every IP packet of IN into an ESP packet with one SA of the file
(--spi, or the file's only SA), sequence numbers from 1: in tunnel mode behind
an outer header from the SA, in transport mode behind the packet's own header,
with a UDP header when the SA has encap: udp.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Link, err = capture.ParseLink(link); err != nil {
				return err
			}
			if spi != "" {
				n, err := strconv.ParseUint(spi, 0, 32)
				if err != nil || n == 0 {
					return fmt.Errorf("--spi %q: want a non-zero 32-bit number (0x1001 or 4097)", spi)
				}
				opts.SPI = uint32(n)
			}
			rep, err := capture.SealFile(cmd.Context(), opts, args[0], args[1])
			if rep != nil {
				rep.WriteText(cmd.OutOrStdout())
			}
			return err
		},
	}
	pcapFlags(cmd, &opts, &link)
	cmd.Flags().StringVar(&spi, "spi", "", "SPI of the SA to seal with (needed when the file holds several)")
	return cmd
}

func newPcapOpen() *cobra.Command {
	var opts capture.Options
	var link string
	cmd := &cobra.Command{
		Use:   "open --sa FILE IN OUT",
		Short: "Open every ESP packet of capture IN whose SPI is in the SA file, inner packets to OUT",
		Long: `open decrypts every ESP packet of IN (IP protocol 50, or UDP port 4500 with NAT
keepalives and non-ESP markers skipped) whose SPI is in the SA file, writes the
inner packets to OUT, and prints counts per SA and rejects per reason.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Link, err = capture.ParseLink(link); err != nil {
				return err
			}
			rep, err := capture.OpenFile(cmd.Context(), opts, args[0], args[1])
			if rep != nil {
				rep.WriteText(cmd.OutOrStdout())
			}
			return err
		},
	}
	pcapFlags(cmd, &opts, &link)
	return cmd
}
