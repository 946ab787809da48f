package sa

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// TestEqualSeesEveryField changes each field of an SA in turn, found by
// reflection so that a field added later is covered too, and wants Equal to
// see the change: a reload must never keep an SA whose configuration moved.
func TestEqualSeesEveryField(t *testing.T) {
	base := func() *SA {
		s := saTo(0x1001, "192.0.2.2")
		s.Selectors = []Selector{{Dst: netip.MustParsePrefix("203.0.113.0/24")}}
		return s
	}
	changes := map[string]func(*SA){
		"SPI":              func(s *SA) { s.SPI++ },
		"Mode":             func(s *SA) { s.Mode = Transport },
		"Src":              func(s *SA) { s.Src = netip.MustParseAddr("192.0.2.9") },
		"Dst":              func(s *SA) { s.Dst = netip.MustParseAddr("192.0.2.9") },
		"Encap":            func(s *SA) { s.Encap = EncapUDP },
		"SrcPort":          func(s *SA) { s.SrcPort = 4501 },
		"DstPort":          func(s *SA) { s.DstPort = 4501 },
		"Suite":            func(s *SA) { s.Suite.Auth = AuthHMACSHA256_128 },
		"EncKey":           func(s *SA) { s.EncKey = append(Key(nil), s.EncKey...); s.EncKey[0] ^= 1 },
		"AuthKey":          func(s *SA) { s.AuthKey = append(Key(nil), s.AuthKey...); s.AuthKey[0] ^= 1 },
		"ESN":              func(s *SA) { s.ESN = !s.ESN },
		"ReplayWindow":     func(s *SA) { s.ReplayWindow++ },
		"InitialSeq":       func(s *SA) { s.InitialSeq = 1 << 32 },
		"TFCPad":           func(s *SA) { s.TFCPad = 1000 },
		"Soft":             func(s *SA) { s.Soft.Time = time.Minute },
		"Hard":             func(s *SA) { s.Hard.Packets = 1 },
		"Selectors":        func(s *SA) { s.Selectors[0].Dst = netip.MustParsePrefix("203.0.113.0/25") },
		"DSCP":             func(s *SA) { s.DSCP = DSCP{Fixed: true} },
		"DF":               func(s *SA) { s.DF = DFClear },
		"TTL":              func(s *SA) { s.TTL = 9 },
		"DecapDSCP":        func(s *SA) { s.DecapDSCP = DecapCopy },
		"IfID":             func(s *SA) { s.IfID = 7 },
		"OutputMark":       func(s *SA) { s.OutputMark = Mark{Value: 1, Mask: 0xff} },
		"FollowSourcePort": func(s *SA) { s.FollowSourcePort = true },
	}
	typ := reflect.TypeOf(SA{})
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		change, ok := changes[name]
		if !ok {
			t.Errorf("SA.%s has no change in this test: add one, and compare it in Equal", name)
			continue
		}
		a, b := base(), base()
		b.EncKey, b.AuthKey = append(Key(nil), a.EncKey...), append(Key(nil), a.AuthKey...)
		if !a.Equal(b) {
			t.Fatalf("two copies of one SA are not Equal")
		}
		change(b)
		if a.Equal(b) {
			t.Errorf("Equal misses a change of %s", name)
		}
	}
	extra := base()
	extra.Selectors = append(extra.Selectors, Selector{Proto: 6})
	if base().Equal(extra) {
		t.Error("Equal misses an added selector")
	}
}
