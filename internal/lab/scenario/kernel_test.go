package scenario

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/espgw/espgw/internal/lab/kernelpeer"
	"github.com/espgw/espgw/sa"
)

// The kernel's counters land under espgw's names where they mean the same
// thing, the rest under the kernel's own, each counted once, and gw2's
// wire_in is every ESP packet the kernel saw.
func TestKernelCountersAsGateway(t *testing.T) {
	gw1, gw2 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.129")
	in := &sa.SA{SPI: 0x1001, Src: gw1, Dst: gw2}
	out := &sa.SA{SPI: 0x2001, Src: gw2, Dst: gw1}
	c := kernelpeer.Counters{
		States: []sa.XFRMState{
			{SA: in, Packets: 100, Seq: 107, Replayed: 3, ReplayWindowDrops: 2, IntegrityFailed: 4},
			{SA: out, Packets: 90, OSeq: 90},
		},
		Stat: kernelpeer.XfrmStat{"XfrmInNoStates": 5, "XfrmInStateProtoError": 6, "XfrmInStateSeqError": 5, "XfrmInTmplMismatch": 1,
			"XfrmInHdrError": 2, "XfrmOutNoStates": 7, "XfrmInError": 0},
	}
	st := kernelAsGateway(c, [2]*sa.SA{in, out})
	if len(st.SAs) != 2 || st.SAs[0].OpenedPackets != 100 || st.SAs[1].SealedPackets != 90 || st.SAs[1].LastSeq != 90 {
		t.Fatalf("SAs: %+v", st.SAs)
	}
	wantSA := map[string]uint64{"replay": 3, "outside-window": 2, "bad-icv": 4}
	for k, v := range wantSA {
		if st.SAs[0].Drops[k] != v {
			t.Errorf("inbound SA %s = %d, want %d", k, st.SAs[0].Drops[k], v)
		}
	}
	// 6 protocol errors, 4 of them the state's ICV failures: 2 others;
	// 5 sequence errors, all the state's replays and window drops: none.
	want := map[string]uint64{"unknown-spi": 5, "policy": 1, "no-sa": 7, "XfrmInStateProtoError": 2, "XfrmInHdrError": 2}
	if len(st.Drops) != len(want) {
		t.Errorf("gateway drops %v, want %v", st.Drops, want)
	}
	for k, v := range want {
		if st.Drops[k] != v {
			t.Errorf("drop %s = %d, want %d (all: %v)", k, st.Drops[k], v, st.Drops)
		}
	}
	// Opened 100 + replay 3 + window 2 + ICV 4 + no state 5 + other protocol
	// errors 2 + header errors 2; the policy drop came after opening.
	if st.WireIn != 118 || st.WireOut != 90 {
		t.Errorf("wire in %d out %d, want 118 and 90", st.WireIn, st.WireOut)
	}
}

// An external device's counters command that prints an ip -s xfrm state
// listing gives gw2's counters under espgw's names.
func TestExternalCountersCommand(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	x, err := newExternalGW2(&External{
		Counters: "cat ../../../sa/testdata/ip-s-xfrm-state-nokeys.txt",
		out:      &sa.SA{SPI: 0x1001, Src: a, Dst: b},
		in:       &sa.SA{SPI: 0x2002, Src: b, Dst: a},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, out, err := x.stats(t.Context())
	if err != nil || out == "" {
		t.Fatalf("stats: %v (%d bytes of output)", err, len(out))
	}
	if len(st.SAs) != 2 || st.SAs[0].OpenedPackets != 1 || st.SAs[0].Drops["replay"] != 1 || st.SAs[0].Drops["bad-icv"] != 1 ||
		st.SAs[1].SealedPackets != 7 || st.SAs[1].LastSeq != 7 {
		t.Errorf("the device's SAs: %+v", st.SAs)
	}
	x.e.Counters = "echo enc 'cbc(aes)' 0x00112233445566778899aabbccddeeff"
	if _, out, _ := x.stats(t.Context()); strings.Contains(out, "00112233445566778899") || !strings.Contains(out, "<key hidden>") {
		t.Errorf("a key in the counters output reaches the report: %q", out)
	}
	x.e.Counters = "echo no listing here"
	if st, out, err := x.stats(t.Context()); err != nil || len(st.SAs) != 0 || out != "no listing here\n" {
		t.Errorf("a command printing something else: %+v, %q, %v", st, out, err)
	}
	x.e.Counters = "exit 3"
	if _, _, err := x.stats(t.Context()); err == nil {
		t.Error("a failing counters command is not an error")
	}
}
