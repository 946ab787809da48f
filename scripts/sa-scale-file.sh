#!/usr/bin/env bash
# Writes the SA file of a gateway with N tunnels to N peers, as a user
# writes one from the README: per tunnel an outbound and an inbound SA
# (aes-cbc with hmac-sha1-96, each peer its own outer address) and a protect
# policy for the tunnel's inner prefixes; STYLE flow writes one line per SA,
# block one field per line. Usage: sa-scale-file.sh N flow|block > sas.yaml
set -euo pipefail
n=${1:?usage: sa-scale-file.sh N flow|block}
style=${2:-flow}
awk -v n="$n" -v style="$style" 'BEGIN {
	print "# SAs of a gateway with " n " tunnels"
	print "sa:"
	for (i = 0; i < n; i++) {
		peer = sprintf("10.%d.%d.%d", 64 + int(i / 65536), int(i / 256) % 256, i % 256)
		for (dir = 0; dir < 2; dir++) {
			src = dir ? peer : "198.51.100.1"; dst = dir ? "198.51.100.1" : peer
			spi = sprintf("0x%x", 1048576 + 2 * i + dir)
			enc = sprintf("0x%024x%08x", i, dir); auth = sprintf("0x%032x%08x", i, dir)
			if (style == "block")
				printf "  - spi: %s\n    mode: tunnel\n    src: %s\n    dst: %s\n    enc: aes-cbc\n    enc-key: %s\n    auth: hmac-sha1-96\n    auth-key: %s\n    replay-window: 64\n", spi, src, dst, enc, auth
			else
				printf "  - {spi: %s, mode: tunnel, src: %s, dst: %s, enc: aes-cbc, enc-key: %s, auth: hmac-sha1-96, auth-key: %s, replay-window: 64}\n", spi, src, dst, enc, auth
		}
	}
	print "spd:"
	for (i = 0; i < n; i++)
		printf "  - {priority: 10, src: 172.16.%d.%d/32, dst: 172.%d.%d.%d/32, action: protect, sa: 0x%x}\n", int(i / 256) % 256, i % 256, 20 + int(i / 65536), int(i / 256) % 256, i % 256, 1048576 + 2 * i
}'
