// Package pcaprewrite prepares any capture for replay through the espgw test
// bed: it reads pcap or pcapng files of the usual link types (Ethernet with
// VLAN tags, raw IP, Linux cooked SLL and SLL2, BSD loopback), extracts the
// IPv4 and IPv6 packets, maps the capture's hosts onto the two hosts of the
// topology (hostA behind one gateway, hostB behind the other), fixes the IP,
// TCP, UDP, ICMP and ICMPv6 checksums, and gives each packet its send time
// (kept, scaled or dropped). Sending is the caller's business.
//
// Nothing is dropped silently: every frame that yields no packet is counted
// under a named reason in Stats.
package pcaprewrite

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Frame is one IP packet found in a capture.
type Frame struct {
	Time time.Time
	Data []byte // the IP packet, from its first header byte to its total length
}

// Stats counts what reading and rewriting did with a capture's frames.
type Stats struct {
	Frames  int            `json:"frames"`  // records read
	Packets int            `json:"packets"` // IP packets handed on
	Skipped map[string]int `json:"skipped"` // records that gave no packet, by reason
	// Hosts says which side each capture address went to (set by Rewrite).
	Hosts map[string]string `json:"hosts,omitempty"`
}

func (s *Stats) skip(reason string) {
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	s.Skipped[reason]++
}

// LINKTYPE values gopacket 1.1.19 does not name. Its LinkType is a byte, so
// its readers hand LINKTYPE_LINUX_SLL2 (276) on as 276 mod 256 = 20, a value
// no other link type uses.
const (
	linkTypeLinuxSLL2 = 276 & 0xff
	linkTypeRawOld    = 12 // DLT_RAW as written by some BSDs
	linkTypeRaw14     = 14
)

// packetSource is what pcapgo's two readers share.
type packetSource interface {
	readFrame() ([]byte, time.Time, layers.LinkType, error)
}

// Read extracts the IP packets of a pcap or pcapng capture. name appears in
// errors.
func Read(r io.Reader, name string) ([]Frame, Stats, error) {
	var st Stats
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, st, fmt.Errorf("read capture %s: too short for a pcap or pcapng header: %w", name, err)
	}
	var src packetSource
	switch binary.LittleEndian.Uint32(magic) {
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1:
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, st, fmt.Errorf("read capture %s: %w", name, err)
		}
		src = pcapSource{pr}
	case 0x0a0d0d0a:
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return nil, st, fmt.Errorf("read capture %s (pcapng): %w", name, err)
		}
		src = ngSource{nr}
	default:
		return nil, st, fmt.Errorf("read capture %s: not a pcap or pcapng file (starts % x)", name, magic)
	}
	var out []Frame
	for {
		data, ts, lt, err := src.readFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, st, fmt.Errorf("read capture %s, record %d: %w", name, st.Frames+1, err)
		}
		st.Frames++
		ip, reason := extract(data, lt)
		if reason != "" {
			st.skip(reason)
			continue
		}
		if reason := checkIP(ip); reason != "" {
			st.skip(reason)
			continue
		}
		ip = ip[:ipLength(ip)]
		out = append(out, Frame{Time: ts, Data: append([]byte(nil), ip...)})
		st.Packets++
	}
	if len(out) == 0 {
		return nil, st, fmt.Errorf("read capture %s: no IP packet in %d records (skipped: %v)", name, st.Frames, st.Skipped)
	}
	return out, st, nil
}

type pcapSource struct{ r *pcapgo.Reader }

func (p pcapSource) readFrame() ([]byte, time.Time, layers.LinkType, error) {
	data, ci, err := p.r.ReadPacketData()
	return data, ci.Timestamp, p.r.LinkType(), err
}

type ngSource struct{ r *pcapgo.NgReader }

func (p ngSource) readFrame() ([]byte, time.Time, layers.LinkType, error) {
	data, ci, err := p.r.ReadPacketData()
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	ifc, err := p.r.Interface(ci.InterfaceIndex)
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("interface %d: %w", ci.InterfaceIndex, err)
	}
	return data, ci.Timestamp, ifc.LinkType, nil
}

// extract returns the IP packet inside a frame of link type lt, or why
// there is none.
func extract(b []byte, lt layers.LinkType) ([]byte, string) {
	etherType := func(et uint16, rest []byte) ([]byte, string) {
		if et == 0x0800 || et == 0x86dd {
			return rest, ""
		}
		return nil, fmt.Sprintf("not IP (ethertype %#04x)", et)
	}
	switch lt {
	case layers.LinkTypeEthernet:
		off := 12
		for tags := 0; ; tags++ {
			if len(b) < off+2 {
				return nil, "short Ethernet frame"
			}
			et := binary.BigEndian.Uint16(b[off:])
			if (et == 0x8100 || et == 0x88a8 || et == 0x9100) && tags < 3 {
				off += 4
				continue
			}
			return etherType(et, b[off+2:])
		}
	case layers.LinkTypeRaw, linkTypeRawOld, linkTypeRaw14, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return b, ""
	case layers.LinkTypeLinuxSLL:
		if len(b) < 16 {
			return nil, "short Linux SLL header"
		}
		return etherType(binary.BigEndian.Uint16(b[14:]), b[16:])
	case linkTypeLinuxSLL2:
		if len(b) < 20 {
			return nil, "short Linux SLL2 header"
		}
		return etherType(binary.BigEndian.Uint16(b[0:]), b[20:])
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		if len(b) < 4 {
			return nil, "short loopback header"
		}
		// The address family, in the byte order of the capturing host
		// (NULL) or network order (LOOP); AF_INET6 differs between BSDs.
		af := binary.LittleEndian.Uint32(b)
		if af > 0xffff {
			af = binary.BigEndian.Uint32(b)
		}
		switch af {
		case 2, 10, 24, 28, 30:
			return b[4:], ""
		}
		return nil, fmt.Sprintf("not IP (address family %d)", af)
	}
	return nil, fmt.Sprintf("unsupported link type %d (%v)", int(lt), lt)
}

// checkIP returns why ip is not a whole IP packet, or "".
func checkIP(ip []byte) string {
	if len(ip) < 1 {
		return "empty IP packet"
	}
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < 20 || int(ip[0]&0x0f)*4 < 20 || int(ip[0]&0x0f)*4 > len(ip) {
			return "malformed IPv4 header"
		}
	case 6:
		if len(ip) < 40 {
			return "malformed IPv6 header"
		}
	default:
		return fmt.Sprintf("IP version %d", ip[0]>>4)
	}
	n := ipLength(ip)
	if n > len(ip) {
		return "cut short by the capture's snap length"
	}
	if n < 20 {
		return "malformed IP length"
	}
	return ""
}

// ipLength is the length the IP header gives its packet.
func ipLength(ip []byte) int {
	if ip[0]>>4 == 6 {
		return 40 + int(binary.BigEndian.Uint16(ip[4:]))
	}
	return int(binary.BigEndian.Uint16(ip[2:]))
}
