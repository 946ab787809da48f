package cryptoguest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot is the espgw module's folder, found from the go command.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("find the module root: not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// BuildTest compiles the tests of package pkg (a path relative to the
// module root, e.g. ./offload/virtio) as a static binary at out, as the
// guest needs: it has no C library.
func BuildTest(ctx context.Context, root, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the tests of %s for the guest: %w: %s", pkg, err, b)
	}
	return nil
}

// Build compiles a command (e.g. ./cmd/espgw) as a static binary at out.
func Build(ctx context.Context, root, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s for the guest: %w: %s", pkg, err, b)
	}
	return nil
}
