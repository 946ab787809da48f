package speed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Header is openssl speed's line above the table.
const Header = "The 'numbers' are in 1000s of bytes per second processed."

// Compare is an openssl run beside an espgw one.
type Compare struct {
	Rows  []Row       `json:"rows"`  // openssl's rows, same sizes
	Ratio [][]float64 `json:"ratio"` // espgw / openssl per alg and size
	Args  []string    `json:"args"`  // the openssl command line
}

// WriteTable prints res like openssl speed, with cmp's rows and ratios when
// set. Rates print as openssl does ("%11.2fk" above 10000, else "%11.2f ").
func WriteTable(w io.Writer, res *Result, cmp *Compare) {
	fmt.Fprintf(w, "version: espgw speed (%s)\n", runtime.Version())
	fmt.Fprintf(w, "options: engine %s, batch %d, multi %d, timing %s\n", res.Engine, res.Batch, res.Multi, res.Timing)
	notes := map[string]bool{}
	for _, d := range res.Drivers {
		fmt.Fprintf(w, "driver: %s by %s (%s)\n", d.Algorithm, d.Driver, d.Module)
		if d.Note != "" && !notes[d.Note] {
			fmt.Fprintf(w, "note: %s\n", d.Note)
			notes[d.Note] = true
		}
	}
	fmt.Fprintln(w, Header)
	fmt.Fprint(w, "type        ")
	for _, s := range res.Sizes {
		fmt.Fprintf(w, "%7d bytes", s)
	}
	fmt.Fprintln(w)
	for i, r := range res.Rows {
		writeRow(w, r.Label, r.KBps, "k")
		if cmp == nil {
			continue
		}
		if o := cmp.find(r.Label); o != nil {
			writeRow(w, "openssl", o.KBps, "k")
			writeRow(w, "ratio", cmp.Ratio[i], "x")
		}
	}
}

func (c *Compare) find(label string) *Row {
	if i := slices.IndexFunc(c.Rows, func(r Row) bool { return r.Label == label }); i >= 0 {
		return &c.Rows[i]
	}
	return nil
}

func writeRow(w io.Writer, label string, vals []float64, unit string) {
	fmt.Fprintf(w, "%-13s", label)
	for _, v := range vals {
		switch {
		case unit == "x":
			fmt.Fprintf(w, " %11.3fx", v)
		case v*1000 > 10000:
			fmt.Fprintf(w, " %11.2fk", v)
		default:
			fmt.Fprintf(w, " %11.2f ", v*1000)
		}
	}
	fmt.Fprintln(w)
}

// WriteJSON prints res (and cmp) as one JSON object.
func WriteJSON(w io.Writer, res *Result, cmp *Compare) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Result
		OpenSSL *Compare `json:"openssl,omitempty"`
	}{res, cmp})
}

// OpenSSLArgs is the openssl speed command line equivalent to cfg for alg.
func OpenSSLArgs(cfg Config, alg Alg) []string {
	args := []string{"speed"}
	if strings.HasPrefix(cfg.Engine, "afalg") {
		// Like for like: openssl through its own AF_ALG engine, which
		// takes the kernel's highest-priority cbc(aes) (AES-CBC only).
		args = append(args, "-engine", "afalg")
	}
	args = append(args, "-evp", alg.Name, "-seconds", strconv.Itoa(max(1, int(cfg.Duration.Seconds()+0.5))))
	if cfg.Multi > 1 {
		args = append(args, "-multi", strconv.Itoa(cfg.Multi))
	}
	if len(cfg.Sizes) == 1 {
		args = append(args, "-bytes", strconv.Itoa(cfg.Sizes[0]))
	}
	if cfg.Elapsed {
		args = append(args, "-elapsed")
	}
	return args
}

// RunOpenSSL runs `openssl speed` for every algorithm of cfg that openssl
// has (Alg.InOpenSSL) and returns its rows and the ratios of
// res to them (0 where openssl has no row).
func RunOpenSSL(ctx context.Context, cfg Config, res *Result) (*Compare, error) {
	cmp := &Compare{}
	for i, alg := range cfg.Algs {
		ratio := make([]float64, len(res.Sizes))
		if alg.InOpenSSL() {
			args := OpenSSLArgs(cfg, alg)
			cmp.Args = append([]string{"openssl"}, args...)
			out, err := exec.CommandContext(ctx, "openssl", args...).Output()
			if err != nil {
				return nil, fmt.Errorf("run openssl %s: %w", strings.Join(args, " "), err)
			}
			row, err := ParseOpenSSL(out, alg.Label(), len(res.Sizes))
			if err != nil {
				return nil, fmt.Errorf("openssl %s: %w", strings.Join(args, " "), err)
			}
			cmp.Rows = append(cmp.Rows, *row)
			for j, v := range row.KBps {
				if v > 0 {
					ratio[j] = res.Rows[i].KBps[j] / v
				}
			}
		}
		cmp.Ratio = append(cmp.Ratio, ratio)
	}
	return cmp, nil
}

// ParseOpenSSL finds the row labelled label in openssl speed's output (the
// table of the parent with -multi) and reads n rates from it.
func ParseOpenSSL(out []byte, label string, n int) (*Row, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	var last *Row
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != n+1 || !strings.EqualFold(f[0], label) {
			continue
		}
		row := &Row{Alg: strings.ToLower(label), Label: label}
		for _, s := range f[1:] {
			num, k := strings.CutSuffix(s, "k")
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return nil, fmt.Errorf("read rate %q in %q: %w", s, sc.Text(), err)
			}
			if math.IsInf(v, 0) || math.IsNaN(v) {
				// openssl divides by the CPU time its process used; work
				// done off it (a device, a kernel thread) leaves none.
				return nil, fmt.Errorf("openssl reports the rate %q in %q: its process used no CPU time, the work was done elsewhere; time by the wall clock with -elapsed", s, sc.Text())
			}
			if !k {
				v /= 1000 // openssl prints small rates in bytes per second
			}
			row.KBps = append(row.KBps, v)
		}
		last = row
	}
	if last == nil {
		return nil, fmt.Errorf("no %s row with %d rates in its output", label, n)
	}
	return last, nil
}
