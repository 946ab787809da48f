package gateway

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/sa"
)

// TestLockRefusesASecondGateway: a second gateway with the same SAs in one
// namespace is refused with a clear error, whatever order its SAs are
// given in; another SA set is not; a released lock (or a dead holder's)
// lets the next one in.
func TestLockRefusesASecondGateway(t *testing.T) {
	root := t.TempDir()
	mk := func(spi uint32, dst string) *sa.SA {
		return &sa.SA{SPI: spi, Dst: netip.MustParseAddr(dst)}
	}
	set := []*sa.SA{mk(0x1001, "198.51.100.2"), mk(0x2001, "198.51.100.1")}
	first, err := lockSAs(root, set)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockSAs(root, []*sa.SA{set[1], set[0]})
	if err == nil || !strings.Contains(err.Error(), "another gateway (pid ") || !strings.Contains(err.Error(), "runs these SAs in network namespace") {
		t.Fatalf("second gateway with the same SAs: %v", err)
	}
	other, err := lockSAs(root, []*sa.SA{mk(0x3001, "198.51.100.2")})
	if err != nil {
		t.Fatalf("another SA set: %v", err)
	}
	other.release()
	first.release()
	again, err := lockSAs(root, set)
	if err != nil {
		t.Fatalf("after the first released its lock: %v", err)
	}
	again.release()
	if left, _ := filepath.Glob(filepath.Join(root, "*")); len(left) != 0 {
		t.Errorf("lock files or directories left: %v", left)
	}
}

// TestStateDirDefault: with no state-dir the reservations go to a directory
// of this namespace under the default root; off turns them off; a path is
// taken from the config's directory.
func TestStateDirDefault(t *testing.T) {
	ns, err := namespaceName()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ set, want string }{
		{"", filepath.Join("/root-x", ns)},
		{"off", ""},
		{"state", "/etc/espgw/state"},
		{"/abs", "/abs"},
	} {
		got, err := resolveStateDir(&Config{File: "/etc/espgw/gw.yaml", StateDir: tc.set}, "/root-x")
		if err != nil || got != tc.want {
			t.Errorf("state-dir %q: %q, %v; want %q", tc.set, got, err, tc.want)
		}
	}
}

// TestSeqStoreCleansUp: a failed write leaves no temporary file, a crash's
// leftover is removed at start, and the bound is read back.
func TestSeqStoreCleansUp(t *testing.T) {
	dir := t.TempDir()
	cfg := &sa.SA{SPI: 0x1001, Dst: netip.MustParseAddr("198.51.100.2")}
	st := newSeqStore(dir, nil)
	if err := st.write(cfg, 1<<16); err != nil {
		t.Fatal(err)
	}
	leftover := st.path(cfg) + ".tmp"
	os.WriteFile(leftover, nil, 0o600) // a crash between create and rename
	if err := st.clean(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover temporary file still there: %v", err)
	}
	got, err := st.resume(cfg)
	if err != nil || got.InitialSeq != 1<<16 {
		t.Fatalf("resume: %v, %v", got, err)
	}
	// On a full disk the temporary file is created and its write fails:
	// it is removed, not left as a 0-byte file, and the bound stays.
	full := fillTmpfs(t)
	st = newSeqStore(full, nil)
	if err := st.write(cfg, 2<<16); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("write on a full disk: %v", err)
	}
	entries, _ := os.ReadDir(full)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "seq-") {
			t.Errorf("%s left on the full disk", e.Name())
		}
	}
}

// fillTmpfs mounts a small tmpfs and fills it (needs root, as the
// gateway does).
func fillTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for range 1000 {
		if _, err := f.Write(buf); err != nil {
			return dir // full
		}
	}
	t.Fatal("the tmpfs never filled")
	return ""
}

// TestRelockFollowsTheSet: a reload to another SA set moves the lock (and
// is refused when another gateway holds the new set's); a reload to the
// same set keeps it.
func TestRelockFollowsTheSet(t *testing.T) {
	root := t.TempDir()
	mk := func(spi uint32) []*sa.SA { return []*sa.SA{{SPI: spi, Dst: netip.MustParseAddr("198.51.100.2")}} }
	mine, err := lockSAs(root, mk(1))
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := lockSAs(root, mk(2))
	if err != nil {
		t.Fatal(err)
	}
	if same, commit, err := mine.relock(root, mk(1)); err != nil || same != mine {
		t.Fatalf("relock to the same set: %v, %v", same, err)
	} else {
		commit()
	}
	if _, _, err := mine.relock(root, mk(2)); err == nil || !strings.Contains(err.Error(), "another gateway") {
		t.Fatalf("relock to a set another gateway runs: %v", err)
	}
	next, commit, err := mine.relock(root, mk(3))
	if err != nil {
		t.Fatal(err)
	}
	commit()
	if again, err := lockSAs(root, mk(1)); err != nil {
		t.Errorf("the old set's lock was not released: %v", err)
	} else {
		again.release()
	}
	if _, err := lockSAs(root, mk(3)); err == nil {
		t.Error("the new set is not locked")
	}
	next.release()
	theirs.release()
}
