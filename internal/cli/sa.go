package cli

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/internal/overwrite"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/sa"
)

// newSA is `espgw sa`: the SA files' own tools.
func newSA() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sa",
		Short: "Work with SAs: convert SA files; add, delete, update, list and rekey a running gateway's",
	}
	cmd.AddCommand(newSAConvert())
	cmd.AddCommand(saControl()...)
	return cmd
}

func newSAConvert() *cobra.Command {
	var from, to, local string
	cmd := &cobra.Command{
		Use:   "convert --to yaml|setkey|ip-xfrm|esp-sa IN [OUT]",
		Short: "Convert an SA file to another format (the output holds the keys)",
		Long: `convert reads the SAs (and policies) of IN in any format espgw reads — its YAML,
setkey(8) statements, the output of ` + "`ip -s xfrm state`" + ` (keys as iproute2 prints
them, as root), ` + "`ip xfrm state/policy add`" + ` commands, or Wireshark's esp_sa table
(what strongSwan's save-keys plugin writes) — and writes them as:

  yaml     espgw's SA file
  setkey   setkey(8) add/spdadd statements
  ip-xfrm  a sh script of ip xfrm state/policy add commands that installs the same
           SAs in a Linux kernel
  esp-sa   Wireshark's esp_sa table (addresses, SPI, algorithms and keys only)

IN - reads standard input. The format of IN is detected (--from names it). OUT, or standard output, gets the
keys in clear; a file is written readable by its owner only, and never over IN. A field the output
format cannot say (ESN in setkey, say) is an error, never a silent loss. With
--local ADDR, ip-xfrm output is for the host ADDR, every policy turned to its view:
SAs from it are outbound, SAs to it inbound, so the other end's dir out policies
become its dir in and fwd policies and the other end's bypass entries allow the
traffic both ways. Every SA must be from or to ADDR, and --local is refused with
any other output format.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				if err := overwrite.Check([]overwrite.File{{Role: "OUT", Path: args[1]}}, overwrite.File{Role: "the input", Path: args[0]}); err != nil {
					return fmt.Errorf("sa convert: %w", err)
				}
			}
			// A converter is run by hand, not on a hot path: the garbage
			// collector keeps to a small heap at some cost in CPU.
			debug.SetMemoryLimit(24 << 20)
			var addr netip.Addr
			if local != "" {
				var err error
				if addr, err = netip.ParseAddr(local); err != nil {
					return fmt.Errorf("--local %q: want the IP address of the host the output is for", local)
				}
			}
			name, in := "stdin", cmd.InOrStdin()
			if args[0] != "-" {
				f, err := openInput(args[0])
				if err != nil {
					return fmt.Errorf("sa convert: %w", err)
				}
				defer f.Close()
				name, in = filepath.Base(args[0]), f
			}
			convert := func(w io.Writer) error {
				return sa.ConvertStream(name, in, sa.Format(from), sa.Format(to), addr, w)
			}
			var err error
			if len(args) == 1 {
				out := bufio.NewWriter(cmd.OutOrStdout())
				if err = convert(out); err == nil {
					err = out.Flush()
				}
			} else {
				err = secret.WriteFileFrom(args[1], convert)
			}
			if err != nil {
				return err
			}
			if sa.Format(to) == sa.FormatEspSA {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: an esp_sa table holds addresses, SPI, algorithms and keys only; mode, encapsulation, ESN, replay window, lifetimes, outer-header options, if-id, output-mark and policies are not in it")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "output format: yaml, setkey, ip-xfrm or esp-sa")
	cmd.Flags().StringVar(&from, "from", "", "input format (default: detected): yaml, setkey, ip-xfrm, ip-xfrm-state or esp-sa")
	cmd.Flags().StringVar(&local, "local", "", "ip-xfrm only: the address of the host the commands are for (SAs from it are outbound, to it inbound)")
	cmd.MarkFlagRequired("to")
	return cmd
}

// openInput opens the SA file to convert, refusing a directory.
func openInput(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.IsDir() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%q is a directory", path)
		}
		return nil, err
	}
	return f, nil
}
