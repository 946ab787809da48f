package kcapi

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ProcCrypto is where the kernel lists its registered algorithms.
const ProcCrypto = "/proc/crypto"

// Alg is one entry of /proc/crypto.
type Alg struct {
	Name     string // the algorithm, e.g. cbc(aes)
	Driver   string // the implementation, e.g. virtio_crypto_aes_cbc
	Module   string // the module that registered it, "kernel" when built in
	Priority int
	Type     string // skcipher, aead, shash, ahash, cipher, …
	Selftest string // passed, unknown, …
	Internal bool   // not reachable from user space
	Async    bool
}

// Algs is the parsed content of /proc/crypto.
type Algs []Alg

// ReadAlgs reads /proc/crypto.
func ReadAlgs() (Algs, error) {
	f, err := os.Open(ProcCrypto)
	if err != nil {
		return nil, fmt.Errorf("read the kernel's algorithms: %w", err)
	}
	defer f.Close()
	algs, err := ParseAlgs(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ProcCrypto, err)
	}
	return algs, nil
}

// ParseAlgs parses /proc/crypto's "key : value" blocks, one per algorithm,
// separated by blank lines.
func ParseAlgs(r io.Reader) (Algs, error) {
	var out Algs
	var cur Alg
	have := false
	flush := func() {
		if have {
			out = append(out, cur)
		}
		cur, have = Alg{}, false
	}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not \"key : value\"", line, text)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		have = true
		switch k {
		case "name":
			cur.Name = v
		case "driver":
			cur.Driver = v
		case "module":
			cur.Module = v
		case "priority":
			p, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: priority %q: %w", line, v, err)
			}
			cur.Priority = p
		case "type":
			cur.Type = v
		case "selftest":
			cur.Selftest = v
		case "internal":
			cur.Internal = v == "yes"
		case "async":
			cur.Async = v == "yes"
		}
	}
	flush()
	return out, sc.Err()
}

// ByDriver returns the entry of the named driver.
func (a Algs) ByDriver(driver string) (Alg, bool) {
	for _, x := range a {
		if x.Driver == driver {
			return x, true
		}
	}
	return Alg{}, false
}

// Best returns the highest-priority entry for the algorithm name that user
// space can reach and whose self-test did not fail: the one the kernel
// gives a socket bound to that name.
func (a Algs) Best(name string) (Alg, bool) {
	var best Alg
	found := false
	for _, x := range a {
		if x.Name != name || x.Internal || x.Selftest == "failed" {
			continue
		}
		if !found || x.Priority > best.Priority {
			best, found = x, true
		}
	}
	return best, found
}

// Offering lists the drivers registered for the algorithm name, best
// first, as "driver (module, priority N)".
func (a Algs) Offering(name string) []string {
	var xs []Alg
	for _, x := range a {
		if x.Name == name && !x.Internal {
			xs = append(xs, x)
		}
	}
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j].Priority > xs[j-1].Priority; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprintf("%s (%s, priority %d)", x.Driver, x.Module, x.Priority))
	}
	return out
}
