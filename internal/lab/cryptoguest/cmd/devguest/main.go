// Command devguest boots the crypto guest and runs shell commands in it.
//
// It boots the crypto guest (Debian's kernel under QEMU with QEMU's
// virtio-crypto device, espgw's static binaries and openssl with its afalg
// engine) and runs shell commands in it, printing what they print: how the
// device engines' benchmarks in BENCHMARKS.md are taken.
//
//	go run ./internal/lab/cryptoguest/cmd/devguest -iommu \
//	    '/espgw/bin/espgw speed -engine virtio -evp aes-128-cbc -elapsed -batch 32 -multi 4'
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/cryptoguest"
)

func main() {
	device := flag.Bool("device", true, "QEMU's virtio-crypto-pci device (crypto0)")
	iommu := flag.Bool("iommu", false, "q35 with an emulated Intel IOMMU, the device behind it (for the virtio engine)")
	load := flag.Bool("load-driver", false, "load the kernel's virtio_crypto driver (for afalg on the device)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: devguest [-device=false] [-iommu] [-load-driver] 'COMMAND' ...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*device, *iommu, *load, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "devguest:", err)
		os.Exit(1)
	}
}

func run(device, iommu, load bool, cmds []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	g, err := cryptoguest.Boot(ctx, cryptoguest.Options{CryptoDevice: device, IOMMU: iommu, OpenSSL: true,
		Prefix: "devguest", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		return err
	}
	defer g.Close()
	if load {
		if err := g.LoadModules(ctx, cryptoguest.LaterModules...); err != nil {
			return err
		}
	}
	for _, c := range cmds {
		fmt.Printf("guest$ %s\n", c)
		out, err := g.RunFor(ctx, 30*time.Minute, c+" 2>&1")
		fmt.Print(out)
		if err != nil && !strings.Contains(err.Error(), "exit status") {
			return err
		}
	}
	return nil
}
