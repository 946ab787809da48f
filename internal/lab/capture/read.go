package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/espgw/espgw/internal/header"
)

// Link is the link type of a capture espgw writes.
type Link string

const (
	// LinkRaw writes bare IP packets (LINKTYPE_RAW).
	LinkRaw Link = "raw"
	// LinkEthernet writes each IP packet in an Ethernet frame between two
	// locally administered addresses.
	LinkEthernet Link = "ethernet"
)

// ParseLink reads a link type name.
func ParseLink(s string) (Link, error) {
	switch Link(s) {
	case LinkRaw, LinkEthernet:
		return Link(s), nil
	}
	return "", fmt.Errorf("unknown link type %q (want raw or ethernet)", s)
}

// Skip names why a captured frame gave no packet to work on.
type Skip string

// The reasons a frame is skipped: while reading (every user of Reader), and
// while opening ESP (Opener).
const (
	NotSkipped      Skip = ""
	NotIP           Skip = "not-ip"            // no IPv4 or IPv6 packet in the frame
	MalformedIP     Skip = "malformed-ip"      // an IP header that does not parse, or a length past the frame
	Truncated       Skip = "truncated-capture" // cut short by the capture's snap length
	UnsupportedLink Skip = "unsupported-link"  // a pcapng interface of a link type no IP is read from
	IPFragment      Skip = "ip-fragment"       // an IP fragment: ESP is opened whole
	NotESP          Skip = "not-esp"           // neither protocol 50 nor UDP on an ESP port
	NATKeepalive    Skip = "nat-keepalive"     // RFC 3948 §2.3: one 0xff byte
	NonESPMarker    Skip = "non-esp-marker"    // RFC 3948 §2.2: IKE on port 4500
)

// Frame is one captured frame and the IP packet found in it.
type Frame struct {
	Index int // 1-based, as Wireshark numbers frames
	CI    gopacket.CaptureInfo
	// IP is the IP packet inside the frame, cut to the length its header
	// gives (link-layer padding dropped); nil when Skip says why not.
	IP   []byte
	Skip Skip
}

// packetSource is what pcapgo's two readers give: a frame and its link
// type (per interface in pcapng).
type packetSource interface {
	next() ([]byte, gopacket.CaptureInfo, layers.LinkType, error)
}

// Reader reads the IP packets of a pcap or pcapng capture of any link type
// an IP packet is commonly captured on: Ethernet (with up to three VLAN
// tags), raw IP (LINKTYPE_RAW, IPV4, IPV6 and the BSDs' DLT_RAW values),
// Linux cooked (SLL and SLL2) and BSD loopback. It is safe on hostile
// input: a record longer than maxSnaplen is refused before pcapgo allocates
// it, and the panics of pcapgo's pcapng reader become errors.
type Reader struct {
	name  string
	src   packetSource
	index int
}

// NewReader starts reading the capture in r; name is used in errors.
func NewReader(r io.Reader, name string) (*Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("read capture %s: too short for a pcap or pcapng header: %w", name, err)
	}
	var src packetSource
	if binary.BigEndian.Uint32(magic) == ngSectionHeader {
		if onlySectionHeader(br) {
			return nil, fmt.Errorf("read capture %s: no packets (a pcapng section header and nothing after it)", name)
		}
		src, err = newNgReader(bufio.NewReader(newNgGuard(br)))
	} else {
		var pr *pcapgo.Reader
		if pr, err = pcapgo.NewReader(br); err == nil {
			if pr.Snaplen() > maxSnaplen {
				pr.SetSnaplen(maxSnaplen) // longer records are refused, not allocated
			}
			if _, ok := linkHeader(pr.LinkType()); !ok {
				lt := pr.LinkType()
				return nil, fmt.Errorf("read capture %s: unsupported link type %s (%d): want Ethernet, raw IP, Linux SLL or SLL2, or loopback", name, lt, int(lt))
			}
		}
		src = pcapSource{pr}
	}
	if err != nil {
		return nil, fmt.Errorf("read capture %s: not a pcap or pcapng file: %w", name, err)
	}
	return &Reader{name: name, src: src}, nil
}

// onlySectionHeader reports whether what is left in br is one whole
// pcapng section header block and nothing after it: a valid but empty
// capture, which gopacket reports as a bare EOF.
func onlySectionHeader(br *bufio.Reader) bool {
	hdr, err := br.Peek(12)
	if err != nil {
		return false
	}
	var order binary.ByteOrder = binary.LittleEndian
	if binary.BigEndian.Uint32(hdr[8:]) == 0x1a2b3c4d {
		order = binary.BigEndian
	}
	n := int(order.Uint32(hdr[4:]))
	if n < 28 || n >= br.Size() {
		return false
	}
	if b, err := br.Peek(n); err != nil || order.Uint32(b[n-4:]) != uint32(n) {
		return false
	}
	_, err = br.Peek(n + 1)
	return errors.Is(err, io.EOF)
}

type pcapSource struct{ *pcapgo.Reader }

func (s pcapSource) next() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	data, ci, err := s.ReadPacketData()
	return data, ci, s.LinkType(), err
}

// newNgReader and ngSource turn panics of gopacket's pcapng reader into
// errors: on corrupt files (v1.1.19) it divides by zero for a timestamp
// resolution past 10^19 and slices option values shorter than it expects.
// The panic is the parser's, confined to reading one block.
func newNgReader(r io.Reader) (src packetSource, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt pcapng section: %v", p)
		}
	}()
	ng, err := pcapgo.NewNgReader(r, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
	if err != nil {
		return nil, err
	}
	return ngSource{ng}, nil
}

type ngSource struct{ *pcapgo.NgReader }

func (s ngSource) next() (data []byte, ci gopacket.CaptureInfo, lt layers.LinkType, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt pcapng block: %v", p)
		}
	}()
	if data, ci, err = s.ReadPacketData(); err != nil {
		return nil, ci, 0, err
	}
	ifc, err := s.Interface(ci.InterfaceIndex)
	if err != nil {
		return nil, ci, 0, fmt.Errorf("interface %d: %w", ci.InterfaceIndex, err)
	}
	return data, ci, ifc.LinkType, nil
}

// LINKTYPE values gopacket 1.1.19 does not name. Its LinkType is a byte, so
// its readers hand LINKTYPE_LINUX_SLL2 (276) on as 276 mod 256 = 20, a value
// no other link type uses.
const (
	linkTypeLinuxSLL2 = 276 & 0xff
	linkTypeRawOld    = 12 // DLT_RAW as written by some BSDs
	linkTypeRaw14     = 14
)

// linkFormat is where a link type puts the IP packet: the length of the
// fixed header before it and where its EtherType (or address family) is.
// gopacket 1.1.19 decodes neither SLL2 nor the 0x9100 VLAN tag, and finding
// the IP offset needs no more than this.
type linkFormat struct {
	hdr       int // bytes before the IP packet (Ethernet: before any VLAN tags)
	etherType int // offset of a 2-byte EtherType, -1 for none
	family    bool
}

// linkHeader returns lt's format; ok is false for a link type IP is not
// read from.
func linkHeader(lt layers.LinkType) (linkFormat, bool) {
	switch lt {
	case layers.LinkTypeEthernet:
		return linkFormat{hdr: 14, etherType: 12}, true
	case layers.LinkTypeRaw, linkTypeRawOld, linkTypeRaw14, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return linkFormat{etherType: -1}, true
	case layers.LinkTypeLinuxSLL:
		return linkFormat{hdr: 16, etherType: 14}, true
	case linkTypeLinuxSLL2:
		return linkFormat{hdr: 20, etherType: 0}, true
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		return linkFormat{hdr: 4, etherType: -1, family: true}, true
	}
	return linkFormat{}, false
}

// extract returns the IP packet inside a frame of link type lt, cut to its
// own length, or why there is none.
func extract(b []byte, lt layers.LinkType) ([]byte, Skip) {
	f, ok := linkHeader(lt)
	if !ok {
		return nil, UnsupportedLink
	}
	if len(b) < f.hdr {
		return nil, NotIP
	}
	switch {
	case f.family:
		// The address family, in the byte order of the capturing host
		// (NULL) or network order (LOOP); AF_INET6 differs between BSDs.
		af := binary.LittleEndian.Uint32(b)
		if af > 0xffff {
			af = binary.BigEndian.Uint32(b)
		}
		if af != 2 && af != 10 && af != 24 && af != 28 && af != 30 {
			return nil, NotIP
		}
	case lt == layers.LinkTypeEthernet:
		if f.hdr, ok = header.EthernetIP(b); !ok {
			return nil, NotIP
		}
	case f.etherType >= 0:
		if et := binary.BigEndian.Uint16(b[f.etherType:]); et != 0x0800 && et != 0x86dd {
			return nil, NotIP
		}
	}
	ip := b[f.hdr:]
	n, ok := header.PacketLength(ip)
	if !ok {
		return nil, MalformedIP
	}
	return ip[:n], NotSkipped
}

// Next returns the next frame, or io.EOF after the last.
func (r *Reader) Next() (Frame, error) {
	data, ci, lt, err := r.src.next()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Frame{}, io.EOF
		}
		return Frame{}, fmt.Errorf("read capture %s: frame %d: %w", r.name, r.index+1, err)
	}
	r.index++
	f := Frame{Index: r.index, CI: ci}
	if ci.CaptureLength < ci.Length {
		f.Skip = Truncated
		return f, nil
	}
	f.IP, f.Skip = extract(data, lt)
	return f, nil
}

// each hands every frame of r to fn, to the end of the capture.
func (r *Reader) each(fn func(Frame) error) error {
	for {
		f, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
	}
}

// Stats counts what reading (and rewriting) did with a capture's frames.
type Stats struct {
	Frames  int            `json:"frames"`  // records read
	Packets int            `json:"packets"` // IP packets handed on
	Skipped map[string]int `json:"skipped"` // records that gave no packet, by reason
	// Hosts says which side each capture address went to (set by Rewrite).
	Hosts map[string]string `json:"hosts,omitempty"`
}

func (s *Stats) skip(reason string, n int) {
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	s.Skipped[reason] += n
}

// ReadAll reads every IP packet of a capture, counting the frames that
// hold none; name appears in errors. A capture with no IP packet at all
// is an error.
func ReadAll(r io.Reader, name string) ([]Frame, Stats, error) {
	var st Stats
	rd, err := NewReader(r, name)
	if err != nil {
		return nil, st, err
	}
	var out []Frame
	err = rd.each(func(f Frame) error {
		st.Frames++
		if f.Skip != NotSkipped {
			st.skip(string(f.Skip), 1)
			return nil
		}
		out = append(out, f)
		st.Packets++
		return nil
	})
	if err != nil {
		return out, st, err
	}
	if len(out) == 0 {
		return nil, st, fmt.Errorf("read capture %s: no IP packet in %d records (skipped: %v)", name, st.Frames, st.Skipped)
	}
	return out, st, nil
}

// Writer writes IP packets to a pcap file.
type Writer struct {
	w    *pcapgo.Writer
	link Link
	buf  []byte
}

// NewWriter writes a pcap header for link to w.
func NewWriter(w io.Writer, link Link) (*Writer, error) {
	pw := pcapgo.NewWriterNanos(w)
	lt := layers.LinkTypeRaw
	if link == LinkEthernet {
		lt = layers.LinkTypeEthernet
	}
	if err := pw.WriteFileHeader(65535, lt); err != nil {
		return nil, fmt.Errorf("write pcap header: %w", err)
	}
	return &Writer{w: pw, link: link}, nil
}

// Write writes one IP packet with the capture's timestamp.
func (w *Writer) Write(ci gopacket.CaptureInfo, ip []byte) error {
	data := ip
	if w.link == LinkEthernet {
		w.buf = append(w.buf[:0], 2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00)
		if header.Version(ip) == 6 {
			w.buf[12], w.buf[13] = 0x86, 0xdd
		}
		w.buf = append(w.buf, ip...)
		data = w.buf
	}
	ci.CaptureLength, ci.Length = len(data), len(data)
	ci.InterfaceIndex = 0
	return w.w.WritePacket(ci, data)
}

// WriteFile writes the IP packets pkts to a new capture at path, packet i
// stamped i milliseconds after the start of 2026: the same file every run.
func WriteFile(path string, link Link, pkts [][]byte) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create capture: %w", err)
	}
	w, err := NewWriter(f, link)
	for i := 0; err == nil && i < len(pkts); i++ {
		err = w.Write(gopacket.CaptureInfo{Timestamp: time.Date(2026, 1, 1, 0, 0, 0, i*1e6, time.UTC)}, pkts[i])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write capture %q: %w", path, err)
	}
	return nil
}
