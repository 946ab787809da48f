package kernelpeer

// initScript is the guest's /init, run by busybox sh as PID 1. Its settings
// come from the kernel command line (espgw_addr, espgw_route, espgw_mtu,
// espgw_natt), so one initramfs serves every peer. It logs to the serial
// console, which the host keeps as the boot log; it never sees key material.
const initScript = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
exec </dev/console >/dev/console 2>&1
# busybox sh runs its own applets before searching PATH, and busybox's ip
# has no xfrm: route every "ip" to iproute2's.
ip() { /sbin/ip "$@"; }
log() { echo "espgw-guest: $*"; }
arg() {
	for w in $(cat /proc/cmdline); do
		case "$w" in "$1="*) echo "${w#*=}" | tr , ' ';; esac
	done
}
[ -L /sbin/ip ] && log "WARNING: /sbin/ip is busybox's, not iproute2's"
for m in $(cat /etc/espgw/modules); do
	insmod /lib/modules/espgw/$m.ko || log "insmod $m failed"
done
log "modules loaded"
ip link set lo up
mtu=$(arg espgw_mtu)
[ -n "$mtu" ] && { ip link set eth0 mtu "$mtu" || log "mtu $mtu failed"; }
ip link set eth0 up || log "no eth0"
for a in $(arg espgw_addr); do
	case "$a" in
	*:*) ip addr add "$a" dev eth0 nodad ;;
	*) ip addr add "$a" dev eth0 ;;
	esac || log "address $a failed"
done
for r in $(arg espgw_route); do
	ip route add "${r%@*}" via "${r#*@}" || log "route $r failed"
done
ports=$(arg espgw_natt)
[ -n "$ports" ] && /bin/espgw-agent natt $ports &
log "network up: $(ip -br addr show dev eth0)"
while :; do
	/bin/espgw-agent serve
	log "agent exited, restarting"
	sleep 1
done
`
