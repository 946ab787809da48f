package sa

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// setkeySAs writes n distinct tunnel SAs as setkey statements.
func setkeySAs(n int) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "add 192.0.2.1 10.%d.%d.%d esp 0x%x -m tunnel -E aes-cbc 0x%032x -A hmac-sha1 0x%040x;\n",
			i>>16, (i>>8)&255, i&255, 0x1000+i, i+1, i+1)
	}
	return []byte(b.String())
}

// cpuTime is the CPU time this process has used: unlike the wall clock,
// it does not grow while other processes have the CPU.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fastestParse is the least CPU time of three parses of data, each after
// a collection, so that neither garbage nor a busy machine decides it.
func fastestParse(t *testing.T, data []byte) time.Duration {
	best := time.Duration(1 << 62)
	for range 3 {
		runtime.GC()
		start := cpuTime(t)
		if _, err := ParseSetkey("t", data); err != nil {
			t.Fatal(err)
		}
		best = min(best, cpuTime(t)-start)
	}
	return best
}

// 32 times the SAs take about 32 times as long, not 1024: the duplicate
// checks and policy binding are indexed, not a scan of every SA added
// before. Measured as a ratio of CPU times within this run.
func TestSetkeyParseLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("times parses of 32,000 SAs")
	}
	const n = 1000
	small, large := setkeySAs(n), setkeySAs(32*n)
	ts, tl := fastestParse(t, small), fastestParse(t, large)
	ratio := float64(tl) / float64(max(ts, time.Microsecond))
	t.Logf("%d SAs %v, %d SAs %v of CPU: ratio %.1f (linear 32, quadratic 1024)", n, ts, 32*n, tl, ratio)
	if ratio > 160 {
		t.Errorf("32× the SAs took %.1f× as long: parsing is not linear", ratio)
	}
}

// A 10 MB file of ; (empty statements) costs next to nothing: statements
// are parsed as they are read, not tokenised into memory first.
func TestSetkeySemicolonBomb(t *testing.T) {
	data := []byte(strings.Repeat(";", 10<<20))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseSetkey("semi", data)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Logf("error (fine): %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("parsing 10 MB of ; allocated %d MB", alloc>>20)
	}
	// A statement that never ends is cut off at a bound, with a clear error.
	_, err = ParseSetkey("words", []byte("add"+strings.Repeat(" x", 1<<20)))
	if err == nil || !strings.Contains(err.Error(), "without a ;") {
		t.Errorf("a million words without ;: %v", err)
	}
}

// SA files above MaxFileSize are refused before they are read.
func TestSAFileSizeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load of a file over the bound: %v", err)
	}
	if _, err := ReadFileAtMost("/dev/zero", 1<<10); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ReadFileAtMost of an endless file: %v", err)
	}
}

// A YAML file of nothing but empty entries costs little whichever reader
// takes it: the streaming reader goes through it allocating a few bytes
// an entry and shows the first 20 problems with a count of the rest; a
// file only the tree decoder reads (an anchor makes it one) is refused
// before it is decoded. Format detection is included.
func TestYAMLNodeBomb(t *testing.T) {
	entries := strings.Repeat("- {}\n", 1<<20)
	for _, c := range []struct {
		name, data, want string
		maxAlloc         uint64
	}{
		{"streamed", "sa:\n" + entries, "… and 4194284 more problems not shown (the first 20 are)", 64 << 20},
		{"tree", "sa: &all\n" + entries, "more than 2000000 YAML nodes", 2 << 20},
	} {
		data := []byte(c.data)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := ParseConfig("bomb.yaml", data)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "\n") > 20 {
			t.Fatalf("%s: a million empty entries: %.500v", c.name, err)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d KB allocated for 5 MB of input", c.name, alloc>>10)
		if alloc > c.maxAlloc {
			t.Errorf("%s: reading them allocated %d KB, want at most %d", c.name, alloc>>10, c.maxAlloc>>10)
		}
	}
}
