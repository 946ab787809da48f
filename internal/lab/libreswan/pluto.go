// Package libreswan runs libreswan's pluto in the kernel peer's QEMU guest.
//
// The guest of internal/lab/kernelpeer has the kernel ESP (XFRM) this
// machine's lacks, so pluto installs its SAs there, and espgw's ike package
// is proven against an IKEv2 it did not write.
//
// libreswan's Debian package conflicts with strongSwan's, which the host
// needs, so it is never installed: Prepare fetches it with `apt-get
// download` into a cache folder and unpacks it with `dpkg-deb -x`. Start
// puts pluto, whack and addconn into the guest with the libraries ldd names
// for them and the NSS modules NSS loads at run time (softokn, freebl),
// beside an NSS database that the host's certutil (libnss3-tools) made, the
// configuration and the secrets; it starts pluto, has it listen and loads
// the connection, and initiates it when asked.
package libreswan

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/sa"
)

// CacheDir is where Prepare keeps libreswan's package, unless told
// otherwise.
const CacheDir = "/var/cache/espgw/libreswan"

// The programs from the package, and where they go in the guest.
const (
	guestDir = "/usr/libexec/ipsec"
	ctlSock  = "/run/pluto/pluto.ctl"
	logFile  = "/tmp/pluto.log"
)

var programs = []string{"pluto", "whack", "addconn"}

// nssModules are what NSS opens by name at run time, which ldd does not
// see.
var nssModules = []string{"libsoftokn3.so", "libfreeblpriv3.so", "libnssdbm3.so"}

const libDir = "/usr/lib/x86_64-linux-gnu"

// Prepare makes sure dir (CacheDir when empty) holds libreswan's unpacked
// Debian package and returns the folder it is unpacked in. A prepared
// folder takes no time.
func Prepare(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		dir = CacheDir
	}
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(root, "usr/libexec/ipsec/pluto")); err == nil {
		return root, nil
	}
	for _, tool := range []struct{ name, pkg string }{{"apt-get", "apt"}, {"dpkg-deb", "dpkg"}, {"certutil", "libnss3-tools"}} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return "", fmt.Errorf("prepare libreswan: %s not found (apt-get install %s)", tool.name, tool.pkg)
		}
	}
	debs := filepath.Join(dir, "deb")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", fmt.Errorf("prepare libreswan: %w", err)
	}
	if exec.CommandContext(ctx, "apt-cache", "show", "libreswan").Run() != nil {
		if out, err := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); err != nil {
			return "", fmt.Errorf("prepare libreswan: apt-get update: %w: %s", err, out)
		}
	}
	get := exec.CommandContext(ctx, "apt-get", "download", "-q", "libreswan")
	get.Dir = debs
	if out, err := get.CombinedOutput(); err != nil {
		return "", fmt.Errorf("prepare libreswan: apt-get download libreswan: %w: %s", err, out)
	}
	found, _ := filepath.Glob(filepath.Join(debs, "libreswan_*.deb"))
	if len(found) == 0 {
		return "", fmt.Errorf("prepare libreswan: apt-get download left no libreswan_*.deb in %s", debs)
	}
	tmp, err := os.MkdirTemp(dir, "unpack-")
	if err != nil {
		return "", fmt.Errorf("prepare libreswan: %w", err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", found[len(found)-1], tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("prepare libreswan: dpkg-deb -x: %w: %s", err, out)
	}
	if err := os.Rename(tmp, root); err != nil && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(filepath.Join(root, "usr/libexec/ipsec/pluto")); serr != nil {
			return "", fmt.Errorf("prepare libreswan: %w", err)
		}
	}
	return root, nil
}

// Config is pluto's side of a tunnel.
type Config struct {
	// Netns gets the guest's tap (named Tap), with the address Host; the
	// guest has Guest. espgw runs in Netns on Host's address.
	Netns, Tap  string
	Host, Guest netip.Prefix
	// LocalNet and RemoteNet are pluto's traffic selectors: its side and
	// espgw's.
	LocalNet, RemoteNet netip.Prefix
	// ID and PeerID are the identities: FQDNs without the @.
	ID, PeerID string
	PSK        string
	// Initiate has pluto initiate the connection (whack --initiate).
	Initiate bool
	// Transport makes the connection transport mode between Host and
	// Guest (type=transport, no subnets; LocalNet and RemoteNet unused).
	Transport bool
	// NAT lets pluto use ESP in UDP when its NAT detection finds one
	// (encapsulation=auto); without it pluto never does.
	NAT bool
	// IKE and ESP are the proposals in libreswan's syntax, such as
	// "aes128-sha2_256-dh31" and "aes_gcm128".
	IKE, ESP string
	// Cert, Key and CA are PEM files: with them pluto authenticates with
	// its certificate (imported into its NSS database with the key, via
	// PKCS #12) and checks the peer's against the CA, rather than the PSK.
	// KeyType is "rsa" or "ecdsa".
	Cert, Key, CA, KeyType string
	// Root is Prepare's folder; Dir receives the files the guest gets.
	Root, Dir string
}

// Pluto is a guest running pluto.
type Pluto struct {
	cfg  Config
	peer *kernelpeer.Peer
	// shared is set when the guest is the caller's (StartIn): Close stops
	// pluto and leaves the guest running.
	shared bool
}

// Name is the connection's name in pluto.
const Name = "espgw"

// Start boots the guest, starts pluto with the connection loaded and, with
// Initiate, initiates it.
func Start(ctx context.Context, cfg Config) (*Pluto, error) {
	files, err := cfg.files(ctx)
	if err != nil {
		return nil, err
	}
	assets, err := kernelpeer.Prepare(ctx, kernelpeer.PrepareOptions{Offline: true})
	if err != nil {
		return nil, fmt.Errorf("start pluto: the guest's kernel (scripts/prepare-kernel-peer.sh): %w", err)
	}
	peer, err := kernelpeer.Start(ctx, kernelpeer.Config{Netns: cfg.Netns, Tap: cfg.Tap, HostAddrs: []netip.Prefix{cfg.Host},
		GuestAddrs: []netip.Prefix{cfg.Guest}, NATTPorts: []uint16{}, Assets: assets, MemoryMB: 384, Files: files,
		CommandTimeout: time.Minute})
	if err != nil {
		return nil, fmt.Errorf("start pluto: %w", err)
	}
	p, err := start(ctx, peer, cfg)
	if err != nil {
		peer.Close()
		return nil, err
	}
	return p, nil
}

// Files writes pluto's configuration into cfg.Dir and lists what a guest
// needs to run it (guest path → host path, for kernelpeer.Config.Files),
// for a boot that runs other things too; cfg.Host and cfg.Guest are then
// the addresses only (StartIn's caller booted the guest). One boot serves
// several configurations, StartIn with each in turn: more's pre-shared
// keys go into the same secrets file and their certificates into the same
// NSS database.
func Files(ctx context.Context, cfg Config, more ...Config) (map[string]string, error) {
	return cfg.files(ctx, more...)
}

// StartIn starts pluto in a guest booted with Files' files, the
// connection loaded and, with Initiate, initiated. Close stops pluto and
// leaves the guest running.
func StartIn(ctx context.Context, peer *kernelpeer.Peer, cfg Config) (*Pluto, error) {
	p, err := start(ctx, peer, cfg)
	if err != nil {
		return nil, err
	}
	p.shared = true
	return p, nil
}

func start(ctx context.Context, peer *kernelpeer.Peer, cfg Config) (*Pluto, error) {
	p := &Pluto{cfg: cfg, peer: peer}
	conf, err := cfg.conf()
	if err != nil {
		return nil, err
	}
	// The connection as cfg has it, over the boot's: one boot serves
	// several configurations (the secrets and NSS database stay).
	script := fmt.Sprintf(`mkdir -p /run/pluto /var/lib/ipsec
cat >/etc/ipsec.conf <<'ESPGW_EOF'
%[5]sESPGW_EOF
%[1]s/pluto --config /etc/ipsec.conf --secretsfile /etc/ipsec.secrets --nssdir /etc/ipsec.d --rundir /run/pluto --logfile %[2]s </dev/null >/tmp/pluto.out 2>&1
for i in $(seq 100); do [ -S %[3]s ] && break; sleep 0.1; done
[ -S %[3]s ] || { echo "pluto made no control socket"; cat /tmp/pluto.out %[2]s; exit 1; }
%[1]s/whack --ctlsocket %[3]s --listen
%[1]s/addconn --ctlsocket %[3]s --config /etc/ipsec.conf %[4]s
`, guestDir, logFile, ctlSock, Name, conf)
	if out, err := peer.Run(ctx, script); err != nil {
		log, _ := p.Log(ctx)
		return nil, fmt.Errorf("start pluto: %w\n%s\npluto's log:\n%s", err, out, log)
	}
	if cfg.Initiate {
		if _, err := p.Whack(ctx, "--name", Name, "--initiate", "--asynchronous"); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// conf is ipsec.conf with the connection.
func (cfg Config) conf() (string, error) {
	auto := "add"
	if cfg.Initiate {
		auto = "start"
	}
	auth := "authby=secret"
	if cfg.Cert != "" {
		if cfg.KeyType != "rsa" && cfg.KeyType != "ecdsa" {
			return "", fmt.Errorf("start pluto: key type %q, want rsa or ecdsa", cfg.KeyType)
		}
		method := map[string]string{"rsa": "rsasig", "ecdsa": "ecdsa"}[cfg.KeyType]
		auth = fmt.Sprintf("authby=%s\n\tleftcert=%s\n\tleftsendcert=always\n\trightca=%%same", method, cfg.ID)
	}
	subnets := fmt.Sprintf("leftsubnet=%s\n\trightsubnet=%s", cfg.LocalNet, cfg.RemoteNet)
	if cfg.Transport {
		subnets = "type=transport"
	}
	encap := "no"
	if cfg.NAT {
		encap = "auto"
	}
	return fmt.Sprintf(`config setup
	logfile=%s
	logtime=yes
	dnssec-enable=no

conn %s
	ikev2=yes
	left=%s
	leftid=@%s
	right=%s
	rightid=@%s
	%s
	%s
	ike=%s
	esp=%s
	pfs=no
	rekey=no
	encapsulation=%s
	leftupdown=/bin/true
	auto=%s
`, logFile, Name, cfg.Guest.Addr(), cfg.ID, cfg.Host.Addr(), cfg.PeerID, subnets, auth, cfg.IKE, cfg.ESP, encap, auto), nil
}

// files writes the configuration, the secrets (cfg's and more's) and the
// NSS database (the certificates of cfg and more) and lists what the guest
// gets.
func (cfg Config) files(ctx context.Context, more ...Config) (map[string]string, error) {
	conf, err := cfg.conf()
	if err != nil {
		return nil, err
	}
	all := append([]Config{cfg}, more...)
	for _, c := range more {
		if _, err := c.conf(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "nss"), 0o700); err != nil {
		return nil, fmt.Errorf("start pluto: %w", err)
	}
	for name, body := range map[string]string{"ipsec.conf": conf, "ipsec.secrets": secretsOf(all)} {
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("start pluto: %w", err)
		}
	}
	nss := filepath.Join(cfg.Dir, "nss")
	if out, err := exec.CommandContext(ctx, "certutil", "-N", "-d", "sql:"+nss, "--empty-password").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("start pluto: certutil -N (libnss3-tools): %w: %s", err, out)
	}
	// Each certificate under its identity (leftcert names it), each CA
	// once.
	imported, cas := map[string]bool{}, 0
	for _, c := range all {
		if c.Cert == "" || imported[c.ID] {
			continue
		}
		imported[c.ID] = true
		p12 := filepath.Join(cfg.Dir, c.ID+".p12")
		argvs := [][]string{
			{"openssl", "pkcs12", "-export", "-in", c.Cert, "-inkey", c.Key, "-name", c.ID, "-out", p12, "-passout", "pass:"},
			{"pk12util", "-i", p12, "-d", "sql:" + nss, "-W", ""},
		}
		if !imported["CA "+c.CA] {
			imported["CA "+c.CA] = true
			nick := "espgw test CA"
			if cas++; cas > 1 {
				nick = fmt.Sprintf("espgw test CA %d", cas)
			}
			argvs = append(argvs, []string{"certutil", "-A", "-d", "sql:" + nss, "-n", nick, "-t", "CT,,", "-a", "-i", c.CA})
		}
		for _, argv := range argvs {
			if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("start pluto: %s: %w: %s", strings.Join(argv[:2], " "), err, out)
			}
		}
	}
	files := map[string]string{"/etc/ipsec.conf": filepath.Join(cfg.Dir, "ipsec.conf"),
		"/etc/ipsec.secrets": filepath.Join(cfg.Dir, "ipsec.secrets")}
	dbs, _ := os.ReadDir(nss)
	for _, d := range dbs {
		files["/etc/ipsec.d/"+d.Name()] = filepath.Join(nss, d.Name())
	}
	var plugins []string
	for _, m := range nssModules {
		plugins = append(plugins, filepath.Join(libDir, m))
		if chk := filepath.Join(libDir, strings.TrimSuffix(m, ".so")+".chk"); exists(chk) {
			files[chk] = chk
		}
	}
	for _, prog := range programs {
		host := filepath.Join(cfg.Root, "usr/libexec/ipsec", prog)
		libs, err := kernelpeer.HostProgram(host, plugins...)
		if err != nil {
			return nil, fmt.Errorf("start pluto: the libraries of %s (apt-get install libldns3 libevent-pthreads-2.1-7): %w", prog, err)
		}
		delete(libs, host)
		for k, v := range libs {
			files[k] = v
		}
		files[guestDir+"/"+prog] = host
	}
	return files, nil
}

// secretsOf is ipsec.secrets: each configuration's pre-shared key
// between its two identities, once.
func secretsOf(cfgs []Config) string {
	var b strings.Builder
	for _, c := range cfgs {
		if line := fmt.Sprintf("@%s @%s : PSK %q\n", c.ID, c.PeerID, c.PSK); !strings.Contains(b.String(), line) {
			b.WriteString(line)
		}
	}
	return b.String()
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// Whack runs pluto's whack with args in the guest.
func (p *Pluto) Whack(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{guestDir + "/whack", "--ctlsocket", ctlSock}, args...)
	out, err := p.peer.Exec(ctx, argv...)
	if err != nil {
		return out, fmt.Errorf("whack %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Status is `whack --status`.
func (p *Pluto) Status(ctx context.Context) (string, error) { return p.Whack(ctx, "--status") }

// Log is pluto's log file.
func (p *Pluto) Log(ctx context.Context) (string, error) {
	return p.peer.Run(ctx, "cat "+logFile+" /tmp/pluto.out")
}

// States are the ESP SAs pluto installed in the guest's kernel, with
// their keys and counters (`ip -s xfrm state`); none is no error.
func (p *Pluto) States(ctx context.Context) ([]sa.XFRMState, error) {
	out, err := p.peer.Run(ctx, "ip -s xfrm state")
	if err != nil {
		return nil, fmt.Errorf("ip xfrm state in the guest: %w", err)
	}
	if strings.TrimSpace(out) == "" {
		return nil, nil
	}
	return sa.ParseXFRMStates("the guest's ip -s xfrm state", []byte(out))
}

// Close stops the guest, and with it pluto; in a guest of the caller's
// (StartIn) it stops pluto only.
func (p *Pluto) Close() error {
	if p.shared {
		_, err := p.Whack(context.Background(), "--shutdown")
		return err
	}
	return p.peer.Close()
}
