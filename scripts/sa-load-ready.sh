#!/usr/bin/env bash
# Times `espgw run` from its start to its "gateway ready" log line with the
# SA file of N tunnels (scripts/sa-scale-file.sh) and with one tunnel, in
# one run, in a network namespace of its own (a veth holding
# the outer address, the TUN, a raw ESP socket, the state directory on the
# file system of TMPDIR), and reports the RSS each gateway then holds and
# the difference per SA. Run as root. Usage: sa-load-ready.sh ESPGW N [flow|block]
set -euo pipefail
bin=$(realpath "${1:?usage: sa-load-ready.sh ESPGW N [flow|block]}")
n=${2:?usage: sa-load-ready.sh ESPGW N [flow|block]}
style=${3:-flow}
here=$(dirname "$(realpath "$0")")
ns=saload$$
dir=$(mktemp -d /tmp/saload.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add wan0 type veth peer name wan1
ip -n "$ns" link set wan1 up
ip -n "$ns" addr add 198.51.100.1/24 dev wan0
ip -n "$ns" link set wan0 up
"$here/sa-scale-file.sh" "$n" "$style" >"$dir/many.yaml"
"$here/sa-scale-file.sh" 1 "$style" >"$dir/one.yaml"
# ready FILE: seconds from the start to "gateway ready", and the RSS then.
ready() {
	cat >"$dir/gw.yaml" <<CONF
local: 198.51.100.1
metrics: off
wan-io: socket
state-dir: $dir/state
tun: {name: saload0, addresses: [172.16.0.1/16], routes: [172.20.0.0/14]}
sa-file: $1
CONF
	rm -rf "$dir/state"
	: >"$dir/log"
	local start=$(date +%s.%N)
	ip netns exec "$ns" "$bin" run -c "$dir/gw.yaml" >"$dir/out" 2>"$dir/log" &
	pid=$!
	for _ in $(seq 1 600); do
		grep -q 'gateway ready' "$dir/log" && break
		kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; exit 1; }
		sleep 0.01
	done
	local end=$(date +%s.%N)
	grep -q 'gateway ready' "$dir/log" || { echo "not ready in 6 s" >&2; cat "$dir/log" >&2; exit 1; }
	local rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
	local cpu=$(awk '{print ($14 + $15) / 100}' /proc/$pid/stat)
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
	echo "$(echo "$end - $start" | bc) $rss $cpu"
}
read -r t1 r1 c1 < <(ready "$dir/one.yaml")
read -r tn rn cn < <(ready "$dir/many.yaml")
printf '%s, %d tunnels (%d SAs, %d policies, %d bytes): ready in %.2f s (%.2f CPU-s), RSS %d KiB\n' "$style" "$n" $((2 * n)) "$n" "$(stat -c %s "$dir/many.yaml")" "$tn" "$cn" "$rn"
printf '%s, 1 tunnel: ready in %.3f s (%.2f CPU-s), RSS %d KiB\n' "$style" "$t1" "$c1" "$r1"
printf 'RSS per SA over the one-tunnel gateway: %d B\n' $(((rn - r1) * 1024 / (2 * n)))
