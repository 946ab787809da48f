package kernelpeer

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchiveUnpacksWithBusybox writes an archive and unpacks it with
// busybox cpio, the same applet family as the guest's and an
// implementation this package did not write.
func TestArchiveUnpacksWithBusybox(t *testing.T) {
	busybox, err := firstExisting(busyboxPaths, "busybox (apt-get install busybox-static)")
	if err != nil {
		t.Fatal(err)
	}
	arc := newArchive()
	arc.file("init", 0o755, []byte("#!/bin/sh\necho hi\n"))
	arc.file("lib/modules/espgw/odd.ko", 0o644, []byte("123")) // length not a multiple of 4
	arc.file("empty", 0o600, nil)
	arc.charDev("dev/null", 1, 3)
	var buf bytes.Buffer
	if err := arc.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	list := exec.Command(busybox, "cpio", "-t")
	list.Stdin = bytes.NewReader(buf.Bytes())
	out, err := list.Output()
	if err != nil {
		t.Fatalf("busybox cpio -t: %v: %s", err, out)
	}
	want := []string{"dev", "dev/null", "empty", "init", "lib", "lib/modules", "lib/modules/espgw", "lib/modules/espgw/odd.ko"}
	if got := strings.Fields(string(out)); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("archive lists\n%v\nwant\n%v", got, want)
	}

	dir := t.TempDir()
	unpack := exec.Command(busybox, "cpio", "-i", "-d")
	unpack.Dir = dir
	unpack.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := unpack.CombinedOutput(); err != nil && !strings.Contains(string(out), "dev/null") {
		t.Fatalf("busybox cpio -i: %v: %s", err, out)
	}
	for name, want := range map[string]string{"init": "#!/bin/sh\necho hi\n", "lib/modules/espgw/odd.ko": "123", "empty": ""} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s unpacked as %q (%v), want %q", name, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "init")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("init mode: %v %v, want 0755", fi.Mode(), err)
	}
}
