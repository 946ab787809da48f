package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
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

// Frame is one captured frame and the IP packet found in it.
type Frame struct {
	Index int // 1-based, as Wireshark numbers frames
	CI    gopacket.CaptureInfo
	// IP is the IP packet inside the frame (it may still carry link-layer
	// trailer bytes beyond the IP length); nil when Skip says why not.
	IP   []byte
	Skip Skip
}

type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	LinkType() layers.LinkType
}

// Reader reads the IP packets of a pcap or pcapng capture whose link type
// is Ethernet, raw IP (LINKTYPE_RAW, IPV4, IPV6), Linux cooked (SLL) or BSD
// loopback.
type Reader struct {
	name    string
	src     packetSource
	decoder gopacket.Decoder
	index   int
}

// NewReader starts reading the capture in r; name is used in errors.
func NewReader(r io.Reader, name string) (*Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("read capture %s: too short for a pcap header: %w", name, err)
	}
	var src packetSource
	if binary.BigEndian.Uint32(magic) == ngSectionHeader {
		if onlySectionHeader(br) {
			return nil, fmt.Errorf("read capture %s: no packets (a pcapng section header and nothing after it)", name)
		}
		src, err = newNgReader(bufio.NewReader(newNgGuard(br)))
	} else {
		var pr *pcapgo.Reader
		if pr, err = pcapgo.NewReader(br); err == nil && pr.Snaplen() > maxSnaplen {
			pr.SetSnaplen(maxSnaplen) // longer records are refused, not allocated
		}
		src = pr
	}
	if err != nil {
		return nil, fmt.Errorf("read capture %s: not a pcap or pcapng file: %w", name, err)
	}
	dec, err := decoderFor(src.LinkType())
	if err != nil {
		return nil, fmt.Errorf("read capture %s: %w", name, err)
	}
	return &Reader{name: name, src: src, decoder: dec}, nil
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
	ng, err := pcapgo.NewNgReader(r, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		return nil, err
	}
	return ngSource{ng}, nil
}

type ngSource struct{ *pcapgo.NgReader }

func (s ngSource) ReadPacketData() (data []byte, ci gopacket.CaptureInfo, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt pcapng block: %v", p)
		}
	}()
	return s.NgReader.ReadPacketData()
}

func decoderFor(lt layers.LinkType) (gopacket.Decoder, error) {
	switch lt {
	case layers.LinkTypeEthernet, layers.LinkTypeRaw, layers.LinkTypeLinuxSLL,
		layers.LinkTypeNull, layers.LinkTypeLoop, 12, 14:
		return lt, nil
	case layers.LinkTypeIPv4:
		return layers.LayerTypeIPv4, nil
	case layers.LinkTypeIPv6:
		return layers.LayerTypeIPv6, nil
	}
	return nil, fmt.Errorf("unsupported link type %s (%d): want Ethernet, raw IP or Linux SLL", lt, int(lt))
}

// Next returns the next frame, or io.EOF after the last.
func (r *Reader) Next() (Frame, error) {
	data, ci, err := r.src.ReadPacketData()
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
	pkt := gopacket.NewPacket(data, r.decoder, gopacket.NoCopy)
	off := 0
	for _, l := range pkt.Layers() {
		if t := l.LayerType(); t == layers.LayerTypeIPv4 || t == layers.LayerTypeIPv6 {
			f.IP = data[off:]
			return f, nil
		}
		off += len(l.LayerContents())
	}
	f.Skip = NotIP
	if pkt.ErrorLayer() != nil {
		f.Skip = MalformedIP
	}
	return f, nil
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
		if len(ip) > 0 && ip[0]>>4 == 6 {
			w.buf[12], w.buf[13] = 0x86, 0xdd
		}
		w.buf = append(w.buf, ip...)
		data = w.buf
	}
	ci.CaptureLength, ci.Length = len(data), len(data)
	ci.InterfaceIndex = 0
	return w.w.WritePacket(ci, data)
}
