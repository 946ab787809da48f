"""ESP echo responder built on scapy: the far gateway of an espgw tunnel.

Run with /usr/bin/python3 inside a network namespace. The first stdin line
is the configuration (JSON): the interface to listen on, the local outer
address, the inner addresses it answers for, and the SAs ("in": toward
this responder, "out": from it). It opens every ESP packet for an inbound
SA (ICV checked, anti-replay window, ESN high bits inferred as in RFC 4303
Appendix A), answers ICMP echo requests for its addresses with ESP echo
replies on the outbound SA, and counts. Each later stdin line "counters"
gets the counters as one JSON line; EOF ends it.

scapy computes HMAC ICVs without the ESN high bits (it honours ESN only for
GCM), so for HMAC suites with ESN this script adds seq-hi to the ICV input
itself (RFC 4303 section 2.2.1).
"""
import hashlib
import hmac
import json
import select
import socket
import struct
import sys

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.packet import Raw

ETH_P_ALL = 0x0003
HASHES = {"HMAC-SHA1-96": hashlib.sha1, "SHA2-256-128": hashlib.sha256,
          "SHA2-384-192": hashlib.sha384, "SHA2-512-256": hashlib.sha512,
          "HMAC-MD5-96": hashlib.md5}
MASK = 0xFFFFFFFF


class SA:
    def __init__(self, c):
        self.c = c
        self.spi = c["spi"]
        self.udp = c["udp"]
        self.esn = c["esn"]
        self.icv_len = c["icv_len"]
        self.window = c["window"] or 64
        self.highest = c["initial_seq"]  # highest accepted (in), last sent (out)
        self.seen = set()
        v6 = ":" in c["src"]
        self.ip = IPv6 if v6 else IP

    def scapy_sa(self, hi, lo=1):
        c = self.c
        # seq_num=lo too: scapy writes "seq_num or self.seq_num", so a
        # low half of 0 (right after 2^32 with ESN) would otherwise go out
        # as the SA's own counter.
        return SecurityAssociation(
            ESP, spi=self.spi, seq_num=lo, crypt_algo=c["crypt"], crypt_key=bytes.fromhex(c["crypt_key"]),
            auth_algo=c["auth"], auth_key=bytes.fromhex(c["auth_key"]) if c["auth_key"] else None,
            tunnel_header=self.ip(src=c["src"], dst=c["dst"]) if c["mode"] == "tunnel" else None,
            nat_t_header=UDP(sport=4500, dport=4500) if self.udp else None,
            esn_en=self.esn, esn=hi)

    def hmac_esn(self):
        return self.esn and self.c["auth"] != "NULL"

    def esn_icv(self, data, hi):
        mac = hmac.new(bytes.fromhex(self.c["auth_key"]), data + struct.pack("!L", hi), HASHES[self.c["auth"]])
        return mac.digest()[:self.icv_len]

    def infer_hi(self, lo):
        """RFC 4303 Appendix A2.2: the high bits of a received sequence number."""
        if not self.esn:
            return 0
        tl, th, w = self.highest & MASK, self.highest >> 32, self.window
        if tl >= w - 1:
            return th if lo >= tl - w + 1 else th + 1
        return th - 1 if lo >= (tl - w + 1) & MASK else th


def esp_offset(b, udp):
    ip_len = 40 if b[0] >> 4 == 6 else (b[0] & 0x0F) * 4
    return ip_len + (8 if udp else 0)


class Responder:
    def __init__(self, cfg):
        self.cfg = cfg
        self.local = cfg["local"]
        self.owned = set(cfg["owned"]) | {self.local}
        self.inb = {}
        self.out = None
        for c in cfg["sas"]:
            if c["dir"] == "in":
                self.inb[c["spi"]] = SA(c)
            elif self.out is None:
                self.out = SA(c)
        self.n = {"received": 0, "opened": 0, "opened_bytes": 0, "bad_icv": 0, "replayed": 0,
                  "outside_window": 0, "unknown_spi": 0, "not_echo": 0, "replied": 0, "errors": 0}
        self.last_error = ""
        self.tx = {4: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
                   6: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)}
        # This namespace's kernel has no ESP: sockets keep it from answering
        # ESP and ESP-in-UDP with ICMP unreachables.
        self.quiet = [socket.socket(socket.AF_INET, socket.SOCK_RAW, 50),
                      socket.socket(socket.AF_INET, socket.SOCK_DGRAM)]
        self.quiet[1].bind(("0.0.0.0", 4500))
        self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
        self.rx.bind((cfg["iface"], ETH_P_ALL))

    def esp_of(self, b):
        """(offset of ESP, udp) when b is ESP for this responder, else None."""
        if len(b) < 28 or b[0] >> 4 != 4 or socket.inet_ntoa(b[16:20]) != self.local:
            return None
        off = (b[0] & 0x0F) * 4
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
        if seq + sa.window <= sa.highest:
            self.n["outside_window"] += 1
            return
        if seq in sa.seen:
            self.n["replayed"] += 1
            return
        pkt = IP(b)
        try:
            if sa.hmac_esn():
                if not hmac.compare_digest(sa.esn_icv(b[off:-sa.icv_len], hi), b[-sa.icv_len:]):
                    self.n["bad_icv"] += 1
                    return
                inner = sa.scapy_sa(hi).decrypt(pkt, verify=False)
            else:
                inner = sa.scapy_sa(hi).decrypt(pkt)
        except Exception as e:  # scapy raises on a bad ICV (and on garbage)
            if "integrity" in type(e).__name__.lower() or "icv" in str(e).lower():
                self.n["bad_icv"] += 1
            else:
                self.n["errors"] += 1
                self.last_error = "%s: %s" % (type(e).__name__, e)
            return
        sa.seen.add(seq)
        sa.highest = max(sa.highest, seq)
        sa.seen = {s for s in sa.seen if s + sa.window > sa.highest}
        self.n["opened"] += 1
        self.n["opened_bytes"] += len(bytes(inner))
        self.answer(inner)

    def answer(self, inner):
        if IP in inner and ICMP in inner and inner[ICMP].type == 8 and inner[IP].dst in self.owned:
            req = inner[ICMP]
            reply = IP(src=inner[IP].dst, dst=inner[IP].src) / ICMP(type=0, id=req.id, seq=req.seq) / Raw(bytes(req.payload))
        elif IPv6 in inner and ICMPv6EchoRequest in inner and inner[IPv6].dst in self.owned:
            req = inner[ICMPv6EchoRequest]
            reply = IPv6(src=inner[IPv6].dst, dst=inner[IPv6].src) / ICMPv6EchoReply(id=req.id, seq=req.seq, data=req.data)
        else:
            self.n["not_echo"] += 1
            return
        out = self.out
        out.highest += 1
        seq = out.highest
        hi = seq >> 32
        reply = reply.__class__(bytes(reply))
        p = out.scapy_sa(hi, seq & MASK).encrypt(reply, seq_num=seq & MASK, esn_en=out.esn, esn=hi)
        if out.udp:
            p[UDP].len = None  # scapy writes 8 before the ESP payload exists
            p[UDP].chksum = 0
        b = bytearray(bytes(IP(bytes(p))))
        if out.hmac_esn():
            off = esp_offset(b, out.udp)
            b[-out.icv_len:] = out.esn_icv(bytes(b[off:-out.icv_len]), hi)
        self.tx[4].sendto(bytes(b), (out.c["dst"], 0))
        self.n["replied"] += 1

    def counters(self):
        d = dict(self.n)
        d["last_error"] = self.last_error
        return d


def main():
    cfg = json.loads(sys.stdin.readline())
    r = Responder(cfg)
    print(json.dumps({"ready": True}), flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready = select.select([r.rx, stdin], [], [])[0]
        if r.rx in ready:
            try:
                r.handle(r.rx.recv(65535))
            except Exception as e:  # count, keep serving
                r.n["errors"] += 1
                r.last_error = "%s: %s" % (type(e).__name__, e)
        if stdin in ready:
            line = sys.stdin.readline()
            if not line:
                return
            if line.strip() == "counters":
                print(json.dumps(r.counters()), flush=True)


if __name__ == "__main__":
    main()
