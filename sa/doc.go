// Package sa holds security associations and policies, and reads and writes
// SA files.
//
// It owns the security association model of espgw: the SA (SPI, mode, outer
// endpoints, encapsulation, algorithms and keys, ESN, replay window,
// lifetimes), the SAD that finds an SA by SPI, the SPD that maps traffic
// selectors to protect, bypass or discard, and the loading and validation of
// SA files (YAML, and setkey(8) manual-keying lines).
//
// It knows nothing of packets or I/O: the esp package turns an SA into a
// working transform, the gateway puts it on the wire.
//
// # Keys
//
// A Key never prints: fmt (every verb), log/slog, encoding/json and every
// error of this package see only its length. Marshal is the one function
// that writes keys out, on purpose, to an SA file.
//
// # The SA file
//
// Load, LoadFile, Parse and ParseConfig read YAML; if the first statement of
// the file is a setkey(8) command (add, spdadd, flush …) they read it as
// setkey input instead (ParseSetkey). Each problem is a *ConfigError naming
// the file, line, entry and field, e.g.
//
//	sas.yaml:12: sa[1] (spi 0x1002): enc-key: 15 bytes, want [16 24 32]
//
// The YAML form (sa/README.md has a complete example):
//
//	sa:                     # the SAs, in order
//	  - spi: 0x1001         # 32 bits, decimal or 0x hex; required
//	    mode: tunnel        # tunnel (default) | transport
//	    src: 192.0.2.1      # outer addresses, both IPv4 or both IPv6; required
//	    dst: 192.0.2.2
//	    encap: none         # none (default) | udp (RFC 3948)
//	    sport: 4500         # udp only; both default to 4500
//	    dport: 4500
//	    enc: aes-cbc        # aes-cbc | 3des-cbc | aes-ctr | aes-gcm-16 | aes-gcm-12 | aes-gcm-8
//	                        # | chacha20-poly1305 | aes-gmac | aes-ccm-8 | aes-ccm-12 | aes-ccm-16 | null
//	    enc-key: 0x00112233445566778899aabbccddeeff
//	    auth: hmac-sha1-96  # hmac-sha1-96 | hmac-sha2-256-128 | hmac-sha2-384-192
//	                        # | hmac-sha2-512-256 | hmac-md5-96 | none (the AEADs; default there)
//	    auth-key: 0x0102030405060708090a0b0c0d0e0f1011121314
//	    esn: false          # default false
//	    replay-window: 64   # packets, 0..4096, 0 turns anti-replay off; default 64
//	    initial-seq: 0      # first sequence number sent minus one; default 0
//	    tfc-pad: 0          # pad payloads up to this many bytes; default 0
//	    lifetimes:          # each bound optional; soft ≤ hard
//	      soft: {bytes: 900M, packets: 900000, time: 50m}
//	      hard: {bytes: 1Gi, packets: 1000000, seconds: 3600}
//	    selectors:          # inbound: traffic this SA may carry
//	      - {src: 198.51.100.0/24, dst: 203.0.113.0/24, proto: tcp, dport: 1024-65535}
//	    if-id: 7            # a Linux xfrm interface's if_id; for sa convert only
//	    output-mark: 0x10/0xff # MARK[/MASK] of the outer packets; for sa convert only
//	spd:                    # outbound policies; optional
//	  - priority: 10        # lower first; equal priorities keep file order
//	    src: 198.51.100.0/24
//	    dst: 203.0.113.0/24
//	    proto: any          # a name (tcp, udp, icmp, icmp6, sctp, gre …), a number, or any
//	    sport: any          # a port, lo-hi, or any; only with tcp, udp, sctp, udplite
//	    dport: any
//	    action: protect     # protect | bypass | discard
//	    sa: 0x1001          # protect only: the SPI of the outbound SA
//
// Keys are hex, with or without 0x, quoted or not; they are read from the
// text as written, so leading zero bytes stay. aes-ctr, aes-gcm-16 and
// aes-gmac keys end with the 4-byte nonce or salt (20, 28 or 36 bytes),
// chacha20-poly1305's with its 4-byte salt (36 bytes), aes-ccm's with its
// 3-byte salt (19, 27 or 35 bytes). A key written as
// random is drawn from crypto/rand at the suite's length (AES-128 for the AES
// ciphers; random-192 and random-256 pick the others); it differs on every
// load, so use it to generate a file (Marshal, WriteFile) that both ends
// then read, not in a file a gateway reloads. Unknown fields,
// repeated fields and an SPI given twice for one destination are errors.
// Counts take k, M, G (×1000) or Ki, Mi, Gi (×1024); a time is a number of
// seconds or a Go duration. YAML anchors, aliases and merge keys
// (<<: *first) share fields between entries; an entry's own fields win.
// SPIs 0..255 are refused (RFC 4303 §2.1 reserves them; esp.NewSA still
// takes SPI 0 for the known-answer vectors), and so is an initial-seq that
// leaves no sequence number to send. Files are at most MaxFileSize bytes.
//
// Errors quote what a file says only through package internal/secret
// (secret.Word, secret.Number, secret.Hidden), the one rule every SA format
// and configuration parser uses: a key typed into the wrong field or as a
// stray token is described by its length, never shown.
//
// # setkey(8) import
//
// ParseSetkey reads the statements of setkey -f files (the BSD and
// ipsec-tools manual-keying format): # comments, statements spanning lines
// up to ";", keys as 0x hex or "quoted strings".
//
//	add [-46n] src dst esp|esp-udp spi [-m tunnel|transport|any] [-r bytes]
//	    [-u reqid] [-f pad_option] [-lh|-ls secs] [-bh|-bs bytes]
//	    -E ealgo key [-A aalgo key] ;
//	spdadd [-46n] src_range dst_range upperspec -P out|in|fwd [prio N]
//	    discard | none | ipsec esp/tunnel/A-B/level | esp/transport//level ;
//	delete src dst esp spi ;   flush ;   spdflush ;   (dump, get: ignored)
//
// ealgo: rijndael-cbc or aes-cbc, 3des-cbc, aes-ctr, aes-gcm-16,
// chacha20-poly1305 (the BSDs' name), aes-gmac, aes-ccm-8|12|16 (espgw's
// names: setkey has none), null;
// aalgo: hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512 (the RFC 4868 ESP
// algorithms, ICV half the hash), hmac-md5, null. Mode any (the default)
// means transport, as kernels treat it. -r is in bytes, as setkey(8) says,
// so the window is 8×bytes packets; without -r there is no replay check.
// esp-udp takes its ports from src[port] dst[port], default 4500.
// spdadd -P out becomes an SPD entry (none is bypass; setkey's higher
// priority first becomes espgw's lower first); its SA is the one added with
// -u N for level unique:N, else the tunnel-mode SA from A to B, else the
// transport-mode SA between the two single addresses of the ranges. spdadd
// -P in|fwd … ipsec adds the policy's selector to that SA's selectors;
// inbound none and discard policies have no counterpart and are skipped.
//
// # Other formats
//
// DetectFormat tells apart, besides YAML and setkey, the output of
// `ip -s xfrm state` (ParseXFRMState), `ip xfrm state/policy add` commands
// (ParseXFRMCommands), Wireshark's esp_sa table (ParseEspSA) and
// strongSwan charon's log with CHILD_SA keys (ParseCharonLog); Load and
// ParseConfig read them all. ParseXFRMStates reads the same listing for
// what the kernel counted on each state (also made with nokeys, the SAs
// then without keys). Encode writes yaml, setkey (MarshalSetkey),
// ip-xfrm (MarshalXFRM, MarshalXFRMFor) and esp-sa (MarshalEspSA); a field
// the format cannot say is an error. The kernel's state flags are carried
// where espgw does the same (esn, decap-dscp as decap-dscp: copy,
// nopmtudisc as df: clear, af-unspec, extra flag dont-encap-dscp as dscp:
// 0; a tunnel state without af-unspec, which carries its outer family only,
// gets selectors of that family) and otherwise refused by name (noecn, wildrecv, icmp, align4,
// oseq-may-wrap); if_id and output-mark are carried as IfID and
// OutputMark, which a gateway refuses (its data path has neither).
// sa/README.md has the table.
//
// # SAD and SPD
//
// NewSAD indexes validated SAs for inbound lookup, as RFC 4301 §4.1 has it
// for unicast SAs: an inbound packet's SA is the one with its SPI and its
// outer destination address (two SAs may share an SPI only for different
// destinations: with one destination they could not be told apart and are
// refused). The packet must then have come as that SA says — raw ESP for
// encap none, in UDP for encap udp, from the SA's src and, with udp, from
// its sport — or it is dropped and counted (SAD.Find says why), never given
// to another SA. Behind a NAT, write the address and port the packets
// arrive from as the inbound SA's src and sport. NewSPD orders policies by
// priority, binds each protect policy to its SA, and indexes them by
// destination prefix so that a lookup does not grow with the number of
// policies (first match in priority order, exactly).
// Both answer lookups without locks or allocation, and Replace swaps in a
// new set atomically while lookups run (the gateway reloads on SIGHUP).
package sa
