package layout

import (
	"bufio"
	"bytes"
	"os/exec"
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
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list"}, args...)...)
	cmd.Dir = "../../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
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
