package kernelpeer

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// guestModules are the modules the guest loads, by name. The kernel finds
// crypto templates and algorithms by name at SA creation time and would ask
// modprobe for the missing ones; the guest has no modprobe, so everything
// `ip xfrm` needs for every supported suite is loaded up front. Builtin ones
// (aes, cbc, sha1, sha256, hmac, md5 in Debian's config) are simply absent
// from the tree and skipped.
var guestModules = []string{
	// the virtual hardware: network card, control port, entropy
	"virtio_pci", "virtio_net", "virtio_console", "virtio_rng",
	// XFRM and ESP
	"xfrm_algo", "xfrm_user", "esp4", "esp6",
	// crypto templates and algorithms of every suite
	"authenc", "authencesn", "cbc", "ctr", "gcm", "ghash_generic",
	"seqiv", "echainiv", "des_generic", "aes_generic", "sha1_generic",
	"sha256_generic", "sha512_generic", "md5", "hmac", "crypto_null", "ecb",
	"ccm", "chacha_generic", "poly1305_generic", "chacha20poly1305",
	// seqiv and echainiv draw their IV salt from the default RNG; without
	// drbg no SA can be created ("unable to initialize cryptographic
	// operations"). drbg runs without jitterentropy_rng, which fails to
	// load in this kernel.
	"drbg",
	// user-space device drivers (the virtio engine): VFIO with the type 1
	// IOMMU, for devices behind the emulated Intel IOMMU (Devices.IOMMU)
	"vfio", "vfio_iommu_type1", "vfio_pci",
	// espgw gateways inside the guest
	"tun",
}

// moduleIndex maps module names (with '-' written as '_') to their files
// under a kernel's modules directory.
type moduleIndex map[string]string

func indexModules(modDir string) (moduleIndex, error) {
	idx := moduleIndex{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := d.Name()
		for _, ext := range []string{".ko", ".ko.xz"} {
			if strings.HasSuffix(base, ext) {
				idx[moduleName(strings.TrimSuffix(base, ext))] = p
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index kernel modules in %s: %w", modDir, err)
	}
	if len(idx) == 0 {
		return nil, fmt.Errorf("no kernel modules under %s", modDir)
	}
	return idx, nil
}

func moduleName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// loadedModule is one module ready for the initramfs.
type loadedModule struct {
	name string
	data []byte // uncompressed ELF object
}

// resolveModules returns the wanted modules that exist in idx with all
// their dependencies, each after the modules it depends on: the order
// modules.dep would give insmod. Dependencies come from each module's own
// .modinfo "depends=" field, so no depmod run is needed.
func resolveModules(idx moduleIndex, wanted []string) ([]loadedModule, error) {
	var out []loadedModule
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		case 2:
			return nil
		}
		file, ok := idx[name]
		if !ok {
			return fmt.Errorf("module %s (needed by %s) not found", name, from)
		}
		state[name] = 1
		data, err := readModule(file)
		if err != nil {
			return err
		}
		deps, err := moduleDepends(data)
		if err != nil {
			return fmt.Errorf("read dependencies of %s: %w", file, err)
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		out = append(out, loadedModule{name: name, data: data})
		return nil
	}
	for _, w := range wanted {
		w = moduleName(w)
		if _, ok := idx[w]; !ok {
			continue // built into this kernel
		}
		if err := visit(w, "the guest"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readModule returns a module's ELF object, decompressing .ko.xz with xz(1).
func readModule(file string) ([]byte, error) {
	if !strings.HasSuffix(file, ".xz") {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read module: %w", err)
		}
		return data, nil
	}
	xz, err := exec.LookPath("xz")
	if err != nil {
		return nil, fmt.Errorf("decompress %s: xz not found (apt-get install xz-utils)", file)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(xz, "-dc", file)
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w: %s", file, err, strings.TrimSpace(stderr.String()))
	}
	return data, nil
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(obj []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, err
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("no .modinfo section")
	}
	info, err := sec.Data()
	if err != nil {
		return nil, err
	}
	for _, field := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(field, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, moduleName(d))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}
