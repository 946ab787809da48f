package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
)

func TestReportCommand(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	fixtures := filepath.Join("..", "..", "internal", "lab", "report", "testdata")
	page := filepath.Join(dir, "report.html")
	_, errOut, code := run(bin, "report", filepath.Join(fixtures, "bench-cpu.json"), filepath.Join(fixtures, "bench-aesni.json"), "-o", page)
	if code != 0 {
		t.Fatalf("espgw report: exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2 id=\"verdicts\">", "bench runs side by side", "<svg class=\"chart\""} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"x": 1}`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"report", bad, "-o", page}, "bad.json: no \"results\""},
		{[]string{"report", filepath.Join(fixtures, "bench-cpu.json")}, "-o: name the HTML file"},
		{[]string{"report", filepath.Join(dir, "none.json"), "-o", page}, "none.json"},
	} {
		if _, errOut, code := run(bin, c.args...); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("espgw %q: exit %d, %q; want an error saying %q", c.args, code, errOut, c.want)
		}
	}
}

func TestDemoReportPage(t *testing.T) {
	labtest.NeedNamespaces(t)
	bin := labtest.Espgw(t)
	page := filepath.Join(t.TempDir(), "demo.html")
	if _, errOut, code := run(bin, "demo", "--duration", "1s", "--report", page); code != 0 {
		t.Fatalf("espgw demo: exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on engine cpu, none encapsulation", "ping hostA→hostB IPv4", "tshark on the WAN capture", "everything sent came out"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the demo's page lacks %q", want)
		}
	}
}
