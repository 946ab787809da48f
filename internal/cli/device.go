package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/espgw/espgw/offload/virtio"
)

// newDevice is `espgw device`: the crypto devices the virtio engine takes
// from the kernel, and giving them back.
func newDevice() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "device",
		Short: "List the virtio-crypto devices and who holds each; give one back to its kernel driver",
	}
	cmd.AddCommand(newDeviceList(), newDeviceRelease())
	return cmd
}

func newDeviceList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the virtio-crypto devices, the driver each is bound to and the process holding it",
		Long: `list shows every virtio-crypto device (PCI 1af4:1054), and every device espgw's
virtio engine took and has not given back: its PCI driver (virtio-pci when the
kernel has it, with virtio_crypto serving afalg; vfio-pci when a user-space driver
can take it), the process holding it through VFIO, and the driver espgw gives it
back to. A device espgw took whose process is gone (killed) is given back by the
next virtio engine start or by ` + "`espgw device release ADDR`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			devs, err := virtio.Devices()
			if err != nil {
				return fmt.Errorf("device list: %w", err)
			}
			if len(devs) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no virtio-crypto device (PCI 1af4:1054) on this machine")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "DEVICE\tDRIVER\tHELD BY\tGIVEN BACK TO")
			for _, d := range devs {
				drv := d.Driver
				switch {
				case drv == "":
					drv = "none"
				case d.VirtioDriver != "":
					drv += " (" + d.VirtioDriver + ")"
				}
				held := "the kernel"
				switch {
				case len(d.Holders) > 0:
					var hs []string
					for _, h := range d.Holders {
						hs = append(hs, h.String())
					}
					held = strings.Join(hs, ", ")
				case d.Stale():
					held = fmt.Sprintf("nobody: pid %d took it and is gone (espgw device release %s)", d.Taken.PID, d.Address)
				case d.Driver == "vfio-pci":
					held = "nobody (free for the virtio engine)"
				case d.Driver == "":
					held = "nobody"
				}
				back := "-"
				if d.Taken != nil {
					back = d.Taken.Driver
					if back == "" {
						back = "no driver (as found)"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Address, drv, held, back)
			}
			return tw.Flush()
		},
	}
}

func newDeviceRelease() *cobra.Command {
	return &cobra.Command{
		Use:   "release ADDR",
		Short: "Give a virtio-crypto device back to the driver it had before espgw took it",
		Long: `release gives the device at PCI address ADDR (0000:00:04.0) back to the driver it
had when espgw's virtio engine took it, as recorded under /run/espgw/vfio:
driver_override restored, vfio-pci unbound, the device probed again. Without a
record (bound to vfio-pci by hand) the kernel's default driver takes it. A device
a running process holds is refused; so is one that is not virtio-crypto.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			drv, err := virtio.Release(args[0])
			if err != nil {
				return fmt.Errorf("device release: %w", err)
			}
			if drv == "" {
				drv = "no driver"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], drv)
			return nil
		},
	}
}
