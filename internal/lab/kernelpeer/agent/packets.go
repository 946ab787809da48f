package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/espgw/espgw/internal/header"
)

// inject sends each hex-encoded IP packet as the guest's own, through its
// XFRM policies, so the header fields the host chose (TOS / traffic class,
// DF, TTL) are what its ESP encapsulates. IPv6 packets go whole from a raw
// IPPROTO_RAW socket. IPv4 ones would too, but the kernel sends packets of
// a header-including IPv4 raw socket past its XFRM output policies (seen
// on Debian's 6.1: the policy is never used), so an IPv4 UDP packet is
// sent from a UDP socket bound to its source, with its TOS, TTL and DF
// (IP_TOS, IP_TTL, IP_MTU_DISCOVER) and payload: the same header fields.
//
//	espgw-agent inject HEX...
func inject(args []string) error {
	for i, h := range args {
		pkt, err := hex.DecodeString(h)
		if err != nil || len(pkt) < 20 {
			return fmt.Errorf("packet %d: not a hex IP packet", i)
		}
		if ip4, hl, err := header.ParseIPv4(pkt); err == nil && ip4.Protocol == syscall.IPPROTO_UDP {
			if err := sendUDP4(ip4, pkt[hl:]); err != nil {
				return fmt.Errorf("send packet %d: %w", i, err)
			}
			continue
		}
		fam, to := syscall.AF_INET, syscall.Sockaddr(nil)
		switch _, dst := header.AddrBytes(pkt); {
		case len(dst) == 4:
			to = &syscall.SockaddrInet4{Addr: [4]byte(dst)}
		case len(dst) == 16:
			fam, to = syscall.AF_INET6, &syscall.SockaddrInet6{Addr: [16]byte(dst)}
		case header.Version(pkt) == 6:
			return fmt.Errorf("packet %d: short IPv6 packet", i)
		default:
			return fmt.Errorf("packet %d: not a hex IP packet", i)
		}
		fd, err := syscall.Socket(fam, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		if err != nil {
			return fmt.Errorf("raw socket: %w", err)
		}
		err = syscall.Sendto(fd, pkt, 0, to)
		syscall.Close(fd)
		if err != nil {
			return fmt.Errorf("send packet %d: %w", i, err)
		}
	}
	return nil
}

// sendUDP4 sends the payload of the UDP datagram u, which the IPv4 header
// h carries, from a UDP socket with the header's marks.
func sendUDP4(h header.IPv4, u []byte) error {
	if len(u) < header.UDPLen {
		return fmt.Errorf("short UDP packet")
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	pmtu := syscall.IP_PMTUDISC_DONT
	if h.DF {
		pmtu = syscall.IP_PMTUDISC_DO
	}
	for _, o := range [][2]int{{syscall.IP_TOS, int(h.TOS)}, {syscall.IP_TTL, int(h.TTL)}, {syscall.IP_MTU_DISCOVER, pmtu}} {
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IP, o[0], o[1]); err != nil {
			return fmt.Errorf("socket option %d: %w", o[0], err)
		}
	}
	sport, dport := header.Ports(u)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(sport), Addr: h.Src.As4()}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	return syscall.Sendto(fd, u[header.UDPLen:], 0, &syscall.SockaddrInet4{Port: int(dport), Addr: h.Dst.As4()})
}

// recvMarks receives UDP datagrams on PORT (IPv4 and IPv6) until COUNT
// arrived or MS milliseconds passed and prints one line per datagram:
// "FAMILY tos=N ttl=N HEXPAYLOAD", the TOS / traffic class and TTL / hop
// limit its header had when the guest delivered it.
//
//	espgw-agent recv PORT COUNT MS
func recvMarks(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: recv PORT COUNT MS")
	}
	port, err1 := strconv.Atoi(args[0])
	count, err2 := strconv.Atoi(args[1])
	ms, err3 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return fmt.Errorf("recv: want numbers, got %v", args)
	}
	deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
	var mu sync.Mutex
	got := 0
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, fam := range []string{"udp4", "udp6"} {
		addr := netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))
		if fam == "udp6" {
			addr = netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port))
		}
		c, err := net.ListenUDP(fam, net.UDPAddrFromAddrPort(addr))
		if err != nil {
			return fmt.Errorf("listen %s: %w", fam, err)
		}
		defer c.Close()
		rc, _ := c.SyscallConn()
		rc.Control(func(fd uintptr) {
			if fam == "udp6" {
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1)
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, 0x42 /* IPV6_RECVTCLASS */, 1)
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_RECVHOPLIMIT, 1)
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, 53 /* IPV6_RECVHOPOPTS */, 1)
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, 58 /* IPV6_RECVDSTOPTS */, 1)
			} else {
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_RECVTOS, 1)
				syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_RECVTTL, 1)
			}
		})
		c.SetReadDeadline(deadline)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, oob := make([]byte, 65536), make([]byte, 256)
			for {
				n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
				if err != nil {
					return
				}
				tos, ttl, ext := marks(oob[:oobn])
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%s tos=%d ttl=%d ext=%s %x\n", fam, tos, ttl, ext, buf[:n])
				got++
				if got >= count {
					once.Do(func() { close(done) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
	}
	return nil
}

// marks reads the TOS / traffic class and TTL / hop limit control messages,
// and names the IPv6 extension headers reported (h: hop-by-hop, d:
// destination options, "-" for none).
func marks(oob []byte) (tos, ttl int, ext string) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, -1, "-"
	}
	tos, ttl = -1, -1
	for _, m := range msgs {
		if m.Header.Level == syscall.IPPROTO_IPV6 {
			switch m.Header.Type {
			case 54: // IPV6_HOPOPTS
				ext += "h"
			case 59: // IPV6_DSTOPTS
				ext += "d"
			}
		}
		v := -1
		switch {
		case len(m.Data) >= 4:
			v = int(binary.NativeEndian.Uint32(m.Data))
		case len(m.Data) >= 1:
			v = int(m.Data[0])
		}
		switch {
		case m.Header.Level == syscall.IPPROTO_IP && m.Header.Type == syscall.IP_TOS,
			m.Header.Level == syscall.IPPROTO_IPV6 && m.Header.Type == 0x43 /* IPV6_TCLASS */ :
			tos = v
		case m.Header.Level == syscall.IPPROTO_IP && m.Header.Type == syscall.IP_TTL,
			m.Header.Level == syscall.IPPROTO_IPV6 && m.Header.Type == syscall.IPV6_HOPLIMIT:
			ttl = v
		}
	}
	if ext == "" {
		ext = "-"
	}
	return tos, ttl, ext
}
