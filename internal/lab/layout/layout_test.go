package layout

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/espgw/espgw"

// labOnly are the import paths no product package may depend on.
var labOnly = []string{
	module + "/internal/lab/",
	module + "/scenarios",
	"gonum.org/v1/plot",
	"github.com/google/gopacket",
	"github.com/schollz/progressbar",
	"github.com/chromedp/",
	"github.com/HdrHistogram/",
}

// lab reports whether pkg is outside the product.
func lab(pkg string) bool {
	return strings.HasPrefix(pkg, module+"/internal/lab/") ||
		pkg == module+"/cmd/espgw" || pkg == module+"/scenarios"
}

// goList runs go list with args in the module and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	return goCmd(t, append([]string{"list"}, args...)...)
}

// goCmd runs the go command with args in the module and returns its lines.
func goCmd(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(gobin, args...)
	cmd.Dir = "../../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	return lines
}

// importers lists every package in the dependency graph of roots with a
// package that imports it (empty for a root), so a failure names the
// offending import.
func importers(t *testing.T, roots []string) map[string]string {
	t.Helper()
	by := map[string]string{}
	lines := goList(t, append([]string{"-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, roots...)...)
	for _, l := range lines {
		f := strings.Fields(l)
		if _, ok := by[f[0]]; !ok {
			by[f[0]] = ""
		}
		for _, imp := range f[1:] {
			if by[imp] == "" {
				by[imp] = f[0]
			}
		}
	}
	return by
}

func TestProductImportsNoLab(t *testing.T) {
	var product []string
	for _, p := range goList(t, "./...") {
		if !lab(p) {
			product = append(product, p)
		}
	}
	for _, want := range []string{"esp", "sa", "ike", "offload", "offload/engines", "offload/cpu", "offload/aesni",
		"offload/afalg", "offload/virtio", "tun", "internal/gateway", "internal/transport", "internal/xdp",
		"internal/control", "internal/cli"} {
		if !slices.Contains(product, module+"/"+want) {
			t.Errorf("%s is not among the product packages %v", want, product)
		}
	}
	deps := importers(t, product)
	for pkg, by := range deps {
		for _, bad := range labOnly {
			if pkg == strings.TrimSuffix(bad, "/") || strings.HasPrefix(pkg, bad) {
				t.Errorf("the product links %s (imported by %s)", pkg, by)
			}
		}
	}
}

// The espgw binary composes the product with the lab: the emulated cards
// must be in it, reached through cmd/espgw and not through the product.
func TestBinaryHasTheModels(t *testing.T) {
	deps := importers(t, []string{"./cmd/espgw"})
	for _, pkg := range []string{module + "/internal/lab/sim/emul", module + "/internal/lab/sim/ring", module + "/internal/cli"} {
		if _, ok := deps[pkg]; !ok {
			t.Errorf("cmd/espgw does not link %s", pkg)
		}
	}
}

// A binary of the gateway's commands alone (testdata/gateway: package cli
// on the product's engines) links none of the lab's libraries, as
// go version -m reads them from the binary itself.
func TestGatewayBinaryLinksNoLab(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gateway")
	goCmd(t, "build", "-o", bin, "./internal/lab/layout/testdata/gateway")
	var deps []string
	for _, l := range goCmd(t, "version", "-m", bin) {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "dep" {
			deps = append(deps, f[1])
		}
	}
	if !slices.Contains(deps, "github.com/spf13/cobra") {
		t.Fatalf("go version -m lists no cobra among %v: not read right", deps)
	}
	for _, dep := range deps {
		for _, bad := range labOnly {
			if strings.HasPrefix(dep+"/", bad) || strings.HasPrefix(dep, bad) {
				t.Errorf("the gateway binary links %s", dep)
			}
		}
	}
}
