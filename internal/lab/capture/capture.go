// Package capture reads, writes, seals, opens and replays packet captures.
//
// It is the test bed's one place for packet captures and for packets on the
// wire, used by `espgw pcap`, `espgw demo` and the scenarios alike:
//
//   - reading (Reader, ReadAll): pcap or pcapng of every usual link type,
//     safe on hostile input; writing (Writer);
//   - sealing and opening captures offline (SealFile, OpenFile: `espgw pcap
//     seal|open`), every packet counted: written, rejected per reason, or
//     skipped per kind; Wireshark's esp_sa lines, so the same captures open
//     decrypted in Wireshark and tshark;
//   - rewriting any capture onto the test bed's two hosts (Load, Rewrite);
//   - replaying it between the hosts and judging what arrived byte for byte
//     (Replay);
//   - watching an interface (Sniff) and sending whole IP packets from a
//     namespace.
//
// The ESP transform is the esp package's; this package only frames packets
// for the wire and does the capture I/O (gopacket's pcapgo).
package capture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/internal/overwrite"
	"github.com/espgw/espgw/internal/secret"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

// Options are what `espgw pcap seal|open` take besides the files.
type Options struct {
	// SAFile is the SA file (YAML or setkey(8) lines).
	SAFile string
	// SPI picks the SA to seal with; 0 means the file's only SA.
	SPI uint32
	// Engine is the offload engine's catalog name ("cpu" when empty).
	Engine string
	// Link is the output capture's link type (raw IP when empty).
	Link Link
	// WiresharkSA, when set, is where to write the esp_sa lines of the SAs.
	WiresharkSA string
}

// SAReport counts one SA's packets.
type SAReport struct {
	SPI     uint32
	Name    string // the SA without keys
	Packets uint64 // sealed or opened
	Bytes   uint64
	Drops   map[string]uint64
}

// Report counts what became of every frame of the input capture.
type Report struct {
	Op      string // "seal" or "open"
	Frames  int
	Written int
	SAs     []SAReport
	// Rejects counts ESP packets (open) or IP packets (seal) that did not
	// come out, per reason, over all SAs and those with no SA.
	Rejects map[string]uint64
	// Skipped counts frames that were not for this operation, per kind.
	Skipped map[string]uint64
}

func newReport(op string) *Report {
	return &Report{Op: op, Rejects: map[string]uint64{}, Skipped: map[string]uint64{}}
}

// WriteText prints the report as a person reads it.
func (r *Report) WriteText(w io.Writer) {
	verb := map[string]string{"seal": "sealed", "open": "opened"}[r.Op]
	fmt.Fprintf(w, "%d frames read, %d packets %s and written\n", r.Frames, r.Written, verb)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "SA\t%s\tbytes\tdrops\n", verb)
	for _, s := range r.SAs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", s.Name, s.Packets, s.Bytes, esp.FormatCounts(s.Drops))
	}
	tw.Flush()
	if len(r.Rejects) > 0 {
		fmt.Fprintf(w, "rejected: %s\n", esp.FormatCounts(r.Rejects))
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "skipped: %s\n", esp.FormatCounts(r.Skipped))
	}
}

// loaded is an SA file turned into working SAs on one engine.
type loaded struct {
	engine offload.Engine
	sas    []*esp.SA
}

func (l *loaded) close() {
	for _, s := range l.sas {
		s.Close()
	}
	l.engine.Close()
}

func load(opts Options) (*loaded, error) {
	cfgs, err := sa.LoadFile(opts.SAFile)
	if err != nil {
		return nil, err
	}
	if len(cfgs) == 0 {
		return nil, fmt.Errorf("SA file %q holds no SAs", opts.SAFile)
	}
	eng, err := sim.Engines{}.Open(cmp.Or(opts.Engine, "cpu"), engines.Options{})
	if err != nil {
		return nil, err
	}
	l := &loaded{engine: eng}
	for _, c := range cfgs {
		s, err := esp.NewSA(c, eng, esp.Options{})
		if err != nil {
			l.close()
			return nil, fmt.Errorf("SA file %q: %w", opts.SAFile, err)
		}
		// A receiver of a peer that starts at initial-seq expects numbers
		// from there (ESN test beds crossing 2^32).
		s.StartReceiveAfter(c.InitialSeq)
		l.sas = append(l.sas, s)
	}
	if opts.WiresharkSA != "" {
		lines, err := sa.MarshalEspSA(&sa.Config{SAs: cfgs})
		if err == nil {
			err = secret.WriteFile(opts.WiresharkSA, lines)
		}
		if err != nil {
			l.close()
			return nil, fmt.Errorf("write Wireshark esp_sa file %q: %w", opts.WiresharkSA, err)
		}
	}
	return l, nil
}

// pick returns the SA to seal with.
func (l *loaded) pick(opts Options) (*esp.SA, error) {
	if opts.SPI == 0 {
		if len(l.sas) != 1 {
			spis := make([]string, len(l.sas))
			for i, s := range l.sas {
				spis[i] = fmt.Sprintf("%#x", s.SPI())
			}
			return nil, fmt.Errorf("SA file %q holds %d SAs (%s): choose one with --spi", opts.SAFile, len(l.sas), strings.Join(spis, ", "))
		}
		return l.sas[0], nil
	}
	for _, s := range l.sas {
		if s.SPI() == opts.SPI {
			return s, nil
		}
	}
	return nil, fmt.Errorf("SA file %q has no SA with SPI %#x", opts.SAFile, opts.SPI)
}

// withFiles runs op from the capture in to a new capture out, with the SAs
// of opts: the outputs are refused when one is the input, and op runs only
// once the SAs are loaded and ready (when not nil) has picked what op needs
// from them, before the output is created, so a bad option leaves no empty
// file behind.
func withFiles(opts Options, in, out string, ready func(*loaded) error, op func(*loaded, *Reader, *Writer) (*Report, error)) (*Report, error) {
	outs := []overwrite.File{{Role: "the output capture", Path: out}, {Role: "--wireshark-sa", Path: opts.WiresharkSA}}
	if err := overwrite.Check(outs, overwrite.File{Role: "the input capture", Path: in}, overwrite.File{Role: "the SA file", Path: opts.SAFile}); err != nil {
		return nil, err
	}
	if _, err := os.Stat(in); err != nil {
		return nil, fmt.Errorf("open input capture: %w", err)
	}
	l, err := load(opts)
	if err != nil {
		return nil, err
	}
	defer l.close()
	if ready != nil {
		if err := ready(l); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(in)
	if err != nil {
		return nil, fmt.Errorf("open input capture: %w", err)
	}
	defer f.Close()
	r, err := NewReader(f, in)
	if err != nil {
		return nil, err
	}
	o, err := os.Create(out)
	if err != nil {
		return nil, fmt.Errorf("create output capture: %w", err)
	}
	w, err := NewWriter(o, cmp.Or(opts.Link, LinkRaw))
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("%q: %w", out, err)
	}
	rep, err := op(l, r, w)
	if cerr := o.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write output capture %q: %w", out, cerr)
	}
	return rep, err
}

// SealFile seals every IP packet of the capture in with one SA of the SA
// file, sequence numbers from the SA's start (1 unless initial-seq says
// otherwise), and writes the ESP packets to out.
func SealFile(ctx context.Context, opts Options, in, out string) (*Report, error) {
	var s *esp.SA
	pick := func(l *loaded) (err error) {
		s, err = l.pick(opts)
		return err
	}
	return withFiles(opts, in, out, pick, func(_ *loaded, r *Reader, w *Writer) (*Report, error) {
		return Seal(ctx, r, w, s)
	})
}

// Seal seals every IP packet read from r with s and writes it to w.
func Seal(ctx context.Context, r *Reader, w *Writer, s *esp.SA) (*Report, error) {
	rep := newReport("seal")
	z := NewSealer(s)
	err := rep.each(r, func(f Frame) error {
		out, err := z.Seal(ctx, f.IP)
		var reason esp.Reason
		if errors.As(err, &reason) {
			rep.Rejects[reason.String()]++
			return nil
		}
		if err != nil {
			return fmt.Errorf("seal frame %d: %w", f.Index, err)
		}
		if err := w.Write(f.CI, out); err != nil {
			return fmt.Errorf("write sealed frame %d: %w", f.Index, err)
		}
		rep.Written++
		return nil
	})
	rep.SAs = []SAReport{saReport(s, "seal")}
	return rep, err
}

// each hands every frame of r that holds an IP packet to fn, counting the
// frames and those skipped.
func (rep *Report) each(r *Reader, fn func(Frame) error) error {
	return r.each(func(f Frame) error {
		rep.Frames++
		if f.Skip != NotSkipped {
			rep.Skipped[string(f.Skip)]++
			return nil
		}
		return fn(f)
	})
}

// OpenFile opens every ESP packet of the capture in whose SPI is in the SA
// file and writes the inner packets to out.
func OpenFile(ctx context.Context, opts Options, in, out string) (*Report, error) {
	return withFiles(opts, in, out, nil, func(l *loaded, r *Reader, w *Writer) (*Report, error) {
		return Open(ctx, r, w, l.sas)
	})
}

// Open opens every ESP packet read from r with the SAs and writes the inner
// packets to w.
func Open(ctx context.Context, r *Reader, w *Writer, sas []*esp.SA) (*Report, error) {
	rep := newReport("open")
	o, err := NewOpener(sas)
	if err != nil {
		return nil, err
	}
	err = rep.each(r, func(f Frame) error {
		res, err := o.Open(ctx, f.IP)
		if err != nil {
			return fmt.Errorf("open frame %d: %w", f.Index, err)
		}
		switch {
		case res.Skip != NotSkipped:
			rep.Skipped[string(res.Skip)]++
		case res.Reject != esp.OK:
			rep.Rejects[res.Reject.String()]++
		default:
			if err := w.Write(f.CI, res.Inner); err != nil {
				return fmt.Errorf("write opened frame %d: %w", f.Index, err)
			}
			rep.Written++
		}
		return nil
	})
	for _, s := range sas {
		rep.SAs = append(rep.SAs, saReport(s, "open"))
	}
	return rep, err
}

func saReport(s *esp.SA, op string) SAReport {
	snap := s.Snapshot()
	r := SAReport{SPI: s.SPI(), Name: s.Config.String(), Drops: snap.Drops,
		Packets: snap.OpenedPackets, Bytes: snap.OpenedBytes}
	if op == "seal" {
		r.Packets, r.Bytes = snap.SealedPackets, snap.SealedBytes
	}
	return r
}

// TsharkDecrypts reports whether tshark 4.0 (Debian 12's) decrypts and
// checks ESP with cipher c: it has no ChaCha20-Poly1305, AES-GMAC or AES-CCM.
func TsharkDecrypts(c sa.Cipher) bool {
	switch c {
	case sa.CipherNull, sa.CipherAESCBC, sa.Cipher3DES, sa.CipherAESCTR, sa.CipherAESGCM16, sa.CipherAESGCM12, sa.CipherAESGCM8:
		return true
	}
	return false
}
