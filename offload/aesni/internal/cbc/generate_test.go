package cbc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// cbc_amd64.s is what _asm/gen.py writes (go generate): a change to the
// generator is not left unapplied, nor the assembly edited by hand.
func TestAssemblyIsGenerated(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the generator")
	}
	out := filepath.Join(t.TempDir(), "cbc_amd64.s")
	if b, err := exec.Command(py, filepath.Join("_asm", "gen.py"), out).CombinedOutput(); err != nil {
		t.Fatalf("_asm/gen.py: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("cbc_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("cbc_amd64.s differs from what _asm/gen.py writes: run go generate ./offload/aesni/internal/cbc")
	}
}
