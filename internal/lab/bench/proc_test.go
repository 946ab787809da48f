package bench

import (
	"os"
	"testing"
	"time"
)

func TestCPUTimeAndMemoryOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn a bounded 200 ms of CPU so the counter must move.
	x := 0
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	after, err := cpuTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 50*time.Millisecond {
		t.Errorf("CPU time moved %v over a 200 ms busy loop", after-before)
	}
	rss, hwm, err := memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 || hwm < rss {
		t.Errorf("rss %d, peak %d: want a few MiB and peak ≥ rss", rss, hwm)
	}
	if _, err := cpuTime(1 << 30); err == nil {
		t.Error("CPU time of a process that does not exist: no error")
	}
}
