package sa

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"unsafe"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/secret"
)

// ConvertStream reads an SA file from r (called name in messages) and
// writes it to w in format to, for the host local (see ConvertFor). An
// input of at most MaxConvertSize bytes is read whole, in any format. A
// larger one is streamed, in bounded memory: YAML (in the form the README
// shows: block lists and mappings, one-line flow mappings, plain or simply
// quoted values) and esp_sa tables. Each SA is written as it is read, and
// what the policies need of it (SPI, mode, addresses, selectors: some 100
// bytes) is all that is kept of it; the policies are kept until the end.
// Larger inputs in the other formats are refused, saying so. On an error,
// part of the output may have been written (secret.WriteFileFrom keeps a
// file's old content then).
func ConvertStream(name string, r io.Reader, from, to Format, local netip.Addr, w io.Writer) error {
	if !slices.Contains(WriteFormats, to) {
		return fmt.Errorf("cannot write SA format %s (want %s)", secret.Word(string(to), "yaml", "setkey", "ip-xfrm", "esp-sa"), formatList(WriteFormats))
	}
	if local.IsValid() && to != FormatXFRM {
		return fmt.Errorf("a local address is for ip-xfrm output only: %s output is the same for both ends", to)
	}
	head := make([]byte, MaxConvertSize+1)
	n, err := io.ReadFull(r, head)
	whole := err == io.EOF || err == io.ErrUnexpectedEOF
	if err != nil && !whole {
		return fmt.Errorf("read %s: %w", name, err)
	}
	head = head[:n]
	if from == "" {
		from = DetectFormat(head)
	}
	// What the streaming readers do not read, and every format but YAML
	// and esp_sa, is read whole, up to MaxConvertSize.
	if whole && (from != FormatYAML && from != FormatEspSA || from == FormatYAML && !streamable(head)) {
		out, err := ConvertFor(name, head, from, to, local)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	in := io.MultiReader(bytes.NewReader(head), r)
	cw := &convertWriter{w: bufio.NewWriterSize(w, 64<<10), to: to, local: local, needRefs: to == FormatSetkey || to == FormatXFRM}
	switch from {
	case FormatYAML:
		err = cw.yaml(name, in)
	case FormatEspSA:
		err = cw.espSA(name, in)
	default:
		return fmt.Errorf("%s is larger than %d bytes: sa convert streams larger files of YAML and esp_sa only, and reads %s files of at most that size: split it into smaller files", name, MaxConvertSize, from)
	}
	if err != nil {
		return err
	}
	if cw.n == 0 {
		return errors.New(name + ": no SAs to convert")
	}
	if err := cw.finish(); err != nil {
		return err
	}
	return cw.w.Flush()
}

// streamable reports whether the streaming reader reads all of data.
func streamable(data []byte) bool {
	if checkBytes(data) != nil {
		return false
	}
	r := &streamReader{src: unsafe.String(unsafe.SliceData(data), len(data))}
	return r.document(nopSink{}) == nil
}

type nopSink struct{}

func (nopSink) list(string, int, int)    {}
func (nopSink) entry(string, *yaml.Node) {}

// maxStreamedEntry bounds one entry of a streamed YAML file: the reader
// holds a window of the file twice this size.
const maxStreamedEntry = 1 << 20

// yaml streams a YAML SA file through the streaming reader, a window at a
// time.
func (cw *convertWriter) yaml(name string, in io.Reader) error {
	p := &yamlParser{file: name}
	b := newConfigBuilder(p)
	cw.needRefs = true
	b.keep = cw.sa
	b.finder = func() saFinder { return cw.refs.index() }
	r := &streamReader{in: in, window: make([]byte, 0, 2*maxStreamedEntry), line: 1}
	err := r.fill()
	if err == nil {
		err = r.document(b)
	}
	if errors.Is(err, errNotSubset) {
		return fmt.Errorf("%s:%d: sa convert streams a YAML file larger than %d bytes only in the form the README shows (block lists and mappings, one-line flow mappings, plain or simply quoted values, each entry under %d bytes); from here on it has more (anchors, aliases, tags, merge keys, escapes or values over several lines): write it so, or split it into smaller files", name, r.line, MaxConvertSize, maxStreamedEntry)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if _, err, _ := p.finish(nil); err != nil {
		return err
	}
	if b.werr != nil {
		return b.werr
	}
	cw.spd = b.c.SPD
	return nil
}

// espSA streams an esp_sa table line by line.
func (cw *convertWriter) espSA(name string, in io.Reader) error {
	p := &lineProblems{file: name}
	seen := map[saKey]int{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxStreamedEntry)
	for line := 1; sc.Scan(); line++ {
		if err := espSALine(p, seen, line, sc.Text(), cw.sa); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return p.errs.Err()
}

// convertWriter writes SAs in a format as they come, and at the end what
// follows them: the selectors' and the policies' lines.
type convertWriter struct {
	w     *bufio.Writer
	to    Format
	local netip.Addr
	n     int
	// needRefs: the output's policy lines or the input's policies need
	// what refs keeps of each SA.
	needRefs bool
	refs     refSet // of the SAs written, when the output needs them
	spd      []Policy
}

// sa writes one SA.
func (cw *convertWriter) sa(s *SA) error {
	if cw.n == 0 {
		if err := cw.start(); err != nil {
			return err
		}
	}
	cw.n++
	if cw.needRefs {
		cw.refs.add(s)
	}
	switch cw.to {
	case FormatYAML:
		var buf bytes.Buffer
		if err := s.Validate(); err != nil {
			return fmt.Errorf("marshal SA %#x: %w", s.SPI, err)
		}
		if err := encodeItem(&buf, marshalSA(s)); err != nil {
			return err
		}
		_, err := cw.w.Write(buf.Bytes())
		return err
	case FormatSetkey:
		var b strings.Builder
		if err := setkeyAdd(&b, s); err != nil {
			return err
		}
		_, err := cw.w.WriteString(b.String())
		return err
	case FormatXFRM:
		a, err := XFRMStateArgs(s)
		if err != nil {
			return err
		}
		writeIP(cw.w, a)
		return nil
	default:
		line, err := EspSALine(s)
		if err != nil {
			return err
		}
		cw.w.WriteString(line)
		return cw.w.WriteByte('\n')
	}
}

func (cw *convertWriter) start() error {
	var err error
	switch cw.to {
	case FormatYAML:
		_, err = cw.w.WriteString("sa:\n")
	case FormatSetkey:
		_, err = cw.w.WriteString(setkeyHeader)
	case FormatXFRM:
		_, err = cw.w.WriteString(xfrmHeader(cw.local))
	}
	return err
}

// finish writes what follows the SAs.
func (cw *convertWriter) finish() error {
	switch cw.to {
	case FormatYAML:
		if len(cw.spd) > 0 {
			cw.w.WriteString("spd:\n")
			for i := range cw.spd {
				var buf bytes.Buffer
				if err := encodeItem(&buf, marshalPolicy(&cw.spd[i])); err != nil {
					return err
				}
				cw.w.Write(buf.Bytes())
			}
		}
		return nil
	case FormatSetkey:
		return setkeyPolicies(cw.w, cw.refs.index(), cw.spd)
	case FormatXFRM:
		return xfrmPolicies(cw.w, cw.refs.index(), cw.spd, cw.local)
	}
	return nil
}

// saRef is what the lines after the SAs (selectors and policies) need of
// an SA, in 40 bytes (its selectors, rare, kept apart).
type saRef struct {
	spi      uint32
	mode     Mode
	v6       bool
	src, dst [16]byte
}

func refOf(s *SA) saRef {
	return saRef{spi: s.SPI, mode: s.Mode, v6: s.Dst.Is6(), src: s.Src.As16(), dst: s.Dst.As16()}
}

func (r *saRef) addrs() (src, dst netip.Addr) {
	src, dst = netip.AddrFrom16(r.src), netip.AddrFrom16(r.dst)
	if !r.v6 {
		src, dst = src.Unmap(), dst.Unmap()
	}
	return src, dst
}

// saKey is an SA's SPI and destination, a map key of 24 bytes.
type saKey struct {
	spi uint32
	v6  bool
	dst [16]byte
}

func keyOf(spi uint32, dst netip.Addr) saKey {
	return saKey{spi, dst.Is6(), dst.As16()}
}

// refSet is the SAs written, by SPI.
type refSet struct {
	refs  []saRef
	sels  map[int32][]Selector // of the SAs that have any, by index
	bySPI map[uint32][2]int32  // the first two SAs of each SPI (-1: none)
}

// add appends the ref of s.
func (rs *refSet) add(s *SA) {
	if len(s.Selectors) > 0 {
		if rs.sels == nil {
			rs.sels = map[int32][]Selector{}
		}
		rs.sels[int32(len(rs.refs))] = slices.Clip(s.Selectors)
	}
	rs.refs = append(rs.refs, refOf(s))
}

// index makes bySPI.
func (rs *refSet) index() *refSet {
	rs.bySPI = make(map[uint32][2]int32, len(rs.refs))
	for i := range rs.refs {
		at, ok := rs.bySPI[rs.refs[i].spi]
		switch {
		case !ok:
			rs.bySPI[rs.refs[i].spi] = [2]int32{int32(i), -1}
		case at[1] < 0:
			rs.bySPI[rs.refs[i].spi] = [2]int32{at[0], int32(i)}
		}
	}
	return rs
}

// sa is an SA of the ref's fields alone, for the writers that take one.
func (rs *refSet) sa(i int) *SA {
	r := &rs.refs[i]
	src, dst := r.addrs()
	return &SA{SPI: r.spi, Mode: r.mode, Src: src, Dst: dst, Selectors: rs.sels[int32(i)]}
}

func refsOf(sas []*SA) *refSet {
	rs := &refSet{refs: make([]saRef, 0, len(sas))}
	for _, s := range sas {
		rs.add(s)
	}
	return rs.index()
}

// first is the index of the first SA with this SPI, -1 if none.
func (rs *refSet) first(spi uint32) int {
	if at, ok := rs.bySPI[spi]; ok {
		return int(at[0])
	}
	return -1
}

// policySA is the SA a protect policy goes through, nil if none.
func (rs *refSet) policySA(pol *Policy) *SA {
	spi := pol.SPI
	if pol.SA != nil {
		spi = pol.SA.SPI
	}
	if i := rs.first(spi); i >= 0 {
		return rs.sa(i)
	}
	return nil
}

// Find is SPIIndex.Find over the refs: a protect policy names its SA by
// SPI alone, which must then be unambiguous.
func (rs *refSet) Find(spi uint32) (*SA, error) {
	at, ok := rs.bySPI[spi]
	switch {
	case !ok:
		return nil, fmt.Errorf("no SA with SPI %#x", spi)
	case at[1] >= 0:
		_, d0 := rs.refs[at[0]].addrs()
		_, d1 := rs.refs[at[1]].addrs()
		return nil, fmt.Errorf("SPI %#x is ambiguous: SAs to %s and %s share it", spi, d0, d1)
	}
	return rs.sa(int(at[0])), nil
}

// espSALine reads one line of an esp_sa table, handing its SA to keep.
func espSALine(p *lineProblems, seen map[saKey]int, line int, raw string, keep func(*SA) error) error {
	t := strings.TrimSpace(strings.TrimRight(raw, "\r"))
	if t == "" || strings.HasPrefix(t, "#") {
		return nil
	}
	f, err := uatFields(t)
	if err != nil {
		p.fail(line, "", "", err)
		return nil
	}
	if len(f) != len(espSAFieldNames) {
		p.fail(line, "", "", fmt.Errorf("%d fields, want %d (%s)", len(f), len(espSAFieldNames), strings.Join(espSAFieldNames, ", ")))
		return nil
	}
	s, entry, field, err := espSARecord(f)
	if err != nil {
		p.fail(line, entry, field, err)
		return nil
	}
	if !p.firstSPI(seen, line, entry, s) {
		return nil
	}
	if p.errs.Len() > 0 {
		return nil // no more output once there is an error
	}
	return keep(s)
}

// fill reads more of the input into the window, moving what is left of it
// to the front, until it holds maxStreamedEntry bytes ahead of pos or the
// input ends. It refuses bytes the reader does not read.
func (r *streamReader) fill() error {
	if r.in == nil || r.done || len(r.src)-r.pos >= maxStreamedEntry {
		return nil
	}
	// The window keeps the line pos is on.
	keep := r.window[r.bol:len(r.src)]
	if len(keep) >= cap(r.window)/2 {
		return fmt.Errorf("line %d: %w: a line of more than %d bytes", r.line, errNotSubset, cap(r.window)/2)
	}
	r.window = r.window[:copy(r.window[:cap(r.window)], keep)]
	r.pos, r.bol = r.pos-r.bol, 0
	for len(r.window) < cap(r.window) && !r.done {
		n, err := r.in.Read(r.window[len(r.window):cap(r.window)])
		if bad := badByte(r.window[len(r.window) : len(r.window)+n]); bad >= 0 {
			// The line the reader stops at is that byte's.
			r.line += bytes.Count(r.window[r.pos:len(r.window)+bad], []byte{'\n'})
			return errNotSubset
		}
		r.window = r.window[:len(r.window)+n]
		if err == io.EOF {
			r.done = true
		} else if err != nil {
			return err
		}
	}
	r.src = unsafe.String(unsafe.SliceData(r.window), len(r.window))
	return nil
}

// more reports whether the window ends before the input does.
func (r *streamReader) more() bool { return r.in != nil && !r.done }
