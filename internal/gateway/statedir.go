package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

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

// DefaultLockRoot is where the locks that keep two gateways from running one
// SA set in one namespace live (on tmpfs: a lock does not outlive a boot).
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

// saLock is the exclusive lock a running gateway holds on its SA set in its
// namespace, so a second gateway started with the same SAs refuses to run
// (both would deliver every packet, and their sequence numbers collide).
type saLock struct {
	f    *os.File
	path string
}

// lockSAs takes the lock of the SA set in its namespace: a file in root
// named by the namespace and a hash of the set's SA identities (SPI and
// destination), flocked for as long as the gateway runs. The kernel drops
// the lock when the process dies, however it dies, so a gateway killed
// with -9 never blocks its restart.
func lockSAs(root string, sas []*sa.SA) (*saLock, error) {
	ns, path, err := saLockPath(root, sas)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	for try := 0; ; try++ {
		if try == 100 {
			return nil, fmt.Errorf("lock the SAs (%s): the file keeps being replaced", path)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("lock the SAs: %w", err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if errors.Is(err, os.ErrNotExist) {
			continue // the directory went between the two calls
		}
		if err != nil {
			return nil, fmt.Errorf("lock the SAs: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				who := strings.TrimSpace(string(holder))
				if who == "" {
					who = "another process"
				}
				return nil, fmt.Errorf("another gateway (%s) runs these SAs in network namespace %s (lock %s): two would both deliver every packet and reuse sequence numbers; stop it first", who, ns, path)
			}
			return nil, fmt.Errorf("lock the SAs (%s): %w", path, err)
		}
		// A holder that was closing may have removed the file between
		// our open and our lock: then the lock is on a file nobody else
		// will find, and we try again.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(path, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			f.Truncate(0)
			fmt.Fprintf(f, "pid %d\n", os.Getpid())
			return &saLock{f: f, path: path}, nil
		}
		f.Close()
	}
}

// saLockPath is the lock file of an SA set in this namespace.
func saLockPath(root string, sas []*sa.SA) (ns, path string, err error) {
	if ns, err = namespaceName(); err != nil {
		return "", "", err
	}
	ids := make([]string, 0, len(sas))
	for _, s := range sas {
		ids = append(ids, fmt.Sprintf("%08x/%s", s.SPI, s.Dst))
	}
	slices.SortFunc(ids, cmp.Compare)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(ids, ",")))
	return ns, filepath.Join(root, fmt.Sprintf("%s.sas-%016x.lock", ns, h.Sum64())), nil
}

// relock moves the lock to another SA set (a reload): it takes the new
// set's lock, or says who holds it; the old lock stays until commit.
func (l *saLock) relock(root string, sas []*sa.SA) (next *saLock, commit func(), err error) {
	if l == nil {
		return nil, func() {}, nil
	}
	if _, path, err := saLockPath(root, sas); err != nil {
		return nil, nil, err
	} else if path == l.path {
		return l, func() {}, nil
	}
	next, err = lockSAs(root, sas)
	if err != nil {
		return nil, nil, err
	}
	return next, l.release, nil
}

// release removes the lock file and drops the lock. (A gateway killed
// with -9 leaves its file, unlocked: the next one takes it.)
func (l *saLock) release() {
	if l == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
}
