package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
)

// wireguardModule is the wireguard-go module; the bench builds it at the
// version espgw itself is built with (go.mod pins it), so the baseline is the
// same code the TUN layer comes from.
const wireguardModule = "golang.zx2c4.com/wireguard"

// wireguardVersion is the version of wireguard-go go.mod pins: from this
// binary's build information (espgw links wireguard-go's tun package), or,
// in a test binary, which carries none, from `go list -m` in the module.
func wireguardVersion(ctx context.Context) (string, error) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == wireguardModule {
				if d.Replace != nil {
					d = d.Replace
				}
				return d.Version, nil
			}
		}
	}
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", wireguardModule).Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v, nil
	}
	return "", fmt.Errorf("wireguard-go baseline: no version of %s in this binary's build information or from go list (%v)", wireguardModule, err)
}

// BuildWireguard returns the path of a wireguard-go binary at the pinned
// version, building it into cacheDir with `go install` (from the Go module
// proxy) the first time.
func BuildWireguard(ctx context.Context, cacheDir string) (string, error) {
	version, err := wireguardVersion(ctx)
	if err != nil {
		return "", err
	}
	if cacheDir == "" {
		// No $HOME (as under some CI runners): a folder in /tmp does.
		if dir, err := os.UserCacheDir(); err == nil {
			cacheDir = filepath.Join(dir, "espgw")
		} else {
			cacheDir = filepath.Join(os.TempDir(), "espgw-cache")
		}
	}
	dir := filepath.Join(cacheDir, "wireguard-go@"+version)
	bin := filepath.Join(dir, "wireguard")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("wireguard-go baseline: building it needs the go tool on PATH: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("wireguard-go baseline: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "install", wireguardModule+"@"+version)
	cmd.Dir = dir // outside any module: `go install pkg@version` builds just that
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("wireguard-go baseline: go install %s@%s: %w: %s", wireguardModule, version, err, strings.TrimSpace(string(out)))
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("wireguard-go baseline: go install left no binary: %w", err)
	}
	return bin, nil
}

// wireguardTunnel is a wireguard-go tunnel between gw1 and gw2 of a
// topology: one wireguard-go process per gateway, configured with wg(8).
type wireguardTunnel struct {
	topo  *netns.Topology
	names [2]string
	procs [2]*exec.Cmd
}

// wireguardMTU is wireguard-go's default: 1500 less outer IPv4 20, UDP 8,
// WireGuard header 32 (and room for IPv6).
const wireguardMTU = 1420

// startWireguard brings a wireguard-go tunnel up across topo's gateways and
// routes the LANs through it.
func startWireguard(ctx context.Context, bin string, topo *netns.Topology, nice int) (w *wireguardTunnel, err error) {
	if _, err := exec.LookPath("wg"); err != nil {
		return nil, fmt.Errorf("wireguard-go baseline: the wg tool is missing (apt-get install -y wireguard-tools): %w", err)
	}
	// UAPI sockets live in /var/run/wireguard, shared by every namespace:
	// the run tag in the interface names keeps beds apart.
	tag := strings.TrimSuffix(strings.TrimPrefix(topo.Prefix(), "bn"), "-")
	if len(tag) > 11 {
		tag = tag[len(tag)-11:]
	}
	w = &wireguardTunnel{topo: topo, names: [2]string{"wg" + tag + "a", "wg" + tag + "b"}}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	a := topo.Addr
	gws := [2]*netns.Namespace{topo.GW1, topo.GW2}
	var priv, pub [2]string
	for i := range gws {
		k, err := exec.CommandContext(ctx, "wg", "genkey").Output()
		if err != nil {
			return w, fmt.Errorf("wireguard-go baseline: wg genkey: %w", err)
		}
		priv[i] = strings.TrimSpace(string(k))
		c := exec.CommandContext(ctx, "wg", "pubkey")
		c.Stdin = strings.NewReader(priv[i] + "\n")
		k, err = c.Output()
		if err != nil {
			return w, fmt.Errorf("wireguard-go baseline: wg pubkey: %w", err)
		}
		pub[i] = strings.TrimSpace(string(k))
	}
	dir, err := os.MkdirTemp("", "espgw-bench-wg-")
	if err != nil {
		return w, fmt.Errorf("wireguard-go baseline: %w", err)
	}
	defer os.RemoveAll(dir)
	type side struct {
		endpoint netip.Addr
		lans     []netip.Prefix
	}
	sides := [2]side{{a.GW1WAN4.Addr(), []netip.Prefix{a.LANA4, a.LANA6}}, {a.GW2WAN4.Addr(), []netip.Prefix{a.LANB4, a.LANB6}}}
	for i, ns := range gws {
		cmd := ns.Command(context.Background(), bin, "-f", w.names[i])
		if nice != 0 {
			cmd = ns.Command(context.Background(), "nice", "-n", strconv.Itoa(nice), bin, "-f", w.names[i])
		}
		cmd.Env = append(os.Environ(), "LOG_LEVEL=error", "WG_PROCESS_FOREGROUND=1")
		if err := topo.Start(cmd); err != nil {
			return w, fmt.Errorf("wireguard-go baseline: %w", err)
		}
		w.procs[i] = cmd
	}
	for i, ns := range gws {
		sock := filepath.Join("/var/run/wireguard", w.names[i]+".sock")
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return w, fmt.Errorf("wireguard-go baseline: %s in %s made no UAPI socket %s in 10s", w.names[i], ns.Short(), sock)
			}
			time.Sleep(50 * time.Millisecond)
		}
		keyFile := filepath.Join(dir, fmt.Sprintf("key%d", i))
		if err := os.WriteFile(keyFile, []byte(priv[i]+"\n"), 0o600); err != nil {
			return w, fmt.Errorf("wireguard-go baseline: %w", err)
		}
		peer := sides[1-i]
		var allowed []string
		for _, p := range peer.lans {
			allowed = append(allowed, p.String())
		}
		if _, err := ns.Output(ctx, "wg", "set", w.names[i], "listen-port", "51820", "private-key", keyFile,
			"peer", pub[1-i], "allowed-ips", strings.Join(allowed, ","),
			"endpoint", netip.AddrPortFrom(peer.endpoint, 51820).String()); err != nil {
			return w, fmt.Errorf("wireguard-go baseline: %w", err)
		}
		if err := ns.SetMTU(w.names[i], wireguardMTU); err != nil {
			return w, err
		}
		if err := ns.SetUp(w.names[i]); err != nil {
			return w, err
		}
		for _, p := range peer.lans {
			if err := ns.AddDeviceRoute(p, w.names[i]); err != nil {
				return w, err
			}
		}
	}
	return w, nil
}

// PIDs are the two wireguard-go processes (ip netns exec execs in place).
func (w *wireguardTunnel) PIDs() []int {
	var out []int
	for _, p := range w.procs {
		if p != nil && p.Process != nil {
			out = append(out, p.Process.Pid)
		}
	}
	return out
}

// Close stops both processes gently, so they remove their UAPI sockets.
func (w *wireguardTunnel) Close() error {
	for i, p := range w.procs {
		if p == nil || p.Process == nil || p.ProcessState != nil {
			continue
		}
		p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.Process.Kill()
			<-done
		}
		os.Remove(filepath.Join("/var/run/wireguard", w.names[i]+".sock"))
	}
	return nil
}
