package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// seqStore keeps, per outbound SA, an upper bound of the sequence numbers
// it may have sent, so that a gateway restarted after a crash with the same
// manual keys resumes above every number its peer has seen rather than
// being refused as a replay (RFC 4303 §3.3.3: a sender never reuses a
// number under one key).
//
// The bound is written ahead of need (esp.Options.Reserve): to a temporary
// file, fsynced, renamed over the SA's file, and the directory fsynced, so
// a crash at any point leaves either the old bound or the new one. When a
// write fails (a full disk), esp stops numbering packets above the last
// bound that was recorded: they are dropped as seq-unpersisted, never sent
// beyond what a restart would resume above.
type seqStore struct {
	dir string
	log *slog.Logger

	mu       sync.Mutex
	failing  map[saKey]time.Time // SAs whose last write failed: when it was last logged
	lastDrop map[saKey]uint64
}

func newSeqStore(dir string, log *slog.Logger) *seqStore {
	return &seqStore{dir: dir, log: log, failing: map[saKey]time.Time{}, lastDrop: map[saKey]uint64{}}
}

// path is the SA's state file: SPI and destination name an SA (sa.SAD).
func (st *seqStore) path(cfg *sa.SA) string {
	return filepath.Join(st.dir, fmt.Sprintf("seq-%08x-%s", cfg.SPI, cfg.Dst))
}

// legacyPath is where gateways before the destination was in the name kept
// the bound.
func (st *seqStore) legacyPath(cfg *sa.SA) string {
	return filepath.Join(st.dir, fmt.Sprintf("seq-%08x", cfg.SPI))
}

// clean removes the temporary files a crash during a write left behind.
func (st *seqStore) clean() error {
	tmps, err := filepath.Glob(filepath.Join(st.dir, "seq-*.tmp"))
	if err != nil {
		return err
	}
	for _, t := range tmps {
		if err := os.Remove(t); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove a temporary file a previous run left: %w", err)
		}
	}
	return nil
}

// resume returns cfg starting after the stored bound, if there is one.
func (st *seqStore) resume(cfg *sa.SA) (*sa.SA, error) {
	path := st.path(cfg)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		path = st.legacyPath(cfg)
		data, err = os.ReadFile(path)
	}
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sequence state of SA %#x: %w", cfg.SPI, err)
	}
	bound, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("sequence state %s: %w (remove the file only if the peer's SA was reset too)", path, err)
	}
	if bound <= cfg.InitialSeq {
		return cfg, nil
	}
	c := *cfg
	c.InitialSeq = bound
	return &c, nil
}

// reserve records a new bound durably; esp sends nothing above it until it
// returned nil. A failure is logged loudly (once, then every
// seqFailureLogEvery with the packets dropped meanwhile) and its temporary
// file removed.
func (st *seqStore) reserve(s *esp.SA, upTo uint64) error {
	err := st.write(s.Config, upTo)
	k := keyOf(s.Config)
	st.mu.Lock()
	defer st.mu.Unlock()
	dropped := s.Counters.Drops[esp.SeqUnpersisted].Load()
	if err == nil {
		if _, was := st.failing[k]; was {
			delete(st.failing, k)
			st.log.Warn("sequence numbers persisted again: sending resumes", "spi", fmt.Sprintf("%#x", s.SPI()), "dst", s.Config.Dst, "bound", upTo, "dropped", dropped)
		}
		return nil
	}
	if last, was := st.failing[k]; !was || time.Since(last) >= seqFailureLogEvery {
		st.failing[k] = time.Now()
		st.log.Error("sequence numbers not persisted: packets above the last recorded bound are dropped (seq-unpersisted) until the state directory takes writes again",
			"spi", fmt.Sprintf("%#x", s.SPI()), "dst", s.Config.Dst, "dir", st.dir, "dropped", dropped, "err", err)
	}
	return err
}

// seqFailureLogEvery spaces the error logs of a state directory that keeps
// failing (esp retries every esp.ReserveRetry).
const seqFailureLogEvery = 10 * time.Second

func (st *seqStore) write(cfg *sa.SA, upTo uint64) (err error) {
	path := st.path(cfg)
	tmp := path + ".tmp"
	defer func() {
		if err != nil {
			os.Remove(tmp) // nothing half-written stays behind
			err = fmt.Errorf("reserve sequence numbers up to %d of SA %#x in %s: %w", upTo, cfg.SPI, st.dir, err)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d\n", upTo)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// The rename is durable only once the directory is.
	d, err := os.Open(st.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
