package scenarios_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/espgw/espgw/scenarios"
)

// Bundled holds exactly the scenario files and captures of this directory,
// each as it is on disk.
func TestBundled(t *testing.T) {
	var onDisk []string
	for _, pattern := range []string{"*.yaml", "pcaps/*.pcap"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		onDisk = append(onDisk, m...)
	}
	var embedded []string
	err := fs.WalkDir(scenarios.Bundled, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			embedded = append(embedded, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(onDisk)
	slices.Sort(embedded)
	if !slices.Equal(onDisk, embedded) {
		t.Fatalf("embedded %v, on disk %v", embedded, onDisk)
	}
	for _, name := range embedded {
		b, err := fs.ReadFile(scenarios.Bundled, name)
		if err != nil {
			t.Fatal(err)
		}
		disk, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(b, disk) {
			t.Errorf("%s: embedded %d bytes differ from the file's (%v)", name, len(b), err)
		}
		if filepath.Ext(name) == ".pcap" && !bytes.HasPrefix(b, []byte{0xd4, 0xc3, 0xb2, 0xa1}) && !bytes.HasPrefix(b, []byte{0xa1, 0xb2, 0xc3, 0xd4}) {
			t.Errorf("%s is not a pcap file", name)
		}
	}
	if len(embedded) < 20 {
		t.Errorf("only %d files bundled", len(embedded))
	}
}
