#!/usr/bin/env python3
"""Pushes packets through a sample of the tunnels of the SA file that
scripts/sa-scale-file.sh writes, into a running gateway: per sampled tunnel
COUNT inner packets into the TUN (sealed by its outbound SA) and COUNT ESP
packets, sealed here with the tunnel's inbound SA (aes-cbc, hmac-sha1-96),
into the gateway's outer interface. Run inside the gateway's network
namespace. Usage: sa-load-traffic.py N SAMPLE COUNT TUN WAN PEER-IF
(N tunnels in the file, SAMPLE of them spread over it; WAN the gateway's
outer interface, PEER-IF the other end of its veth)."""

import hashlib
import hmac
import os
import socket
import struct
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

ETH_P_IP = 0x0800
LOCAL = "198.51.100.1"


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(src, dst, proto, payload):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    h = h[:10] + struct.pack("!H", checksum(h)) + h[12:]
    return h + payload


def udp(src, dst, data):
    # Checksum 0: none, as IPv4 allows.
    return ipv4(src, dst, 17, struct.pack("!HHHH", 40000, 9, 8 + len(data), 0) + data)


def peer(i):
    return "10.%d.%d.%d" % (64 + i // 65536, i // 256 % 256, i % 256)


def inner_local(i):
    return "172.16.%d.%d" % (i // 256 % 256, i % 256)


def inner_remote(i):
    return "172.%d.%d.%d" % (20 + i // 65536, i // 256 % 256, i % 256)


def esp_in(i, seq, inner):
    """The ESP packet tunnel i's peer sends: its inbound SA's keys as
    sa-scale-file.sh writes them."""
    spi = 1048576 + 2 * i + 1
    enc = bytes.fromhex("%024x%08x" % (i, 1))
    auth = bytes.fromhex("%032x%08x" % (i, 1))
    pad = (-(len(inner) + 2)) % 16
    plain = inner + bytes(range(1, pad + 1)) + bytes([pad, 4])
    iv = os.urandom(16)
    e = Cipher(algorithms.AES(enc), modes.CBC(iv)).encryptor()
    body = struct.pack("!II", spi, seq) + iv + e.update(plain) + e.finalize()
    icv = hmac.new(auth, body, hashlib.sha1).digest()[:12]
    return ipv4(peer(i), LOCAL, 50, body + icv)


def main():
    n, sample, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    tun, wan, peer_if = sys.argv[4], sys.argv[5], sys.argv[6]
    wan_mac = bytes.fromhex(open("/sys/class/net/%s/address" % wan).read().strip().replace(":", ""))
    to_tun = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    to_wan = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    sent = 0
    for k in range(sample):
        i = k * n // sample
        for seq in range(1, count + 1):
            to_tun.sendto(udp(inner_local(i), inner_remote(i), b"out %d" % seq), (tun, ETH_P_IP))
            pkt = esp_in(i, seq, udp(inner_remote(i), inner_local(i), b"in %d" % seq))
            to_wan.sendto(pkt, (peer_if, ETH_P_IP, 0, 0, wan_mac))
            sent += 2
    print("sent %d packets through %d tunnels (%d SAs)" % (sent, sample, 2 * sample))


if __name__ == "__main__":
    main()
