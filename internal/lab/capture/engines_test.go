package capture

// Every registered offload engine seals captures that the cpu engine opens,
// and opens what the cpu engine sealed, through `pcap seal|open --engine`.

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/sim"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/offload/engines"
	"github.com/espgw/espgw/sa"
)

func TestEveryEngineInterop(t *testing.T) {
	ctx := context.Background()
	for _, name := range (sim.Engines{}).Software() {
		eng, err := (sim.Engines{}).Open(name, engines.Options{})
		if err != nil {
			t.Fatalf("engine %s: %v", name, err)
		}
		var suites []sa.Suite // what the engine makes sessions for
		for _, sc := range interopSuites() {
			if !slices.Contains(suites, sc.suite) && accepts(eng, sc.suite) {
				suites = append(suites, sc.suite)
			}
		}
		eng.Close()
		for _, sc := range interopSuites() {
			if !slices.Contains(suites, sc.suite) {
				continue
			}
			// One AES key size per suite keeps the run short; CBC gets all three.
			if sc.suite.Cipher != sa.CipherAESCBC && sc.encLen != sc.suite.EncKeyLens()[0] {
				continue
			}
			t.Run(strings.ReplaceAll(name, ":", "_")+"/"+sc.String(), func(t *testing.T) {
				dir := t.TempDir()
				cfg := randomSA(sc, sa.Tunnel, false, sa.EncapUDP)
				saFile := writeSAFile(t, cfg)
				in := filepath.Join(dir, "in.pcap")
				inners := writeInnerCapture(t, in, false, []int{20, 64, 512, 1400})
				for _, dir2 := range [][2]string{{name, "cpu"}, {"cpu", name}} {
					sealed := filepath.Join(dir, "sealed-"+strings.ReplaceAll(dir2[0], ":", "_")+".pcap")
					opened := sealed + ".open.pcap"
					if _, err := SealFile(ctx, Options{SAFile: saFile, Engine: dir2[0]}, in, sealed); err != nil {
						t.Fatalf("seal with %s: %v", dir2[0], err)
					}
					rep, err := OpenFile(ctx, Options{SAFile: saFile, Engine: dir2[1]}, sealed, opened)
					if err != nil {
						t.Fatalf("open with %s: %v", dir2[1], err)
					}
					got := readIPs(t, opened)
					if len(got) != len(inners) {
						t.Fatalf("sealed by %s, opened by %s: %d packets of %d (%+v)", dir2[0], dir2[1], len(got), len(inners), rep)
					}
					for i := range got {
						if !bytes.Equal(got[i], inners[i]) {
							t.Fatalf("sealed by %s, opened by %s: packet %d differs", dir2[0], dir2[1], i)
						}
					}
				}
			})
		}
	}
}

// accepts reports whether e makes a session for suite at some key length.
func accepts(e offload.Engine, suite sa.Suite) bool {
	for _, n := range suite.EncKeyLens() {
		s, err := e.NewSession(offload.SessionConfig{Suite: suite, EncKey: make(sa.Key, n), AuthKey: make(sa.Key, suite.AuthKeyLen())})
		if err == nil {
			s.Close()
			return true
		}
	}
	return false
}
