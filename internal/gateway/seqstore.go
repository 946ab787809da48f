package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/sa"
)

// seqStore keeps, per outbound SA, an upper bound of the sequence numbers
// it may have sent, so that a gateway restarted after a crash with the same
// manual keys resumes above every number its peer has seen rather than
// being refused as a replay (RFC 4303 §3.3.3: a sender never reuses a
// number under one key).
//
// The bounds of every SA go to one journal in the state directory
// (JournalName): each reservation is a record appended to it, and the
// records of all the reservations asked for while one write is under way
// go out together in the next write, made durable by one fsync (a group
// commit). So a gateway putting 50,000 outbound SAs in force makes their
// first reservations in one write, not 100,000 fsyncs, and a rekey's new
// SA waits for one fsync at most, off the data path. Each write starts on
// a JournalBlock boundary and is padded to one, so a write torn by a crash
// never shares a disk block with records already durable. A record carries
// a CRC, and the journal is trusted only when it proves itself (journal.go:
// what a crash during the last write leaves is skipped, anything else is
// damage, refused unless the gateway is told to skip). When the journal has
// grown to twice what it holds, it is rewritten with one record per SA
// (to a temporary file, fsynced, renamed over the journal, the directory
// fsynced). Several gateways may share a state directory (one per
// namespace by default): a write holds an flock of the journal, and a
// gateway finding the journal replaced by another's rewrite reopens it.
//
// esp never numbers a packet above a bound before its record is durable.
// When a write fails (a full disk), esp stops numbering packets above the
// last bound recorded: they are dropped as seq-unpersisted, never sent
// beyond what a restart would resume above.
type seqStore struct {
	dir string
	log *slog.Logger

	// mu guards the fields below it: the records waiting for the next
	// write, the batch they will be in, whether a writer is at work.
	mu     sync.Mutex
	opened bool
	closed bool
	// skip is the journal's floor: how far above its initial sequence
	// every SA resumes at least, since a journal that did not prove itself
	// was replaced (Options.SequenceSkip); 0 for most journals.
	skip     uint64
	pending  []seqRecord
	next     *seqBatch
	flushing bool
	bounds   map[saKey]storedBound // the highest bound known per SA
	failing  map[saKey]time.Time   // SAs whose last write failed: when it was last logged

	// fileMu is held by the writer of a batch and by a rewrite.
	fileMu    sync.Mutex
	f         *os.File
	size      int64 // the journal's length after our last write
	compactAt int64 // rewrite once the journal is this long
	buf       []byte
	writes    int // batches written (tests)
	// repair is set when the journal was damaged and the gateway told to
	// skip: the first write replaces it (the damaged file set aside).
	repair bool
	// used is whether the directory's manifest says its journal has held
	// a durable reservation.
	used bool
	// askedSkip is Options.SequenceSkip.
	askedSkip uint64
}

// JournalName is the file of a state directory that holds the sequence
// reservations of its gateways' outbound SAs.
const JournalName = "seq.journal"

// JournalBlock is the alignment of the journal's writes.
const JournalBlock = 4096

// journalHeader opens the journal, for whoever reads it.
const journalHeader = "# espgw sequence reservations: spi dst bound crc32 (the highest bound of an SA holds)\n"

type seqRecord struct {
	key  saKey
	upTo uint64
}

type seqBatch struct {
	done chan struct{}
	err  error
}

// storedBound is an SA's bound and the file it was read from (for errors).
type storedBound struct {
	upTo uint64
	from string
}

var errStoreClosed = errors.New("the gateway is closed")

func newSeqStore(dir string, log *slog.Logger) *seqStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &seqStore{dir: dir, log: log, next: newSeqBatch(), bounds: map[saKey]storedBound{}, failing: map[saKey]time.Time{}}
}

func newSeqBatch() *seqBatch { return &seqBatch{done: make(chan struct{})} }

func (st *seqStore) journal() string { return filepath.Join(st.dir, JournalName) }

// open reads the bounds the directory holds and opens the journal; it is
// called before the first SA is built and does nothing after. A journal
// that does not prove itself (JournalDamage) is an error, unless the
// gateway was told to skip (Options.SequenceSkip): then every SA resumes
// that far above what the journal still shows, and the first write
// replaces the journal, the damaged one set aside.
func (st *seqStore) open() error {
	st.fileMu.Lock()
	defer st.fileMu.Unlock()
	st.mu.Lock()
	opened, closed := st.opened, st.closed
	st.mu.Unlock()
	if closed {
		return errStoreClosed
	}
	if opened {
		return nil
	}
	if err := st.clean(); err != nil {
		return err
	}
	legacy, err := readLegacyBounds(st.dir)
	if err != nil {
		return err
	}
	st.used = manifestSays(st.dir)
	f, created, damage := openJournal(st.journal(), st.used)
	if created {
		// The new file's name is durable only once the directory is.
		if err := syncDir(st.dir); err != nil {
			f.Close()
			return fmt.Errorf("state directory %s: %w", st.dir, err)
		}
	}
	st.f = f
	sc := journalScan{bounds: map[saKey]storedBound{}, tornAt: -1}
	if f != nil {
		if err := st.lockFile(); err != nil {
			f.Close()
			st.f = nil
			return err
		}
		defer func() {
			if st.f != nil {
				unix.Flock(int(st.f.Fd()), unix.LOCK_UN)
			}
		}()
		sc = scanJournal(st.f, st.journal())
		if damage == nil {
			damage = sc.damage
		}
		if damage == nil && st.used && sc.records == 0 {
			damage = &JournalDamage{st.journal(), -1, fmt.Sprintf("it holds no record (%d bytes), though the directory's %s says reservations were made durable in it: emptied?", sc.size, ManifestName)}
		}
	}
	switch {
	case damage != nil && st.askedSkip == 0:
		if st.f != nil {
			st.f.Close()
			st.f = nil
		}
		return fmt.Errorf("%w. Its outbound SAs' bounds cannot be trusted, so the gateway sends under none of them: start it with --sequence-skip N to resume each N above the highest bound the journal still shows (N more than any SA can have sent since; an SA without ESN needs its resumed number below 2^32)", damage)
	case damage != nil:
		st.repair = true
		for k, b := range sc.bounds {
			sc.bounds[k] = storedBound{satAdd(b.upTo, st.askedSkip), b.from}
		}
		// An SA whose every record was in the damaged part is unknown:
		// the floor makes every SA without a record of its own resume
		// the skip above its initial sequence, from now on.
		if f := sc.bounds[floorKey]; f.upTo < st.askedSkip {
			sc.bounds[floorKey] = storedBound{st.askedSkip, st.journal()}
		}
		st.log.Warn("sequence journal damaged: --sequence-skip given, every outbound SA resumes that far above the highest bound the journal still shows (or its initial-seq); the journal is replaced at the first reservation and the damaged one kept beside it",
			"skip", st.skip, "damage", damage.Error(), "intact-records", sc.records)
	case sc.tornAt >= 0:
		st.log.Warn("sequence journal: the last write was torn by a crash and is skipped (it was never made durable, so no packet went out under it); the journal is rewritten without it",
			"file", st.journal(), "from-byte", sc.tornAt, "bytes", sc.size-sc.tornAt)
		st.bounds = maps.Clone(sc.bounds)
		if err := st.compact(); err != nil {
			st.f.Close()
			st.f = nil
			return fmt.Errorf("rewrite the torn journal %s: %w", st.journal(), err)
		}
	case st.askedSkip > 0:
		st.log.Info("--sequence-skip not applied: the sequence journal proves itself", "file", st.journal(), "records", sc.records)
	}
	st.size = sc.size
	st.compactAt = max(1<<20, 2*sc.size)
	if st.f != nil {
		var fi unix.Stat_t
		if unix.Fstat(int(st.f.Fd()), &fi) == nil {
			st.size = fi.Size
			st.compactAt = max(1<<20, 2*fi.Size)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for k, b := range legacy {
		if st.repair {
			b.upTo = satAdd(b.upTo, st.askedSkip)
		}
		st.bounds[k] = b
	}
	for k, b := range sc.bounds {
		if b.upTo > st.bounds[k].upTo {
			st.bounds[k] = b
		}
	}
	st.skip = st.bounds[floorKey].upTo
	st.opened = true
	return nil
}

// floorKey is the journal's record of a skip (SPI 0 is no SA's, RFC 4303
// §2.1): every SA resumes at least this far above its initial sequence.
var floorKey = saKey{}

// satAdd is a+b, or the largest uint64 where that overflows.
func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// close waits for the write under way and closes the journal; reservations
// asked for after it fail.
func (st *seqStore) close() error {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.fileMu.Lock()
	defer st.fileMu.Unlock()
	if st.f == nil {
		return nil
	}
	err := st.f.Close()
	st.f = nil
	return err
}

// clean removes the temporary files a crash during a write left behind.
func (st *seqStore) clean() error {
	for _, pat := range []string{"seq-*.tmp", JournalName + ".tmp"} {
		tmps, err := filepath.Glob(filepath.Join(st.dir, pat))
		if err != nil {
			return err
		}
		for _, t := range tmps {
			if err := os.Remove(t); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove a temporary file a previous run left: %w", err)
			}
		}
	}
	return nil
}

// resume returns cfg starting after the stored bound, if there is one.
// After a skip (the journal did not prove itself) it starts at least the
// skip above its initial sequence, and one that would pass the end of its
// sequence space is refused: it needs new keys.
func (st *seqStore) resume(cfg *sa.SA) (*sa.SA, error) {
	b := st.stored(cfg)
	st.mu.Lock()
	skip := st.skip
	st.mu.Unlock()
	from := b.upTo
	if skip > 0 {
		from = max(from, satAdd(cfg.InitialSeq, skip))
		last := uint64(math.MaxUint32)
		if cfg.ESN {
			last = math.MaxUint64
		}
		if from >= last {
			return nil, fmt.Errorf("SA %#x to %s: --sequence-skip %d takes it to %d, past the last sequence number it may send (%d, %s): it needs new keys and a new SPI (a rekey)",
				cfg.SPI, cfg.Dst, skip, from, last, map[bool]string{false: "no ESN", true: "ESN"}[cfg.ESN])
		}
		if from > b.upTo {
			st.log.Warn("SA resumes skipped: the sequence journal did not prove itself", "spi", fmt.Sprintf("%#x", cfg.SPI), "dst", cfg.Dst, "next", from+1, "skip", skip)
		}
	}
	if from <= cfg.InitialSeq {
		return cfg, nil
	}
	c := *cfg
	c.InitialSeq = from
	return &c, nil
}

// stored is the highest bound stored for cfg: its own, or that of a
// legacy file naming its SPI only.
func (st *seqStore) stored(cfg *sa.SA) storedBound {
	st.mu.Lock()
	defer st.mu.Unlock()
	b := st.bounds[keyOf(cfg)]
	if old := st.bounds[saKey{spi: cfg.SPI}]; old.upTo > b.upTo {
		b = old
	}
	return b
}

// source names the file an SA's stored bound came from.
func (st *seqStore) source(cfg *sa.SA) string {
	if b := st.stored(cfg); b.from != "" {
		return b.from
	}
	return st.journal()
}

// reserve is esp.Options.Reserve: it records a new bound durably (with the
// other SAs' reservations of the moment, in one write) and returns once it
// is. A failure is logged loudly (once, then every seqFailureLogEvery with
// the packets dropped meanwhile).
func (st *seqStore) reserve(s *esp.SA, upTo uint64) error {
	err := st.commit([]seqRecord{{keyOf(s.Config), upTo}})
	st.report(s, upTo, err)
	return err
}

func (st *seqStore) report(s *esp.SA, upTo uint64, err error) {
	k := keyOf(s.Config)
	st.mu.Lock()
	defer st.mu.Unlock()
	dropped := s.Counters.Dropped(esp.SeqUnpersisted)
	if err == nil {
		if _, was := st.failing[k]; was {
			delete(st.failing, k)
			st.log.Warn("sequence numbers persisted again: sending resumes", "spi", fmt.Sprintf("%#x", s.SPI()), "dst", s.Config.Dst, "bound", upTo, "dropped", dropped)
		}
		return
	}
	if last, was := st.failing[k]; !was || time.Since(last) >= seqFailureLogEvery {
		st.failing[k] = time.Now()
		st.log.Error("sequence numbers not persisted: packets above the last recorded bound are dropped (seq-unpersisted) until the state directory takes writes again",
			"spi", fmt.Sprintf("%#x", s.SPI()), "dst", s.Config.Dst, "dir", st.dir, "dropped", dropped, "err", err)
	}
}

// reserveFirst makes the first reservations of SAs about to go in force,
// in one write, before any packet may need them: their first packets do
// not wait for an fsync. If the write fails, they are not reserved, and
// their first packets try again (and are dropped as seq-unpersisted while
// the directory takes no writes).
func (st *seqStore) reserveFirst(sas []*esp.SA) {
	if len(sas) == 0 {
		return
	}
	recs := make([]seqRecord, len(sas))
	for i, s := range sas {
		recs[i] = seqRecord{keyOf(s.Config), s.LastSeq() + esp.ReserveBlock}
	}
	err := st.commit(recs)
	if err != nil {
		st.log.Error("sequence numbers not persisted for new SAs: their packets wait for a reservation of their own, and are dropped (seq-unpersisted) until the state directory takes writes again",
			"sas", len(sas), "dir", st.dir, "err", err)
		return
	}
	for i, s := range sas {
		s.Reserved(recs[i].upTo)
	}
}

// seqFailureLogEvery spaces the error logs of a state directory that keeps
// failing (esp retries every esp.ReserveRetry).
const seqFailureLogEvery = 10 * time.Second

// commit makes recs durable with whatever else is waiting: the caller that
// finds no write under way writes every batch that gathers meanwhile; the
// others wait for the batch their records went into.
func (st *seqStore) commit(recs []seqRecord) error {
	st.mu.Lock()
	if st.closed || !st.opened {
		st.mu.Unlock()
		if !st.opened {
			return errors.New("the state directory was not opened")
		}
		return errStoreClosed
	}
	st.pending = append(st.pending, recs...)
	mine := st.next
	if st.flushing {
		st.mu.Unlock()
		<-mine.done
		return mine.err
	}
	st.flushing = true
	for len(st.pending) > 0 {
		batch, b := st.pending, st.next
		st.pending, st.next = nil, newSeqBatch()
		st.mu.Unlock()
		b.err = st.write(batch)
		st.mu.Lock()
		if b.err == nil {
			for _, r := range batch {
				if r.upTo > st.bounds[r.key].upTo {
					st.bounds[r.key] = storedBound{r.upTo, st.journal()}
				}
			}
		}
		close(b.done)
	}
	st.flushing = false
	st.mu.Unlock()
	return mine.err
}

// write appends one batch of records to the journal and makes it durable.
func (st *seqStore) write(recs []seqRecord) (err error) {
	st.fileMu.Lock()
	defer st.fileMu.Unlock()
	defer func() {
		if err != nil {
			err = fmt.Errorf("reserve sequence numbers of %d SAs in %s: %w", len(recs), st.dir, err)
		}
	}()
	if st.repair {
		if err := st.replaceDamaged(recs); err != nil {
			return err
		}
		st.repair = false
		st.writes++
		st.markUsed()
		return nil
	}
	if st.f == nil {
		return errStoreClosed
	}
	if err := st.lockFile(); err != nil {
		return err
	}
	defer func() {
		if st.f != nil { // a rewrite may have replaced it
			unix.Flock(int(st.f.Fd()), unix.LOCK_UN)
		}
	}()
	var fi unix.Stat_t
	if err := unix.Fstat(int(st.f.Fd()), &fi); err != nil {
		return err
	}
	// Every write begins with the header: a reader tells a write that
	// follows a torn one by it.
	at := alignUp(fi.Size)
	st.buf = append(st.buf[:0], journalHeader...)
	for _, r := range recs {
		st.buf = appendRecord(st.buf, r)
	}
	st.buf = pad(st.buf)
	if _, err = st.f.WriteAt(st.buf, at); err == nil {
		err = unix.Fdatasync(int(st.f.Fd()))
	}
	if err != nil {
		// Nothing of a failed write may count: cut it off (a record
		// that stays anyway is only a higher bound, which is safe).
		st.f.Truncate(fi.Size)
		return err
	}
	st.size = at + int64(len(st.buf))
	st.writes++
	st.markUsed()
	if cap(st.buf) > 64<<10 {
		st.buf = nil // a load's batch (2 MB for 50,000 SAs) is not kept
	}
	if st.size >= st.compactAt {
		if err := st.compact(); err != nil {
			// The batch is durable; the journal just stays long.
			st.log.Warn("sequence journal: rewrite failed, the journal grows meanwhile", "file", st.journal(), "err", err)
			st.compactAt = st.size + 1<<20
		}
	}
	return nil
}

// lockFile takes the journal's flock, reopening the journal if another
// gateway's rewrite replaced it since we opened it. fileMu is held.
func (st *seqStore) lockFile() error {
	for try := 0; ; try++ {
		if try == 100 {
			return fmt.Errorf("lock %s: the file keeps being replaced", st.journal())
		}
		if err := unix.Flock(int(st.f.Fd()), unix.LOCK_EX); err != nil {
			return fmt.Errorf("lock %s: %w", st.journal(), err)
		}
		var a, b unix.Stat_t
		if unix.Fstat(int(st.f.Fd()), &a) == nil && unix.Stat(st.journal(), &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			return nil
		}
		f, _, damage := openJournal(st.journal(), true)
		if damage != nil {
			return damage
		}
		st.f.Close()
		st.f = f
	}
}

// compact rewrites the journal with one record per SA: those of every
// gateway that wrote to it, the bounds of the legacy per-SA files and the
// bounds this store knows. The journal's flock and fileMu are held.
func (st *seqStore) compact() error {
	sc := scanJournal(st.f, st.journal())
	if sc.damage != nil {
		return sc.damage
	}
	legacy, err := readLegacyBounds(st.dir)
	if err != nil {
		return err
	}
	bounds := sc.bounds
	st.mu.Lock()
	for _, m := range []map[saKey]storedBound{legacy, st.bounds} {
		for k, b := range m {
			if b.upTo > bounds[k].upTo {
				bounds[k] = b
			}
		}
	}
	st.mu.Unlock()
	return st.rewrite(bounds, nil)
}

// replaceDamaged writes a new journal in place of a damaged one, with
// every bound known (those the damaged journal still showed, raised by the
// skip) and recs; the damaged file is kept beside it, renamed. Until the
// new journal is in place the damaged one (or none, with the manifest)
// stays, so a crash meanwhile is refused again at the next start.
func (st *seqStore) replaceDamaged(recs []seqRecord) error {
	st.mu.Lock()
	bounds := maps.Clone(st.bounds)
	st.mu.Unlock()
	for _, r := range recs {
		if r.upTo > bounds[r.key].upTo {
			bounds[r.key] = storedBound{r.upTo, st.journal()}
		}
	}
	aside := st.journal() + ".damaged-" + time.Now().UTC().Format("20060102T150405.000000000")
	err := st.rewrite(bounds, func() error {
		if err := os.Rename(st.journal(), aside); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("set the damaged journal aside: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	unix.Flock(int(st.f.Fd()), unix.LOCK_UN) // taken by rewrite
	st.log.Warn("sequence journal replaced: the damaged one is kept beside it", "file", st.journal(), "damaged", aside, "sas", len(bounds))
	return nil
}

// rewrite puts a journal holding bounds in place of the journal: written to
// a temporary file, fsynced, (before called,) renamed over the journal,
// the directory fsynced. The new journal becomes st.f, flocked.
func (st *seqStore) rewrite(bounds map[saKey]storedBound, before func() error) error {
	buf := []byte(journalHeader)
	for k, b := range bounds {
		buf = appendRecord(buf, seqRecord{k, b.upTo})
	}
	buf = pad(buf)
	tmp := st.journal() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if err == nil && before != nil {
		err = before()
	}
	if err == nil {
		err = os.Rename(tmp, st.journal())
	}
	if err == nil {
		err = syncDir(st.dir)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	// The old journal's lock goes with its descriptor; another gateway
	// waiting on it finds the file replaced and reopens.
	if st.f != nil {
		st.f.Close()
	}
	st.f = f
	unix.Flock(int(f.Fd()), unix.LOCK_EX) // released by the caller's unlock
	st.size = int64(len(buf))
	st.compactAt = max(1<<20, 2*st.size)
	return nil
}

// markUsed writes the directory's manifest after its journal's first
// durable reservation (fileMu held); a failure is logged and tried again
// at the next write.
func (st *seqStore) markUsed() {
	if st.used {
		return
	}
	if err := writeManifest(st.dir); err != nil {
		st.log.Warn("sequence journal: write the state directory's manifest", "dir", st.dir, "err", err)
		return
	}
	st.used = true
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func alignUp(n int64) int64 { return (n + JournalBlock - 1) / JournalBlock * JournalBlock }

// pad fills b with spaces and a newline to the next JournalBlock boundary.
func pad(b []byte) []byte {
	n := int(alignUp(int64(len(b)))) - len(b)
	if n == 0 {
		return b
	}
	for range n - 1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
}

// appendRecord writes one record: SPI, destination, bound and the CRC-32
// of those three fields as they are written.
func appendRecord(b []byte, r seqRecord) []byte {
	start := len(b)
	dst := "any" // a legacy file's bound for every SA with the SPI
	if r.key.dst.IsValid() {
		dst = r.key.dst.String()
	}
	b = fmt.Appendf(b, "%08x %s %d", r.key.spi, dst, r.upTo)
	sum := crc32.ChecksumIEEE(b[start:])
	return fmt.Appendf(b, " %08x\n", sum)
}

// parseRecord reads one record line; ok is false for a line that is not
// one (torn, or its CRC does not match).
func parseRecord(line []byte) (r seqRecord, ok bool) {
	i := bytes.LastIndexByte(line, ' ')
	if i < 0 {
		return r, false
	}
	sum, err := strconv.ParseUint(string(line[i+1:]), 16, 32)
	if err != nil || crc32.ChecksumIEEE(line[:i]) != uint32(sum) {
		return r, false
	}
	f := strings.Fields(string(line[:i]))
	if len(f) != 3 {
		return r, false
	}
	spi, err1 := strconv.ParseUint(f[0], 16, 32)
	var dst netip.Addr
	var err2 error
	if f[1] != "any" {
		dst, err2 = netip.ParseAddr(f[1])
	}
	upTo, err3 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return r, false
	}
	return seqRecord{saKey{uint32(spi), dst}, upTo}, true
}

// readLegacyBounds reads the per-SA files of gateways before the journal:
// seq-<spi>-<dst> and, older, seq-<spi> (which names no destination and
// so holds for every SA with that SPI).
func readLegacyBounds(dir string) (map[saKey]storedBound, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the state directory: %w", err)
	}
	out := map[saKey]storedBound{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "seq-") || strings.HasSuffix(name, ".tmp") || e.IsDir() {
			continue
		}
		spiText, dstText, _ := strings.Cut(strings.TrimPrefix(name, "seq-"), "-")
		spi, err := strconv.ParseUint(spiText, 16, 32)
		if err != nil {
			continue // not a state file of ours
		}
		var dst netip.Addr
		if dstText != "" {
			if dst, err = netip.ParseAddr(dstText); err != nil {
				continue
			}
		}
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read sequence state %s: %w", path, err)
		}
		bound, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sequence state %s: %w (remove the file only if the peer's SA was reset too)", path, err)
		}
		k := saKey{uint32(spi), dst}
		if bound > out[k].upTo {
			out[k] = storedBound{bound, path}
		}
	}
	return out, nil
}

// StoredBounds reads the sequence bounds a state directory holds (its
// journal and any legacy per-SA files), the highest per SA: what a gateway
// started on the directory resumes its outbound SAs above. A legacy file
// naming no destination is listed with a zero Dst.
func StoredBounds(dir string) (map[SAID]uint64, error) {
	bounds, err := readLegacyBounds(dir)
	if err != nil {
		return nil, err
	}
	if bounds == nil {
		bounds = map[saKey]storedBound{}
	}
	f, err := os.OpenFile(filepath.Join(dir, JournalName), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err == nil {
		defer f.Close()
		sc := scanJournal(f, f.Name())
		if sc.damage != nil {
			return nil, sc.damage
		}
		for k, b := range sc.bounds {
			if b.upTo > bounds[k].upTo {
				bounds[k] = b
			}
		}
	}
	out := make(map[SAID]uint64, len(bounds))
	for k, b := range bounds {
		out[SAID{SPI: k.spi, Dst: k.dst}] = b.upTo
	}
	return out, nil
}
