// Command prepare readies the Linux-kernel ESP peer's kernel and initramfs.
//
// It readies the Linux-kernel ESP peer: it fetches Debian's kernel image
// into a cache folder (not as the machine's kernel), builds the guest agent
// and writes the initramfs. It is idempotent and quick when everything is
// already there.
//
//	go run ./internal/lab/kernelpeer/cmd/prepare [-dir DIR] [-package PKG] [-offline]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
)

func main() {
	var opts kernelpeer.PrepareOptions
	flag.StringVar(&opts.Dir, "dir", "", "cache folder (default $ESPGW_KERNEL_DIR or "+kernelpeer.DefaultDir+")")
	flag.StringVar(&opts.Package, "package", "", "kernel image package (default: the one "+kernelpeer.KernelMetaPackage+" depends on)")
	flag.BoolVar(&opts.Offline, "offline", false, "never download; use the kernel already unpacked")
	flag.Parse()
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	a, err := kernelpeer.Prepare(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prepare kernel peer: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kernel peer ready in %v: %s (%s)\n  kernel    %s\n  initramfs %s\n  modules   %d\n",
		time.Since(start).Round(time.Millisecond), a.Package, a.KernelRelease, a.Kernel, a.Initramfs, len(a.Modules))
}
