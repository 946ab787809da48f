package gateway

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/sa"
)

// DefaultStateRoot is where a gateway keeps its sequence reservations when
// the config names no state-dir: one directory per network namespace
// (DefaultStateRoot/<namespace>), as SA identities (SPI and destination)
// are unique within one. state-dir: off turns persistence off.
const DefaultStateRoot = "/var/lib/espgw"

// StateDirOff is the state-dir value that turns sequence persistence off.
const StateDirOff = "off"

// DefaultLockRoot is where the claims that keep two gateways from running
// one SA in one namespace live, a directory per namespace (on tmpfs: a
// claim does not outlive a boot).
const DefaultLockRoot = "/run/espgw"

// namespaceName names the calling thread's network namespace for the state
// and lock directories: its name under /run/netns (ip netns), "init" for
// the host's own, else "netns-<inode>".
func namespaceName() (string, error) {
	var self unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &self); err != nil {
		return "", fmt.Errorf("find this network namespace: %w", err)
	}
	same := func(path string) bool {
		var st unix.Stat_t
		return unix.Stat(path, &st) == nil && st.Dev == self.Dev && st.Ino == self.Ino
	}
	if same("/proc/1/ns/net") {
		return "init", nil
	}
	if names, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range names {
			if same(filepath.Join("/run/netns", e.Name())) {
				return e.Name(), nil
			}
		}
	}
	return "netns-" + strconv.FormatUint(self.Ino, 10), nil
}

// resolveStateDir is the directory a config's sequence reservations go to, or ""
// when it turns them off.
func resolveStateDir(cfg *Config, root string) (string, error) {
	switch cfg.StateDir {
	case StateDirOff:
		return "", nil
	case "":
		ns, err := namespaceName()
		if err != nil {
			return "", fmt.Errorf("state-dir (default %s/<namespace>): %w", root, err)
		}
		return filepath.Join(root, ns), nil
	}
	return cfg.rel(cfg.StateDir), nil
}

// stateClaims is the directory of claims of the gateways sharing the state
// directory dir, under root: named by a hash of dir's resolved path, so
// the state directory itself holds only state.
func stateClaims(root, dir string) (string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", err
	}
	h := fnv.New64a()
	h.Write([]byte(real))
	return filepath.Join(root, fmt.Sprintf("state-%016x", h.Sum64())), nil
}

// saClaim is a running gateway's claim on the SAs it runs in one
// directory of claims: its network namespace's (under DefaultLockRoot), and
// its state directory's, whose journal keys bounds by SPI and destination.
// A second gateway claiming any of the same SAs (SPI and destination) there
// is refused, naming the first's pid and the SA: both would deliver every
// packet, and number the same SA twice over.
//
// Each gateway has a file of its own in the directory, listing its SAs and
// flocked for as long as it runs: the kernel drops the lock when the
// process dies, however it dies, so a gateway killed with -9 never blocks
// its restart (its file, unlocked, is removed by the next claim). Claims
// are checked and written holding the directory's own flock, so two
// gateways starting at once cannot both miss each other. The claim keeps
// no copy of its SAs: they are the gateway's SAs in force, which the
// gateway's tables answer for (change).
type saClaim struct {
	dir, where string
	f          *os.File
}

// claimSet is a set of SA identities (SPI and destination): another
// gateway's claims, as its file lists them.
type claimSet map[claimID]struct{}

// claimID is an saKey with its address as 16 bytes: no pointer to scan,
// and 24 bytes rather than 32. The addresses of SAs carry no zone.
type claimID struct {
	spi  uint32
	is4  bool
	addr [16]byte
}

func claimOf(k saKey) claimID { return claimID{spi: k.spi, is4: k.dst.Is4(), addr: k.dst.As16()} }

func (id claimID) key() saKey {
	dst := netip.AddrFrom16(id.addr)
	if id.is4 {
		dst = dst.Unmap()
	}
	return saKey{id.spi, dst}
}

// claimFileSuffix ends the name of a gateway's file of claims.
const claimFileSuffix = ".sas"

// claimSAs claims sas in dir (where names it in errors: "network
// namespace X", "state directory Y").
func claimSAs(dir, where string, sas []*sa.SA) (*saClaim, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("claim the SAs in %s: %w", dir, err)
	}
	c := &saClaim{dir: dir, where: where}
	err := c.locked(func() error {
		want := idsOf(sas)
		if err := c.checkOthers(want); err != nil {
			return err
		}
		var b [6]byte
		rand.Read(b[:])
		path := filepath.Join(dir, fmt.Sprintf("gw-%d-%x%s", os.Getpid(), b, claimFileSuffix))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			os.Remove(path)
			return err
		}
		c.f = f
		return c.rewrite(want)
	})
	if err != nil {
		c.release()
		return nil, fmt.Errorf("claim the SAs in %s: %w", dir, err)
	}
	return c, nil
}

func idsOf(sas []*sa.SA) []claimID {
	ids := make([]claimID, len(sas))
	for i, s := range sas {
		ids[i] = claimOf(keyOf(s))
	}
	return ids
}

// locked runs f holding the directory's flock.
func (c *saClaim) locked(f func() error) error {
	l, err := os.OpenFile(filepath.Join(c.dir, "claims.lock"), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := unix.Flock(int(l.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	return f()
}

// checkOthers refuses ids that another live gateway claims in the
// directory, and removes the files of dead ones. The directory's flock is
// held.
func (c *saClaim) checkOthers(ids []claimID) error {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, claimFileSuffix) || (c.f != nil && filepath.Base(c.f.Name()) == name) {
			continue
		}
		path := filepath.Join(c.dir, name)
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
			// Its gateway is gone (its lock went with it).
			os.Remove(path)
			f.Close()
			continue
		}
		pid, theirs, err := readClaims(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		for _, id := range ids {
			if _, ok := theirs[id]; ok {
				k := id.key()
				return fmt.Errorf("%s is run by another gateway (pid %s) in %s (%s): two would both deliver every packet and reuse its sequence numbers; stop it first",
					SAID{SPI: k.spi, Dst: k.dst}, pid, c.where, path)
			}
		}
	}
	return nil
}

// readClaims reads a gateway's file of claims: its pid, then a line per
// SA ("spi dst"), a line "- spi dst" for one it gave up since.
func readClaims(f *os.File) (pid string, ids claimSet, err error) {
	ids = claimSet{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		drop := len(fields) == 3 && fields[0] == "-"
		if drop {
			fields = fields[1:]
		}
		if len(fields) != 2 {
			continue
		}
		if fields[0] == "pid" {
			pid = fields[1]
			continue
		}
		spi, err1 := strconv.ParseUint(fields[0], 16, 32)
		dst, err2 := netip.ParseAddr(fields[1])
		if err1 != nil || err2 != nil {
			continue
		}
		id := claimOf(saKey{uint32(spi), dst})
		if drop {
			delete(ids, id)
		} else {
			ids[id] = struct{}{}
		}
	}
	if pid == "" {
		pid = "unknown"
	}
	return pid, ids, sc.Err()
}

// rewrite replaces the gateway's file with ids (the directory's flock held).
func (c *saClaim) rewrite(ids []claimID) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d\n", os.Getpid())
	for _, id := range ids {
		k := id.key()
		fmt.Fprintf(&b, "%08x %s\n", k.spi, k.dst)
	}
	if err := c.f.Truncate(0); err != nil {
		return err
	}
	_, err := c.f.WriteAt([]byte(b.String()), 0)
	return err
}

// replace makes the claim sas, running apply (the change that puts them in
// force) between the check and the record: refused, or apply failing,
// leaves the claim as it was.
func (c *saClaim) replace(sas []*sa.SA, apply func() error) error {
	if c == nil {
		return apply()
	}
	return c.locked(func() error {
		want := idsOf(sas)
		if err := c.checkOthers(want); err != nil {
			return err
		}
		if err := apply(); err != nil {
			return err
		}
		return c.rewrite(want)
	})
}

// change adds and removes SAs of the claim around apply, as replace does,
// appending to the gateway's file rather than rewriting it: a change of a
// few SAs costs the same with one SA in force or 100,000. held tells
// whether the claim holds an SA before the change: the gateway's tables
// answer it, before apply changes them.
func (c *saClaim) change(add []*sa.SA, del []saKey, held func(saKey) bool, apply func() error) error {
	if c == nil {
		return apply()
	}
	return c.locked(func() error {
		var added []claimID
		kept := make(map[saKey]bool, len(add))
		for _, s := range add {
			k := keyOf(s)
			if !kept[k] && !held(k) {
				added = append(added, claimOf(k))
			}
			kept[k] = true
		}
		var dropped []saKey
		for _, k := range del {
			if held(k) && !kept[k] {
				dropped = append(dropped, k)
			}
		}
		if err := c.checkOthers(added); err != nil {
			return err
		}
		if err := apply(); err != nil {
			return err
		}
		var b strings.Builder
		for _, k := range dropped {
			fmt.Fprintf(&b, "- %08x %s\n", k.spi, k.dst)
		}
		for _, id := range added {
			k := id.key()
			fmt.Fprintf(&b, "%08x %s\n", k.spi, k.dst)
		}
		fi, err := c.f.Stat()
		if err != nil {
			return err
		}
		_, err = c.f.WriteAt([]byte(b.String()), fi.Size())
		return err
	})
}

// release gives the claim up: its file removed, its lock dropped. (A
// gateway killed with -9 leaves its file, unlocked: the next claim in the
// directory removes it.)
func (c *saClaim) release() {
	if c == nil || c.f == nil {
		return
	}
	os.Remove(c.f.Name())
	c.f.Close()
	c.f = nil
}
