#!/usr/bin/python3
"""An independent ESP peer for espgw's interop tests, built on scapy's
scapy.layers.ipsec. It reads one JSON document on stdin:

  {"jobs": [{"op": "seal" | "open" | "pcap", "sa": {...}, "packets": [hex, ...],
             "seqs": [int, ...]?, "file": path?, "link": "ether"|"raw"|"sll"?, "extra": bool?}]}

and writes {"results": [{"packets": [hex | null], "errors": [str | null]}]} on stdout.

seal: encrypts each inner IP packet (hex) with the SA; sequence numbers from 1,
      or the 64-bit numbers in "seqs" (high half as ESN, which scapy honours
      only for AES-GCM).
open: decrypts each outer IP packet (hex) carrying ESP, checking the ICV.
pcap: like seal, and writes the ESP packets to "file" with the given link type;
      with "extra" it mixes in frames that are not ESP to open (ARP, a plain
      UDP packet, a NAT keepalive, an IKE packet behind a non-ESP marker).
"""
import json
import sys

from scapy.all import ARP, UDP, CookedLinux, Ether, IP, IPv6, Raw, raw, wrpcap
from scapy.layers.ipsec import ESP, SecurityAssociation

CRYPT = {"aes-cbc": "AES-CBC", "3des-cbc": "3DES", "aes-ctr": "AES-CTR",
         "aes-gcm-16": "AES-GCM", "null": "NULL"}
AUTH = {"hmac-sha1-96": "HMAC-SHA1-96", "hmac-sha2-256-128": "SHA2-256-128",
        "hmac-sha2-384-192": "SHA2-384-192", "hmac-sha2-512-256": "SHA2-512-256",
        "hmac-md5-96": "HMAC-MD5-96", "none": "NULL"}


def ip_class(b):
    return IPv6 if b[0] >> 4 == 6 else IP


def make_sa(c):
    kw = dict(spi=c["spi"], crypt_algo=CRYPT[c["enc"]],
              crypt_key=bytes.fromhex(c["enc_key"]) if c["enc"] != "null" else None,
              auth_algo=AUTH[c["auth"]],
              auth_key=bytes.fromhex(c["auth_key"]) if c["auth"] != "none" else None,
              esn_en=bool(c.get("esn")))
    if c["mode"] == "tunnel":
        if ":" in c["src"]:
            kw["tunnel_header"] = IPv6(src=c["src"], dst=c["dst"])
        else:
            kw["tunnel_header"] = IP(src=c["src"], dst=c["dst"])
    if c.get("encap") == "udp":
        kw["nat_t_header"] = UDP(sport=c.get("sport", 4500), dport=c.get("dport", 4500))
    return SecurityAssociation(ESP, **kw)


def fix_nat_t(p):
    # scapy writes UDP length 8 under IPv4 (the IP header is rebuilt
    # before ESP is attached): let it be recomputed.
    if UDP in p:
        p[UDP].len = None
        if IP in p:
            p[IP].len = None
            p[IP].chksum = None
        else:
            p[IPv6].plen = None
    return ip_class(raw(p))(raw(p))


def seal(sa, job):
    out, errs = [], []
    seqs = job.get("seqs")
    for i, h in enumerate(job["packets"]):
        b = bytes.fromhex(h)
        try:
            seq = seqs[i] if seqs else i + 1
            sa.seq_num = seq & 0xffffffff
            sa.esn = seq >> 32
            p = fix_nat_t(sa.encrypt(ip_class(b)(b)))
            out.append(raw(p).hex())
            errs.append(None)
        except Exception as e:  # reported per packet, judged by the Go test
            out.append(None)
            errs.append("%s: %s" % (type(e).__name__, e))
    return out, errs


def c_transport_v6_nat_t(sa, p):
    return sa.nat_t_header is not None and sa.tunnel_header is None and IPv6 in p


def open_(sa, job):
    out, errs = [], []
    seqs = job.get("seqs")
    for i, h in enumerate(job["packets"]):
        b = bytes.fromhex(h)
        try:
            p = ip_class(b)(b)  # a fresh parse: decrypt mutates its argument
            if c_transport_v6_nat_t(sa, p):
                # scapy 2.5 leaves the UDP header inside an opened IPv6
                # transport packet; hand it the same ESP without UDP.
                u = p[UDP]
                p[IPv6].remove_payload()
                p[IPv6].nh = 50
                p[IPv6].plen = None
                p = IPv6(raw(p[IPv6] / ESP(raw(u.payload))))
            esn = (seqs[i] >> 32) if seqs else 0
            d = sa.decrypt(p, esn=esn) if esn else sa.decrypt(p)
            out.append(raw(d).hex())
            errs.append(None)
        except Exception as e:
            out.append(None)
            errs.append("%s: %s" % (type(e).__name__, e))
    return out, errs


def frame(link, p):
    if link == "ether":
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p
    if link == "sll":
        return CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\0\0\0\0\x01\0\0",
                           proto=0x86dd if IPv6 in p and p.version == 6 else 0x0800) / p
    return p


def pcap(sa, job, c):
    out, errs = seal(sa, job)
    link = job.get("link", "raw")
    frames = []
    v6 = ":" in c["src"]
    ipc = (lambda **k: IPv6(**k)) if v6 else (lambda **k: IP(**k))
    for i, h in enumerate(out):
        if h is None:
            continue
        b = bytes.fromhex(h)
        frames.append(frame(link, ip_class(b)(b)))
        if job.get("extra") and i == 0:
            if link == "ether":
                frames.append(Ether(src="02:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="192.0.2.1", pdst="192.0.2.2"))
            frames.append(frame(link, ipc(src=c["src"], dst=c["dst"]) / UDP(sport=4500, dport=4500) / Raw(b"\xff")))
            frames.append(frame(link, ipc(src=c["src"], dst=c["dst"]) / UDP(sport=4500, dport=4500) / Raw(b"\0\0\0\0" + b"ike" * 10)))
            frames.append(frame(link, ipc(src=c["src"], dst=c["dst"]) / UDP(sport=1234, dport=53) / Raw(b"dns?")))
    linktype = {"ether": 1, "raw": 101, "sll": 113}[link]
    wrpcap(job["file"], frames, linktype=linktype)
    return out, errs


def main():
    doc = json.load(sys.stdin)
    results = []
    for job in doc["jobs"]:
        sa = make_sa(job["sa"])
        if job["op"] == "seal":
            pk, er = seal(sa, job)
        elif job["op"] == "open":
            pk, er = open_(sa, job)
        elif job["op"] == "pcap":
            pk, er = pcap(sa, job, job["sa"])
        else:
            raise SystemExit("unknown op %r" % job["op"])
        results.append({"packets": pk, "errors": er})
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
