package kernelpeer

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Extra is what one boot adds to the shared initramfs without rebuilding
// it: espgw's own static binaries, test binaries, other host programs with
// their libraries, data files, and kernel modules to load after boot. They
// go into a second cpio archive of the boot's own, appended to the shared
// one uncompressed (the kernel unpacks concatenated archives in order), so
// the prepared cache that other tests share stays as it is.
type Extra struct {
	// Files are copied into the guest.
	Files []File
	// Modules are loaded (insmod, with their dependencies, in dependency
	// order) once the guest is up, before Start returns; modules already
	// in the shared initramfs are skipped. A name may be loaded later
	// instead with Peer.LoadModules if it is in LaterModules.
	Modules []string
	// LaterModules are put into the guest but not loaded: a test loads
	// them when it wants (virtio_crypto, whose driver would otherwise take
	// cbc(aes) from the first moment).
	LaterModules []string
}

// File is one file for the guest: Src on the host, or Data.
type File struct {
	Path string // absolute path in the guest
	Src  string // host file to copy
	Data []byte // or the content itself
	Mode uint32 // permission bits; 0 means 0755 for Src, 0644 for Data
}

// HostProgram returns the files that run a host program in the guest: the
// program and every library ldd names for it and for extra (plugins such
// as openssl's engines, which the program loads by path), at the same
// paths.
func HostProgram(path string, plugins ...string) ([]File, error) {
	var files []File
	seen := map[string]bool{}
	for _, bin := range append([]string{path}, plugins...) {
		if !seen[bin] {
			files = append(files, File{Path: bin, Src: bin})
			seen[bin] = true
		}
		libs, err := sharedLibraries(bin)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			if !seen[l] {
				files = append(files, File{Path: l, Src: l})
				seen[l] = true
			}
		}
	}
	return files, nil
}

// extraModuleDir is where the extra archive keeps its modules.
const extraModuleDir = "lib/modules/espgw-extra"

// writeBootInitrd writes the boot's initrd into dir: the shared
// initramfs, decompressed, followed by the extra archive. Uncompressed is
// what boots fastest under TCG, where the kernel's gunzip is slow; the
// extra files are tens of megabytes of Go binaries.
func (c *Config) writeBootInitrd(dir string) (string, []string, []string, error) {
	x := c.Extra
	arc := newArchive()
	for _, f := range x.Files {
		if !filepath.IsAbs(f.Path) {
			return "", nil, nil, fmt.Errorf("extra guest file %q: path must be absolute", f.Path)
		}
		data, mode := f.Data, f.Mode
		if f.Src != "" {
			var err error
			if data, err = os.ReadFile(f.Src); err != nil {
				return "", nil, nil, fmt.Errorf("extra guest file %s: %w", f.Path, err)
			}
			if mode == 0 {
				mode = 0o755
			}
		} else if mode == 0 {
			mode = 0o644
		}
		arc.file(f.Path, mode, data)
	}
	now, later, err := c.extraModules(arc)
	if err != nil {
		return "", nil, nil, err
	}
	base, err := os.Open(c.Assets.Initramfs)
	if err != nil {
		return "", nil, nil, fmt.Errorf("read the shared initramfs: %w", err)
	}
	defer base.Close()
	zr, err := gzip.NewReader(base)
	if err != nil {
		return "", nil, nil, fmt.Errorf("read the shared initramfs %s: %w", c.Assets.Initramfs, err)
	}
	var out bytes.Buffer
	if _, err := io.Copy(&out, zr); err != nil {
		return "", nil, nil, fmt.Errorf("decompress the shared initramfs: %w", err)
	}
	for out.Len()%4 != 0 { // a cpio archive starts 4-byte aligned
		out.WriteByte(0)
	}
	if err := arc.writeTo(&out); err != nil {
		return "", nil, nil, err
	}
	path := filepath.Join(dir, "initrd.cpio")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return "", nil, nil, fmt.Errorf("write the boot's initrd: %w", err)
	}
	return path, now, later, nil
}

// extraModules puts the modules Extra names, with the dependencies the
// shared initramfs lacks, into arc; it returns the load order of those to
// load at boot and of the later ones.
func (c *Config) extraModules(arc *archive) (now, later []string, err error) {
	x := c.Extra
	if len(x.Modules)+len(x.LaterModules) == 0 {
		return nil, nil, nil
	}
	modDir := filepath.Join(c.Assets.Dir, "unpacked", c.Assets.Package, "lib", "modules", c.Assets.KernelRelease)
	idx, err := indexModules(modDir)
	if err != nil {
		return nil, nil, err
	}
	loaded := map[string]bool{}
	for _, m := range c.Assets.Modules {
		loaded[m] = true
	}
	add := func(wanted []string) ([]string, error) {
		mods, err := resolveModules(idx, wanted)
		if err != nil {
			return nil, fmt.Errorf("extra modules of kernel %s: %w", c.Assets.KernelRelease, err)
		}
		var order []string
		for _, m := range mods {
			if loaded[m.name] {
				continue
			}
			loaded[m.name] = true
			arc.file(extraModuleDir+"/"+m.name+".ko", 0o644, m.data)
			order = append(order, m.name)
		}
		return order, nil
	}
	if now, err = add(x.Modules); err != nil {
		return nil, nil, err
	}
	if later, err = add(x.LaterModules); err != nil {
		return nil, nil, err
	}
	return now, later, nil
}
