package kernelpeer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildStatic builds a main package of the espgw module as a static
// binary (CGO_ENABLED=0) into out, for the guest: it runs there with no
// libraries. Like Prepare, it must run inside the module.
func BuildStatic(ctx context.Context, pkg, out string) error {
	return goBuild(ctx, out, "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
}

// BuildTest compiles a package's tests as a static test binary into out
// (go test -c), to run them in the guest.
func BuildTest(ctx context.Context, pkg, out string) error {
	return goBuild(ctx, out, "test", "-c", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
}

func goBuild(ctx context.Context, out string, args ...string) error {
	if err := needTool("go", "the Go toolchain"); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("go %s: %w", args[0], err)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s %s (run from inside the espgw module): %w: %s", args[0], args[len(args)-1], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
