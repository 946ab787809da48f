// Package strongswan runs strongSwan's charon in network namespaces as an
// IKE and ESP peer.
//
// It runs strongSwan's IKE daemon (charon, Debian's strongswan-charon with
// the kernel-libipsec plugin: user-space ESP over a TUN device, since this
// machine's kernel has no ESP) in network namespaces, so that a tunnel a
// real IKE daemon negotiated can be taken over by espgw with the keys charon
// logs (sa.ParseCharonLog), and so that espgw's own IKEv2 (package ike) is
// proven against charon, each side initiating in turn.
//
// Each charon runs under ipsec's starter in a mount namespace of its own:
// a private /run (pid files, the stroke socket) and its own ipsec.conf,
// ipsec.secrets and strongswan.conf bind-mounted over /etc's, so two of
// them never meet. Its file log has chd = 4 (the CHILD_SA keys) and
// flush_line = yes.
package strongswan

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/lab/netns"
	"github.com/espgw/espgw/internal/lab/testbed"
)

// Config is one side of an IKEv2 tunnel with a pre-shared key.
type Config struct {
	NS *netns.Namespace
	// Dir receives the configuration files and charon's log.
	Dir string
	// Local and Remote are the gateways' outer addresses; LocalNet and
	// RemoteNet the traffic selectors.
	Local, Remote       netip.Addr
	LocalNet, RemoteNet netip.Prefix
	// ID and PeerID are the IKE identities (FQDNs, without the @);
	// PeerDN, when set, is the peer's identity instead: a DN.
	ID, PeerID, PeerDN string
	// PSK is the pre-shared key both sides hold.
	PSK string
	// Initiate makes this side start the IKE_SA (auto=start); the other
	// side waits (auto=add).
	Initiate bool
	// ESP and IKE are the proposals (default aes128-sha256 and
	// aes128-sha256-modp2048; "default" for strongSwan's own default
	// proposals); the openssl plugin brings AES-GCM, the ECP groups and
	// Curve25519 (x25519).
	ESP, IKE string
	// Cert, Key and CA are PEM files: with them charon authenticates with
	// its certificate (leftcert, the key in ipsec.secrets) and checks the
	// peer's against the CA, rather than the PSK. KeyType is how
	// ipsec.secrets names the key: "RSA", "ECDSA" or "PKCS8" (Ed25519).
	Cert, Key, CA, KeyType string
	// RealNAT leaves out forceencaps, which otherwise fakes a NAT: a test
	// with a real NAT between the two sides sets it.
	RealNAT bool
	// Options are lines added to strongswan.conf's charon section, such as
	// "signature_authentication = no" or "rsa_pss = yes".
	Options []string
	// Setup are lines added to ipsec.conf's config setup, such as
	// "uniqueids=no" (many IKE SAs with the same identities kept side by
	// side).
	Setup []string
	// Quiet logs at level 0 (what is established and what fails), without
	// the CHILD_SA keys: a benchmark's charon.
	Quiet bool
}

// Charon is a running starter and its charon.
type Charon struct {
	cfg        Config
	starter    *exec.Cmd
	out        *testbed.LockedBuffer
	charonPID  int
	waited     chan struct{}
	closeOnce  sync.Once
	closeError error
}

// Starter is where Debian puts ipsec's starter.
const Starter = "/usr/lib/ipsec/starter"

// CheckInstalled says what is missing to run charon with kernel-libipsec.
func CheckInstalled() error {
	for _, f := range []struct{ path, pkg string }{
		{Starter, "strongswan-starter"},
		{"/usr/lib/ipsec/charon", "strongswan-charon"},
		{"/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so", "libcharon-extra-plugins"},
		{"/usr/lib/ipsec/plugins/libstrongswan-openssl.so", "libstrongswan-standard-plugins"},
		{"/usr/bin/unshare", "util-linux"},
		{"/usr/bin/nsenter", "util-linux"},
	} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s not found: apt-get install %s", f.path, f.pkg)
		}
	}
	return nil
}

// LogPath is charon's log file.
func (c *Charon) LogPath() string { return filepath.Join(c.cfg.Dir, "charon.log") }

// Start writes the configuration and starts starter, which starts charon.
func Start(ctx context.Context, cfg Config) (*Charon, error) {
	if err := CheckInstalled(); err != nil {
		return nil, err
	}
	if cfg.ESP == "" {
		cfg.ESP = "aes128-sha256"
	}
	if cfg.IKE == "" {
		cfg.IKE = "aes128-sha256-modp2048"
	}
	peerID := "@" + cfg.PeerID
	if cfg.PeerDN != "" {
		peerID = strconv.Quote(cfg.PeerDN)
	}
	forceEncaps := "yes"
	if cfg.RealNAT {
		forceEncaps = "no"
	}
	auth := "authby=secret"
	if cfg.Cert != "" {
		if cfg.Key == "" || cfg.CA == "" || (cfg.KeyType != "RSA" && cfg.KeyType != "ECDSA" && cfg.KeyType != "PKCS8") {
			return nil, fmt.Errorf("start charon: a certificate needs its key, a CA and the key type RSA, ECDSA or PKCS8")
		}
		auth = fmt.Sprintf("leftauth=pubkey\n\trightauth=pubkey\n\tleftcert=%s\n\tleftsendcert=always", cfg.Cert)
	}
	auto := "add"
	if cfg.Initiate {
		auto = "start"
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("start charon: %w", err)
	}
	// rekey=no and no DPD: the tunnel must stay as negotiated while one
	// side is taken over by a gateway that speaks no IKE.
	setup := append([]string{`charondebug="chd 4"`}, cfg.Setup...)
	level, chd := 1, 4
	if cfg.Quiet {
		setup[0], level, chd = `charondebug="chd 0"`, 0, 0
	}
	conf := fmt.Sprintf(`config setup
	%s
conn espgw
	keyexchange=ikev2
	left=%s
	leftsubnet=%s
	leftid=@%s
	right=%s
	rightsubnet=%s
	rightid=%s
	%s
	%s
	%s
	forceencaps=%s
	rekey=no
	ikelifetime=24h
	lifetime=8h
	dpdaction=none
	auto=%s
`, strings.Join(setup, "\n\t"), cfg.Local, cfg.LocalNet, cfg.ID, cfg.Remote, cfg.RemoteNet, peerID, auth, proposalLine("ike", cfg.IKE), proposalLine("esp", cfg.ESP), forceEncaps, auto)
	secrets := fmt.Sprintf("@%s @%s : PSK %q\n", cfg.ID, cfg.PeerID, cfg.PSK)
	if cfg.Cert != "" {
		conf += fmt.Sprintf("ca espgw\n\tcacert=%s\n\tauto=add\n", cfg.CA)
		secrets = fmt.Sprintf(": %s %s\n", cfg.KeyType, cfg.Key)
	}
	c := &Charon{cfg: cfg, out: &testbed.LockedBuffer{}, waited: make(chan struct{})}
	swan := fmt.Sprintf(`charon {
	load = random nonce openssl aes sha1 sha2 hmac gmp kdf pem pkcs1 pkcs8 x509 pubkey constraints kernel-libipsec kernel-netlink socket-default stroke updown
%s
	filelog {
		espgw {
			path = %s
			default = %d
			chd = %d
			flush_line = yes
			time_format = %%T
		}
	}
}
`, strings.Join(cfg.Options, "\n"), c.LogPath(), level, chd)
	for name, body := range map[string]string{"ipsec.conf": conf, "ipsec.secrets": secrets, "strongswan.conf": swan} {
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("start charon: %w", err)
		}
	}
	script := fmt.Sprintf("mount -t tmpfs tmpfs /run && mount --bind %[1]s/ipsec.conf /etc/ipsec.conf && "+
		"mount --bind %[1]s/ipsec.secrets /etc/ipsec.secrets && mount --bind %[1]s/strongswan.conf /etc/strongswan.conf && "+
		"exec %[2]s --nofork", cfg.Dir, Starter)
	c.starter = exec.Command("ip", "netns", "exec", cfg.NS.Name(), "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	c.starter.Stdout, c.starter.Stderr = c.out, c.out
	c.starter.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.starter.WaitDelay = 5 * time.Second
	if err := c.starter.Start(); err != nil {
		return nil, fmt.Errorf("start charon in %s: %w", cfg.NS.Short(), err)
	}
	go func() { c.starter.Wait(); close(c.waited) }()
	started := regexp.MustCompile(`charon \((\d+)\) started`)
	for deadline := time.Now().Add(20 * time.Second); c.charonPID == 0; {
		if m := started.FindStringSubmatch(c.out.String()); m != nil {
			c.charonPID, _ = strconv.Atoi(m[1])
			break
		}
		select {
		case <-c.waited:
			return nil, fmt.Errorf("starter in %s exited:\n%s", cfg.NS.Short(), c.out.String())
		case <-ctx.Done():
			c.Kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Kill()
			return nil, fmt.Errorf("charon in %s did not start within 20s:\n%s", cfg.NS.Short(), c.out.String())
		}
	}
	return c, nil
}

// Status is `ipsec statusall`, run in charon's own namespaces.
func (c *Charon) Status(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.charonPID), "-m", "-n", "/usr/sbin/ipsec", "statusall").CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ipsec statusall in %s: %w: %s", c.cfg.NS.Short(), err, out)
	}
	return string(out), nil
}

// WaitConnection waits until starter has loaded the connection into
// charon: before that, charon answers an IKE_SA_INIT with
// NO_PROPOSAL_CHOSEN.
func (c *Charon) WaitConnection(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		st, err := c.Status(ctx)
		if err == nil && strings.Contains(st, "  espgw: ") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("charon in %s has no connection espgw after %v:\n%s", c.cfg.NS.Short(), wait, st)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Rekey has charon rekey an SA of its connection: "espgw{1}" the CHILD_SA
// numbered 1, "espgw[1]" the IKE SA (stroke's rekey, in charon's
// namespaces).
func (c *Charon) Rekey(ctx context.Context, name string) error {
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.charonPID), "-m", "-n", "/usr/lib/ipsec/stroke", "rekey", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stroke rekey %s in %s: %w: %s", name, c.cfg.NS.Short(), err, out)
	}
	return nil
}

// ChildCounters are a CHILD_SA's traffic counters from `ipsec statusall`.
type ChildCounters struct {
	BytesIn, PacketsIn, BytesOut, PacketsOut uint64
}

var childLine = regexp.MustCompile(`(\d+) bytes_i(?: \((\d+) pkts?[^)]*\))?, (\d+) bytes_o(?: \((\d+) pkts?[^)]*\))?`)

// Child waits until the CHILD_SA is installed and returns its counters.
func (c *Charon) Child(ctx context.Context, wait time.Duration) (ChildCounters, error) {
	deadline := time.Now().Add(wait)
	for {
		st, err := c.Status(ctx)
		if err == nil && strings.Contains(st, "INSTALLED") {
			if m := childLine.FindStringSubmatch(st); m != nil {
				var cc ChildCounters
				for i, p := range []*uint64{&cc.BytesIn, &cc.PacketsIn, &cc.BytesOut, &cc.PacketsOut} {
					*p, _ = strconv.ParseUint(m[i+1], 10, 64)
				}
				return cc, nil
			}
		}
		if time.Now().After(deadline) {
			return ChildCounters{}, fmt.Errorf("no CHILD_SA installed in %s within %v:\n%s\nstarter:\n%s", c.cfg.NS.Short(), wait, st, c.out.String())
		}
		select {
		case <-ctx.Done():
			return ChildCounters{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Kill ends starter and charon at once with SIGKILL, by their PIDs: charon
// gets no chance to delete its SAs with the peer, which keeps them, as
// after a crash — the state a takeover starts from.
func (c *Charon) Kill() error {
	c.closeOnce.Do(func() {
		var errs []error
		// starter first, or it would start charon again; charon holds
		// starter's output pipe, so starter's Wait returns after both.
		if c.starter != nil && c.starter.Process != nil {
			c.starter.Process.Kill()
		}
		if c.charonPID != 0 {
			if err := syscall.Kill(c.charonPID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill charon %d: %w", c.charonPID, err))
			}
			for i := 0; i < 100 && syscall.Kill(c.charonPID, 0) == nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if c.starter != nil && c.starter.Process != nil {
			<-c.waited
		}
		c.closeError = errors.Join(errs...)
	})
	return c.closeError
}

// Output is what starter and charon printed.
func (c *Charon) Output() string { return c.out.String() }

// Down has charon delete its connection's IKE SA and CHILD_SAs with the
// peer (stroke down, in charon's namespaces).
func (c *Charon) Down(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.charonPID), "-m", "-n", "/usr/lib/ipsec/stroke", "down", "espgw").CombinedOutput()
	if err != nil {
		return fmt.Errorf("stroke down espgw in %s: %w: %s", c.cfg.NS.Short(), err, out)
	}
	return nil
}

// Stroke runs /usr/lib/ipsec/stroke with args in charon's namespaces
// (such as "up-nb espgw": one more IKE SA initiated, not waited for).
func (c *Charon) Stroke(ctx context.Context, args ...string) error {
	argv := append([]string{"-t", strconv.Itoa(c.charonPID), "-m", "-n", "/usr/lib/ipsec/stroke"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("stroke %s in %s: %w: %s", strings.Join(args, " "), c.cfg.NS.Short(), err, out)
	}
	return nil
}

// PID is charon's process id.
func (c *Charon) PID() int { return c.charonPID }

var childName = regexp.MustCompile(`(espgw\{\d+\}):\s+INSTALLED`)

// InstalledChild is the name of the CHILD_SA charon has installed
// ("espgw{3}"), for Rekey, or "" when there is none.
func (c *Charon) InstalledChild(ctx context.Context) (string, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return "", err
	}
	if m := childName.FindStringSubmatch(st); m != nil {
		return m[1], nil
	}
	return "", nil
}

// proposalLine is the ipsec.conf line of key's proposals: those alone
// (strict, "!"), or none for "default", which leaves strongSwan's own
// default proposals.
func proposalLine(key, proposals string) string {
	if proposals == "default" {
		return "# " + key + ": strongSwan's default proposals"
	}
	return key + "=" + proposals + "!"
}
