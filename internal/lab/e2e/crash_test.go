package e2e_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/internal/gateway"
	"github.com/espgw/espgw/internal/header"
	"github.com/espgw/espgw/internal/lab/labtest"
	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
	"github.com/espgw/espgw/sa"
)

// TestSequenceRecoveryFullDisk kills a gateway with SIGKILL under load while
// its state directory is a full tmpfs. The gateway never sent a sequence
// number above the last bound it could record (the packets above it are
// counted as seq-unpersisted), so once the disk has room again the
// restarted gateway resumes above everything its peer saw: the peer drops
// nothing as replay or outside-window, and the tunnel carries traffic at
// once.
func TestSequenceRecoveryFullDisk(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	b := startBed(t, testbed.Options{Prefix: "itfull", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	pingAll(t, b, 3)

	// Move gw1's state directory onto a small tmpfs.
	dir := filepath.Join(b.Dir, "gw1-state")
	if _, err := b.StopGateway(0, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	saved := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		saved[e.Name()] = data
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs on the state directory: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) }) // before the bed's own cleanup
	for name, data := range saved {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.StartGateway(ctx, 0); err != nil {
		t.Fatal(err)
	}
	pingAll(t, b, 3) // its first reservation is on the tmpfs now
	storedBound(t, dir)

	// Fill the disk: the next reservation fails.
	filler := filepath.Join(dir, "filler")
	fill(t, filler)

	// Load: small UDP datagrams hostA → hostB, until gw1 has gone through
	// its reservation and drops what it could not record.
	loadCtx, stopLoad := context.WithTimeout(ctx, 30*time.Second)
	defer stopLoad()
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		testbed.Iperf3(loadCtx, b.Topo.HostB, b.Topo.HostA, b.Topo.Addr.HostB4.Addr(),
			testbed.IperfOptions{UDP: true, Bitrate: "200M", Length: 64, Duration: 20 * time.Second})
	}()
	out := saOf(t, b, 0, "out")
	deadline := time.Now().Add(25 * time.Second)
	for out.Drops[seqUnpersisted] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("gw1 never reached the end of its reservation under load: last seq %d, drops %v", out.LastSeq, out.Drops)
		}
		time.Sleep(200 * time.Millisecond)
		out = saOf(t, b, 0, "out")
	}
	bound := storedBound(t, dir)
	if _, err := b.StopGateway(0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("gw1 killed under load: last seq %d, recorded bound %d, %d packets dropped as seq-unpersisted", out.LastSeq, bound, out.Drops[seqUnpersisted])
	in := saOf(t, b, 1, "in")
	if in.Highest > bound {
		t.Fatalf("gw2 saw sequence number %d, above the bound %d gw1 recorded: a restart would reuse numbers", in.Highest, bound)
	}
	stopLoad()
	<-loadDone

	// Room again; restart under the same keys.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := b.StartGateway(ctx, 0); err != nil {
		t.Fatal(err)
	}
	pingAll(t, b, 10)
	after := saOf(t, b, 1, "in")
	for _, r := range []string{"replay", "outside-window"} {
		if n := after.Drops[r]; n != 0 {
			t.Errorf("gw2 dropped %d packets as %s after gw1's restart (highest before %d)", n, r, in.Highest)
		}
	}
	if after.Highest <= bound {
		t.Errorf("gw1 resumed at or below its recorded bound: gw2's highest %d, bound %d", after.Highest, bound)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 0 {
		t.Errorf("temporary files left in the state directory: %v", tmps)
	}
}

// seqUnpersisted is the drop reason of packets above the recorded bound.
const seqUnpersisted = "seq-unpersisted"

// fill writes path until the disk under it is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for range 10000 {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the disk never filled")
}

// storedBound is the one SA bound the state directory holds.
func storedBound(t *testing.T, dir string) uint64 {
	t.Helper()
	bounds, err := gateway.StoredBounds(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(bounds) != 1 {
		t.Fatalf("bounds stored in %s: %v, want the outbound SA's", dir, bounds)
	}
	for _, b := range bounds {
		return b
	}
	return 0
}

// saOf is gateway i's one SA of the direction (out or in).
func saOf(t *testing.T, b *testbed.Bed, i int, dir string) gateway.SAStats {
	t.Helper()
	st := gwStats(t, b, i)
	for _, s := range st.SAs {
		if s.Direction == dir && !s.Retired {
			return s
		}
	}
	t.Fatalf("gw%d has no %s SA: %+v", i+1, dir, st.SAs)
	return gateway.SAStats{}
}

// TestSecondGatewayRefused starts second gateways beside gw1 (their own
// TUN, no metrics, their own control socket): with gw1's SAs in gw1's
// namespace, with only one of them there, and with gw1's SAs in another
// namespace but gw1's state directory. Each refuses to start, naming gw1's
// pid and an SA they share; gw1 carries on.
func TestSecondGatewayRefused(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "itlock", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	cfg, err := os.ReadFile(filepath.Join(b.Dir, "gw1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.WriteFile(filepath.Join(b.Dir, "subset.yaml"), &sa.Config{SAs: b.SAs[1:]}); err != nil {
		t.Fatal(err)
	}
	gw1Out, gw1In := b.SAs[0], b.SAs[1]
	for _, c := range []struct {
		name, stateDir, saFile string
		ns                     *netns.Namespace
		where                  string
		sa                     *sa.SA
	}{
		{"the same SAs", "gw1b-state", "sas.yaml", b.Topo.GW1, "in network namespace " + b.Topo.GW1.Name(), nil},
		{"a subset", "gw1b-state", "subset.yaml", b.Topo.GW1, "in network namespace " + b.Topo.GW1.Name(), gw1In},
		{"the state directory", "gw1-state", "sas.yaml", b.Topo.HostA, "in state directory " + filepath.Join(b.Dir, "gw1-state"), gw1Out},
	} {
		second := strings.NewReplacer("name: esp0", "name: esp1", "metrics: 127.0.0.1:9478", "metrics: off", "state-dir: gw1-state", "state-dir: "+c.stateDir,
			"sa-file: sas.yaml", "sa-file: "+c.saFile, "control: gw1.sock", "control: gw1b.sock",
			// hostA holds no interface with gw1's address for AF_XDP to bind:
			// the claims are checked the same on either WAN I/O.
			"wan-io: xdp", "wan-io: socket").Replace(string(cfg))
		path := filepath.Join(b.Dir, "gw1b.yaml")
		if err := os.WriteFile(path, []byte(second), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := c.ns.Command(ctx, labtest.Espgw(t), "run", "-c", path).CombinedOutput()
		cancel()
		who := fmt.Sprintf("is run by another gateway (pid %d) %s", b.GW[0].PID(), c.where)
		named := c.sa == nil || strings.Contains(string(out), fmt.Sprintf("SA %#x to %s", c.sa.SPI, c.sa.Dst))
		if err == nil || !strings.Contains(string(out), who) || !named {
			t.Fatalf("%s: second gateway: %v, want a refusal saying %q and naming the SA\n%s", c.name, err, who, out)
		}
		pingAll(t, b, 3)
	}
}

// TestTransportModeRestartAfterKill kills a transport-mode gateway with -9:
// its policy rule stays behind, and the restarted gateway takes it over
// instead of failing with "file exists"; traffic flows again.
func TestTransportModeRestartAfterKill(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "ittrk", Mode: sa.Transport, Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	ctx := context.Background()
	_, gw2 := b.Outer()
	ping := func(when string) {
		testbed.Ping(ctx, b.GW[0].NS, gw2, testbed.PingOptions{Size: 8, Count: 1}) // neighbour discovery
		r, err := testbed.Ping(ctx, b.GW[0].NS, gw2, testbed.PingOptions{Size: 100, Count: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.Received != r.Sent {
			t.Fatalf("ping gw1→gw2 %s: %d of %d\n%s", when, r.Received, r.Sent, r.Output)
		}
	}
	ping("before the kill")
	if _, err := b.StopGateway(0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rules, err := b.Topo.GW1.Command(ctx, "ip", "rule", "show").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), "lookup 17747") { // table 0x4553
		t.Fatalf("the killed gateway's rule is not there to be taken over:\n%s", rules)
	}
	if err := b.StartGateway(ctx, 0); err != nil {
		t.Fatal(err)
	}
	ping("after the restart")
	rules, _ = b.Topo.GW1.Command(ctx, "ip", "rule", "show").CombinedOutput()
	if n := strings.Count(string(rules), "lookup 17747"); n != 1 {
		t.Errorf("%d transport rules after the restart, want 1:\n%s", n, rules)
	}
}

// TestDefaultStateDir: a gateway whose config names no state-dir persists
// its reservations anyway, in /var/lib/espgw/<its namespace>.
func TestDefaultStateDir(t *testing.T) {
	needRoot(t)
	b := startBed(t, testbed.Options{Prefix: "itsdir", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	if _, err := b.StopGateway(0, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.Dir, "gw1.yaml")
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(cfg), "state-dir: gw1-state\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(gateway.DefaultStateRoot, b.Topo.GW1.Name())
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := b.StartGateway(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	pingAll(t, b, 3)
	if bound := storedBound(t, dir); bound <= saOf(t, b, 0, "out").LastSeq {
		t.Errorf("bound %d not above the last sequence number sent", bound)
	}
}

// TestSequenceRecoveryDamagedJournal kills gw1 with -9 and damages its
// sequence journal in each way a disk or a hand can: cut inside a record,
// a digit changed, random bytes, emptied, deleted, replaced by a symbolic
// link to another file, grown to 6 GB. Each time the restarted gateway
// refuses to start, naming the damage and --sequence-skip, and sends
// nothing; started with --sequence-skip it does, and the first sequence
// number of its SA on the wire is above every one it sent before the
// kill, so gw2 drops nothing as replay or outside-window. A plain kill -9
// with the journal intact needs no flag.
func TestSequenceRecoveryDamagedJournal(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	b := startBed(t, testbed.Options{Prefix: "itdmg", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	seen := sniffSeqs(t, b, b.SAs[0].SPI)
	dir := filepath.Join(b.Dir, "gw1-state")
	journal := filepath.Join(dir, gateway.JournalName)
	victim := filepath.Join(b.Dir, "victim")
	if err := os.WriteFile(victim, []byte("not a journal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := func(f func([]byte) []byte) error {
		data, err := os.ReadFile(journal)
		if err != nil {
			return err
		}
		return os.WriteFile(journal, f(data), 0o600)
	}
	for _, c := range []struct {
		name, says string
		damage     func() error
	}{
		{"intact", "", func() error { return nil }},
		{"cut inside a record", "ends inside a record", func() error { return os.Truncate(journal, 110) }},
		{"a digit changed", "CRC does not match", func() error {
			return edit(func(d []byte) []byte {
				i := bytes.LastIndex(d, []byte("00001001 198.51.100."))
				i += bytes.IndexByte(d[i+len("00001001 "):], ' ') + len("00001001 ") + 1
				d[i] = '0' + ('9'-d[i])%10
				return d
			})
		}},
		{"random bytes", "damaged at byte", func() error {
			rnd := make([]byte, 8192)
			rand.NewChaCha8([32]byte{1}).Read(rnd)
			return os.WriteFile(journal, rnd, 0o600)
		}},
		{"emptied", "holds no record", func() error { return os.Truncate(journal, 0) }},
		{"deleted", "it is missing", func() error { return os.Remove(journal) }},
		{"a symbolic link to another file", "symbolic link", func() error {
			if err := os.Remove(journal); err != nil {
				return err
			}
			return os.Symlink(victim, journal)
		}},
		{"grown to 6 GB", "more than a journal ever grows to", func() error { return os.Truncate(journal, 6<<30) }},
	} {
		pingAll(t, b, 3)
		before := seen()
		if len(before) == 0 {
			t.Fatal("no ESP packet of gw1's SA seen on the WAN")
		}
		highest := slices.Max(before)
		if _, err := b.StopGateway(0, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := c.damage(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.says != "" {
			err := b.StartGateway(ctx, 0)
			if err == nil {
				t.Fatalf("%s: gw1 started on the damaged journal", c.name)
			}
			if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "--sequence-skip") {
				t.Fatalf("%s: gw1 refused to start without saying %q and how to go on: %v", c.name, c.says, err)
			}
			// Traffic while it is down: none of it may leave under the SA.
			testbed.Ping(ctx, b.Topo.HostA, b.Topo.Addr.HostB4.Addr(), testbed.PingOptions{Size: 100, Count: 2, Deadline: time.Second})
			if n := len(seen()); n != len(before) {
				t.Fatalf("%s: gw1 refused to start, but %d ESP packets of its SA crossed the WAN", c.name, n-len(before))
			}
		}
		// What an operator knows: no more than twice the highest number
		// ever sent can have gone out (the skip counts from what the
		// journal still shows, nothing at all for random bytes).
		var args []string
		if c.says != "" {
			args = []string{"--sequence-skip", strconv.FormatUint(2*uint64(highest)+1<<20, 10)}
		}
		if err := b.StartGateway(ctx, 0, args...); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.says != "" && !strings.Contains(b.GW[0].Output(), "SA resumes skipped") {
			t.Errorf("%s: no warning naming the jump:\n%s", c.name, b.GW[0].Output())
		}
		pingAll(t, b, 3)
		after := seen()[len(before):]
		if len(after) == 0 {
			t.Fatalf("%s: no ESP packet of gw1's SA after its restart", c.name)
		}
		if after[0] <= highest {
			t.Errorf("%s: gw1's first sequence number after the restart is %d, not above %d, sent before the kill", c.name, after[0], highest)
		}
		t.Logf("%s: highest before the kill %d, first after the restart %d", c.name, highest, after[0])
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "not a journal\n" {
		t.Errorf("the file the link pointed to was changed: %q, %v", data, err)
	}
	in := saOf(t, b, 1, "in")
	for _, r := range []string{"replay", "outside-window"} {
		if n := in.Drops[r]; n != 0 {
			t.Errorf("gw2 dropped %d packets as %s", n, r)
		}
	}
}

// sniffSeqs watches gw1's side of the WAN for ESP packets of the SA spi
// and returns what lists their sequence numbers so far, in wire order.
func sniffSeqs(t *testing.T, b *testbed.Bed, spi uint32) func() []uint32 {
	t.Helper()
	return sniffed(t, b.Topo.WAN, "gw1", func(d []byte) (uint32, bool) {
		ihl, proto, _, ok := header.Upper(d)
		if !ok || header.Version(d) != 4 || proto != 50 || len(d) < ihl+8 || binary.BigEndian.Uint32(d[ihl:]) != spi {
			return 0, false
		}
		return binary.BigEndian.Uint32(d[ihl+4:]), true
	})
}

// TestReloadEditKeepsNumbering runs both gateways with state-dir: off,
// adds a soft lifetime to every SA and reloads them (SIGHUP): the SAs
// keep their identity (SPI, addresses, keys), so gw1's numbers on the wire
// go on from where they were instead of starting at 1 again, gw2 drops
// none as replay, and the pings all cross. Each log says the SAs kept
// their numbers and windows.
func TestReloadEditKeepsNumbering(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	b := startBed(t, testbed.Options{Prefix: "itedit", Suite: sa.Suite{Cipher: sa.CipherAESGCM16}})
	for i := range b.GW {
		if _, err := b.StopGateway(i, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		cfg, err := os.ReadFile(b.GW[i].Config)
		if err != nil {
			t.Fatal(err)
		}
		off := regexp.MustCompile(`(?m)^state-dir: .*$`).ReplaceAll(cfg, []byte("state-dir: off"))
		if err := os.WriteFile(b.GW[i].Config, off, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := b.StartGateway(ctx, i); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.GW[i].Output(), "state-dir: off") {
			t.Fatalf("gw%d did not run with state-dir: off:\n%s", i+1, b.GW[i].Output())
		}
	}
	seen := sniffSeqs(t, b, b.SAs[0].SPI)
	pingAll(t, b, 20)
	before := seen()
	if len(before) < 20 {
		t.Fatalf("%d ESP packets of gw1's SA seen before the reload, want 20", len(before))
	}
	for _, s := range b.SAs {
		s.Soft = sa.Lifetime{Packets: 1 << 30}
	}
	if err := sa.WriteFile(filepath.Join(b.Dir, "sas.yaml"), &sa.Config{SAs: b.SAs[:]}); err != nil {
		t.Fatal(err)
	}
	for i, g := range b.GW {
		if err := g.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(g.Output(), "SA changed: it keeps its sequence numbers and replay window") {
			if time.Now().After(deadline) {
				t.Fatalf("gw%d's log does not say its edited SAs kept their numbers:\n%s", i+1, g.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	pingAll(t, b, 5)
	after := seen()[len(before):]
	if len(after) == 0 {
		t.Fatal("no ESP packet of gw1's SA after the reload")
	}
	if highest := slices.Max(before); after[0] <= highest {
		t.Errorf("gw1's first sequence number after the reload is %d, not above %d before it: numbering restarted", after[0], highest)
	}
	if n := saOf(t, b, 1, "in").Drops["replay"]; n != 0 {
		t.Errorf("gw2 dropped %d packets as replay after the reload", n)
	}
}
