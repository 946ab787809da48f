package emul_test

import (
	"context"
	"testing"
	"time"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/internal/lab/sim/emul"
	"github.com/espgw/espgw/offload"
	"github.com/espgw/espgw/sa"
)

func TestUnknownProfile(t *testing.T) {
	if _, err := emul.New("emul:nope", emul.Options{}); err == nil {
		t.Error("no error for an unknown profile")
	}
}

// TestModelledTimeIsWaited: in real-clock mode a batch completes no sooner
// than the model says (single op at 8 KiB on ubsec-2014: host, card and
// bytes, well above 60 µs whatever the draw of the card's time).
func TestModelledTimeIsWaited(t *testing.T) {
	e, err := emul.New("ubsec-2014", emul.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, err := e.NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC}, EncKey: make(sa.Key, 16), CipherOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ops := []*offload.Op{cipherOp(s, 8192)}
	w := offload.NewWaiter(e)
	start := time.Now()
	if err := w.Run(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	// Host 25.5 µs + 8192 × 1.7 ns (-25%) alone is ≥ 29 µs.
	if d := time.Since(start); d < 29*time.Microsecond {
		t.Errorf("an 8 KiB op completed in %v, before its modelled time", d)
	}
}

// TestSteadyStateAllocatesNothing: the emulated engines, too, allocate
// nothing per op once warm.
func TestSteadyStateAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	for _, name := range []string{"ubsec-2014", "t4"} {
		for _, virtual := range []bool{false, true} {
			e, err := emul.New(name, emul.Options{Virtual: virtual})
			if err != nil {
				t.Fatal(err)
			}
			s, err := e.NewSession(offload.SessionConfig{Suite: sa.Suite{Cipher: sa.CipherAESCBC}, EncKey: make(sa.Key, 16), CipherOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			ops := []*offload.Op{cipherOp(s, 64), cipherOp(s, 64)}
			w := offload.NewWaiter(e)
			round := func() {
				if err := w.Run(context.Background(), ops); err != nil {
					t.Fatal(err)
				}
			}
			round()
			if n := testing.AllocsPerRun(100, round); n != 0 {
				t.Errorf("%s virtual=%v: a round allocates %.1f times, want 0", name, virtual, n)
			}
			e.Close()
		}
	}
}

// cipherOp is a cipher-only aes-cbc op on s over n bytes of zeroes, laid out
// as esp does (header and IV in front).
func cipherOp(s offload.Session, n int) *offload.Op {
	op := new(offload.Op)
	layout := esp.NewLayout(sa.Suite{Cipher: sa.CipherAESCBC}, nil, false)
	layout.Op(op, s, offload.Seal, make([]byte, esp.HeaderLen+16+n), 0)
	return op
}
