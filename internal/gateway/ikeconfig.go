package gateway

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/ike"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/sa"
)

// IKEConfig is the ike: section of a gateway configuration: the IKEv2
// connections the gateway negotiates its SAs over, named as in
// strongSwan's swanctl.conf.
type IKEConfig struct {
	// RetransmitTimeout is the wait for the first response to a request,
	// doubled after each of RetransmitTries sends (strongSwan's
	// charon.retransmit_timeout and retransmit_tries; 1s and 5 by default).
	RetransmitTimeout time.Duration
	RetransmitTries   int
	// DecryptionTable, when set, is where the gateway writes Wireshark's
	// ikev2_decryption_table for every IKE SA it makes (mode 0600), and
	// ESPSAFile Wireshark's esp_sa table of the CHILD_SAs.
	DecryptionTable, ESPSAFile string
	Connections                []*IKEConnection
	// Secrets are the private keys of the secrets: section (swanctl's
	// private<suffix>, rsa<suffix>, ecdsa<suffix> with a file): a
	// connection with local auth pubkey signs with the one whose public
	// key is its certificate's. Never printed.
	Secrets []*IKEPrivateKey
}

// IKEPrivateKey is one private key of the secrets: section.
type IKEPrivateKey struct {
	Name, File string
	Line       int
	Key        crypto.Signer
}

// IKEConnection is one connection: an IKE SA with a peer and its
// CHILD_SAs (the first set up by IKE_AUTH, the others by CREATE_CHILD_SA).
type IKEConnection struct {
	Name string
	Line int
	// LocalAddrs are the addresses this side speaks IKE from (the first
	// one initiates); RemoteAddrs the peer's (the first one is initiated
	// to; none: any peer may initiate, and this side never does).
	LocalAddrs, RemoteAddrs []netip.Addr
	// LocalID and RemoteID are the identities (local.id, remote.id); a
	// zero RemoteID accepts any.
	LocalID, RemoteID ike.Identity
	// PSK is the pre-shared key, read from PSKFile or the environment
	// variable PSKEnv; never printed.
	PSK     sa.Key
	PSKFile string
	PSKEnv  string
	// LocalAuth and RemoteAuth are how each side authenticates: psk or
	// pubkey (a certificate and its key, RFC 7427 signatures).
	LocalAuth, RemoteAuth string
	// Certs is this side's chain (local.certs, its own first), Key its
	// private key (from secrets:), CAs the trust anchors of the peer's
	// certificate (remote.cacerts); the files as written.
	Certs                []*x509.Certificate
	Key                  crypto.Signer
	CAs                  []*x509.Certificate
	CertFiles, CAFiles   []string
	certsLine, localNode *yaml.Node
	Proposals            []ike.Proposal
	ProposalsText        string
	RekeyTime            time.Duration // IKE SA rekey; 0: never
	RandTime             time.Duration // the most taken off RekeyTime at random
	DPDDelay             time.Duration // liveness checks; 0: none
	Children             []*IKEChild
	RetransmitWait       time.Duration
	Tries                int
}

// IKEChild is one of a connection's CHILD_SAs.
type IKEChild struct {
	Name              string
	LocalTS, RemoteTS []netip.Prefix
	ESPProposals      []ike.Proposal
	ESPText           string
	StartAction       string // start, trap or none
	// Transport negotiates transport mode (mode: transport): the
	// selectors are the two IKE addresses, by default.
	Transport bool
	// RekeyTime is when the CHILD_SA is rekeyed, less a random part of
	// RandTime; LifeTime is when it expires unless rekeyed.
	RekeyTime, LifeTime, RandTime time.Duration
}

// Authentication methods (local.auth, remote.auth).
const (
	AuthPSK    = "psk"
	AuthPubkey = "pubkey"
)

// Start actions.
const (
	StartActionStart = "start"
	// StartActionTrap negotiates on the first outbound packet that
	// matches the child's selectors while no policy does.
	StartActionTrap = "trap"
	StartActionNone = "none"
)

// ikeDefaults are strongSwan's defaults for what a connection leaves out.
const (
	defaultIKERekey   = 4 * time.Hour
	defaultChildRekey = time.Hour
	// DefaultIKEProposals and DefaultESPProposals stand for swanctl's
	// "default" keyword: what espgw offers when a connection names none.
	DefaultIKEProposals = "aes128-sha256-x25519,aes256-sha384-ecp384,aes128gcm16-prfsha256-x25519,aes256gcm16-prfsha384-ecp384"
	DefaultESPProposals = "aes128gcm16,aes256gcm16,aes128-sha256,aes256-sha384"
)

var (
	ikeSettings   = []string{"retransmit_timeout", "retransmit_tries", "decryption_table", "esp_sa_file", "connections", "secrets"}
	connSettings  = []string{"local_addrs", "remote_addrs", "local", "remote", "proposals", "rekey_time", "rand_time", "dpd_delay", "psk_file", "psk_env", "children", "version"}
	endSettings   = []string{"id", "auth", "certs", "cacerts"}
	childSettings = []string{"local_ts", "remote_ts", "esp_proposals", "mode", "start_action", "rekey_time", "life_time", "rand_time"}
)

// ike reads the ike: section.
func (p *cfgParser) ike(n *yaml.Node, c *Config) *IKEConfig {
	ic := &IKEConfig{RetransmitTimeout: time.Second, RetransmitTries: 5}
	if n.Kind != yaml.MappingNode {
		p.failf(n, "ike", "want a mapping (connections, retransmit_timeout, retransmit_tries, decryption_table, esp_sa_file)")
		return ic
	}
	var conns *yaml.Node
	p.each(n, "ike.", ikeSettings, func(k, v *yaml.Node) {
		switch k.Value {
		case "retransmit_timeout":
			ic.RetransmitTimeout = p.duration(v, "ike.retransmit_timeout", 100*time.Millisecond, time.Minute)
		case "retransmit_tries":
			ic.RetransmitTries = p.int(v, "ike.retransmit_tries", 1, 20)
		case "decryption_table":
			if s, ok := p.scalar(v, "ike.decryption_table"); ok && s != "" {
				ic.DecryptionTable = c.rel(s)
			}
		case "esp_sa_file":
			if s, ok := p.scalar(v, "ike.esp_sa_file"); ok && s != "" {
				ic.ESPSAFile = c.rel(s)
			}
		case "connections":
			conns = v
		case "secrets":
			p.ikeSecrets(v, c, ic)
		}
	})
	if conns == nil {
		p.failf(n, "ike.connections", "missing: at least one connection")
		return ic
	}
	if conns.Kind != yaml.MappingNode || len(conns.Content) == 0 {
		p.failf(conns, "ike.connections", "want a mapping of connection names to connections")
		return ic
	}
	names := map[string]int{}
	for i := 0; i+1 < len(conns.Content); i += 2 {
		k, v := conns.Content[i], conns.Content[i+1]
		name := k.Value
		if k.Kind != yaml.ScalarNode || name == "" {
			p.failf(k, "ike.connections", "a connection name is a %s, want a name", kindName(k))
			continue
		}
		if line, dup := names[name]; dup {
			p.failf(k, "ike.connections."+name, "given twice (first on line %d)", line)
			continue
		}
		names[name] = k.Line
		if conn := p.ikeConnection(name, v, c, ic); conn != nil {
			ic.Connections = append(ic.Connections, conn)
		}
	}
	for _, conn := range ic.Connections {
		p.ikeKeyFor(conn, ic)
	}
	return ic
}

// ikeSecrets reads the secrets: section: private keys as PEM files, named
// as swanctl.conf's (private-gw1: {file: gw1.key}).
func (p *cfgParser) ikeSecrets(n *yaml.Node, c *Config, ic *IKEConfig) {
	if n.Kind != yaml.MappingNode {
		p.failf(n, "ike.secrets", "want a mapping of names (private-NAME, rsa-NAME, ecdsa-NAME) to {file: PEM file}")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := "ike.secrets." + secret.Unquoted(secret.Name(k.Value))
		if k.Kind != yaml.ScalarNode || !(strings.HasPrefix(k.Value, "private") || strings.HasPrefix(k.Value, "rsa") || strings.HasPrefix(k.Value, "ecdsa") || strings.HasPrefix(k.Value, "pkcs8")) {
			p.failf(k, field, "want a private key's name (private-NAME, rsa-NAME, ecdsa-NAME or pkcs8-NAME): the gateway's secrets are private keys; a PSK goes in psk_file or psk_env")
			continue
		}
		if v.Kind != yaml.MappingNode {
			p.failf(v, field, "want a mapping (file)")
			continue
		}
		var file *yaml.Node
		p.each(v, field+".", []string{"file"}, func(_, fv *yaml.Node) { file = fv })
		if file == nil {
			p.failf(v, field+".file", "missing: the private key's PEM file")
			continue
		}
		name, ok := p.scalar(file, field+".file")
		if !ok {
			continue
		}
		data, err := os.ReadFile(c.rel(name))
		if err != nil {
			p.failf(file, field+".file", "read %s: %v", secret.Quote(name), pathErr(err))
			continue
		}
		key, err := ike.ParsePrivateKey(data)
		if err != nil {
			p.failf(file, field+".file", "%s: %v", secret.Quote(name), err)
			continue
		}
		ic.Secrets = append(ic.Secrets, &IKEPrivateKey{Name: k.Value, File: name, Line: file.Line, Key: key})
	}
}

// ikeKeyFor finds the private key of a connection's certificate among the
// secrets, as strongSwan does: by its public key.
func (p *cfgParser) ikeKeyFor(conn *IKEConnection, ic *IKEConfig) {
	if conn.LocalAuth != AuthPubkey || len(conn.Certs) == 0 {
		return
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	for _, k := range ic.Secrets {
		if pub, ok := k.Key.Public().(equaler); ok && pub.Equal(conn.Certs[0].PublicKey) {
			conn.Key = k.Key
			return
		}
	}
	p.failf(conn.certsLine, "ike.connections."+conn.Name+".local.certs", "no private key in ike.secrets is the key of certificate %s (%s)",
		conn.Certs[0].Subject, secret.Quote(conn.CertFiles[0]))
}

// pathErr is a file error without the path (the message names it).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (p *cfgParser) ikeConnection(name string, n *yaml.Node, c *Config, ic *IKEConfig) *IKEConnection {
	field := "ike.connections." + name
	if n.Kind != yaml.MappingNode {
		p.failf(n, field, "want a mapping (local_addrs, remote_addrs, local, remote, proposals, children, …)")
		return nil
	}
	conn := &IKEConnection{Name: name, Line: n.Line, RekeyTime: defaultIKERekey, ProposalsText: DefaultIKEProposals,
		RetransmitWait: ic.RetransmitTimeout, Tries: ic.RetransmitTries}
	var children, pskNode, randSet *yaml.Node
	proposalsLine := n
	p.each(n, field+".", connSettings, func(k, v *yaml.Node) {
		f := field + "." + k.Value
		switch k.Value {
		case "version":
			if s, _ := p.scalar(v, f); s != "2" && s != "0" {
				p.failf(v, f, "%s: espgw speaks IKEv2 only (want 2)", secret.Number(s))
			}
		case "local_addrs":
			conn.LocalAddrs = p.addrs(v, f)
		case "remote_addrs":
			for _, a := range p.list(v) {
				if a.Kind == yaml.ScalarNode && (a.Value == "%any" || a.Value == "0.0.0.0" || a.Value == "::") {
					continue
				}
				conn.RemoteAddrs = append(conn.RemoteAddrs, p.addrs(a, f)...)
			}
		case "local", "remote":
			p.ikeEnd(v, f, k.Value == "local", conn, c)
		case "proposals":
			if s, ok := p.scalar(v, f); ok {
				proposalsLine = v
				if s != "default" {
					conn.ProposalsText = s
				}
			}
		case "rekey_time":
			conn.RekeyTime = p.duration(v, f, 0, 365*24*time.Hour)
		case "rand_time":
			conn.RandTime = p.duration(v, f, 0, 365*24*time.Hour)
			randSet = v
		case "dpd_delay":
			conn.DPDDelay = p.duration(v, f, 0, 24*time.Hour)
		case "psk_file":
			conn.PSKFile, _ = p.scalar(v, f)
			pskNode = v
		case "psk_env":
			conn.PSKEnv, _ = p.scalar(v, f)
			pskNode = v
		case "children":
			children = v
		}
	})
	// swanctl: rand_time defaults to over_time, 10% of rekey_time.
	if randSet == nil {
		conn.RandTime = conn.RekeyTime / 10
	} else if conn.RekeyTime > 0 && conn.RandTime >= conn.RekeyTime {
		p.failf(randSet, field+".rand_time", "%s is not less than rekey_time %s", conn.RandTime, conn.RekeyTime)
	}
	props, err := ike.ParseProposals(ike.ProtoIKE, conn.ProposalsText)
	if err != nil {
		p.failf(proposalsLine, field+".proposals", "%s", proposalError(err))
	}
	conn.Proposals = props
	if len(conn.LocalAddrs) == 0 {
		p.failf(n, field+".local_addrs", "missing: the address this side speaks IKE from")
	}
	for _, a := range conn.LocalAddrs {
		if !slices.Contains(c.Local, a) {
			p.failf(n, field+".local_addrs", "%s is not one of the gateway's local addresses (%v)", a, c.Local)
		}
	}
	if conn.LocalAuth == "" {
		conn.LocalAuth = AuthPSK
	}
	if conn.RemoteAuth == "" {
		conn.RemoteAuth = conn.LocalAuth
	}
	// With a certificate the identity is by default its subject DN (the
	// ike package's default); with a PSK the local address.
	if conn.LocalID.Kind == 0 && len(conn.LocalAddrs) > 0 && conn.LocalAuth == AuthPSK {
		conn.LocalID = ike.Addr(conn.LocalAddrs[0])
	}
	if conn.LocalAuth == AuthPubkey && len(conn.Certs) == 0 && len(conn.CertFiles) == 0 {
		p.failf(n, field+".local.certs", "missing: auth pubkey signs with a certificate (certs: [PEM file]) and its key (in ike.secrets)")
	}
	if len(conn.Certs) > 0 && conn.LocalID.Kind != 0 {
		if err := ike.IdentityInCertificate(conn.LocalID, conn.Certs[0]); err != nil {
			p.failf(conn.localNode, field+".local.id", "%s", secret.Scrub(err.Error()))
		}
	}
	if conn.RemoteAuth == AuthPubkey && len(conn.CAs) == 0 && len(conn.CAFiles) == 0 {
		p.failf(n, field+".remote.cacerts", "missing: auth pubkey checks the peer's certificate against CAs (cacerts: [PEM file])")
	}
	needPSK := conn.LocalAuth == AuthPSK || conn.RemoteAuth == AuthPSK
	switch {
	case !needPSK && (conn.PSKFile != "" || conn.PSKEnv != ""):
		p.failf(pskNode, field, "a pre-shared key, and neither side's auth is psk")
	case conn.PSKFile != "" && conn.PSKEnv != "":
		p.failf(pskNode, field, "give one of psk_file and psk_env, not both")
	case conn.PSKFile != "":
		path := c.rel(conn.PSKFile)
		data, err := os.ReadFile(path)
		if err != nil {
			p.failf(pskNode, field+".psk_file", "read %s: %v", secret.Quote(conn.PSKFile), pathErr(err))
			break
		}
		conn.PSK = sa.Key(bytes.TrimRight(data, "\r\n"))
		if len(conn.PSK) == 0 {
			p.failf(pskNode, field+".psk_file", "%s is empty", secret.Quote(conn.PSKFile))
		}
	case conn.PSKEnv != "":
		v, ok := os.LookupEnv(conn.PSKEnv)
		if !ok || v == "" {
			p.failf(pskNode, field+".psk_env", "the environment variable %s is not set or empty", secret.Quote(conn.PSKEnv))
		}
		conn.PSK = sa.Key(v)
	case needPSK:
		p.failf(n, field, "no pre-shared key: give psk_file or psk_env (or auth pubkey on both sides)")
	}
	if children == nil {
		p.failf(n, field+".children", "missing: the CHILD_SA (local_ts, remote_ts, esp_proposals)")
		return conn
	}
	if children.Kind != yaml.MappingNode || len(children.Content) == 0 {
		p.failf(children, field+".children", "want a mapping of child names to CHILD_SAs")
		return conn
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(children.Content); i += 2 {
		k, v := children.Content[i], children.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.failf(k, field+".children", "a child name is a %s, want a name", kindName(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.failf(k, field+".children."+k.Value, "given twice (first on line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		if ch := p.ikeChild(k.Value, v, field+".children."+k.Value, conn, i == 0); ch != nil {
			conn.Children = append(conn.Children, ch)
		}
	}
	return conn
}

// transportSelectors checks a transport-mode child's selectors, which
// are the connection's first local and remote address when left out:
// transport mode protects the two IKE hosts' own traffic, so the peer's
// address must be known (remote_addrs).
func (p *cfgParser) transportSelectors(n *yaml.Node, tsLines map[string]*yaml.Node, field string, ch *IKEChild, conn *IKEConnection) {
	if len(conn.RemoteAddrs) == 0 || len(conn.LocalAddrs) == 0 {
		p.failf(n, field+".mode", "transport mode needs local_addrs and the peer's address in remote_addrs: it protects the two hosts' own traffic")
		return
	}
	for _, end := range []struct {
		name string
		ts   *[]netip.Prefix
		addr netip.Addr
	}{{"local_ts", &ch.LocalTS, conn.LocalAddrs[0]}, {"remote_ts", &ch.RemoteTS, conn.RemoteAddrs[0]}} {
		host := netip.PrefixFrom(end.addr, end.addr.BitLen())
		if len(*end.ts) == 0 {
			*end.ts = []netip.Prefix{host}
			continue
		}
		if len(*end.ts) != 1 || (*end.ts)[0] != host {
			p.failf(tsLines[end.name], field+"."+end.name, "%v: transport mode protects the hosts' own traffic, want %s (or leave it out)", *end.ts, host)
		}
	}
}

// ikeEnd reads local: or remote: {id, auth: psk|pubkey, certs, cacerts}.
func (p *cfgParser) ikeEnd(n *yaml.Node, field string, local bool, conn *IKEConnection, c *Config) {
	if n.Kind != yaml.MappingNode {
		p.failf(n, field, "want a mapping (id, auth, certs, cacerts)")
		return
	}
	id, auth := &conn.RemoteID, &conn.RemoteAuth
	if local {
		id, auth = &conn.LocalID, &conn.LocalAuth
		conn.localNode = n
	}
	p.each(n, field+".", endSettings, func(k, v *yaml.Node) {
		f := field + "." + k.Value
		switch k.Value {
		case "id":
			s, ok := p.scalar(v, f)
			if !ok {
				return
			}
			got, err := ike.ParseIdentity(s)
			if err != nil {
				p.failf(v, f, "%s", secret.Scrub(err.Error()))
			}
			*id = got
		case "auth":
			s, ok := p.scalar(v, f)
			if !ok {
				return
			}
			if s != AuthPSK && s != AuthPubkey {
				p.failf(v, f, "%s: want psk or pubkey", secret.Word(s, AuthPSK, AuthPubkey))
				return
			}
			*auth = s
		case "certs":
			if !local {
				p.failf(k, f, "the peer's certificate comes in IKE_AUTH; remote takes cacerts")
				return
			}
			conn.certsLine = v
			conn.Certs, conn.CertFiles = p.certFiles(v, f, c)
		case "cacerts":
			if local {
				p.failf(k, f, "CAs check the peer's certificate: put cacerts in remote")
				return
			}
			conn.CAs, conn.CAFiles = p.certFiles(v, f, c)
		}
	})
}

// certFiles reads PEM certificate files (relative to the configuration),
// every certificate of each in order.
func (p *cfgParser) certFiles(n *yaml.Node, field string, c *Config) ([]*x509.Certificate, []string) {
	var certs []*x509.Certificate
	var files []string
	for _, v := range p.list(n) {
		name, ok := p.scalar(v, field)
		if !ok || name == "" {
			if ok {
				p.failf(v, field, "an empty file name")
			}
			continue
		}
		files = append(files, name)
		data, err := os.ReadFile(c.rel(name))
		if err != nil {
			p.failf(v, field, "read %s: %v", secret.Quote(name), pathErr(err))
			continue
		}
		got, err := ike.ParseCertificates(data)
		if err != nil {
			p.failf(v, field, "%s: %v", secret.Quote(name), err)
			continue
		}
		certs = append(certs, got...)
	}
	return certs, files
}

func (p *cfgParser) ikeChild(name string, n *yaml.Node, field string, conn *IKEConnection, first bool) *IKEChild {
	if n.Kind != yaml.MappingNode {
		p.failf(n, field, "want a mapping (local_ts, remote_ts, esp_proposals, mode, start_action, rekey_time, life_time)")
		return nil
	}
	ch := &IKEChild{Name: name, ESPText: DefaultESPProposals, StartAction: StartActionNone, RekeyTime: defaultChildRekey, LifeTime: -1, RandTime: -1}
	espLine := n
	tsLines := map[string]*yaml.Node{"local_ts": n, "remote_ts": n}
	p.each(n, field+".", childSettings, func(k, v *yaml.Node) {
		f := field + "." + k.Value
		switch k.Value {
		case "local_ts":
			ch.LocalTS, tsLines[k.Value] = p.prefixes(v, f), v
		case "remote_ts":
			ch.RemoteTS, tsLines[k.Value] = p.prefixes(v, f), v
		case "esp_proposals":
			if s, ok := p.scalar(v, f); ok {
				espLine = v
				if s != "default" {
					ch.ESPText = s
				}
			}
		case "mode":
			s, ok := p.scalar(v, f)
			switch {
			case !ok:
			case s == "transport":
				ch.Transport = true
			case s != "tunnel":
				p.failf(v, f, "%s: want tunnel or transport", secret.Word(s, "tunnel", "transport"))
			}
		case "start_action":
			s, ok := p.scalar(v, f)
			if !ok {
				return
			}
			switch s {
			case StartActionStart, StartActionNone, StartActionTrap:
				ch.StartAction = s
			default:
				p.failf(v, f, "%s: want start, trap or none", secret.Word(s, "start", "none", "trap"))
			}
		case "rekey_time":
			ch.RekeyTime = p.duration(v, f, 0, 365*24*time.Hour)
		case "life_time":
			ch.LifeTime = p.duration(v, f, 0, 365*24*time.Hour)
		case "rand_time":
			ch.RandTime = p.duration(v, f, 0, 365*24*time.Hour)
		}
	})
	esp, err := ike.ParseProposals(ike.ProtoESP, ch.ESPText)
	if err != nil {
		p.failf(espLine, field+".esp_proposals", "%s", proposalError(err))
	}
	ch.ESPProposals = esp
	if ch.Transport {
		p.transportSelectors(n, tsLines, field, ch, conn)
	}
	if len(ch.LocalTS) == 0 || len(ch.RemoteTS) == 0 {
		p.failf(n, field, "want local_ts and remote_ts (the inner prefixes of each side)")
	}
	// swanctl: life_time is 110% of rekey_time, rand_time their difference.
	if ch.LifeTime < 0 {
		ch.LifeTime = time.Duration(math.Round(float64(ch.RekeyTime) * 1.1))
	}
	if ch.RandTime < 0 {
		ch.RandTime = ch.LifeTime - ch.RekeyTime
	}
	if ch.RekeyTime > 0 && ch.LifeTime > 0 && ch.LifeTime <= ch.RekeyTime {
		p.failf(n, field+".life_time", "%s is not after rekey_time %s: the CHILD_SA would expire before it is rekeyed", ch.LifeTime, ch.RekeyTime)
	}
	if ch.RekeyTime > 0 && ch.RandTime >= ch.RekeyTime {
		p.failf(n, field+".rand_time", "%s is not less than rekey_time %s", ch.RandTime, ch.RekeyTime)
	}
	if ch.StartAction == StartActionTrap && len(conn.RemoteAddrs) == 0 {
		p.failf(n, field+".start_action", "trap needs the peer's address in remote_addrs")
	}
	if ch.StartAction == StartActionStart && len(conn.RemoteAddrs) == 0 && first {
		p.failf(n, field+".start_action", "start needs the peer's address in remote_addrs")
	}
	return ch
}

// longKeywords are strongSwan's algorithm keywords that secret's rule
// would take for key material (16 or more letters and digits): shown
// all the same in a proposal's error.
var longKeywords = []string{"chacha20poly1305", "camellia128ccm16", "camellia192ccm16", "camellia256ccm16", "camellia128ccm12", "camellia192ccm12", "camellia256ccm12"}

// proposalError is a proposal's parse error for a message: what it quotes
// that could be a key hidden (secret.Scrub), strongSwan's keywords shown.
func proposalError(err error) string {
	msg := err.Error()
	for i, k := range longKeywords {
		msg = strings.ReplaceAll(msg, strconv.Quote(k), fmt.Sprintf("\x00%d\x00", i))
	}
	msg = secret.Scrub(msg)
	for i, k := range longKeywords {
		msg = strings.ReplaceAll(msg, fmt.Sprintf("\x00%d\x00", i), strconv.Quote(k))
	}
	return msg
}

// duration reads a duration in [lo, hi]: Go's (90s, 1h30m) or swanctl's
// plain seconds and s/m/h/d suffixes.
func (p *cfgParser) duration(n *yaml.Node, field string, lo, hi time.Duration) time.Duration {
	s, ok := p.scalar(n, field)
	if !ok {
		return 0
	}
	d, err := parseSwanDuration(s)
	if err != nil || d < lo || d > hi {
		p.failf(n, field, "%s: want a duration from %s to %s (like 1h or 30s)", secret.Number(s), lo, hi)
	}
	return d
}

func parseSwanDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	if strings.HasSuffix(s, "d") {
		n, err := strconv.ParseUint(strings.TrimSuffix(s, "d"), 10, 16)
		return time.Duration(n) * 24 * time.Hour, err
	}
	return time.ParseDuration(s)
}

// ikeConfig builds the ike package's configuration of a connection.
func (conn *IKEConnection) ikeConfig() ike.Config {
	ch := conn.Children[0]
	cfg := ike.Config{LocalID: conn.LocalID, RemoteID: conn.RemoteID, PSK: conn.PSK, IKE: conn.Proposals, ESP: ch.ESPProposals,
		RetransmitTimeout: conn.RetransmitWait, Tries: conn.Tries}
	if conn.LocalAuth == AuthPubkey {
		cfg.Certs, cfg.Key = conn.Certs, conn.Key
	}
	if conn.RemoteAuth == AuthPubkey {
		cfg.CAs, cfg.PeerSignature = conn.CAs, true
	}
	cfg.ChildName, cfg.LocalTS, cfg.RemoteTS, cfg.Transport = ch.Name, ch.localTS(), ch.remoteTS(), ch.Transport
	for _, more := range conn.Children[1:] {
		cfg.MoreChildren = append(cfg.MoreChildren, ike.ChildConfig{Name: more.Name, LocalTS: more.localTS(), RemoteTS: more.remoteTS(),
			ESP: more.ESPProposals, Transport: more.Transport})
	}
	return cfg
}

func (ch *IKEChild) localTS() []ike.Selector  { return selectors(ch.LocalTS) }
func (ch *IKEChild) remoteTS() []ike.Selector { return selectors(ch.RemoteTS) }

func selectors(ps []netip.Prefix) []ike.Selector {
	var out []ike.Selector
	for _, p := range ps {
		out = append(out, ike.PrefixSelector(p.Masked()))
	}
	return out
}

// String names the connection, without its key.
func (conn *IKEConnection) String() string {
	return fmt.Sprintf("IKE connection %s", conn.Name)
}

// same reports whether two ike: sections say the same (a change of it
// needs a restart).
func (ic *IKEConfig) same(o *IKEConfig) bool {
	if ic == nil || o == nil {
		return ic == o
	}
	if ic.RetransmitTimeout != o.RetransmitTimeout || ic.RetransmitTries != o.RetransmitTries ||
		ic.DecryptionTable != o.DecryptionTable || ic.ESPSAFile != o.ESPSAFile || len(ic.Connections) != len(o.Connections) {
		return false
	}
	for i, a := range ic.Connections {
		b := o.Connections[i]
		if a.Name != b.Name || !slices.Equal(a.LocalAddrs, b.LocalAddrs) || !slices.Equal(a.RemoteAddrs, b.RemoteAddrs) ||
			!a.LocalID.Equal(b.LocalID) || !a.RemoteID.Equal(b.RemoteID) || !bytes.Equal(a.PSK, b.PSK) ||
			a.LocalAuth != b.LocalAuth || a.RemoteAuth != b.RemoteAuth || !sameCerts(a.Certs, b.Certs) || !sameCerts(a.CAs, b.CAs) || !sameKey(a.Key, b.Key) ||
			a.ProposalsText != b.ProposalsText || a.RekeyTime != b.RekeyTime || a.RandTime != b.RandTime || a.DPDDelay != b.DPDDelay || len(a.Children) != len(b.Children) {
			return false
		}
		for j, x := range a.Children {
			y := b.Children[j]
			if x.Name != y.Name || !slices.Equal(x.LocalTS, y.LocalTS) || !slices.Equal(x.RemoteTS, y.RemoteTS) || x.ESPText != y.ESPText || x.Transport != y.Transport ||
				x.StartAction != y.StartAction || x.RekeyTime != y.RekeyTime || x.LifeTime != y.LifeTime || x.RandTime != y.RandTime {
				return false
			}
		}
	}
	return true
}

func sameCerts(a, b []*x509.Certificate) bool {
	return slices.EqualFunc(a, b, func(x, y *x509.Certificate) bool { return x.Equal(y) })
}

func sameKey(a, b crypto.Signer) bool {
	type equaler interface{ Equal(crypto.PrivateKey) bool }
	if a == nil || b == nil {
		return a == b
	}
	k, ok := a.(equaler)
	return ok && k.Equal(b)
}
