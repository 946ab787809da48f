package scenario

import (
	"encoding/binary"
	"fmt"
	"net"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/espgw/espgw/sa"
)

// Header marks: a step's sender can write the TOS / traffic class (DSCP and
// ECN) and TTL of its packets, and forbid or allow fragmentation; a UDP
// step's receiver records what the headers said on arrival and the sender
// what it learned of the path. Expectations read them as steps.NAME.dscp,
// .ecn-ce, .ecn-ect0, .ecn-ect1, .ecn-not-ect, .ttl, .path-mtu, .too-big,
// and for pings .time-exceeded, .frag-needed, .reported-mtu.

// Headers is what a step saw of the IP headers.
type Headers struct {
	// ECN counts the packets received per ECN codepoint: Not-ECT, ECT(1),
	// ECT(0), CE.
	ECN [4]int `json:"ecn"`
	// DSCP counts the packets received per DSCP.
	DSCP map[int]int `json:"dscp,omitempty"`
	// MinTTL is the lowest TTL / hop limit a received packet had.
	MinTTL int `json:"min_ttl,omitempty"`
	// PathMTU is the path MTU the sender's kernel held for the destination
	// after the step (IP_MTU): what ICMP errors taught it.
	PathMTU int `json:"path_mtu,omitempty"`
	// TooBig counts sends the sender's kernel refused with EMSGSIZE.
	TooBig int `json:"too_big,omitempty"`
	// ExtHeaders counts the IPv6 datagrams that arrived with the
	// hop-by-hop and destination options headers a step with ext-headers
	// sent them with.
	ExtHeaders int `json:"ext_headers,omitempty"`
	// Ping only: ICMP errors ping reported, and the MTU the last
	// fragmentation-needed / packet-too-big announced.
	TimeExceeded int `json:"time_exceeded,omitempty"`
	FragNeeded   int `json:"frag_needed,omitempty"`
	ReportedMTU  int `json:"reported_mtu,omitempty"`
}

// see records one received datagram's control messages.
func (h *Headers) see(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	hbh, dst := false, false
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IPV6 && len(m.Data) == len(padOptions) && string(m.Data[1:]) == string(padOptions[1:]) {
			hbh = hbh || m.Header.Type == unix.IPV6_HOPOPTS
			dst = dst || m.Header.Type == unix.IPV6_DSTOPTS
		}
	}
	if hbh && dst {
		h.ExtHeaders++
	}
	for _, m := range msgs {
		var v int
		switch {
		case len(m.Data) >= 4:
			v = int(binary.NativeEndian.Uint32(m.Data))
		case len(m.Data) >= 1:
			v = int(m.Data[0])
		default:
			continue
		}
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS,
			m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS:
			if h.DSCP == nil {
				h.DSCP = map[int]int{}
			}
			h.DSCP[v>>2&63]++
			h.ECN[v&3]++
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL,
			m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT:
			if h.MinTTL == 0 || v < h.MinTTL {
				h.MinTTL = v
			}
		}
	}
}

// add merges o (another family's flow of the same step) into h.
func (h *Headers) add(o Headers) {
	for i := range h.ECN {
		h.ECN[i] += o.ECN[i]
	}
	for d, n := range o.DSCP {
		if h.DSCP == nil {
			h.DSCP = map[int]int{}
		}
		h.DSCP[d] += n
	}
	if o.MinTTL > 0 && (h.MinTTL == 0 || o.MinTTL < h.MinTTL) {
		h.MinTTL = o.MinTTL
	}
	if o.PathMTU > 0 && (h.PathMTU == 0 || o.PathMTU < h.PathMTU) {
		h.PathMTU = o.PathMTU
	}
	h.TooBig += o.TooBig
	h.ExtHeaders += o.ExtHeaders
	h.TimeExceeded += o.TimeExceeded
	h.FragNeeded += o.FragNeeded
	if o.ReportedMTU > 0 {
		h.ReportedMTU = o.ReportedMTU
	}
}

// metrics are the step's header metrics under prefix p.
func (h *Headers) metrics(p string, m Metrics) {
	if len(h.DSCP) == 1 {
		for d := range h.DSCP {
			m[p+"dscp"] = float64(d)
		}
	} else if len(h.DSCP) > 1 {
		m[p+"dscp"] = -1 // mixed
	}
	for i, name := range []string{"ecn-not-ect", "ecn-ect1", "ecn-ect0", "ecn-ce"} {
		m[p+name] = float64(h.ECN[i])
	}
	m[p+"ttl"] = float64(h.MinTTL)
	m[p+"path-mtu"] = float64(h.PathMTU)
	m[p+"too-big"] = float64(h.TooBig)
	m[p+"ext-headers"] = float64(h.ExtHeaders)
	m[p+"time-exceeded"] = float64(h.TimeExceeded)
	m[p+"frag-needed"] = float64(h.FragNeeded)
	m[p+"reported-mtu"] = float64(h.ReportedMTU)
}

// recordHeaders asks the receiving socket for each datagram's TOS /
// traffic class and TTL / hop limit.
func recordHeaders(c *net.UDPConn, v6 bool) error {
	return control(c, func(fd int) error {
		if v6 {
			for _, o := range []int{unix.IPV6_RECVTCLASS, unix.IPV6_RECVHOPLIMIT, unix.IPV6_RECVHOPOPTS, unix.IPV6_RECVDSTOPTS} {
				if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o, 1); err != nil {
					return fmt.Errorf("IPv6 receive option %d: %w", o, err)
				}
			}
			return nil
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return fmt.Errorf("IP_RECVTOS: %w", err)
		}
		return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
	})
}

// padOptions is the extension header an ext-headers step sends, as
// hop-by-hop and as destination options: one PadN option filling it to
// eight bytes (the kernel writes the next-header byte).
var padOptions = []byte{0, 0, 1, 4, 0, 0, 0, 0}

// markSender sets the sending socket's TOS / traffic class, TTL and DF,
// and IPv6 extension headers when ext is set.
func markSender(c *net.UDPConn, v6 bool, m Marks, df *bool, ext bool) error {
	return control(c, func(fd int) error {
		if ext && v6 {
			for _, o := range []int{unix.IPV6_HOPOPTS, unix.IPV6_DSTOPTS} {
				if err := unix.SetsockoptString(fd, unix.IPPROTO_IPV6, o, string(padOptions)); err != nil {
					return fmt.Errorf("set IPv6 extension header (option %d): %w", o, err)
				}
			}
		}
		if v := m.byteValue(); v >= 0 {
			lvl, opt := unix.IPPROTO_IP, unix.IP_TOS
			if v6 {
				lvl, opt = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
			}
			if err := unix.SetsockoptInt(fd, lvl, opt, v); err != nil {
				return fmt.Errorf("set TOS %d: %w", v, err)
			}
		}
		if m.TTL > 0 {
			lvl, opt := unix.IPPROTO_IP, unix.IP_TTL
			if v6 {
				lvl, opt = unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS
			}
			if err := unix.SetsockoptInt(fd, lvl, opt, m.TTL); err != nil {
				return fmt.Errorf("set TTL %d: %w", m.TTL, err)
			}
		}
		if df != nil {
			if v6 {
				v := 0
				if *df {
					v = 1
				}
				return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, v)
			}
			mode := unix.IP_PMTUDISC_DONT
			if *df {
				mode = unix.IP_PMTUDISC_DO
			}
			return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, mode)
		}
		return nil
	})
}

// pathMTU is the path MTU a connected socket's kernel holds (0 if unknown).
func pathMTU(c *net.UDPConn, v6 bool) int {
	mtu := 0
	control(c, func(fd int) error {
		lvl, opt := unix.IPPROTO_IP, unix.IP_MTU
		if v6 {
			lvl, opt = unix.IPPROTO_IPV6, unix.IPV6_MTU
		}
		mtu, _ = unix.GetsockoptInt(fd, lvl, opt)
		return nil
	})
	return mtu
}

func control(c *net.UDPConn, fn func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

var (
	pingTimeExceeded = regexp.MustCompile(`(?m)Time to live exceeded|Time exceeded: Hop limit`)
	pingFragNeeded   = regexp.MustCompile(`(?m)(?:Frag needed and DF set \(mtu = (\d+)\)|Packet too big: mtu=(\d+))`)
)

// pingErrors reads the ICMP errors ping printed.
func pingErrors(out []byte) Headers {
	var h Headers
	h.TimeExceeded = len(pingTimeExceeded.FindAll(out, -1))
	for _, m := range pingFragNeeded.FindAllSubmatch(out, -1) {
		h.FragNeeded++
		for _, g := range m[1:] {
			if len(g) > 0 {
				h.ReportedMTU, _ = strconv.Atoi(string(g))
			}
		}
	}
	return h
}

// pingArgs are ping's options for the marks.
func pingArgs(m Marks) []string {
	var args []string
	if v := m.byteValue(); v >= 0 {
		args = append(args, "-Q", strconv.Itoa(v))
	}
	if m.TTL > 0 {
		args = append(args, "-t", strconv.Itoa(m.TTL))
	}
	return args
}

// header applies the spec's outer-header options to one SA.
func (spec *SASpec) header(s *sa.SA) error {
	var err error
	if spec.DSCP != "" {
		if s.DSCP, err = sa.ParseDSCP(spec.DSCP); err != nil {
			return fmt.Errorf("sa.dscp: %w", err)
		}
	}
	if spec.DecapDSCP != "" {
		if s.DecapDSCP, err = sa.ParseDecapDSCP(spec.DecapDSCP); err != nil {
			return fmt.Errorf("sa.decap-dscp: %w", err)
		}
	}
	if spec.DF != "" {
		if s.DF, err = sa.ParseDF(spec.DF); err != nil {
			return fmt.Errorf("sa.df: %w", err)
		}
	}
	if spec.TTL < 0 || spec.TTL > 255 {
		return fmt.Errorf("sa.ttl %d: want 1..255", spec.TTL)
	}
	s.TTL = uint8(spec.TTL)
	return nil
}
