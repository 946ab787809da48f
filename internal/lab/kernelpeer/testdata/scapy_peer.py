"""Independent ESP peer for the kernelpeer tests, built on scapy.

Reads one JSON case per line on stdin, writes one JSON result per line on
stdout. For each case it seals an ICMP echo request to the guest with the
inbound SA, sends it, waits for the guest's ESP-protected echo reply,
verifies and decrypts that with the outbound SA, then sends a tampered
packet and a replay of the first one (the Go side checks the kernel
counted both). Run it with /usr/bin/python3 inside the test namespace.

scapy computes HMAC ICVs without the ESN high bits (it honours ESN only for
GCM), so for HMAC suites with ESN this script appends seq-hi to the ICV
input itself (RFC 4303 §2.2.1, Appendix A), as the kernel does.
"""
import hashlib
import hmac
import json
import os
import select
import socket
import struct
import sys
import time

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6EchoReply, ICMPv6EchoRequest, IPv6
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.packet import Raw

ETH_P_ALL = 0x0003
HASHES = {"HMAC-SHA1-96": hashlib.sha1, "SHA2-256-128": hashlib.sha256,
          "SHA2-384-192": hashlib.sha384, "SHA2-512-256": hashlib.sha512,
          "HMAC-MD5-96": hashlib.md5}


def v6(c):
    return ":" in c["guest"]


def ip_class(c):
    return IPv6 if v6(c) else IP


def make_sa(c, spi, src, dst, hi, udp=None):
    if udp is None:
        udp = c["udp"]
    return SecurityAssociation(
        ESP, spi=spi, crypt_algo=c["crypt"], crypt_key=bytes.fromhex(c["crypt_key"]),
        auth_algo=c["auth"], auth_key=bytes.fromhex(c["auth_key"]) if c["auth_key"] else None,
        tunnel_header=ip_class(c)(src=src, dst=dst) if c["mode"] == "tunnel" else None,
        nat_t_header=UDP(sport=4500, dport=4500) if udp else None,
        esn_en=c["esn"], esn=hi)


def esp_offset(b, udp):
    """Where ESP starts: after the IP header (no IPv6 extension headers
    here) and the UDP header when encapsulated."""
    ip_len = 40 if b[0] >> 4 == 6 else (b[0] & 0x0F) * 4
    return ip_len + (8 if udp else 0)


def esn_icv(c, esp_bytes, hi):
    """ICV of an HMAC suite with ESN: HMAC over ESP || seq-hi."""
    mac = hmac.new(bytes.fromhex(c["auth_key"]), esp_bytes + struct.pack("!L", hi), HASHES[c["auth"]])
    return mac.digest()[:c["icv_len"]]


def udp6_checksum(b):
    """Recompute the UDP checksum of an IPv6 packet without extension
    headers, after its ESP bytes changed (RFC 8200 §8.1 pseudo-header)."""
    b[46:48] = b"\x00\x00"
    udp = bytes(b[40:])
    data = bytes(b[8:40]) + struct.pack("!LxxxB", len(udp), 17) + udp
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    b[46:48] = struct.pack("!H", (~total & 0xFFFF) or 0xFFFF)


def seal(c, sa, inner, seq, tamper=False):
    lo, hi = seq & 0xFFFFFFFF, seq >> 32
    p = sa.encrypt(inner, seq_num=lo, esn_en=c["esn"], esn=hi)
    if c["udp"]:
        # scapy writes the UDP length before the ESP payload exists (8).
        # A zero UDP checksum is fine over IPv4 (RFC 3948 §3.1.1) but not
        # over IPv6, where receivers drop it (RFC 8200 §8.1).
        p[UDP].len = None
        p[UDP].chksum = None if v6(c) else 0
    b = bytearray(bytes(ip_class(c)(bytes(p))))
    if c["esn"] and c["auth"] != "NULL":
        off = esp_offset(b, c["udp"])
        b[-c["icv_len"]:] = esn_icv(c, bytes(b[off:-c["icv_len"]]), hi)
    if tamper:
        # one bit of the last ciphertext byte before the ICV
        b[-c["icv_len"] - 1] ^= 0x01
    if c["udp"] and v6(c):
        udp6_checksum(b)  # the UDP checksum covers the ESP bytes changed above
    return bytes(b)


def open_reply(c, sa, b, hi):
    """Verify and decrypt the guest's reply; returns (inner packet, seq).

    A UDP-encapsulated reply is first turned into plain ESP (the ICV covers
    only the ESP part): scapy's decrypt mishandles IPv6 transport mode with
    a UDP header, and this keeps one path for all cases."""
    off = esp_offset(b, c["udp"])
    seq = struct.unpack("!L", b[off + 4:off + 8])[0]
    if c["udp"]:
        outer = ip_class(c)(b)
        if v6(c):
            plain = IPv6(src=outer.src, dst=outer.dst, nh=50, hlim=outer.hlim) / Raw(b[off:])
        else:
            plain = IP(src=outer.src, dst=outer.dst, proto=50, ttl=outer.ttl) / Raw(b[off:])
        b = bytes(ip_class(c)(bytes(plain)))
        off = esp_offset(b, False)
    if c["esn"] and c["auth"] != "NULL":
        want = esn_icv(c, b[off:-c["icv_len"]], hi)
        if not hmac.compare_digest(want, b[-c["icv_len"]:]):
            raise ValueError("reply ICV (with ESN high bits %d) does not verify" % hi)
        return sa.decrypt(ip_class(c)(b), verify=False), seq
    return sa.decrypt(ip_class(c)(b)), seq


def is_reply(c, b):
    if v6(c):
        if len(b) < 48 or b[0] >> 4 != 6:
            return False
        src, proto = socket.inet_ntop(socket.AF_INET6, b[8:24]), b[6]
    else:
        if len(b) < 28 or b[0] >> 4 != 4:
            return False
        src, proto = socket.inet_ntoa(b[12:16]), b[9]
    if src != c["guest"]:
        return False
    off = esp_offset(b, c["udp"])
    if len(b) < off + 8:
        return False
    if c["udp"]:
        if proto != 17 or struct.unpack("!H", b[off - 8:off - 6])[0] != 4500:
            return False
    elif proto != 50:
        return False
    return struct.unpack("!L", b[off:off + 4])[0] == c["spi_out"]


def run_case(c, txs, rx):
    tx = txs[6 if v6(c) else 4]
    hi_in = (c["seq_in"] + 1) >> 32
    hi_out = (c["seq_out"] + 1) >> 32
    sa_in = make_sa(c, c["spi_in"], c["host"], c["guest"], hi_in)
    sa_out = make_sa(c, c["spi_out"], c["guest"], c["host"], hi_out, udp=False)
    src, dst = (c["host_inner"], c["guest_inner"]) if c["mode"] == "tunnel" else (c["host"], c["guest"])
    payload = os.urandom(c["payload_len"])
    ident = c["spi_in"] & 0xFFFF
    if v6(c):
        req = IPv6(src=src, dst=dst) / ICMPv6EchoRequest(id=ident, seq=7, data=payload)
    else:
        req = IP(src=src, dst=dst) / ICMP(type=8, id=ident, seq=7) / Raw(payload)
    req = ip_class(c)(bytes(req))
    pkt = seal(c, sa_in, req, c["seq_in"] + 1)

    while select.select([rx], [], [], 0)[0]:
        rx.recv(65535)  # drop what came before
    tx.sendto(pkt, (c["guest"], 0))
    deadline = time.time() + c["timeout"]
    reply = None
    while reply is None:
        left = deadline - time.time()
        if left <= 0 or not select.select([rx], [], [], left)[0]:
            return {"ok": False, "error": "no ESP reply from the guest within %ss" % c["timeout"]}
        frame = rx.recv(65535)
        if is_reply(c, frame):
            reply = frame
    inner, seq = open_reply(c, sa_out, reply, hi_out)
    problems = []
    if v6(c):
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
    if seq != (c["seq_out"] + 1) & 0xFFFFFFFF:
        problems.append("reply sequence %#x, want %#x" % (seq, (c["seq_out"] + 1) & 0xFFFFFFFF))

    # A tampered packet: one bit flipped in the last ciphertext byte before
    # the ICV, under a fresh sequence number so only the ICV can reject it.
    bad = seal(c, sa_in, req, c["seq_in"] + 2, tamper=True)
    tx.sendto(bad, (c["guest"], 0))
    # A replay of the first packet.
    if c["replay"]:
        tx.sendto(pkt, (c["guest"], 0))
    return {"ok": not problems, "error": "; ".join(problems), "reply_len": len(reply)}


def main():
    # IPPROTO_RAW sockets take the IP header from the packet, v4 and v6.
    txs = {4: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
           6: socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)}
    rx = None
    # This namespace's kernel has no ESP: open sockets so it does not answer
    # the guest's ESP with ICMP unreachables.
    quiet = [socket.socket(socket.AF_INET, socket.SOCK_RAW, 50),
             socket.socket(socket.AF_INET6, socket.SOCK_RAW, 50),
             socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
             socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)]
    quiet[3].setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    quiet[2].bind(("0.0.0.0", 4500))
    quiet[3].bind(("::", 4500))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        if rx is None:
            rx = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
            rx.bind((c["iface"], ETH_P_ALL))
        try:
            res = run_case(c, txs, rx)
        except Exception as e:  # report, do not die: the next case may work
            res = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        print(json.dumps(res), flush=True)
    for q in quiet:
        q.close()


if __name__ == "__main__":
    main()
