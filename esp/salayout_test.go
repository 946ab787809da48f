package esp

import (
	"testing"
	"unsafe"
)

// TestSALayout checks the cache layout SA's comment promises: 384 bytes
// (a size class whose objects start on a cache line), line 0 what every
// packet reads, the seal and open parts of the history on lines of their
// own, and line 3 the big ring of a window over 192 packets, reserve and
// the packet counters.
func TestSALayout(t *testing.T) {
	var s SA
	const line = 64
	for _, c := range []struct {
		name      string
		off, size uintptr
		wantLine  uintptr
	}{
		{"sess", unsafe.Offsetof(s.sess), unsafe.Sizeof(s.sess), 0},
		{"Aux", unsafe.Offsetof(s.Aux), unsafe.Sizeof(s.Aux), 0},
		{"history", unsafe.Offsetof(s.history), unsafe.Sizeof(s.history), 0},
		{"layout", unsafe.Offsetof(s.layout), unsafe.Sizeof(s.layout), 0},
		{"flags", unsafe.Offsetof(s.flags), unsafe.Sizeof(s.flags), 0},
		{"expired", unsafe.Offsetof(s.expired), unsafe.Sizeof(s.expired), 0},
		{"spi", unsafe.Offsetof(s.spi), unsafe.Sizeof(s.spi), 0},
		{"tfcPad", unsafe.Offsetof(s.tfcPad), unsafe.Sizeof(s.tfcPad), 0},
		{"own seal part", unsafe.Offsetof(s.own), unsafe.Offsetof(s.own.mu), 1},
		{"own mu and window but its big ring", unsafe.Offsetof(s.own) + unsafe.Offsetof(s.own.mu), unsafe.Offsetof(s.own.window) + unsafe.Offsetof(s.own.window.big) - unsafe.Offsetof(s.own.mu), 2},
		{"window's big ring", unsafe.Offsetof(s.own) + unsafe.Offsetof(s.own.window) + unsafe.Offsetof(s.own.window.big), unsafe.Sizeof(s.own.window.big), 3},
		{"reserve", unsafe.Offsetof(s.reserve), unsafe.Sizeof(s.reserve), 3},
		{"packet counters", unsafe.Offsetof(s.Counters), unsafe.Offsetof(s.Counters.drops), 3},
	} {
		first, last := c.off/line, (c.off+c.size-1)/line
		if first != c.wantLine || last != c.wantLine {
			t.Errorf("%s at bytes %d…%d: lines %d…%d, want line %d", c.name, c.off, c.off+c.size-1, first, last, c.wantLine)
		}
	}
	if n := unsafe.Sizeof(s); n <= 352 || n > 384 {
		t.Errorf("SA is %d bytes, want 353…384 (the 384-byte size class)", n)
	}
}
