package kernelpeer

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// HostProgram returns the Config.Files entries that run a host program in
// the guest: the program and every library ldd names for it and for its
// plugins (such as openssl's engines, which it loads by path), each at the
// same path as on the host.
func HostProgram(path string, plugins ...string) (map[string]string, error) {
	files := map[string]string{}
	for _, bin := range append([]string{path}, plugins...) {
		files[bin] = bin
		libs, err := sharedLibraries(bin)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			files[l] = l
		}
	}
	return files, nil
}

// extraModuleDir is where a boot's own modules are in the guest.
const extraModuleDir = "lib/modules/espgw-extra"

// extraModules puts Config.Modules and LaterModules, with the dependencies
// the prepared initramfs lacks, into arc, and returns the load order of
// each.
func (c *Config) extraModules(arc *archive) (now, later []string, err error) {
	if len(c.Modules)+len(c.LaterModules) == 0 {
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
		for _, w := range wanted {
			if _, ok := idx[moduleName(w)]; !ok {
				return nil, fmt.Errorf("module %s is not among kernel %s's modules (built in, or misspelt)", w, c.Assets.KernelRelease)
			}
		}
		mods, err := resolveModules(idx, wanted)
		if err != nil {
			return nil, fmt.Errorf("modules of kernel %s: %w", c.Assets.KernelRelease, err)
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
	if now, err = add(c.Modules); err != nil {
		return nil, nil, err
	}
	if later, err = add(c.LaterModules); err != nil {
		return nil, nil, err
	}
	return now, later, nil
}

// loadModules insmods a boot's own modules in order; one loaded already is
// no error.
func (p *Peer) loadModules(ctx context.Context, mods []string) error {
	if len(mods) == 0 {
		return nil
	}
	var script strings.Builder
	for _, m := range mods {
		fmt.Fprintf(&script, "[ -d /sys/module/%s ] || insmod /%s/%s.ko || { echo \"insmod %s failed\"; exit 1; }\n", m, extraModuleDir, m, m)
	}
	if out, err := p.RunFor(ctx, 2*time.Minute, script.String()); err != nil {
		return fmt.Errorf("load modules %s in the guest: %w: %s", strings.Join(mods, " "), err, out)
	}
	return nil
}

// LoadModules loads modules of Config.LaterModules, with the dependencies
// they came with, now.
func (p *Peer) LoadModules(ctx context.Context, names ...string) error {
	want := map[string]bool{}
	for _, n := range names {
		want[moduleName(n)] = true
	}
	var order []string
	for _, m := range p.laterModules {
		if len(want) == 0 {
			break
		}
		order = append(order, m)
		delete(want, m)
	}
	if len(want) != 0 {
		var missing []string
		for m := range want {
			missing = append(missing, m)
		}
		return fmt.Errorf("load modules: %s not in Config.LaterModules", strings.Join(missing, ", "))
	}
	return p.loadModules(ctx, order)
}

// RunFor is Run with its own timeout, for commands that take longer than
// Config.CommandTimeout (test binaries, benchmarks).
func (p *Peer) RunFor(ctx context.Context, timeout time.Duration, script string) (string, error) {
	return p.exec(ctx, []string{"/bin/sh", "-c", "ip() { /sbin/ip \"$@\"; }\n" + script}, timeout)
}

// Run runs a busybox sh script in the guest, in which "ip" is iproute2's
// /sbin/ip (busybox's own ip applet has no xfrm).
func (p *Peer) Run(ctx context.Context, script string) (string, error) {
	return p.RunFor(ctx, p.cfg.CommandTimeout, script)
}
