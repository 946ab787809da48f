package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxJournalSize is the largest sequence journal a gateway reads. A journal
// is rewritten once it has grown to twice what it holds, and holds about 50
// bytes per SA: 100,000 SAs stay far below it.
const MaxJournalSize = 64 << 20

// ManifestName is the file that says a state directory's journal has held a
// durable reservation: with it, a journal that is missing or holds no record
// is damage, not a first start.
const ManifestName = "seq.manifest"

const manifestText = "espgw: " + JournalName + " in this directory holds durable sequence reservations; without it (missing, empty) a gateway refuses to start until told --sequence-skip N\n"

// journalSector is the smallest unit a disk writes whole: a write torn by a
// crash leaves each sector of it either written or zero.
const journalSector = 512

// maxJournalLine bounds a line of the journal: a padding line is at most a
// block, a record under a hundred bytes.
const maxJournalLine = JournalBlock

// JournalDamage says why a sequence journal cannot be trusted: its bounds
// may be lower than numbers already sent, so a gateway resuming from it
// could send a sequence number twice.
type JournalDamage struct {
	File   string
	Offset int64 // where in the file (-1: the file as a whole)
	What   string
}

func (d *JournalDamage) Error() string {
	if d.Offset < 0 {
		return fmt.Sprintf("sequence journal %s is damaged: %s", d.File, d.What)
	}
	return fmt.Sprintf("sequence journal %s is damaged at byte %d: %s", d.File, d.Offset, d.What)
}

// journalScan is what reading a journal found: the highest intact bound per
// SA, the journal's length, how many records checked, where a write torn by
// a crash begins (-1: none) and the first damage, if any. The bounds are
// read whatever the damage: the intact records still say where their SAs
// were at least.
type journalScan struct {
	bounds  map[saKey]storedBound
	size    int64
	records int
	tornAt  int64
	damage  *JournalDamage
}

// scanJournal reads the journal f streaming and judges it from what is on
// disk. Every write of the journal is whole JournalBlock blocks at a block
// boundary, starting with the header line; its records end in a newline and
// carry a CRC. A crash during the last write (never acknowledged, so no
// packet went out under it) can leave some of its sectors unwritten, read as
// zeros, or the write cut at a block boundary. Anything else — a length that
// is not whole blocks, a complete line that is not a record, zeros not on
// sector boundaries, a write after a torn one — was not left by a crash.
func scanJournal(f *os.File, name string) journalScan {
	sc := journalScan{bounds: map[saKey]storedBound{}, tornAt: -1}
	var fi unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fi); err != nil {
		sc.damage = &JournalDamage{name, -1, fmt.Sprintf("cannot be read (%v)", err)}
		return sc
	}
	sc.size = fi.Size
	if fi.Size > MaxJournalSize {
		sc.damage = &JournalDamage{name, -1, fmt.Sprintf("%d bytes, more than a journal ever grows to (%d): not read", fi.Size, MaxJournalSize)}
		return sc
	}
	damaged := func(at int64, format string, args ...any) {
		if sc.damage == nil {
			sc.damage = &JournalDamage{name, at, fmt.Sprintf(format, args...)}
		}
	}
	var (
		line      []byte // the line's bytes but its zeros, up to maxJournalLine
		start     int64  // where the line began
		long      bool   // longer than maxJournalLine
		zeros     bool   // it holds zeros
		badZeros  bool   // zeros that are not whole sectors
		zeroStart int64  = -1
	)
	end := func(terminated bool) {
		defer func() { line, long, zeros, badZeros = line[:0], false, false, false }()
		switch {
		case badZeros:
			damaged(start, "zero bytes inside a line that are not whole %d-byte sectors: not what a crash leaves (random data?)", journalSector)
			return
		case zeros:
			// Sectors of a write a crash left unwritten: the last write's.
			if sc.tornAt < 0 {
				sc.tornAt = start
			}
			return
		case long:
			damaged(start, "a line of more than %d bytes, which is no record", maxJournalLine)
			return
		}
		text := bytes.TrimRight(line, " ")
		if len(text) == 0 {
			return // padding
		}
		if !terminated {
			if sc.size%JournalBlock == 0 {
				// A write cut at a block boundary by a crash.
				if sc.tornAt < 0 {
					sc.tornAt = start
				}
				return
			}
			damaged(start, "it ends inside a record (%d bytes), and a crash leaves whole %d-byte blocks: it was cut (truncated)", sc.size, JournalBlock)
			return
		}
		if string(text) == journalHeader[:len(journalHeader)-1] {
			switch {
			case start%JournalBlock != 0:
				damaged(start, "a write's header where no write begins")
			case sc.tornAt >= 0:
				damaged(sc.tornAt, "a write follows the unwritten bytes at byte %d, so they are not a crash's last write", sc.tornAt)
			}
			return
		}
		r, ok := parseRecord(text)
		if !ok {
			damaged(start, "a line that is not a record, or whose CRC does not match (%d bytes): changed after it was written", len(text))
			return
		}
		sc.records++
		if r.upTo > sc.bounds[r.key].upTo {
			sc.bounds[r.key] = storedBound{r.upTo, name}
		}
	}
	buf := make([]byte, 64<<10)
	var off int64
	for off < sc.size {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), sc.size-off)], off)
		if n == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				break // shrunk under us: judged by what was read
			}
			damaged(off, "cannot be read (%v)", err)
			return sc
		}
		for i, c := range buf[:n] {
			at := off + int64(i)
			if c == 0 {
				if zeroStart < 0 {
					zeroStart = at
					if at%journalSector != 0 {
						badZeros = true
					}
				}
				zeros = true
				continue
			}
			if zeroStart >= 0 {
				if at%journalSector != 0 {
					badZeros = true
				}
				zeroStart = -1
			}
			if c == '\n' {
				end(true)
				start = at + 1
				continue
			}
			if len(line) < maxJournalLine {
				line = append(line, c)
			} else {
				long = true
			}
		}
		off += int64(n)
	}
	if len(line) > 0 || zeros || badZeros {
		end(false)
	}
	if sc.size%JournalBlock != 0 {
		damaged(-1, "its length, %d bytes, is not whole %d-byte blocks, as every write leaves it: it was cut or edited", sc.size, JournalBlock)
	}
	return sc
}

// openJournal opens the journal at path without following a symbolic link
// and checks that it is a regular file of this user's that no one else may
// write. A missing journal is created, unless the directory was used
// (its manifest says so): then it is damage.
func openJournal(path string, used bool) (f *os.File, created bool, damage *JournalDamage) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		if used {
			return nil, false, &JournalDamage{path, -1, "it is missing, though the directory's " + ManifestName + " says reservations were made durable in it: deleted?"}
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, os.ErrExist) {
			return openJournal(path, used) // another gateway made it just now
		}
		created = err == nil
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, false, &JournalDamage{path, -1, "it is a symbolic link, which espgw never follows (a link could make it write over another file)"}
	}
	if err != nil {
		return nil, false, &JournalDamage{path, -1, fmt.Sprintf("cannot be opened (%v)", err)}
	}
	var fi unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fi); err != nil {
		f.Close()
		return nil, false, &JournalDamage{path, -1, fmt.Sprintf("cannot be read (%v)", err)}
	}
	switch uid := uint32(os.Geteuid()); {
	case fi.Mode&unix.S_IFMT != unix.S_IFREG:
		f.Close()
		return nil, false, &JournalDamage{path, -1, fmt.Sprintf("it is not a regular file (mode %#o)", fi.Mode)}
	case fi.Uid != uid:
		f.Close()
		return nil, false, &JournalDamage{path, -1, fmt.Sprintf("it is owned by uid %d, not by this gateway's (%d)", fi.Uid, uid)}
	case fi.Mode&0o022 != 0:
		f.Close()
		return nil, false, &JournalDamage{path, -1, fmt.Sprintf("others may write it (mode %#o; espgw makes it 0600)", fi.Mode&0o777)}
	}
	return f, created, nil
}

// manifestSays reports whether dir's manifest says its journal has held a
// durable reservation. A manifest that is there but not a regular file
// counts as there.
func manifestSays(dir string) bool {
	_, err := os.Lstat(dir + "/" + ManifestName)
	return !errors.Is(err, os.ErrNotExist)
}

// writeManifest records that dir's journal holds durable reservations.
func writeManifest(dir string) error {
	path := dir + "/" + ManifestName
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(manifestText)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(dir)
	}
	return err
}
