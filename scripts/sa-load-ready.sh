#!/usr/bin/env bash
# Times `espgw run` from its start to its "gateway ready" log line with the
# SA file of N tunnels (scripts/sa-scale-file.sh) and with one tunnel, in
# one run, in a network namespace of its own (a veth holding
# the outer address, the TUN, a raw ESP socket, the state directory on the
# file system of TMPDIR), and reports the RSS each gateway holds once it has
# given the load's garbage back to the kernel and the difference per SA; then pushes COUNT packets each way through SAMPLE
# of the tunnels (scripts/sa-load-traffic.py: their SAs' sealing and opening
# states built) and reports the RSS again, after TRAFFIC_WAIT seconds, and
# what the SAs that carried traffic hold beyond the idle ones. Run as root.
# Usage: [SAMPLE=1000 COUNT=3 TRAFFIC_WAIT=1] sa-load-ready.sh ESPGW N [flow|block]
set -euo pipefail
bin=$(realpath "${1:?usage: sa-load-ready.sh ESPGW N [flow|block]}")
n=${2:?usage: sa-load-ready.sh ESPGW N [flow|block]}
style=${3:-flow}
sample=${SAMPLE:-1000}
count=${COUNT:-3}
wait_s=${TRAFFIC_WAIT:-1}
here=$(dirname "$(realpath "$0")")
# Binaries from before the gateway returned the load's memory after ready
# do it before their ready line.
returns=
grep -q 'start-up garbage returned' "$bin" && returns=1
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
# Sealed packets leave for a next hop that is wan1's address, where they end.
ip -n "$ns" route add 10.64.0.0/10 via 198.51.100.9 dev wan0
ip -n "$ns" neigh add 198.51.100.9 lladdr "$(ip netns exec "$ns" cat /sys/class/net/wan1/address)" dev wan0 nud permanent
"$here/sa-scale-file.sh" "$n" "$style" >"$dir/many.yaml"
"$here/sa-scale-file.sh" 1 "$style" >"$dir/one.yaml"
# ready FILE TUNNELS: seconds from the start to "gateway ready", the RSS
# and CPU time then, and the RSS after traffic through a sample of TUNNELS.
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
	local cpu=$(awk '{print ($14 + $15) / 100}' /proc/$pid/stat)
	# A gateway that gives the load's garbage back beside its running data
	# path says when it is done: the RSS is taken after that.
	if [ -n "$returns" ]; then
		for _ in $(seq 1 3000); do
			grep -q 'start-up garbage returned' "$dir/log" && break
			sleep 0.01
		done
		grep -o 'start-up garbage returned.*' "$dir/log" >&2 || { echo "start-up memory not returned in 30 s" >&2; exit 1; }
	fi
	local rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
	local k=$((sample < $2 ? sample : $2))
	ip netns exec "$ns" python3 "$here/sa-load-traffic.py" "$2" "$k" "$count" saload0 wan0 wan1 >&2
	sleep "$wait_s"
	local rss2=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
	kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
	sed -n '2,3p;/gateway drops/p' "$dir/out" >&2
	echo "$(echo "$end - $start" | bc) $rss $cpu $rss2 $k"
}
read -r t1 r1 c1 a1 k1 < <(ready "$dir/one.yaml" 1)
read -r tn rn cn an kn < <(ready "$dir/many.yaml" "$n")
printf '%s, %d tunnels (%d SAs, %d policies, %d bytes): ready in %.2f s (%.2f CPU-s), RSS %d KiB; after traffic through %d tunnels %d KiB\n' "$style" "$n" $((2 * n)) "$n" "$(stat -c %s "$dir/many.yaml")" "$tn" "$cn" "$rn" "$kn" "$an"
printf '%s, 1 tunnel: ready in %.3f s (%.2f CPU-s), RSS %d KiB; after traffic %d KiB\n' "$style" "$t1" "$c1" "$r1" "$a1"
printf 'RSS per SA over the one-tunnel gateway: %d B at ready, %d B after traffic (both with traffic through their sample)\n' $(((rn - r1) * 1024 / (2 * n))) $(((an - a1) * 1024 / (2 * n)))
printf 'RSS per SA that carried traffic, beyond an idle one: %d B (%d SAs)\n' $(((an - rn - (a1 - r1)) * 1024 / (2 * kn))) $((2 * kn))
