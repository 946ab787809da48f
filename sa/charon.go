package sa

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"github.com/espgw/espgw/internal/secret"
)

// strongSwan's names (its "using … for encryption/integrity" lines) for
// the algorithms espgw has.
var (
	charonCiphers = map[string]Cipher{"AES_CBC": CipherAESCBC, "3DES_CBC": Cipher3DES, "AES_CTR": CipherAESCTR,
		"AES_GCM_16": CipherAESGCM16, "AES_GCM_12": CipherAESGCM12, "AES_GCM_8": CipherAESGCM8, "NULL": CipherNull,
		"CHACHA20_POLY1305": CipherChaCha20Poly1305, "NULL_AES_GMAC": CipherAESGMAC, "AES_CCM_8": CipherAESCCM8,
		"AES_CCM_12": CipherAESCCM12, "AES_CCM_16": CipherAESCCM16}
	charonAuths = map[string]Auth{"HMAC_SHA1_96": AuthHMACSHA1_96, "HMAC_SHA2_256_128": AuthHMACSHA256_128,
		"HMAC_SHA2_384_192": AuthHMACSHA384_192, "HMAC_SHA2_512_256": AuthHMACSHA512_256, "HMAC_MD5_96": AuthHMACMD5_96}
)

var (
	// 09:13:44 11[CHD] text — the time format is the user's, so only the
	// thread and group are relied on.
	charonLine  = regexp.MustCompile(`(?:^|\s)(\d+)\[([A-Z]{3})\] (.*)$`)
	charonKey   = regexp.MustCompile(`^(encryption|integrity) (initiator|responder) key => (\d+) bytes`)
	charonHex   = regexp.MustCompile(`^\s*\d+: ((?:[0-9A-F]{2} ){1,16})`)
	charonSPI   = regexp.MustCompile(`^\s*SPI 0x([0-9a-f]{8}), src (\S+) dst (\S+)`)
	charonUsing = regexp.MustCompile(`^\s*using (\S+) for (encryption|integrity)`)
	charonTS    = regexp.MustCompile(`CHILD_SA \S+ established with SPIs ([0-9a-f]{8})_i ([0-9a-f]{8})_o and TS (.*) === (.*)$`)
)

// looksLikeCharonLog reports whether data holds charon log lines with
// CHILD_SA keys.
func looksLikeCharonLog(data []byte) bool {
	s := string(data[:min(len(data), 1<<20)])
	return strings.Contains(s, "[CHD]") && strings.Contains(s, " initiator key => ")
}

// charonChild is one CHILD_SA being read from a worker thread's lines.
type charonChild struct {
	line       int
	cipher     string
	auth       string
	keys       map[string]Key // "encryption initiator" → key
	reading    string         // the key whose hex dump lines follow
	want       int
	sas        []*SA // inbound, outbound
	directions []bool
}

// ParseCharonLog reads the SAs of the CHILD_SAs a strongSwan charon
// negotiated from its log, at the level that prints CHILD_SA keys
// (filelog or charondebug with chd = 4; flush_line = yes so that nothing
// waits in a buffer): the algorithms ("using AES_CBC for encryption"),
// the initiator's and responder's keys with their hex dumps, the inbound
// and outbound SPIs and addresses ("adding inbound ESP SA", "adding" or,
// for a rekeyed CHILD_SA, "registering outbound ESP SA", "SPI 0x…, src
// A dst B"), and the traffic selectors of the established line, which
// become the inbound SA's selectors. Debian 12's strongSwan has no
// save-keys plugin, so its log is the only place its keys are written.
//
// The SAs are tunnel mode with a 32-packet replay window (charon's
// default); ESP in UDP on port 4500 both ways when the log says a NAT was
// found or faked (forceencaps, and always with kernel-libipsec), raw ESP
// otherwise; ESN when the selected ESP proposal says EXT_SEQ. Keys go to
// the SA of the direction they protect: this charon is the initiator of
// its CHILD_SAs when the log shows it initiating the IKE_SA (charon's
// "initiating IKE_SA" line), the responder otherwise — CHILD_SAs rekeyed
// with the other side initiating are outside what the log tells apart.
func ParseCharonLog(name string, data []byte) (*Config, error) {
	p := &lineProblems{file: name}
	text := string(data)
	initiator := strings.Contains(text, "] initiating IKE_SA ")
	encap := strings.Contains(text, "behind NAT") || strings.Contains(text, "faking NAT situation")
	esn := strings.Contains(text, "selected proposal: ESP:") && regexp.MustCompile(`selected proposal: ESP:\S*/EXT_SEQ`).MatchString(text)
	threads := map[string]*charonChild{}
	var sas []*SA
	for i, raw := range strings.Split(text, "\n") {
		line := i + 1
		m := charonLine.FindStringSubmatch(strings.TrimRight(raw, "\r"))
		if m == nil {
			continue
		}
		thread, group, msg := m[1], m[2], m[3]
		c := threads[thread]
		if group == "CHD" {
			if u := charonUsing.FindStringSubmatch(msg); u != nil {
				if c == nil || len(c.sas) == 2 {
					c = &charonChild{line: line, keys: map[string]Key{}}
					threads[thread] = c
				}
				if u[2] == "encryption" {
					c.cipher = u[1]
				} else {
					c.auth = u[1]
				}
				continue
			}
		}
		if c == nil {
			continue
		}
		switch {
		case group == "CHD" && charonKey.MatchString(msg):
			k := charonKey.FindStringSubmatch(msg)
			c.reading = k[1] + " " + k[2]
			fmt.Sscan(k[3], &c.want)
			c.keys[c.reading] = Key{}
		case group == "CHD" && c.reading != "" && charonHex.MatchString(msg):
			h := strings.ReplaceAll(charonHex.FindStringSubmatch(msg)[1], " ", "")
			b, err := hex.DecodeString(h)
			if err != nil {
				p.fail(line, "CHILD_SA", c.reading+" key", errors.New("hex dump line not hex"))
				delete(threads, thread)
				continue
			}
			c.keys[c.reading] = append(c.keys[c.reading], b...)
			if len(c.keys[c.reading]) >= c.want {
				c.reading = ""
			}
		case group == "CHD" && (msg == "adding inbound ESP SA" || msg == "adding outbound ESP SA" || msg == "registering outbound ESP SA"):
			// A rekeyed CHILD_SA's outbound SA is registered with its keys
			// and installed (added) later, when the old one goes.
			c.reading = ""
			c.directions = append(c.directions, strings.Contains(msg, "inbound"))
		case group == "CHD" && charonSPI.MatchString(msg) && len(c.directions) > len(c.sas):
			s, err := c.sa(msg, c.directions[len(c.sas)], initiator, encap, esn)
			if err != nil {
				p.fail(line, "CHILD_SA", "", err)
				delete(threads, thread)
				continue
			}
			c.sas = append(c.sas, s)
		case charonTS.MatchString(msg) && len(c.sas) == 2:
			ts := charonTS.FindStringSubmatch(msg)
			for _, s := range c.sas {
				if fmt.Sprintf("%08x", s.SPI) != ts[1] {
					continue
				}
				// Inbound: from the remote selectors to the local ones.
				local, remote := strings.Fields(ts[3]), strings.Fields(ts[4])
				for _, l := range local {
					for _, r := range remote {
						lp, err1 := netip.ParsePrefix(l)
						rp, err2 := netip.ParsePrefix(r)
						if err1 == nil && err2 == nil && lp.Addr().Is4() == rp.Addr().Is4() {
							s.Selectors = append(s.Selectors, Selector{Src: rp.Masked(), Dst: lp.Masked()})
						}
					}
				}
			}
			sas = append(sas, c.sas...)
			delete(threads, thread)
		}
	}
	// A CHILD_SA whose established line never came (a log cut short) still
	// counts once both its SAs are known.
	for _, c := range threads {
		if len(c.sas) == 2 {
			sas = append(sas, c.sas...)
		}
	}
	if err := p.errs.Err(); err != nil {
		return nil, err
	}
	if len(sas) == 0 {
		return nil, &ConfigError{File: name, Err: errors.New("no CHILD_SA with keys in the log (charon logs them with chd = 4, and flush_line = yes keeps the last ones from waiting in a buffer)")}
	}
	seen := map[spiDst]bool{}
	var out []*SA
	for _, s := range sas { // a CHILD_SA logged twice (a restart reading the same file) once
		k := spiDst{s.SPI, s.Dst}
		if !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return &Config{SAs: out}, nil
}

// sa makes the SA of one "SPI 0x…, src A dst B" line.
func (c *charonChild) sa(msg string, inbound, initiator, encap, esn bool) (*SA, error) {
	m := charonSPI.FindStringSubmatch(msg)
	var spi uint32
	fmt.Sscanf(m[1], "%x", &spi)
	src, err1 := netip.ParseAddr(m[2])
	dst, err2 := netip.ParseAddr(m[3])
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("SPI %#x: addresses %s and %s", spi, secret.Number(m[2]), secret.Number(m[3]))
	}
	s := &SA{SPI: spi, Mode: Tunnel, Src: src, Dst: dst, ESN: esn, ReplayWindow: 32}
	if encap {
		s.Encap, s.SrcPort, s.DstPort = EncapUDP, DefaultNATTPort, DefaultNATTPort
	}
	cipher, ok := charonCiphers[c.cipher]
	if !ok {
		return nil, fmt.Errorf("SPI %#x: encryption %s is not supported (want AES_CBC, 3DES_CBC, AES_CTR, AES_GCM_16, AES_GCM_12, AES_GCM_8)", spi, secret.Word(c.cipher, "AES_CBC", "3DES_CBC", "AES_CTR", "AES_GCM_16", "AES_GCM_12", "AES_GCM_8"))
	}
	s.Suite.Cipher = cipher
	if !cipher.IsAEAD() {
		a, ok := charonAuths[c.auth]
		if !ok {
			return nil, fmt.Errorf("SPI %#x: integrity %s is not supported (want HMAC_SHA1_96, HMAC_SHA2_256_128, HMAC_SHA2_384_192, HMAC_SHA2_512_256, HMAC_MD5_96)", spi, secret.Word(c.auth, "HMAC_SHA1_96", "HMAC_SHA2_256_128"))
		}
		s.Suite.Auth = a
	}
	// The initiator's keys protect what the initiator sends: outbound on
	// the initiator, inbound on the responder.
	who := "responder"
	if inbound != initiator {
		who = "initiator"
	}
	s.EncKey = c.keys["encryption "+who]
	s.AuthKey = c.keys["integrity "+who]
	if len(s.EncKey) == 0 && cipher != CipherNull {
		return nil, fmt.Errorf("SPI %#x: no encryption %s key in the log (charon logs keys with chd = 4)", spi, who)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("SPI %#x: %w", spi, err)
	}
	return s, nil
}
