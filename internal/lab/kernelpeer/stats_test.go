package kernelpeer

import (
	"os"
	"strings"
	"testing"
)

func TestParseXfrmStat(t *testing.T) {
	b, err := os.ReadFile("testdata/xfrm_stat.txt")
	if err != nil {
		t.Fatal(err)
	}
	x, err := ParseXfrmStat(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if x["XfrmInStateProtoError"] != 1 || x["XfrmInStateSeqError"] != 1 || len(x) != 28 || len(x.NonZero()) != 2 {
		t.Errorf("got %v, want 28 counters, XfrmInStateProtoError 1 and XfrmInStateSeqError 1 the only ones above 0", x)
	}
	later, err := ParseXfrmStat(strings.Replace(string(b), "XfrmInNoStates          \t0", "XfrmInNoStates          \t4", 1) + "XfrmNewCounter 2\n")
	if err != nil {
		t.Fatal(err)
	}
	d := later.Sub(x)
	if len(d) != 2 || d["XfrmInNoStates"] != 4 || d["XfrmNewCounter"] != 2 {
		t.Errorf("increase %v, want XfrmInNoStates 4 and XfrmNewCounter 2", d)
	}
	for _, bad := range []string{"", "XfrmInError\n", "XfrmInError x\n"} {
		if _, err := ParseXfrmStat(bad); err == nil {
			t.Errorf("ParseXfrmStat(%q): no error", bad)
		}
	}
}
