#!/usr/bin/python3
"""espgw's independent ESP peer, built on scapy.layers.ipsec: the crypto and
the packet layout are scapy's, not espgw's. Run it with /usr/bin/python3
(Debian's, where python3-scapy is installed) in one of three modes:

  esp_peer.py jobs
      One JSON document on stdin,
        {"jobs": [{"op": "seal" | "open" | "pcap", "sa": SA, "packets": [hex, ...],
                   "seqs": [int, ...]?, "file": path?, "link": "ether"|"raw"|"sll"?,
                   "extra": bool?}]}
      and {"results": [{"packets": [hex | null], "errors": [str | null]}]} on
      stdout. seal: each inner IP packet (hex) becomes an ESP packet, sequence
      numbers from 1 or the 64-bit numbers in "seqs". open: each outer IP
      packet carrying ESP is verified and decrypted. pcap: like seal, and the
      ESP packets are written to "file" with the link type; "extra" mixes in
      frames that are not ESP to open (ARP, a NAT keepalive, an IKE packet
      behind the non-ESP marker, plain UDP).

  esp_peer.py respond
      The far gateway of a tunnel, in a network namespace. The first stdin
      line is {"iface", "local", "owned": [addr], "sas": [SA + "dir": in|out]}.
      Every ESP packet to "local" for an inbound SA is opened (ICV checked,
      anti-replay window, ESN high bits inferred as RFC 4303 Appendix A says);
      ICMP echo requests for the owned addresses are answered with ESP echo
      replies on the outbound SA. A later line "counters" gets the counters as
      one JSON line; EOF ends it.

  esp_peer.py probe
      One exchange with an ESP peer per stdin line,
        {"in": SA, "out": SA, "host_inner", "guest_inner", "payload_len",
         "iface", "timeout", "replay": bool}
      seals an echo request with "in", sends it, waits for the peer's ESP echo
      reply on "out", verifies and decrypts it, then sends a tampered packet
      and (with "replay") a replay of the first; one JSON result per line.

An SA is given in espgw's names in every mode:
  {"spi", "mode": "tunnel"|"transport", "src", "dst", "encap": "none"|"udp",
   "sport", "dport", "enc", "enc_key", "auth", "auth_key", "esn",
   "initial_seq", "replay_window"}

scapy computes HMAC ICVs without the ESN high bits (it honours ESN only for
its AEADs: AES-GCM, AES-CCM, ChaCha20-Poly1305; it has no AES-GMAC), so for HMAC suites with ESN this script adds seq-hi to the ICV input
itself (RFC 4303 §2.2.1).
"""
import copy
import hashlib
import hmac
import json
import os
import select
import socket
import struct
import sys
import time

from scapy.all import ARP, CookedLinux, Ether, Raw, wrpcap
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6, in6_chksum
from scapy.layers.ipsec import CRYPT_ALGOS, ESP, SecurityAssociation

CRYPT = {"aes-cbc": "AES-CBC", "3des-cbc": "3DES", "aes-ctr": "AES-CTR",
         "aes-gcm-16": "AES-GCM", "null": "NULL",
         "chacha20-poly1305": "CHACHA20-POLY1305", "aes-ccm-16": "AES-CCM",
         "aes-ccm-8": "AES-CCM-8", "aes-ccm-12": "AES-CCM-12"}
# scapy's AES-CCM has a 16-byte ICV; RFC 4309's 8- and 12-byte ones are the
# same algorithm with a shorter tag (scapy hands icv_size to AESCCM).
for _n in (8, 12):
    CRYPT_ALGOS["AES-CCM-%d" % _n] = copy.copy(CRYPT_ALGOS["AES-CCM"])
    CRYPT_ALGOS["AES-CCM-%d" % _n].name = "AES-CCM-%d" % _n
    CRYPT_ALGOS["AES-CCM-%d" % _n].icv_size = _n
AUTH = {"hmac-sha1-96": "HMAC-SHA1-96", "hmac-sha2-256-128": "SHA2-256-128",
        "hmac-sha2-384-192": "SHA2-384-192", "hmac-sha2-512-256": "SHA2-512-256",
        "hmac-md5-96": "HMAC-MD5-96", "none": "NULL"}
HASH = {"HMAC-SHA1-96": (hashlib.sha1, 12), "SHA2-256-128": (hashlib.sha256, 16),
        "SHA2-384-192": (hashlib.sha384, 24), "SHA2-512-256": (hashlib.sha512, 32),
        "HMAC-MD5-96": (hashlib.md5, 12)}
ETH_P_ALL = 0x0003
MASK = 0xFFFFFFFF


def ip_class(b):
    return IPv6 if b[0] >> 4 == 6 else IP


class BadICV(Exception):
    pass


class PeerSA:
    """One SA: scapy's SecurityAssociation, plus what scapy leaves out (the
    ESN high bits in HMAC ICVs, UDP lengths and checksums under NAT-T, the
    replay window)."""

    def __init__(self, c):
        self.c = c
        self.spi = c["spi"]
        self.src, self.dst = c["src"], c["dst"]
        self.tunnel = c["mode"] == "tunnel"
        self.udp = c.get("encap") == "udp"
        self.ports = (c.get("sport") or 4500, c.get("dport") or 4500)
        self.ip = IPv6 if ":" in c["src"] else IP
        self.crypt = CRYPT[c["enc"]]
        self.auth = AUTH[c["auth"]]
        self.crypt_key = bytes.fromhex(c["enc_key"]) if c["enc"] != "null" else None
        self.auth_key = bytes.fromhex(c["auth_key"]) if c["auth"] != "none" else None
        self.esn = bool(c.get("esn"))
        self.window = c.get("replay_window") or 64
        self.highest = c.get("initial_seq") or 0  # highest accepted (in), last sent (out)
        self.seen = set()

    def scapy(self, hi=0, lo=1, udp=None):
        # seq_num=lo too: scapy writes "seq_num or self.seq_num", so a low
        # half of 0 (right after 2^32 with ESN) would otherwise go out as
        # the SA's own counter.
        udp = self.udp if udp is None else udp
        return SecurityAssociation(
            ESP, spi=self.spi, seq_num=lo, crypt_algo=self.crypt, crypt_key=self.crypt_key,
            auth_algo=self.auth, auth_key=self.auth_key,
            tunnel_header=self.ip(src=self.src, dst=self.dst) if self.tunnel else None,
            nat_t_header=UDP(sport=self.ports[0], dport=self.ports[1]) if udp else None,
            esn_en=self.esn, esn=hi)

    def hmac_esn(self):
        return self.esn and self.auth != "NULL"

    def esn_icv(self, data, hi):
        h, n = HASH[self.auth]
        return hmac.new(self.auth_key, data + struct.pack("!L", hi), h).digest()[:n]

    def icv_len(self):
        if self.auth != "NULL":
            return HASH[self.auth][1]
        return CRYPT_ALGOS[self.crypt].icv_size if self.crypt != "NULL" else 0

    def seal(self, inner, seq, tamper=False):
        """The ESP packet (bytes) of the inner IP packet with sequence number
        seq; with tamper, one bit of the last byte before the ICV flipped."""
        lo, hi = seq & MASK, seq >> 32
        p = self.scapy(hi, lo).encrypt(inner, seq_num=lo, esn_en=self.esn, esn=hi)
        if self.udp:
            # scapy writes the UDP and IP lengths before the ESP payload
            # exists: let them be recomputed.
            p[UDP].len = None
            if IP in p:
                p[IP].len, p[IP].chksum = None, None
            else:
                p[IPv6].plen = None
        b = bytearray(bytes(self.ip(bytes(p))))
        off = esp_offset(b, self.udp)
        icv = self.icv_len()
        if self.hmac_esn():
            b[-icv:] = self.esn_icv(bytes(b[off:-icv]), hi)
        if tamper:
            b[-icv - 1] ^= 0x01
        if self.udp:
            # A zero UDP checksum is fine over IPv4 (RFC 3948 §2.1) but not
            # over IPv6 (RFC 8200 §8.1): computed by scapy over the final
            # ESP bytes.
            u = off - 8
            b[u + 6:u + 8] = b"\0\0"
            if self.ip is IPv6:
                c = in6_chksum(17, IPv6(bytes(b[:40])), bytes(b[u:])) or 0xFFFF
                b[u + 6:u + 8] = struct.pack("!H", c)
        return bytes(b)

    def open(self, b, hi=0):
        """The inner packet of the ESP packet b (bytes), ICV verified."""
        if self.udp:
            # The ICV covers only the ESP part: hand scapy the same ESP
            # without UDP (it mishandles IPv6 transport mode behind UDP).
            # The outer header is kept whole (in transport mode it becomes
            # the inner packet's), naming ESP.
            hdr = ip_class(b)(b)
            off = esp_offset(b, True)
            hdr.remove_payload()
            if IPv6 in hdr:
                hdr.nh, hdr.plen = 50, None
            else:
                hdr.proto, hdr.len, hdr.chksum = 50, None, None
            b = bytes(hdr / Raw(b[off:]))
        sa = self.scapy(hi, udp=False)
        p = ip_class(b)(b)  # a fresh parse: decrypt mutates its argument
        if self.hmac_esn():
            icv, off = self.icv_len(), esp_offset(b, False)
            if not hmac.compare_digest(self.esn_icv(b[off:-icv], hi), b[-icv:]):
                raise BadICV("ICV with ESN high bits %d does not verify" % hi)
            return sa.decrypt(p, verify=False)
        return sa.decrypt(p)

    def infer_hi(self, lo):
        """RFC 4303 Appendix A2.2: the high bits of a received sequence number."""
        if not self.esn:
            return 0
        tl, th, w = self.highest & MASK, self.highest >> 32, self.window
        if tl >= w - 1:
            return th if lo >= tl - w + 1 else th + 1
        return th - 1 if lo >= (tl - w + 1) & MASK else th

    def check_replay(self, seq):
        """None when seq may be accepted, else the counter it falls under."""
        if seq + self.window <= self.highest:
            return "outside_window"
        return "replayed" if seq in self.seen else None

    def accept(self, seq):
        self.seen.add(seq)
        self.highest = max(self.highest, seq)
        self.seen = {s for s in self.seen if s + self.window > self.highest}


def esp_offset(b, udp):
    """Where ESP starts: after the IP header (IPv6 without extension
    headers) and the UDP header when encapsulated."""
    return (40 if b[0] >> 4 == 6 else IP(b).ihl * 4) + (8 if udp else 0)


def failure(e):
    return "%s: %s" % (type(e).__name__, e)


def quiet_sockets():
    """This namespace's kernel has no ESP: sockets keep it from answering
    ESP and ESP-in-UDP with ICMP unreachables."""
    q = [socket.socket(socket.AF_INET, socket.SOCK_RAW, 50), socket.socket(socket.AF_INET6, socket.SOCK_RAW, 50),
         socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)]
    q[3].setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    q[2].bind(("0.0.0.0", 4500))
    q[3].bind(("::", 4500))
    return q


def raw_senders():
    # IPPROTO_RAW sockets take the IP header from the packet, v4 and v6.
    return {4: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
            6: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)}


def sniffer(iface):
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    rx.bind((iface, ETH_P_ALL))
    return rx


# --- jobs ---

def per_packet(job, fn):
    """fn(packet bytes, 64-bit sequence number) for each packet of the job;
    a failure is reported for its packet, judged by the Go test."""
    out, errs = [], []
    seqs = job.get("seqs")
    for i, h in enumerate(job["packets"]):
        try:
            out.append(fn(bytes.fromhex(h), seqs[i] if seqs else i + 1).hex())
            errs.append(None)
        except Exception as e:
            out.append(None)
            errs.append(failure(e))
    return out, errs


def job_seal(sa, job):
    return per_packet(job, lambda b, seq: sa.seal(ip_class(b)(b), seq))


def job_open(sa, job):
    return per_packet(job, lambda b, seq: bytes(sa.open(b, (seq >> 32) if job.get("seqs") else 0)))


def frame(link, p):
    if link == "ether":
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p
    if link == "sll":
        return CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\0\0\0\0\x01\0\0",
                           proto=0x86dd if p.version == 6 else 0x0800) / p
    return p


def job_pcap(sa, job):
    out, errs = job_seal(sa, job)
    link = job.get("link", "raw")
    frames = []
    for i, h in enumerate(out):
        if h is None:
            continue
        b = bytes.fromhex(h)
        frames.append(frame(link, ip_class(b)(b)))
        if job.get("extra") and i == 0:
            if link == "ether":
                frames.append(Ether(src="02:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="192.0.2.1", pdst="192.0.2.2"))
            for udp, data in [((4500, 4500), b"\xff"), ((4500, 4500), b"\0\0\0\0" + b"ike" * 10), ((1234, 53), b"dns?")]:
                frames.append(frame(link, sa.ip(src=sa.src, dst=sa.dst) / UDP(sport=udp[0], dport=udp[1]) / Raw(data)))
    wrpcap(job["file"], frames, linktype={"ether": 1, "raw": 101, "sll": 113}[link])
    return out, errs


def jobs():
    results = []
    for job in json.load(sys.stdin)["jobs"]:
        run = {"seal": job_seal, "open": job_open, "pcap": job_pcap}.get(job["op"])
        if run is None:
            raise SystemExit("unknown op %r" % job["op"])
        pk, er = run(PeerSA(job["sa"]), job)
        results.append({"packets": pk, "errors": er})
    json.dump({"results": results}, sys.stdout)


# --- respond ---

def echo_reply(inner, owned):
    """The echo reply to inner, when it is an echo request for an owned address."""
    if IP in inner and ICMP in inner and inner[ICMP].type == 8 and inner[IP].dst in owned:
        req = inner[ICMP]
        return IP(src=inner[IP].dst, dst=inner[IP].src) / ICMP(type=0, id=req.id, seq=req.seq) / Raw(bytes(req.payload))
    if IPv6 in inner and ICMPv6EchoRequest in inner and inner[IPv6].dst in owned:
        req = inner[ICMPv6EchoRequest]
        return IPv6(src=inner[IPv6].dst, dst=inner[IPv6].src) / ICMPv6EchoReply(id=req.id, seq=req.seq, data=req.data)
    return None


class Responder:
    def __init__(self, cfg):
        self.local = cfg["local"]
        self.owned = set(cfg["owned"]) | {self.local}
        self.inb, self.out = {}, None
        for c in cfg["sas"]:
            if c["dir"] == "in":
                self.inb[c["spi"]] = PeerSA(c)
            elif self.out is None:
                self.out = PeerSA(c)
        self.n = {"received": 0, "opened": 0, "opened_bytes": 0, "bad_icv": 0, "replayed": 0,
                  "outside_window": 0, "unknown_spi": 0, "not_echo": 0, "replied": 0, "errors": 0}
        self.last_error = ""
        self.tx = raw_senders()
        self.quiet = quiet_sockets()
        self.rx = sniffer(cfg["iface"])

    def esp_of(self, b):
        """(offset of ESP, udp) when b is ESP for this responder, else None."""
        if len(b) < 28 or b[0] >> 4 != 4 or socket.inet_ntoa(b[16:20]) != self.local:
            return None
        off = esp_offset(b, False)
        if b[9] == 50:
            return off, False
        if b[9] == 17 and struct.unpack("!H", b[off + 2:off + 4])[0] == 4500:
            if len(b) < off + 16 or b[off + 8:off + 12] == b"\0\0\0\0":
                return None  # keepalive or IKE behind the non-ESP marker
            return off + 8, True
        return None

    def handle(self, b):
        where = self.esp_of(b)
        if where is None:
            return
        off, udp = where
        self.n["received"] += 1
        spi, lo = struct.unpack("!LL", b[off:off + 8])
        sa = self.inb.get(spi)
        if sa is None or sa.udp != udp:
            self.n["unknown_spi"] += 1
            return
        hi = sa.infer_hi(lo)
        seq = hi << 32 | lo
        why = sa.check_replay(seq)
        if why:
            self.n[why] += 1
            return
        try:
            inner = sa.open(b, hi)
        except Exception as e:  # scapy raises on a bad ICV (and on garbage)
            if isinstance(e, BadICV) or "integrity" in type(e).__name__.lower() or "icv" in str(e).lower():
                self.n["bad_icv"] += 1
            else:
                self.n["errors"] += 1
                self.last_error = failure(e)
            return
        sa.accept(seq)
        self.n["opened"] += 1
        self.n["opened_bytes"] += len(bytes(inner))
        reply = echo_reply(inner, self.owned)
        if reply is None:
            self.n["not_echo"] += 1
            return
        self.out.highest += 1
        reply = reply.__class__(bytes(reply))
        self.tx[4].sendto(self.out.seal(reply, self.out.highest), (self.out.dst, 0))
        self.n["replied"] += 1


def respond():
    r = Responder(json.loads(sys.stdin.readline()))
    print(json.dumps({"ready": True}), flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready = select.select([r.rx, stdin], [], [])[0]
        if r.rx in ready:
            try:
                r.handle(r.rx.recv(65535))
            except Exception as e:  # count, keep serving
                r.n["errors"] += 1
                r.last_error = failure(e)
        if stdin in ready:
            line = sys.stdin.readline()
            if not line:
                return
            if line.strip() == "counters":
                print(json.dumps(dict(r.n, last_error=r.last_error)), flush=True)


# --- probe ---

def is_reply(out, b):
    """Whether b is an ESP packet of SA out."""
    v6 = out.ip is IPv6
    if len(b) < (48 if v6 else 28) or b[0] >> 4 != (6 if v6 else 4):
        return False
    src = socket.inet_ntop(socket.AF_INET6, b[8:24]) if v6 else socket.inet_ntoa(b[12:16])
    proto = b[6] if v6 else b[9]
    off = esp_offset(b, out.udp)
    if src != out.src or len(b) < off + 8:
        return False
    if out.udp:
        if proto != 17 or struct.unpack("!H", b[off - 8:off - 6])[0] != 4500:
            return False
    elif proto != 50:
        return False
    return struct.unpack("!L", b[off:off + 4])[0] == out.spi


def run_case(c, txs, rx):
    sa_in, sa_out = PeerSA(c["in"]), PeerSA(c["out"])
    tx = txs[6 if sa_in.ip is IPv6 else 4]
    seq_in, seq_out = sa_in.highest + 1, sa_out.highest + 1
    src, dst = (c["host_inner"], c["guest_inner"]) if sa_in.tunnel else (sa_in.src, sa_in.dst)
    payload = os.urandom(c["payload_len"])
    ident = sa_in.spi & 0xFFFF
    if sa_in.ip is IPv6:
        req = IPv6(src=src, dst=dst) / ICMPv6EchoRequest(id=ident, seq=7, data=payload)
    else:
        req = IP(src=src, dst=dst) / ICMP(type=8, id=ident, seq=7) / Raw(payload)
    req = sa_in.ip(bytes(req))
    pkt = sa_in.seal(req, seq_in)

    while select.select([rx], [], [], 0)[0]:
        rx.recv(65535)  # drop what came before
    tx.sendto(pkt, (sa_in.dst, 0))
    deadline = time.time() + c["timeout"]
    reply = None
    while reply is None:
        left = deadline - time.time()
        if left <= 0 or not select.select([rx], [], [], left)[0]:
            return {"ok": False, "error": "no ESP reply from the peer within %ss" % c["timeout"]}
        b = rx.recv(65535)
        if is_reply(sa_out, b):
            reply = b
    seq = struct.unpack("!L", reply[esp_offset(reply, sa_out.udp) + 4:][:4])[0]
    inner = sa_out.open(reply, seq_out >> 32)
    problems = []
    if sa_in.ip is IPv6:
        icmp = inner[ICMPv6EchoReply] if ICMPv6EchoReply in inner else None
        data = icmp.data if icmp is not None else b""
    else:
        icmp = inner[ICMP] if ICMP in inner and inner[ICMP].type == 0 else None
        data = bytes(icmp.payload) if icmp is not None else b""
    if icmp is None:
        problems.append("decrypted reply is not an ICMP echo reply: %r" % inner)
    else:
        if icmp.id != ident or icmp.seq != 7:
            problems.append("not our echo reply: id %d seq %d" % (icmp.id, icmp.seq))
        if data != payload:
            problems.append("echo payload differs (%d bytes, want %d)" % (len(data), len(payload)))
        if inner.src != dst or inner.dst != src:
            problems.append("inner addresses %s->%s, want %s->%s" % (inner.src, inner.dst, dst, src))
    if seq != seq_out & MASK:
        problems.append("reply sequence %#x, want %#x" % (seq, seq_out & MASK))

    # A tampered packet under a fresh sequence number, so only the ICV can
    # reject it; then a replay of the first packet.
    tx.sendto(sa_in.seal(req, seq_in + 1, tamper=True), (sa_in.dst, 0))
    if c.get("replay"):
        tx.sendto(pkt, (sa_in.dst, 0))
    return {"ok": not problems, "error": "; ".join(problems), "reply_len": len(reply)}


def probe():
    txs, rx = raw_senders(), None
    quiet = quiet_sockets()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        if rx is None:
            rx = sniffer(c["iface"])
        try:
            res = run_case(c, txs, rx)
        except Exception as e:  # report, do not die: the next case may work
            res = {"ok": False, "error": failure(e)}
        print(json.dumps(res), flush=True)
    for q in quiet:
        q.close()


if __name__ == "__main__":
    modes = {"jobs": jobs, "respond": respond, "probe": probe}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        raise SystemExit("usage: esp_peer.py jobs|respond|probe")
    modes[sys.argv[1]]()
