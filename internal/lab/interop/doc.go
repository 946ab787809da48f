// Package interop proves espgw against ESP implementations it did not write.
//
// It puts an ESP implementation espgw did not write on the far side of an
// espgw gateway's tunnel, and proves the two agree: the Linux kernel's own
// ESP (XFRM), in a QEMU guest run by internal/lab/kernelpeer.
//
// # The bed (StartBed)
//
//	hostA ──lan── gw1 (espgw run) ──wan── [wan: wanrelay] ──tap── Linux guest
//	192.0.2.10     192.0.2.1     198.51.100.1/24              198.51.100.129/24
//	2001:db8:a::10 2001:db8:a::1                               lo: 203.0.113.10,
//	                                                                2001:db8:b::10
//
// (the standard topology's addresses, internal/lab/netns; the guest stands
// where gw2 does)
//
// Each box but the guest is a network namespace. gw1 is a real `espgw run`
// process; the wan namespace holds no address and runs internal/lab/wanrelay
// between gw1's WAN port and the guest's tap, so internal/lab/impair can tamper
// with and replay gw1's ESP on its way to the kernel. The guest is the far
// gateway with the far inner network on its loopback. It boots once per
// test binary (seconds under TCG, more on a loaded machine); Bed.Configure
// then sets up each case: fresh SAs with random keys, the same sa.SA values
// mirrored into the guest (`ip xfrm state/policy`, ConfigureGateway), gw1
// restarted on them, a fresh relay.
//
// Tunnel mode carries hostA ↔ 203.0.113.10 (and IPv6 inside the IPv4
// tunnel). Transport mode carries gw1 ↔ the guest's own outer address: gw1
// sends its ICMP and TCP toward 198.51.100.129 into its TUN by policy routing
// (ip rule … ipproto icmp|tcp lookup 100), while the gateway's own ESP to
// the same address takes the main table.
//
// gw1's namespace forwards IPv6 (conf/all) but gives new devices host
// behaviour (conf/default/forwarding=0): a TUN created with forwarding=1
// joins ff02::2 and the kernel sends MLDv2 reports from :: into it, which
// the gateway seals into the tunnel (or drops as no-policy when an SPD is
// in force) — extra packets that would spoil the exact counter comparison.
//
// # The guest as the far gateway
//
// The guest is set up the way the scenario runner's `peer: linux-xfrm` gw2
// is, by kernelpeer.Peer.ConfigureGateway: the topology (here the far
// hosts on its loopback, there hostB behind its eth1) is a parameter, and
// the addresses, routes, neighbour entries and mirrored SAs are written
// once, there.
//
// StartScapyPeer is the hook for `peer: scapy`: the scapy ESP peer
// (internal/lab/scapy) in respond mode listens on an interface
// in the runner's namespace, opens ESP for its SAs (ICV, anti-replay
// window, ESN high bits) and answers ICMP echo requests for its addresses
// with ESP echo replies; ScapyPeer.Counters says what it received, opened,
// rejected (bad ICV, replay, unknown SPI) and answered. BedOptions.Scapy
// builds the same bed with the responder in a namespace of its own behind
// the relay instead of the guest.
//
// # Interop matrix
//
// The tests record every combination they run in a Matrix; with
// ESPGW_WRITE_MATRIX=1 they write it to docs/interop-matrix.md at the
// repository root (see the test file for the exact command).
package interop
