package main

import (
	"bufio"
	"bytes"
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

// sa convert stays within 64 MB of memory whatever it is given: 30 MB of
// the documented YAML (SAs and policies) and of esp_sa lines, streamed;
// the largest inputs it reads whole; inputs beyond that in the formats it
// does not stream (refused, saying so); and files of nothing but errors
// (the first 20 shown, the rest counted). Peak RSS is the kernel's count
// for the real binary.
func TestSAConvertMemoryBounded(t *testing.T) {
	bin := labtest.Espgw(t)
	dir := t.TempDir()
	setkeyLine := func(i int) string {
		return fmt.Sprintf("add 192.0.2.1 10.%d.%d.%d esp 0x%x -m tunnel -E aes-cbc 0x%032x -A hmac-sha1 0x%040x;\n", i>>16&255, i>>8&255, i&255, 0x1000+i, i+1, i+1)
	}
	espSALine := func(i int) string {
		return fmt.Sprintf("\"IPv4\",\"192.0.2.1\",\"10.%d.%d.%d\",\"0x%08x\",\"AES-CBC [RFC3602]\",\"0x%032x\",\"HMAC-SHA-1-96 [RFC2404]\",\"0x%040x\"\n", i>>16&255, i>>8&255, i&255, 0x1000+i, i+1, i+1)
	}
	// The documented YAML, one flow-style line per SA: 64,000 tunnels of
	// two SAs and a protect policy each, cut at 30 MB.
	const tunnels = 64000
	yamlLine := func(i int) string {
		switch {
		case i == 0:
			return "sa:\n"
		case i <= 2*tunnels:
			t, dir := (i-1)/2, (i-1)%2
			src, dst := "198.51.100.1", fmt.Sprintf("10.%d.%d.%d", 64+t>>16, t>>8&255, t&255)
			if dir == 1 {
				src, dst = dst, src
			}
			return fmt.Sprintf("  - {spi: %#x, mode: tunnel, src: %s, dst: %s, enc: aes-cbc, enc-key: 0x%032x, auth: hmac-sha1-96, auth-key: 0x%040x, replay-window: 64}\n", 0x100000+i, src, dst, i, i)
		case i == 2*tunnels+1:
			return "spd:\n"
		}
		t := i - 2*tunnels - 2
		return fmt.Sprintf("  - {priority: 10, src: 172.16.%d.%d/32, dst: 172.%d.%d.%d/32, action: protect, sa: %#x}\n", t>>8&255, t&255, 20+t>>16, t>>8&255, t&255, 0x100000+2*t+1)
	}
	files := map[string]struct {
		size int
		line func(int) string
	}{
		"big.setkey":    {12 << 20, setkeyLine},
		"big.espsa":     {30 << 20, espSALine},
		"big.yaml":      {30 << 20, yamlLine},
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
		{in: "big.setkey", want: "larger than 4194304 bytes: sa convert streams larger files of YAML and esp_sa only", ok: false},
		{in: "big.espsa", ok: true},
		{in: "big.yaml", ok: true},
		{in: "empty.yaml", want: "more problems not shown (the first 20 are)", ok: false},
		{in: "nodes.yaml", want: "more problems not shown (the first 20 are)", ok: false},
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
			if c.ok {
				in, out := countLines(t, filepath.Join(dir, c.in), "  - {spi:", `"IPv`, "add "), countLines(t, filepath.Join(dir, "out"), "  - spi:", "add ")
				if in == 0 || out != in {
					t.Errorf("%s to %s: %d SAs written of %d", c.in, to, out, in)
				}
			}
			if rss > limit && !raceEnabled { // scripts/test.sh runs it in the plain build too
				t.Errorf("%s to %s: peak RSS %d MB, want at most %d MB", c.in, to, rss>>20, limit>>20)
			}
		}
	}
}

// countLines counts the lines of a file that start with one of prefixes,
// reading it a line at a time.
func countLines(t *testing.T, path string, prefixes ...string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, p := range prefixes {
			if bytes.HasPrefix(sc.Bytes(), []byte(p)) {
				n++
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// The next child's peak RSS starts at this process's.
	debug.FreeOSMemory()
	return n
}
