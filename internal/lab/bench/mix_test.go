package bench

import (
	"strings"
	"testing"
)

func TestIMIXIsSevenFourOne(t *testing.T) {
	m := IMIX()
	count := map[int]int{}
	for _, f := range m.Frames {
		count[f]++
	}
	if count[64] != 7 || count[594] != 4 || count[1400] != 1 || len(count) != 3 {
		t.Errorf("IMIX counts %v, want 7×64, 4×594, 1×1400", count)
	}
	if want := (7*64 + 4*594 + 1400) / 12.0; m.MeanFrame() != want {
		t.Errorf("mean frame %g, want %g", m.MeanFrame(), want)
	}
	// Interleaved: never more than two large frames in a row.
	run := 0
	for _, f := range append(m.Frames, m.Frames...) {
		if f > 64 {
			run++
		} else {
			run = 0
		}
		if run > 2 {
			t.Fatalf("IMIX order %v has a burst of large frames", m.Frames)
		}
	}
	for _, f := range m.Frames {
		if f < MinFrame || f > MaxFrame {
			t.Errorf("IMIX frame %d outside %d…%d", f, MinFrame, MaxFrame)
		}
	}
}

func TestParseMixes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"all", []string{"64", "128", "256", "512", "1024", "1280", "1400", "imix"}, ""},
		{"64, IMIX,1400", []string{"64", "imix", "1400"}, ""},
		{"62", []string{"62"}, ""},
		{"61", nil, "frame size 61: want 62 to 1418"},
		{"2000", nil, "frame size 2000"},
		{"big", nil, `frame size "big"`},
		{",", nil, "none given"},
	} {
		got, err := ParseMixes(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseMixes(%q) error %v, want one with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseMixes(%q): %v", tc.in, err)
			continue
		}
		var names []string
		for _, m := range got {
			names = append(names, m.Name)
		}
		if strings.Join(names, ",") != strings.Join(tc.want, ",") {
			t.Errorf("ParseMixes(%q) = %v, want %v", tc.in, names, tc.want)
		}
	}
}
