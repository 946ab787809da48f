package sa

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/espgw/espgw/internal/secret"
)

// xfrmState reads one state from iproute2's words, the same whether they
// come from an `ip xfrm state add` command or from the lines of an `ip
// xfrm state` listing (commandSpelling gives a listing line's words the
// command's spelling first).
type xfrmState struct {
	s        *SA
	listing  bool // words of a listing: flags as iproute2 prints them, hex flag bits
	lenient  bool // a counters listing: flags that do not change the counters are not errors
	named    func(spi uint32)
	reqid    uint32
	seqLo    uint64
	seqHi    uint64
	seqSet   bool // replay-oseq or replay-oseq-hi given
	keyed    bool // enc or aead given
	afUnspec bool // flag af-unspec given
}

// words reads the state's words f; fail gets each problem with the field
// it is in. It returns false at the first problem.
func (b *xfrmState) words(f []string, fail func(field string, err error)) bool {
	s := b.s
	for i := 0; i < len(f); i++ {
		w := f[i]
		need := func(n int) bool {
			if i+n >= len(f) {
				fail(w, fmt.Errorf("missing value (want %d)", n))
				return false
			}
			return true
		}
		num := func(bits int) (uint64, bool) {
			if !need(1) {
				return 0, false
			}
			i++
			v, err := strconv.ParseUint(f[i], 0, bits)
			if err != nil {
				fail(w, fmt.Errorf("%s is not a number", secret.Number(f[i])))
				return 0, false
			}
			return v, true
		}
		switch w {
		case "src", "dst":
			if !need(1) {
				return false
			}
			i++
			a, err := netip.ParseAddr(f[i])
			if err != nil {
				fail(w, fmt.Errorf("%s is not an IP address", secret.Number(f[i])))
				return false
			}
			if w == "src" {
				s.Src = a
			} else {
				s.Dst = a
			}
		case "proto":
			if !need(1) {
				return false
			}
			i++
			if f[i] != "esp" {
				fail(w, fmt.Errorf("%s: only esp states are supported", secret.Word(f[i], "esp")))
				return false
			}
		case "spi":
			v, ok := num(32)
			if !ok {
				return false
			}
			s.SPI = uint32(v)
			if b.named != nil {
				b.named(s.SPI)
			}
		case "reqid":
			v, ok := num(32)
			if !ok {
				return false
			}
			b.reqid = uint32(v)
		case "mode":
			if !need(1) {
				return false
			}
			i++
			switch f[i] {
			case "tunnel":
				s.Mode = Tunnel
			case "transport":
				s.Mode = Transport
			default:
				fail(w, fmt.Errorf("%s: want tunnel or transport", secret.Word(f[i], "tunnel", "transport")))
				return false
			}
		case "replay-window":
			v, ok := num(32)
			if !ok {
				return false
			}
			s.ReplayWindow = int(min(v, 1<<20))
		case "replay-seq", "replay-seq-hi":
			if _, ok := num(32); !ok {
				return false
			}
		case "replay-oseq":
			v, ok := num(32)
			if !ok {
				return false
			}
			b.seqLo, b.seqSet = v, true
		case "replay-oseq-hi":
			v, ok := num(32)
			if !ok {
				return false
			}
			b.seqHi, b.seqSet = v, true
		case "flag", "extra-flag", "extra_flag":
			known := xfrmStateFlags
			if w != "flag" {
				known = xfrmExtraFlags
			}
			// A listing's flags run to the end of the line or the next
			// kind of flag: there every word is a flag's name, and bits
			// iproute2 has no name for are a hex word.
			flagWord := func(v string) bool {
				if b.listing {
					return v != "extra_flag" && v != "extra-flag" && v != "flag"
				}
				return slices.Contains(known, v) || isFlagNumber(v)
			}
			if !b.listing && (i+1 >= len(f) || !flagWord(f[i+1])) {
				fail(w, fmt.Errorf("want a flag (%s)", strings.Join(known, ", ")))
				return false
			}
			for i+1 < len(f) && flagWord(f[i+1]) {
				i++
				name := f[i]
				if !b.listing && isFlagNumber(name) {
					fail(w, fmt.Errorf("%s as a number: name the flags (%s)", secret.Number(name), strings.Join(known, ", ")))
					return false
				}
				b.afUnspec = b.afUnspec || w == "flag" && name == "af-unspec"
				if err := xfrmFlag(s, w, name); err != nil && !b.lenient {
					fail(w, err)
					return false
				}
			}
		case "if_id":
			v, ok := num(32)
			if !ok {
				return false
			}
			s.IfID = uint32(v)
		case "output-mark":
			v, ok := num(32)
			if !ok {
				return false
			}
			mask := uint64(0xffffffff)
			if i+2 < len(f) && f[i+1] == "mask" {
				i++
				if mask, ok = num(32); !ok {
					return false
				}
			}
			m, err := ParseMark(fmt.Sprintf("%d/%d", v, mask))
			if err != nil {
				fail(w, err)
				return false
			}
			s.OutputMark = m
		case "enc", "auth", "auth-trunc", "aead":
			n := 2
			if w == "auth-trunc" || w == "aead" {
				n = 3
			}
			if !need(n) {
				return false
			}
			if err := xfrmAlgorithm(s, w, f[i+1], f[i+2], f[i+3:i+1+n]); err != nil {
				fail(w, err)
				return false
			}
			b.keyed = b.keyed || w == "enc" || w == "aead"
			i += n
		case "encap":
			if !need(4) {
				return false
			}
			if f[i+1] != "espinudp" {
				fail(w, fmt.Errorf("%s: only espinudp (RFC 3948) is supported", secret.Word(f[i+1], "espinudp")))
				return false
			}
			sp, err1 := strconv.ParseUint(f[i+2], 10, 16)
			dp, err2 := strconv.ParseUint(f[i+3], 10, 16)
			if err1 != nil || err2 != nil {
				fail(w, errors.New("want encap espinudp SPORT DPORT OADDR with numeric ports"))
				return false
			}
			s.Encap, s.SrcPort, s.DstPort = EncapUDP, uint16(sp), uint16(dp)
			i += 4
		case "tfcpad":
			v, ok := num(16)
			if !ok {
				return false
			}
			s.TFCPad = int(v)
		case "limit":
			if !need(2) {
				return false
			}
			kind := f[i+1]
			i++
			v, ok := num(64)
			if !ok {
				return false
			}
			l := &s.Soft
			if strings.HasSuffix(kind, "-hard") {
				l = &s.Hard
			}
			switch kind {
			case "byte-soft", "byte-hard":
				l.Bytes = v
			case "packet-soft", "packet-hard":
				l.Packets = v
			case "time-soft", "time-hard":
				l.Time = time.Duration(min(v, 1<<33)) * time.Second
			default:
				fail("limit", fmt.Errorf("%s is not supported (want byte-, packet- or time-soft|hard)", secret.Word(kind, "byte-soft", "byte-hard", "packet-soft", "packet-hard", "time-soft", "time-hard")))
				return false
			}
		case "sel":
			j := i + 1
			for j+1 < len(f) && slices.Contains([]string{"src", "dst", "proto", "sport", "dport", "uid", "dev", "type", "code"}, f[j]) {
				j += 2
			}
			sel, err := xfrmSelector(f[i+1 : j])
			if err != nil {
				fail("sel", err)
				return false
			}
			if sel != (Selector{}) {
				s.Selectors = []Selector{sel}
			}
			i = j - 1
		default:
			fail("", fmt.Errorf("unknown or unsupported word %s", secret.Word(w, stateWords...)))
			return false
		}
	}
	return true
}

// finish completes the SA once every word is read.
func (b *xfrmState) finish() {
	s := b.s
	if s.Encap == EncapNone && (s.SrcPort != 0 || s.DstPort != 0) {
		s.SrcPort, s.DstPort = 0, 0
	}
	if b.seqSet {
		s.InitialSeq = b.seqHi<<32 | b.seqLo
	}
	pinInnerFamily(s, b.afUnspec)
}

// commandSpelling gives the words of a listing line the spelling of the
// command's: "spi 0x00001001(4097)" and "reqid 1(0x00000001)" lose the
// value again in brackets, the flags lose their bits "(0x…)" and are
// split where iproute2 runs them together ("esnextra_flag"), a key loses
// its length "(128 bits)", "replay-window N seq 0x…" its seq, "encap
// type espinudp sport S dport D addr A" becomes "encap espinudp S D A",
// "output-mark V/M" becomes "output-mark V mask M" and a "mark V/M" in
// front of it goes; a null cipher without a key gets an empty one and,
// with hidden true, "<<Keys hidden>>" is one word.
func commandSpelling(f []string, hidden bool) []string {
	if f[0] == "encap" {
		kv := pairs(f[1:])
		return []string{"encap", kv["type"], kv["sport"], kv["dport"], cmp.Or(kv["addr"], "0.0.0.0")}
	}
	out := make([]string, 0, len(f)+2)
	for i := 0; i < len(f); i++ {
		w := f[i]
		prev := ""
		if len(out) > 0 {
			prev = out[len(out)-1]
		}
		switch {
		case (prev == "spi" || prev == "reqid") && strings.Contains(w, "("):
			w, _, _ = strings.Cut(w, "(")
		case strings.HasPrefix(w, "(0x"):
			continue
		case strings.HasPrefix(w, "(") && i+1 < len(f) && f[i+1] == "bits)":
			i++
			continue
		case w == "seq" && prev != "" && i+1 < len(f) && out[0] == "replay-window":
			i++
			continue
		case w == "mark" && i+1 < len(f):
			i++
			continue
		case hidden && w == "<<Keys" && i+1 < len(f) && f[i+1] == "hidden>>":
			i++
			w = hiddenKeys
		case prev == "output-mark" && strings.Contains(w, "/"):
			v, m, _ := strings.Cut(w, "/")
			out = append(out, v, "mask")
			w = m
		}
		if name, ok := strings.CutSuffix(w, "extra_flag"); ok && name != "" {
			out = append(out, name)
			w = "extra_flag"
		}
		out = append(out, w)
	}
	if len(out) == 2 && out[0] == "enc" && (out[1] == "ecb(cipher_null)" || out[1] == "cipher_null") {
		out = append(out, "")
	}
	return out
}
