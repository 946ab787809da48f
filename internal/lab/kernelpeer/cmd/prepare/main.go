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
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "prepare kernel peer: %v\n", err)
		os.Exit(1)
	}
}

// run prepares the kernel peer as the command line args ask, logging to
// stderr and printing what it made to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var opts kernelpeer.PrepareOptions
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.Dir, "dir", "", "cache folder (default $ESPGW_KERNEL_DIR or "+kernelpeer.DefaultDir+")")
	fs.StringVar(&opts.Package, "package", "", "kernel image package (default: the one "+kernelpeer.KernelMetaPackage+" depends on)")
	fs.BoolVar(&opts.Offline, "offline", false, "never download; use the kernel already unpacked")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	start := time.Now()
	a, err := kernelpeer.Prepare(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kernel peer ready in %v: %s (%s)\n  kernel    %s\n  initramfs %s\n  modules   %d\n",
		time.Since(start).Round(time.Millisecond), a.Package, a.KernelRelease, a.Kernel, a.Initramfs, len(a.Modules))
	return nil
}
