// Package xdp carries raw ESP over AF_XDP sockets.
//
// It carries raw ESP (IP protocol 50) over AF_XDP: an XDP program on the WAN
// interface steers ESP, and only ESP, into AF_XDP sockets (one per receive
// queue), and the Conn here sends and receives whole batches through their
// rings and a UMEM shared with the kernel, writing the Ethernet and IP
// headers itself from the kernel's neighbour and route tables. Everything
// else on the interface — ARP, ICMP, UDP-encapsulated ESP, fragments of ESP,
// the control traffic — goes on to the kernel untouched.
//
// It is the outer I/O of the gateway only: esp.Packet in, esp.Packet out,
// the same contract as internal/transport, whose raw ESP socket the Conn
// keeps open beside it: with that socket open the kernel does not answer
// ESP with ICMP protocol-unreachable, it receives what the program passes
// on (fragments the kernel reassembles), and it sends what the Conn cannot
// (packets to a neighbour the kernel has not resolved yet, which the kernel
// then resolves, and packets to be fragmented).
//
// The XDP program is built in Go with cilium/ebpf's asm package (no clang)
// and attached in generic (skb) mode on veth — native mode on a veth turns
// off UDP segmentation on its peer — and natively, with zero copy where the
// driver offers it, elsewhere. The sockets, UMEM and rings use
// golang.org/x/sys/unix.
package xdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// XDP actions and the xdp_md fields the program reads.
const (
	xdpPass = 2

	mdData          = 0
	mdDataEnd       = 4
	mdRxQueueIndex  = 16
	ethHeaderLen    = 14
	ipv4HeaderLen   = 20
	ipv6HeaderLen   = 40
	protocolESP     = 50
	etherTypeIPv4LE = 0x0008 // 0x0800 read as a little-endian halfword
	etherTypeIPv6LE = 0xdd86 // 0x86dd likewise
	// fragmentMaskLE is IPv4's MF flag and fragment offset (0x3fff in
	// network order) as a little-endian halfword.
	fragmentMaskLE = 0xff3f
)

// steerESP is the XDP program: an Ethernet frame carrying ESP to local —
// an unfragmented IPv4 packet, or an IPv6 packet whose first next header is
// ESP, of local's family and addressed to it — goes to the AF_XDP socket of
// its receive queue (or on to the kernel if the queue has none); every
// other frame goes on to the kernel.
func steerESP(sockets *ebpf.Map, local netip.Addr) asm.Instructions {
	// The destination address as the little-endian words a load gives.
	var dst []int32
	a := local.AsSlice()
	for i := 0; i+4 <= len(a); i += 4 {
		dst = append(dst, int32(binary.LittleEndian.Uint32(a[i:])))
	}
	ipv4, ipv6 := "ipv4", "ipv6"
	if len(dst) == 4 {
		ipv4 = "pass"
	} else {
		ipv6 = "pass"
	}
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, mdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, mdDataEnd, asm.Word),
		// Long enough for Ethernet and a minimal IPv4 header?
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, ethHeaderLen+ipv4HeaderLen),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JEq.Imm(asm.R5, etherTypeIPv4LE, ipv4),
		asm.JEq.Imm(asm.R5, etherTypeIPv6LE, ipv6),
		asm.Ja.Label("pass"),
	}
	if len(dst) == 1 {
		insns = append(insns,
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+9, asm.Byte).WithSymbol("ipv4"),
			asm.JNE.Imm(asm.R5, protocolESP, "pass"),
			// A fragment goes to the kernel, which reassembles it for the
			// raw socket.
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+6, asm.Half),
			asm.JSet.Imm(asm.R5, fragmentMaskLE, "pass"),
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+16, asm.Word),
			asm.JNE.Imm32(asm.R5, dst[0], "pass"),
			asm.Ja.Label("redirect"),
		)
	} else {
		insns = append(insns,
			asm.Mov.Reg(asm.R4, asm.R2).WithSymbol("ipv6"),
			asm.Add.Imm(asm.R4, ethHeaderLen+ipv6HeaderLen),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R5, asm.R2, ethHeaderLen+6, asm.Byte),
			asm.JNE.Imm(asm.R5, protocolESP, "pass"),
		)
		for i, w := range dst {
			insns = append(insns,
				asm.LoadMem(asm.R5, asm.R2, int16(ethHeaderLen+24+4*i), asm.Word),
				asm.JNE.Imm32(asm.R5, w, "pass"))
		}
	}
	return append(insns,

		// bpf_redirect_map(sockets, rx_queue_index, XDP_PASS): the low bits
		// of the flags are the action when the queue has no socket.
		asm.LoadMem(asm.R2, asm.R1, mdRxQueueIndex, asm.Word).WithSymbol("redirect"),
		asm.LoadMapPtr(asm.R1, sockets.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	)
}

// newProgram builds the socket map for queues receive queues and loads the
// program that steers ESP to local into it.
func newProgram(queues int, local netip.Addr) (*ebpf.Map, *ebpf.Program, error) {
	sockets, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "espgw_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("create the AF_XDP socket map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "espgw_steer", Type: ebpf.XDP, License: "GPL", Instructions: steerESP(sockets, local.Unmap()),
	})
	if err != nil {
		sockets.Close()
		return nil, nil, fmt.Errorf("load the XDP program that steers ESP: %w", err)
	}
	return sockets, prog, nil
}
