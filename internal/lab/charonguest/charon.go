// Package charonguest runs strongSwan's charon in the kernel peer's QEMU guest, with the kernel's ESP and swanctl.
//
// The guest of internal/lab/kernelpeer has the kernel ESP (XFRM) this
// machine's lacks, so charon there installs its CHILD_SAs with its
// kernel-netlink plugin as on any Linux IPsec gateway, and is configured
// through swanctl and its vici plugin the way strongSwan's own
// documentation configures one. The programs are this machine's installed
// ones (strongswan-charon, strongswan-swanctl and the plugin packages),
// put into the guest with the libraries ldd names for them and their
// plugins (Files). Start starts charon in the guest and loads the
// connection with swanctl --load-all.
package charonguest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/internal/secret"
)

// The programs, at the same paths in the guest as on this machine.
const (
	Charon     = "/usr/lib/ipsec/charon"
	Swanctl    = "/usr/sbin/swanctl"
	pluginDir  = "/usr/lib/ipsec/plugins"
	viciSocket = "unix:///tmp/charon.vici"
	logFile    = "/tmp/charon.log"
	libgcc     = "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"
)

// plugins are what charon loads: crypto, kernel-netlink for the kernel's
// ESP, the sockets and vici for swanctl.
var plugins = []string{"random", "nonce", "openssl", "aes", "sha1", "sha2", "hmac", "gcm", "kdf", "pem", "pkcs1", "pkcs8",
	"x509", "pubkey", "constraints", "kernel-netlink", "socket-default", "vici"}

// packages name where each file comes from, for the error of one missing.
var packages = map[string]string{Charon: "strongswan-charon", Swanctl: "strongswan-swanctl",
	"vici": "strongswan-swanctl", "openssl": "libstrongswan-standard-plugins", "gcm": "libstrongswan-standard-plugins"}

// Config is charon's side of the tunnel, in swanctl.conf's terms.
type Config struct {
	// Dir receives the files the guest gets (the secrets among them, the
	// owner's only).
	Dir string
	// LocalAddr is the guest's outer address, RemoteAddr espgw's.
	LocalAddr, RemoteAddr netip.Addr
	// LocalAddr6 and RemoteAddr6, when set, are a second pair, IPv6, on
	// which charon takes the same connections: an IKE SA between them
	// gets the transport-mode child host between these two.
	LocalAddr6, RemoteAddr6 netip.Addr
	// LocalID and RemoteID are the identities as swanctl writes them
	// (an FQDN, an address, …); empty: the addresses.
	LocalID, RemoteID string
	PSK               string
	// LocalTS and RemoteTS are the CHILD_SA's traffic selectors.
	LocalTS, RemoteTS []netip.Prefix
	// Proposals and ESPProposals are in strongSwan's syntax
	// (default: swanctl's defaults).
	Proposals, ESPProposals string
	// RekeyTime is the CHILD_SA's rekey_time (0: swanctl's 1h).
	RekeyTime time.Duration
	// Cert, when set, adds a connection espgw-cert on which charon
	// authenticates with a certificate and checks gw1's against a CA.
	Cert *Cert
	// Transport adds a second CHILD_SA, host, in transport mode between
	// the two addresses (local_ts and remote_ts dynamic): charon gives it
	// to a request whose selectors are the two hosts.
	Transport bool
}

// Cert is the certificate connection: its identities (the device's is in
// its certificate) and the PEM files of the device's certificate, its
// private key (KeyType rsa or ecdsa) and the CA that issued gw1's.
type Cert struct {
	LocalID, RemoteID string
	Cert, Key, CA     string
	KeyType           string
}

// The guest paths of the certificate connection's files, in swanctl's
// folders.
const (
	guestCert = "/etc/swanctl/x509/appliance.pem"
	guestCA   = "/etc/swanctl/x509ca/ca.pem"
)

// Files writes charon's configuration into cfg.Dir and lists what the
// guest needs, guest path → host path, for kernelpeer.Config.Files.
func Files(cfg Config) (map[string]string, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("charon in the guest: %w", err)
	}
	swan := fmt.Sprintf(`charon {
	load = %s
	install_routes = no
	install_virtual_ip = no
	retransmit_timeout = 2
	retransmit_tries = 3
	plugins {
		vici {
			socket = %s
		}
	}
	filelog {
		guest {
			path = %s
			default = 1
			ike = 2
			chd = 2
			flush_line = yes
			time_format = %%T
		}
	}
}
swanctl {
	load = pem pkcs1 pkcs8 x509 pubkey
}
`, strings.Join(plugins, " "), viciSocket, logFile)
	conf, err := cfg.swanctl()
	if err != nil {
		return nil, err
	}
	for name, body := range map[string]string{"strongswan.conf": swan, "swanctl.conf": conf} {
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("charon in the guest: %w", err)
		}
	}
	files := map[string]string{"/etc/strongswan.conf": filepath.Join(cfg.Dir, "strongswan.conf"),
		"/etc/swanctl/swanctl.conf": filepath.Join(cfg.Dir, "swanctl.conf")}
	if c := cfg.Cert; c != nil {
		files[guestCert], files[guestCA] = c.Cert, c.CA
		files["/etc/swanctl/"+c.KeyType+"/appliance.key"] = c.Key
	}
	// glibc opens libgcc_s by name when a thread is cancelled, which
	// charon does as it stops its threads: ldd does not list it.
	files[libgcc] = libgcc
	var so []string
	for _, p := range plugins {
		path := filepath.Join(pluginDir, "libstrongswan-"+p+".so")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("charon in the guest: plugin %s: %w (apt-get install %s)", p, err, packageOf(p))
		}
		so = append(so, path)
	}
	for _, prog := range []string{Charon, Swanctl} {
		if _, err := os.Stat(prog); err != nil {
			return nil, fmt.Errorf("charon in the guest: %w (apt-get install %s)", err, packageOf(prog))
		}
		var extra []string
		if prog == Charon {
			extra = so
		}
		libs, err := kernelpeer.HostProgram(prog, extra...)
		if err != nil {
			return nil, fmt.Errorf("charon in the guest: the libraries of %s: %w", prog, err)
		}
		for k, v := range libs {
			files[k] = v
		}
	}
	return files, nil
}

func packageOf(what string) string {
	if p, ok := packages[what]; ok {
		return p
	}
	return "libcharon-extra-plugins"
}

// swanctl is the connection as swanctl.conf.
func (cfg Config) swanctl() (string, error) {
	if !cfg.LocalAddr.IsValid() || !cfg.RemoteAddr.IsValid() || len(cfg.LocalTS) == 0 || len(cfg.RemoteTS) == 0 || cfg.PSK == "" {
		return "", fmt.Errorf("charon in the guest: want both addresses, both traffic selectors and a pre-shared key")
	}
	if cfg.LocalAddr6.IsValid() != cfg.RemoteAddr6.IsValid() || cfg.LocalAddr6.IsValid() && (!cfg.LocalAddr6.Is6() || !cfg.RemoteAddr6.Is6()) {
		return "", fmt.Errorf("charon in the guest: the second pair of addresses wants both, IPv6")
	}
	if c := cfg.Cert; c != nil && (c.LocalID == "" || c.RemoteID == "" || c.Cert == "" || c.Key == "" || c.CA == "" || c.KeyType != "rsa" && c.KeyType != "ecdsa") {
		return "", fmt.Errorf("charon in the guest: a certificate connection wants both identities, the certificate, its key (rsa or ecdsa) and the CA")
	}
	ids := []string{cfg.LocalID, cfg.RemoteID}
	for i, a := range []netip.Addr{cfg.LocalAddr, cfg.RemoteAddr} {
		if ids[i] == "" {
			ids[i] = a.String()
		}
	}
	list := func(ps []netip.Prefix) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.Masked().String()
		}
		return strings.Join(s, ",")
	}
	or := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	rekey := "1h"
	if cfg.RekeyTime > 0 {
		rekey = fmt.Sprintf("%ds", int(cfg.RekeyTime.Seconds()))
	}
	host := ""
	if cfg.Transport {
		host = fmt.Sprintf(`
			host {
				mode = transport
				esp_proposals = %s
				rekey_time = %s
				start_action = none
			}`, or(cfg.ESPProposals, "default"), rekey)
	}
	return fmt.Sprintf(`connections {
	espgw {
		version = 2
		local_addrs = %s
		remote_addrs = %s
		proposals = %s
		local {
			auth = psk
			id = %s
		}
		remote {
			auth = psk
			id = %s
		}
		children {
			net {
				local_ts = %s
				remote_ts = %s
				esp_proposals = %s
				rekey_time = %s
				start_action = none
			}%s
		}
	}%s
}
secrets {
	ike-espgw {
		id-local = %s
		id-remote = %s
		secret = %q
	}
}
`, cfg.localAddrs(), cfg.remoteAddrs(), or(cfg.Proposals, "default"), ids[0], ids[1], list(cfg.LocalTS), list(cfg.RemoteTS),
		or(cfg.ESPProposals, "default"), rekey, host, cfg.certConn(list(cfg.LocalTS), list(cfg.RemoteTS), or(cfg.ESPProposals, "default"), rekey), ids[0], ids[1], cfg.PSK), nil
}

// localAddrs and remoteAddrs are the connections' local_addrs and
// remote_addrs: the IPv4 pair and the IPv6 one when set.
func (cfg Config) localAddrs() string  { return addrs(cfg.LocalAddr, cfg.LocalAddr6) }
func (cfg Config) remoteAddrs() string { return addrs(cfg.RemoteAddr, cfg.RemoteAddr6) }

func addrs(a, a6 netip.Addr) string {
	if a6.IsValid() {
		return a.String() + ", " + a6.String()
	}
	return a.String()
}

// certConn is the certificate connection of swanctl.conf, or nothing.
func (cfg Config) certConn(localTS, remoteTS, esp, rekey string) string {
	c := cfg.Cert
	if c == nil {
		return ""
	}
	proposals := cfg.Proposals
	if proposals == "" {
		proposals = "default"
	}
	return fmt.Sprintf(`
	espgw-cert {
		version = 2
		local_addrs = %s
		remote_addrs = %s
		proposals = %s
		send_cert = always
		local {
			auth = pubkey
			certs = %s
			id = %s
		}
		remote {
			auth = pubkey
			cacerts = %s
			id = %s
		}
		children {
			net-cert {
				local_ts = %s
				remote_ts = %s
				esp_proposals = %s
				rekey_time = %s
				start_action = none
			}
		}
	}`, cfg.localAddrs(), cfg.remoteAddrs(), proposals, guestCert, c.LocalID, guestCA, c.RemoteID, localTS, remoteTS, esp, rekey)
}

// Guest is charon running in a booted guest.
type Guest struct {
	peer *kernelpeer.Peer
}

// Start starts charon in the guest that booted with Files' files and
// loads the connection; charon then waits for espgw to initiate.
func Start(ctx context.Context, peer *kernelpeer.Peer) (*Guest, error) {
	g := &Guest{peer: peer}
	script := fmt.Sprintf(`mkdir -p /var/run /run /etc/swanctl/x509 /etc/swanctl/x509ca /etc/swanctl/x509aa /etc/swanctl/x509ocsp /etc/swanctl/x509crl /etc/swanctl/x509ac /etc/swanctl/pubkey /etc/swanctl/private /etc/swanctl/rsa /etc/swanctl/ecdsa /etc/swanctl/bliss /etc/swanctl/pkcs8 /etc/swanctl/pkcs12
(%[1]s >/tmp/charon.out 2>&1 </dev/null &)
for i in $(seq 150); do [ -S %[2]s ] && break; sleep 0.1; done
[ -S %[2]s ] || { echo "charon made no vici socket"; cat /tmp/charon.out %[3]s; exit 1; }
%[4]s --load-all --uri %[5]s
`, Charon, strings.TrimPrefix(viciSocket, "unix://"), logFile, Swanctl, viciSocket)
	if out, err := peer.RunFor(ctx, time.Minute, script); err != nil {
		return nil, fmt.Errorf("start charon in the guest: %w\n%s", err, secret.Scrub(out))
	}
	return g, nil
}

// Swanctl runs swanctl with args, a command first (--list-sas,
// --rekey …), in the guest.
func (g *Guest) Swanctl(ctx context.Context, args ...string) (string, error) {
	argv := append(append([]string{Swanctl}, args...), "--uri", viciSocket)
	out, err := g.peer.Exec(ctx, argv...)
	if err != nil {
		return out, fmt.Errorf("swanctl %s in the guest: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Log is charon's log.
func (g *Guest) Log(ctx context.Context) string {
	out, _ := g.peer.Run(ctx, "cat /tmp/charon.out "+logFile)
	return out
}

// Stop stops charon (and with it its SAs in the guest's kernel).
func (g *Guest) Stop(ctx context.Context) error {
	_, err := g.peer.Run(ctx, "kill $(cat /var/run/charon.pid) 2>/dev/null; for i in $(seq 50); do [ -e /var/run/charon.pid ] || exit 0; sleep 0.1; done")
	return err
}
