package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload/cpu"
	"github.com/espgw/espgw/sa"
)

// TestClaimRefusesOverlap: a second gateway claiming any SA (SPI and
// destination) a live one claims in the directory is refused, naming the
// first's pid and the SA — the same set in any order, a subset, a
// superset — while SAs of their own (another SPI, or the same SPI to
// another destination) are not; a released claim, or a dead holder's
// file, lets the next one in.
func TestClaimRefusesOverlap(t *testing.T) {
	mk := func(spi uint32, dst string) *sa.SA { return &sa.SA{SPI: spi, Dst: netip.MustParseAddr(dst)} }
	a, b := mk(0x1001, "198.51.100.2"), mk(0x2001, "198.51.100.1")
	for _, c := range []struct {
		name   string
		second []*sa.SA
		clash  string
	}{
		{"the same set", []*sa.SA{b, a}, "SA 0x"},
		{"a subset", []*sa.SA{b}, "SA 0x2001 to 198.51.100.1"},
		{"a superset", []*sa.SA{a, b, mk(0x3001, "198.51.100.2")}, "SA 0x"},
		{"another SPI", []*sa.SA{mk(0x3001, "198.51.100.2")}, ""},
		{"the SPI to another destination", []*sa.SA{mk(0x1001, "198.51.100.9")}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			first, err := claimSAs(root, "network namespace test", []*sa.SA{a, b})
			if err != nil {
				t.Fatal(err)
			}
			second, err := claimSAs(root, "network namespace test", c.second)
			switch {
			case c.clash == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.clash != "" && (err == nil || !strings.Contains(err.Error(), c.clash) ||
				!strings.Contains(err.Error(), fmt.Sprintf("another gateway (pid %d) in network namespace test", os.Getpid()))):
				t.Fatalf("got %v, want a refusal naming %q and the other's pid", err, c.clash)
			}
			second.release()
			first.release()
			again, err := claimSAs(root, "network namespace test", c.second)
			if err != nil {
				t.Fatalf("after the first released its claim: %v", err)
			}
			// A holder killed with -9 leaves its file, unlocked.
			again.f.Close()
			again.f = nil
			if _, err := claimSAs(root, "network namespace test", c.second); err != nil {
				t.Fatalf("after its holder died: %v", err)
			}
		})
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

// journalSA is an outbound SA of the tests' journals.
func journalSA(t *testing.T, i int) *esp.SA {
	t.Helper()
	cfg := &sa.SA{SPI: 0x1000 + uint32(i), Src: netip.MustParseAddr("198.51.100.1"), Dst: netip.MustParseAddr("198.51.100.2"),
		Suite: sa.Suite{Cipher: sa.CipherAESGCM16}, EncKey: make(sa.Key, 20), ReplayWindow: 64}
	s, err := esp.NewSA(cfg, cpu.New(), esp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openStore(t *testing.T, dir string) *seqStore {
	t.Helper()
	st := newSeqStore(dir, nil)
	if err := st.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.close() })
	return st
}

// TestSeqStoreCleansUp: a crash's leftover temporary file is removed at
// open, the bound is read back by a new store (a restart), and a write on
// a full disk fails, leaving the journal as it was and no file behind.
func TestSeqStoreCleansUp(t *testing.T) {
	dir := t.TempDir()
	s := journalSA(t, 1)
	st := openStore(t, dir)
	if err := st.reserve(s, 1<<16); err != nil {
		t.Fatal(err)
	}
	st.close()
	leftover := filepath.Join(dir, JournalName+".tmp")
	os.WriteFile(leftover, nil, 0o600) // a crash during a rewrite
	st = openStore(t, dir)
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover temporary file still there: %v", err)
	}
	got, err := st.resume(s.Config)
	if err != nil || got.InitialSeq != 1<<16 {
		t.Fatalf("resume: %v, %v", got, err)
	}
	// On a full disk the write fails: the journal keeps its length and
	// its bound, and nothing else is left.
	full := fillTmpfs(t)
	st = openStore(t, full)
	before, _ := os.Stat(filepath.Join(full, JournalName))
	if err := st.reserve(s, 2<<16); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("write on a full disk: %v", err)
	}
	after, _ := os.Stat(filepath.Join(full, JournalName))
	if before == nil || after == nil || after.Size() != before.Size() {
		t.Errorf("journal on the full disk: %v before, %v after", before, after)
	}
	entries, _ := os.ReadDir(full)
	for _, e := range entries {
		if e.Name() != "filler" && e.Name() != JournalName {
			t.Errorf("%s left on the full disk", e.Name())
		}
	}
	if b := st.stored(s.Config); b.upTo != 0 {
		t.Errorf("a failed write counted: bound %d", b.upTo)
	}
}

// TestSeqJournalBatches: the first reservations of many SAs are one write;
// reservations asked for together while a write is under way share the
// next one; every bound is read back after a restart.
func TestSeqJournalBatches(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	var sas []*esp.SA
	for i := range 1000 {
		sas = append(sas, journalSA(t, i))
	}
	st.reserveFirst(sas)
	if st.writes != 1 {
		t.Errorf("1,000 first reservations took %d writes, want 1", st.writes)
	}
	var wg sync.WaitGroup
	for _, s := range sas {
		wg.Go(func() {
			if err := st.reserve(s, 5<<16); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st.writes > 1+len(sas)/4 {
		t.Errorf("1,000 concurrent reservations took %d writes: they were not batched", st.writes-1)
	}
	st.close()
	st = openStore(t, dir)
	for _, s := range sas {
		if b := st.stored(s.Config); b.upTo != 5<<16 {
			t.Fatalf("SA %#x: bound %d after a restart, want %d", s.SPI(), b.upTo, 5<<16)
		}
		if s.LastSeq() != 0 {
			t.Fatal("reserving moved a sequence number")
		}
	}
}

// TestSeqJournalTornAndLegacy: a last write torn by a crash (sectors of it
// unwritten) is skipped and the others read; a legacy per-SA file's bound
// counts where it is the highest, for its SPI and destination or, naming no
// destination, for every SA of its SPI.
func TestSeqJournalTornAndLegacy(t *testing.T) {
	dir := t.TempDir()
	a, b, c := journalSA(t, 1), journalSA(t, 2), journalSA(t, 3)
	st := openStore(t, dir)
	st.reserveFirst([]*esp.SA{a, b})
	st.close()
	// A last write of two blocks whose second sector never reached the
	// disk: the records in its first sector count, the one cut is skipped.
	write := []byte(journalHeader)
	write = appendRecord(write, seqRecord{keyOf(a.Config), 9 << 16})
	for len(write) < journalSector+100 {
		write = appendRecord(write, seqRecord{keyOf(b.Config), 9 << 16})
	}
	write = pad(write)
	clear(write[journalSector : 2*journalSector])
	appendJournal(t, dir, write)
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("seq-%08x-%s", c.SPI(), c.Config.Dst)), []byte("777\n"), 0o600)
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("seq-%08x", b.SPI())), []byte("888888\n"), 0o600)
	st = openStore(t, dir)
	for _, w := range []struct {
		s    *esp.SA
		want uint64
	}{{a, 9 << 16}, {b, 888888}, {c, 777}} {
		if got := st.stored(w.s.Config).upTo; got != w.want {
			t.Errorf("SA %#x: bound %d, want %d", w.s.SPI(), got, w.want)
		}
	}
	// The torn write is gone from the journal, rewritten at open.
	f, err := os.Open(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if sc := scanJournal(f, f.Name()); sc.damage != nil || sc.tornAt >= 0 {
		t.Errorf("after the open: damage %v, torn at %d", sc.damage, sc.tornAt)
	}
}

// appendJournal adds data (a whole write) at the end of dir's journal.
func appendJournal(t *testing.T, dir string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, JournalName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

// usedJournal is a state directory whose journal holds three writes for
// SA a (bounds 1, 2 and 3 blocks of reservations) and one for b.
func usedJournal(t *testing.T) (dir string, a, b *esp.SA) {
	t.Helper()
	dir = t.TempDir()
	a, b = journalSA(t, 1), journalSA(t, 2)
	st := openStore(t, dir)
	st.reserveFirst([]*esp.SA{a, b})
	for i := uint64(2); i <= 3; i++ {
		if err := st.reserve(a, i*esp.ReserveBlock); err != nil {
			t.Fatal(err)
		}
	}
	st.close()
	return dir, a, b
}

// TestSeqJournalProvesItself: a journal is trusted only when what is on
// disk is what espgw's writes, or a crash during the last of them, leave;
// every other state is refused by name, the damage and where it is said,
// and nothing is written anywhere.
func TestSeqJournalProvesItself(t *testing.T) {
	journal := func(dir string) string { return filepath.Join(dir, JournalName) }
	edit := func(t *testing.T, path string, f func([]byte) []byte) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string // in the error; empty: trusted
		bound  uint64 // a's bound when trusted
	}{
		{"intact", func(*testing.T, string) {}, "", 3 * esp.ReserveBlock},
		{"torn: the last write's sectors unwritten", func(t *testing.T, dir string) {
			w := appendRecord([]byte(journalHeader), seqRecord{saKey{0x1001, netip.MustParseAddr("198.51.100.2")}, 9 * esp.ReserveBlock})
			w = pad(w)
			clear(w[:journalSector])
			appendJournal(t, dir, w)
		}, "", 3 * esp.ReserveBlock},
		{"torn: the last write cut at a block", func(t *testing.T, dir string) {
			w := []byte(journalHeader)
			for len(w) < JournalBlock+100 {
				w = appendRecord(w, seqRecord{saKey{0x1001, netip.MustParseAddr("198.51.100.2")}, 9 * esp.ReserveBlock})
			}
			appendJournal(t, dir, w[:JournalBlock])
		}, "", 9 * esp.ReserveBlock},
		{"torn: the last write's blocks all unwritten", func(t *testing.T, dir string) {
			appendJournal(t, dir, make([]byte, 2*JournalBlock))
		}, "", 3 * esp.ReserveBlock},
		{"cut inside a record", func(t *testing.T, dir string) { os.Truncate(journal(dir), 110) }, "ends inside a record", 0},
		{"cut at a line", func(t *testing.T, dir string) {
			edit(t, journal(dir), func(d []byte) []byte { i := bytes.LastIndex(d, []byte("00001001")); return d[:i] })
		}, "not whole 4096-byte blocks", 0},
		{"a flipped digit", func(t *testing.T, dir string) {
			edit(t, journal(dir), func(d []byte) []byte {
				i := bytes.LastIndex(d, []byte("00001001 198.51.100.2 ")) + len("00001001 198.51.100.2 ")
				d[i] ^= 1
				return d
			})
		}, "CRC does not match", 0},
		{"random bytes", func(t *testing.T, dir string) {
			rnd := make([]byte, JournalBlock)
			for i := range rnd {
				rnd[i] = byte(i*7919 + i>>3)
			}
			os.WriteFile(journal(dir), rnd, 0o600)
		}, "damaged at byte", 0},
		{"zeros followed by a later write", func(t *testing.T, dir string) {
			edit(t, journal(dir), func(d []byte) []byte { clear(d[:journalSector]); return d })
		}, "a write follows the unwritten bytes", 0},
		{"empty", func(t *testing.T, dir string) { os.Truncate(journal(dir), 0) }, "holds no record", 0},
		{"deleted", func(t *testing.T, dir string) { os.Remove(journal(dir)) }, "it is missing", 0},
		{"a symbolic link to another file", func(t *testing.T, dir string) {
			os.Remove(journal(dir))
			os.Symlink(filepath.Join(dir, "victim"), journal(dir))
		}, "symbolic link", 0},
		{"oversized", func(t *testing.T, dir string) { os.Truncate(journal(dir), 6<<30) }, "more than a journal ever grows to", 0},
		{"writable by others", func(t *testing.T, dir string) { os.Chmod(journal(dir), 0o666) }, "others may write it", 0},
		{"owned by another user", func(t *testing.T, dir string) { os.Chown(journal(dir), 65534, 65534) }, "owned by uid 65534", 0},
		{"a directory in its place", func(t *testing.T, dir string) {
			os.Remove(journal(dir))
			os.Mkdir(journal(dir), 0o700)
		}, "cannot be opened", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, a, _ := usedJournal(t)
			victim := filepath.Join(dir, "victim")
			os.WriteFile(victim, []byte("not the journal\n"), 0o600)
			c.damage(t, dir)
			st := newSeqStore(dir, nil)
			err := st.open()
			defer st.close()
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got := st.stored(a.Config).upTo; got != c.bound {
					t.Errorf("bound %d, want %d", got, c.bound)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--sequence-skip") {
				t.Fatalf("got %v, want a refusal saying %q and how to go on", err, c.want)
			}
			if data, _ := os.ReadFile(victim); string(data) != "not the journal\n" {
				t.Errorf("the file a link points to was written: %q", data)
			}
		})
	}
}

// TestSeqJournalSkip: told --sequence-skip, a gateway on a damaged journal
// resumes every SA that far above what the journal still shows (an SA it
// never showed: above its initial sequence), replaces the journal with
// those bounds at its first reservation and keeps the damaged one beside
// it; the next start trusts the new journal, whose floor resumes the SAs
// it does not list the skip above their initial sequence. An SA without ESN that the
// skip takes past 2^32 is refused; with ESN it is not. The first start of
// a directory and a journal the skip is not needed for skip nothing.
func TestSeqJournalSkip(t *testing.T) {
	dir, a, b := usedJournal(t)
	os.Truncate(filepath.Join(dir, JournalName), 110)
	const skip = 1 << 24
	st := newSeqStore(dir, nil)
	st.askedSkip = skip
	if err := st.open(); err != nil {
		t.Fatal(err)
	}
	fresh := journalSA(t, 9)
	fresh.Config.InitialSeq = 5
	for _, w := range []struct {
		s    *esp.SA
		want uint64
	}{{a, skip}, {b, skip}, {fresh, 5 + skip}} {
		got, err := st.resume(w.s.Config)
		if err != nil || got.InitialSeq != w.want {
			t.Errorf("SA %#x resumes after %v (%v), want %d", w.s.SPI(), got, err, w.want)
		}
	}
	huge := newSeqStore(t.TempDir(), nil)
	huge.skip = 1 << 32
	noESN := *a.Config
	if _, err := huge.resume(&noESN); err == nil || !strings.Contains(err.Error(), "needs new keys") {
		t.Errorf("a skip past 2^32 without ESN: %v", err)
	}
	withESN := noESN
	withESN.ESN = true
	if got, err := huge.resume(&withESN); err != nil || got.InitialSeq != 1<<32 {
		t.Errorf("a skip past 2^32 with ESN: %v, %v", got, err)
	}
	resumed, _ := st.resume(a.Config)
	s, err := esp.NewSA(resumed, cpu.New(), esp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.reserveFirst([]*esp.SA{s})
	st.close()
	if aside, _ := filepath.Glob(filepath.Join(dir, JournalName+".damaged-*")); len(aside) != 1 {
		t.Errorf("damaged journals kept: %v, want one", aside)
	}
	again := openStore(t, dir) // no skip: the new journal proves itself
	if got := again.stored(a.Config).upTo; got != skip+esp.ReserveBlock {
		t.Errorf("SA a's bound after the skip: %d, want %d", got, skip+esp.ReserveBlock)
	}
	// SA b's records were all cut off and it was not in force: the
	// journal's floor still resumes it, and any SA it does not list,
	// the skip above its initial sequence.
	for _, w := range []struct {
		s    *esp.SA
		want uint64
	}{{b, skip}, {fresh, 5 + skip}} {
		if got, err := again.resume(w.s.Config); err != nil || got.InitialSeq != w.want {
			t.Errorf("SA %#x resumes after %v (%v) once the journal was replaced, want %d", w.s.SPI(), got, err, w.want)
		}
	}
	again.close()

	// A first start (no manifest, no journal) and an intact journal: the
	// skip is not applied.
	intact, _, _ := usedJournal(t)
	for _, d := range []string{t.TempDir(), intact} {
		st := newSeqStore(d, nil)
		st.askedSkip = skip
		if err := st.open(); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.resume(fresh.Config); got.InitialSeq != 5 {
			t.Errorf("%s: a skip applied to a journal that proves itself: %d", d, got.InitialSeq)
		}
		st.close()
	}
}

// TestSeqJournalRewrite: a journal grown past its limit is rewritten with
// one record per SA, keeping every bound, also those another gateway
// sharing the directory wrote; that gateway's next write goes to the
// rewritten journal, not to the file it had open.
func TestSeqJournalRewrite(t *testing.T) {
	dir := t.TempDir()
	one, two := openStore(t, dir), openStore(t, dir)
	a, b := journalSA(t, 1), journalSA(t, 2)
	if err := two.reserve(b, 1<<16); err != nil {
		t.Fatal(err)
	}
	one.compactAt = 64 * JournalBlock
	for i := range 100 {
		if err := one.reserve(a, uint64(i+1)<<16); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() >= 64*JournalBlock {
		t.Errorf("journal of %d bytes after 100 writes: never rewritten", fi.Size())
	}
	if err := two.reserve(b, 2<<16); err != nil {
		t.Fatal(err)
	}
	one.close()
	two.close()
	st := openStore(t, dir)
	if got := st.stored(a.Config).upTo; got != 100<<16 {
		t.Errorf("bound of the rewriting gateway's SA: %d, want %d", got, 100<<16)
	}
	if got := st.stored(b.Config).upTo; got != 2<<16 {
		t.Errorf("bound of the other gateway's SA: %d, want %d", got, 2<<16)
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

// TestClaimFollowsChanges: a reload's set replaces the claim, a control
// socket change adds and removes SAs of it, each refused when another
// gateway claims an SA it brings, and left as it was when refused or when
// the change itself fails.
func TestClaimFollowsChanges(t *testing.T) {
	root := t.TempDir()
	mk := func(spi uint32) *sa.SA { return &sa.SA{SPI: spi, Dst: netip.MustParseAddr("198.51.100.2")} }
	mine, err := claimSAs(root, "here", []*sa.SA{mk(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.release()
	theirs, err := claimSAs(root, "here", []*sa.SA{mk(2)})
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.release()
	ok := func() error { return nil }
	if err := mine.replace([]*sa.SA{mk(1), mk(2)}, ok); err == nil || !strings.Contains(err.Error(), "SA 0x2 ") {
		t.Fatalf("a reload to an SA another gateway runs: %v", err)
	}
	// held is the SAs in force, as the gateway's tables would answer.
	inForce := map[saKey]bool{keyOf(mk(1)): true}
	held := func(k saKey) bool { return inForce[k] }
	if err := mine.change([]*sa.SA{mk(2)}, nil, held, ok); err == nil {
		t.Fatal("an added SA another gateway runs was not refused")
	}
	if err := mine.replace([]*sa.SA{mk(3)}, func() error { return errors.New("load failed") }); err == nil {
		t.Fatal("a failed change was not reported")
	}
	if c, err := claimSAs(root, "here", []*sa.SA{mk(3)}); err != nil {
		t.Fatalf("a failed change claimed its SA: %v", err)
	} else {
		c.release()
	}
	if err := mine.replace([]*sa.SA{mk(3), mk(5)}, ok); err != nil {
		t.Fatal(err)
	}
	inForce = map[saKey]bool{keyOf(mk(3)): true, keyOf(mk(5)): true}
	// SA 3 goes, 4 comes, and 5 is replaced by an SA of the same SPI and
	// destination (deleted and added in one change): it stays claimed.
	if err := mine.change([]*sa.SA{mk(4), mk(5)}, []saKey{keyOf(mk(3)), keyOf(mk(5))}, held, ok); err != nil {
		t.Fatal(err)
	}
	for spi, held := range map[uint32]bool{1: false, 3: false, 4: true, 5: true} {
		c, err := claimSAs(root, "here", []*sa.SA{mk(spi)})
		if held != (err != nil) {
			t.Errorf("SA %d: claimed by the first %v, second claim: %v", spi, held, err)
		}
		c.release()
	}
}

// A claim's compact identity of an SA gives back its SPI and destination,
// and keeps an IPv4 destination apart from the same address mapped into
// IPv6.
func TestClaimIDRoundTrip(t *testing.T) {
	seen := map[claimID]string{}
	for _, a := range []string{"198.51.100.2", "::ffff:198.51.100.2", "2001:db8::2"} {
		k := saKey{0x1001, netip.MustParseAddr(a)}
		id := claimOf(k)
		if got := id.key(); got != k {
			t.Errorf("%s: back as %v", a, got.dst)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("%s and %s have one claim identity", a, other)
		}
		seen[id] = a
	}
}
