// Package kernelpeer runs the Linux kernel's own ESP in a QEMU guest as a
// peer.
//
// It runs the Linux kernel's own ESP (XFRM) as a peer for espgw's tests and
// scenarios: Debian's kernel in a QEMU guest, reached through a tap device
// in a network namespace, configured with `ip xfrm state/policy` commands
// mirrored from the same sa.SA values espgw uses. The machine's own kernel
// has no ESP; the guest's does.
//
// # Preparation (Prepare, or `go run ./internal/lab/kernelpeer/cmd/prepare`)
//
// The cache folder is $ESPGW_KERNEL_DIR, else /var/cache/espgw/kernel.
//
//  1. `apt-cache depends linux-image-amd64` names the kernel image package
//     (linux-image-6.1.0-NN-amd64 on Debian 12); `apt-get download` fetches
//     it into deb/ and `dpkg-deb -x` unpacks it into unpacked/PACKAGE/.
//     Nothing is installed: the machine's kernel and /boot stay as they are.
//  2. The guest agent (./agent) is built as a static binary (CGO_ENABLED=0).
//  3. The initramfs is written as a newc cpio archive, gzipped, by this
//     package (no cpio tool needed). It holds busybox-static as /bin/busybox,
//     iproute2's /sbin/ip with the shared libraries ldd names (busybox's own
//     ip applet has no xfrm), the agent, /init, and the modules of
//     guestModules with their dependencies. Dependencies are read from each
//     module's .modinfo "depends=" field (the package ships no modules.dep)
//     and written to /etc/espgw/modules in load order; .ko.xz modules are
//     decompressed with xz. Crypto templates and algorithms (authenc,
//     authencesn, gcm, ctr, ghash, ccm, chacha20poly1305, seqiv, echainiv,
//     des, sha512, drbg, …)
//     are loaded up front because the guest has no modprobe to load them on
//     demand when `ip xfrm state add` asks for them.
//
// Each step is skipped when its result exists; the initramfs is rewritten
// only when its content hash changes. Prepared (and Start without Assets)
// reads the record assets.json a successful Prepare leaves.
//
// # Boot (Start)
//
// Start creates the tap in the caller's namespace (`ip -n NS tuntap add`),
// puts the host addresses on it, and runs
//
//	ip netns exec NS qemu-system-x86_64 -accel tcg -m 256 -nodefaults
//	  -kernel vmlinuz -initrd initramfs.cpio.gz -append "console=ttyS0 … espgw_addr=… espgw_route=… espgw_natt=4500"
//	  -serial file:console.log
//	  -netdev tap,ifname=TAP,script=no -device virtio-net-pci
//	  -device virtio-rng-pci
//	  -device virtio-serial-pci -chardev socket,path=ctl.sock,server=on,wait=off
//	  -device virtserialport,chardev=ctl,name=org.espgw.ctl
//
// KVM does not work on this project's machines, hence TCG. /init (see
// initScript) mounts proc, sys and devtmpfs, insmods the modules, sets up
// eth0 (addresses, routes, MTU) from the kernel command line, starts
// `espgw-agent natt` and then serves the control port. The natt sockets
// matter: the kernel takes ESP out of UDP only on a socket with
// UDP_ENCAP_ESPINUDP set, which an IKE daemon would otherwise hold, and the
// socket needs per-socket bypass policies (as strongSwan sets on its own)
// because the kernel checks inbound policy on the UDP datagram before
// decapsulating it: without them, a transport-mode policy between the two
// hosts drops the ESP-in-UDP it expects (XfrmInTmplMismatch).
//
// Once the agent answers, Start pins permanent neighbour entries between
// the tap and the guest in both directions, so IPv6 neighbour
// unreachability probes (unicast ICMPv6 between the very addresses a
// transport-mode policy covers) never need ESP.
//
// The control channel is the virtio-serial port org.espgw.ctl: the host
// writes one JSON request per line ({"id","argv","timeout_ms"}) to the unix
// socket, the agent runs the command with that timeout and answers one
// JSON line with the exit status and output. The agent opens the port
// once, read-write, for both directions (a second open fails). Start pings
// until the agent answers, so a boot is complete when commands work; a
// failed boot returns an error with the tail of the serial console.
// Peer.BootTime is the wall time of the boot, Peer.BootCPU the CPU time
// qemu spent on it (about 15 s of TCG emulation; the wall time grows with
// the machine's load).
//
// Config.ExtraTaps gives the guest more NICs (eth1, …), unconfigured: the
// scenario runner's linux-xfrm peer puts hostB behind eth1, and moves both
// taps into each scenario's gw2 namespace and back, so one boot serves a
// whole run (qemu keeps its descriptors while a tap changes namespace).
//
// Close kills qemu by its PID, removes the tap and the work folder.
// Commands may hold key material: neither side logs commands, errors never
// include them, Command.String hides keys, and the counters are read with
// `ip -s xfrm state list nokeys`.
//
// # Mirroring SAs
//
// XFRMCommands turns an sa.SA and a Direction into `ip xfrm state add` and
// `ip xfrm policy add` commands: tunnel or transport mode; raw ESP or
// `encap espinudp SPORT DPORT 0.0.0.0`; `flag esn` with the replay window,
// and InitialSeq as replay-seq/replay-oseq(-hi); cbc(aes), cbc(des3_ede),
// rfc3686(ctr(aes)), rfc4106(gcm(aes)) with a 128-, 96- or 64-bit ICV,
// rfc7539esp(chacha20,poly1305) and rfc4543(gcm(aes)) with a 128-bit ICV,
// rfc4309(ccm(aes)) with 64, 96 or 128 bits; hmac(sha1),
// hmac(sha256/384/512) and hmac(md5) truncated per RFC 2404/4868/2403;
// lifetimes and TFC padding; the outer-header flags, if_id and output-mark
// (sa.XFRMStateArgs); flag af-unspec for a tunnel SA carrying the other
// inner family. Peer.ReplaceSAs installs a set in one round trip.
// Peer.ConfigureGateway makes the guest the far gateway of an espgw
// gateway's tunnel in the caller's topology (the interop bed's, a
// scenario's gw2): addresses, routes, neighbour entries pinned both ways
// and the tunnel's two SAs, in one round trip. Peer.Counters reads
// `ip -s xfrm state` (sa.ParseXFRMStates, the one listing parser) and
// /proc/net/xfrm_stat; Counters.CheckDrops compares what the kernel
// dropped with what a test wants, exactly or at least.
// Peer.SendTCP and Peer.ReceiveTCP move random bytes over TCP between a
// host namespace and busybox nc in the guest, checked by sha256.
//
// # Tests
//
// The tests boot one guest for the whole test binary and put scapy
// (internal/lab/scapy in probe mode) on the tap side. For
// every suite × tunnel/transport × raw/UDP over IPv4 (and three suites over
// IPv6), with ESN on half the cases and its high bits non-zero, scapy's echo
// request must come back as an ESP echo reply that scapy verifies and
// decrypts; then a tampered packet and a replayed one must appear in the
// kernel's counters (integrity failed / XfrmInStateProtoError, replay /
// XfrmInStateSeqError) and nothing else may. Missing qemu, kernel files or
// scapy fail the tests with the command that fixes it; -short skips the
// tests that boot a guest.
//
// Run them with
//
//	go run ./internal/lab/kernelpeer/cmd/prepare
//	go test -count=1 -timeout 30m ./internal/lab/kernelpeer/
package kernelpeer
