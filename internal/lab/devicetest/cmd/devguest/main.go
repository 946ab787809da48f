// Command devguest boots the device guest (Debian's kernel under QEMU with
// virtio-crypto devices, espgw's static binaries in /espgw) and runs shell
// commands in it, printing what they print: how the device engines'
// benchmarks in BENCHMARKS.md are taken.
//
//	go run ./internal/lab/devicetest/cmd/devguest -crypto 1 -iommu \
//	    '/espgw/espgw speed -engine virtio -evp aes-128-cbc -elapsed -batch 32 -multi 4'
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"

	"github.com/espgw/espgw/internal/lab/devicetest"
	"github.com/espgw/espgw/internal/lab/kernelpeer"
)

func main() {
	crypto := flag.Int("crypto", 1, "virtio-crypto devices (crypto0, crypto1, …)")
	iommu := flag.Bool("iommu", true, "q35 with an emulated Intel IOMMU, the devices behind it (for the virtio engine)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: devguest [-crypto N] [-iommu=false] 'COMMAND' ...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*crypto, *iommu, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "devguest:", err)
		os.Exit(1)
	}
}

func run(crypto int, iommu bool, cmds []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ns := fmt.Sprintf("devguest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	g, err := devicetest.Boot(ctx, devicetest.GuestOptions{
		Devices:  kernelpeer.Devices{Crypto: crypto, IOMMU: iommu},
		Commands: []string{"./cmd/espgw"},
		Netns:    ns,
		Log:      slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	defer g.Close()
	for _, c := range cmds {
		fmt.Printf("guest$ %s\n", c)
		out, err := g.Run(ctx, c+" 2>&1")
		fmt.Print(out)
		if err != nil && !strings.Contains(err.Error(), "exit status") {
			return err
		}
	}
	return nil
}
