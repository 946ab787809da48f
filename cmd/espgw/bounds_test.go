package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/espgw/espgw/internal/lab/labtest"
)

// runRSS runs the espgw binary and returns its stderr, exit status and
// peak resident set in bytes, from the kernel's rusage of the child.
func runRSS(t *testing.T, bin string, args ...string) (string, int, int64) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var e strings.Builder
	cmd.Stderr = &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return e.String(), code, ru.Maxrss << 10
}

// writeLines writes line(i) for i = 0, 1, … until the file holds size
// bytes, streaming: the test's own memory stays small, since a child
// forked from it starts its peak RSS count at the parent's.
func writeLines(t *testing.T, path string, size int, line func(i int) string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i, n := 0, 0; ; i++ {
		l := line(i)
		if n+len(l) > size {
			break
		}
		n += len(l)
		w.WriteString(l)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		t.Fatal(err)
	}
}

// sa convert stays within 64 MB of memory whatever it is given: the
// largest inputs it converts, inputs beyond its bounds (refused, saying
// so) and files of nothing but errors (the first 20 shown, the rest
// counted). Peak RSS is the kernel's count for the real binary.
func TestSAConvertMemoryBounded(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	setkeyLine := func(i int) string {
		return fmt.Sprintf("add 192.0.2.1 10.%d.%d.%d esp 0x%x -m tunnel -E aes-cbc 0x%032x -A hmac-sha1 0x%040x;\n", i>>16&255, i>>8&255, i&255, 0x1000+i, i+1, i+1)
	}
	espSALine := func(i int) string {
		return fmt.Sprintf("\"IPv4\",\"192.0.2.1\",\"10.%d.%d.%d\",\"0x%08x\",\"AES-CBC [RFC3602]\",\"0x%032x\",\"HMAC-SHA-1-96 [RFC2404]\",\"0x%040x\"\n", i>>16&255, i>>8&255, i&255, 0x1000+i, i+1, i+1)
	}
	files := map[string]struct {
		size int
		line func(int) string
	}{
		"big.setkey":    {12 << 20, setkeyLine},
		"big.espsa":     {30 << 20, espSALine},
		"empty.yaml":    {28 << 20, func(i int) string { return map[bool]string{true: "sa:\n", false: "- {}\n"}[i == 0] }},
		"max.setkey":    {4 << 20, setkeyLine},
		"max.espsa":     {4 << 20, espSALine},
		"nodes.yaml":    {1 << 20, func(i int) string { return map[bool]string{true: "sa:\n", false: "- {}\n"}[i == 0] }},
		"errors.setkey": {4 << 20, func(i int) string { return "add 192.0.2.1 192.0.2.2 esp 0x1001 -E bogus 0x00;\n" }},
	}
	for name, f := range files {
		writeLines(t, filepath.Join(dir, name), f.size, f.line)
	}
	debug.FreeOSMemory()
	const limit = 64 << 20
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{in: "big.setkey", want: `big.setkey" is 12582`, ok: false},
		{in: "big.espsa", want: "larger than the 4194304 bytes", ok: false},
		{in: "empty.yaml", want: "larger than the 4194304 bytes", ok: false},
		{in: "nodes.yaml", want: "more than 50000 YAML nodes", ok: false},
		{in: "errors.setkey", want: "more problems not shown (the first 20 are)", ok: false},
		{in: "max.setkey", ok: true},
		{in: "max.espsa", ok: true},
	} {
		for _, to := range []string{"yaml", "setkey"} {
			errOut, code, rss := runRSS(t, bin, "sa", "convert", "--to", to, filepath.Join(dir, c.in), filepath.Join(dir, "out"))
			t.Logf("%s to %s: exit %d, peak RSS %d MB", c.in, to, code, rss>>20)
			if c.ok && code != 0 || !c.ok && (code == 0 || !strings.Contains(errOut, c.want)) {
				t.Errorf("%s to %s: exit %d, %.300q; want ok=%v and %q", c.in, to, code, errOut, c.ok, c.want)
			}
			if n := strings.Count(errOut, "\n"); n > 22 {
				t.Errorf("%s to %s: %d lines of errors", c.in, to, n)
			}
			if rss > limit && !raceEnabled { // scripts/test.sh runs it in the plain build too
				t.Errorf("%s to %s: peak RSS %d MB, want at most %d MB", c.in, to, rss>>20, limit>>20)
			}
		}
	}
}
