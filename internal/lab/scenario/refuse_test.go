package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/espgw/espgw/sa"
)

// matrixBomb is a 600-byte matrix of 8 fields × 10 values: 10^8
// combinations.
func matrixBomb() string {
	var b strings.Builder
	b.WriteString("matrix:\n")
	for i := range 8 {
		fmt.Fprintf(&b, "  traffic.x%d: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\n", i)
	}
	return b.String() + "traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
}

// The matrix bomb is refused before any combination is built.
func TestMatrixBombCostsNothing(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse("bomb.yaml", []byte(matrixBomb()))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a matrix of 10^8 combinations parsed")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("refusing the matrix allocated %d MB", alloc>>20)
	}
	// The largest matrix allowed still expands.
	doc := "matrix:\n  engine: [cpu, ring, cpu, ring]\n  sa.mode: [tunnel, tunnel, tunnel, tunnel]\n  topology.family: [ipv4, ipv6, ipv4, ipv6]\n  topology.outer: [ipv4, ipv4, ipv4, ipv4]\n" +
		"traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
	scs, err := Parse("max.yaml", []byte(doc))
	if err != nil || len(scs) != MaxMatrix {
		t.Errorf("a matrix of %d combinations: %d scenarios, %v", MaxMatrix, len(scs), err)
	}
}

// A key written where it does not belong is never printed.
func TestScenarioErrorsHideKeys(t *testing.T) {
	const hexKey = "0xa1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6"
	const ascii = "randomSecretValue42"
	base := "traffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"
	for _, doc := range []string{
		"sa: {keys: " + hexKey + "}\n",
		"sa: {keys: " + ascii + "}\n",
		"sa: {keys: [" + hexKey + ", " + hexKey + "]}\n",
		"sa: {keys: [{enc-key: " + ascii + "}, {enc-key: " + ascii + "}]}\n",
		"sa: {mode: " + ascii + "}\n",
		"sa: {encap: " + hexKey + "}\n",
		"sa: {suite: " + ascii + "}\n",
		"sa: {replay-window: " + ascii + "}\n",
		"engine: " + ascii + "\n",
		"topology: {family: " + ascii + "}\n",
		"timeout: " + ascii + "\n",
	} {
		_, err := Parse("s.yaml", []byte(doc+base))
		if err == nil {
			t.Errorf("%q: no error", doc)
			continue
		}
		if strings.Contains(err.Error(), "a1b2c3") || strings.Contains(err.Error(), "Secret") {
			t.Errorf("%q: the error shows the key: %v", doc, err)
		}
	}
}

// Scenario files above sa.MaxFileSize are refused before they are read.
func TestScenarioFileSizeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(sa.MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load of a file over the bound: %v", err)
	}
}
