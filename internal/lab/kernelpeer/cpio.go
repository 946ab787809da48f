package kernelpeer

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// archive collects the files of an initramfs and writes them as a cpio
// "newc" archive, the one format the kernel's initramfs unpacker reads.
// Writing it here keeps the cpio tool out of the preparation and makes the
// output depend only on the inputs (fixed mtimes, sorted entries), so its
// hash says whether a rebuild changed anything.
type archive struct {
	entries map[string]entry
}

type entry struct {
	mode         uint32 // file type and permission bits, as in stat(2)
	data         []byte // file content or symlink target
	major, minor uint32 // device numbers of a device node
}

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeCharDev = 0o020000
)

func newArchive() *archive { return &archive{entries: map[string]entry{}} }

// dir adds a directory and its parents.
func (a *archive) dir(name string) {
	name = clean(name)
	for name != "" && name != "." {
		if _, ok := a.entries[name]; !ok {
			a.entries[name] = entry{mode: modeDir | 0o755}
		}
		name = clean(path.Dir(name))
	}
}

// file adds a regular file (and its parent directories).
func (a *archive) file(name string, perm uint32, data []byte) {
	name = clean(name)
	a.dir(path.Dir(name))
	a.entries[name] = entry{mode: modeFile | perm&0o7777, data: data}
}

// charDev adds a character device node.
func (a *archive) charDev(name string, major, minor uint32) {
	name = clean(name)
	a.dir(path.Dir(name))
	a.entries[name] = entry{mode: modeCharDev | 0o600, major: major, minor: minor}
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// writeTo writes the archive in newc format, parents before children.
func (a *archive) writeTo(w io.Writer) error {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var buf bytes.Buffer
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		writeHeader(&buf, ino, e, n)
		buf.Write(e.data)
		pad4(&buf)
		ino++
	}
	writeHeader(&buf, 0, entry{}, "TRAILER!!!")
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write cpio archive: %w", err)
	}
	return nil
}

func writeHeader(buf *bytes.Buffer, ino uint32, e entry, name string) {
	nlink := uint32(1)
	if e.mode&0o170000 == modeDir {
		nlink = 2
	}
	fmt.Fprintf(buf, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.major, e.minor, len(name)+1, 0)
	buf.WriteString(name)
	buf.WriteByte(0)
	pad4(buf)
}

func pad4(buf *bytes.Buffer) {
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
}
