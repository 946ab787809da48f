package esp_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/espgw/espgw/esp"
	"github.com/espgw/espgw/offload"
)

// TestResetClearsAllButOp: Reset leaves no field of a packet's last use
// behind but its Op, which Prepare fills before an engine sees it. A field
// added to Packet is cleared by Reset or this test fails.
func TestResetClearsAllButOp(t *testing.T) {
	p := &esp.Packet{Buf: make([]byte, 9), Off: 3, Len: 4, HdrLen: 40,
		Peer: netip.MustParseAddrPort("192.0.2.1:4500"), Local: netip.MustParseAddr("192.0.2.2"),
		TOS: 1, TTL: 2, Fragment: true, FragMTU: 1280, SA: new(esp.SA), Seq: 7, Drop: esp.BadICV,
		Op: offload.Op{Buf: make([]byte, 5), NonceLen: 12}}
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the test leaves field %s zero: set it, so that Reset is seen clearing it", v.Type().Field(i).Name)
		}
	}
	buf := make([]byte, 3)
	p.Reset(buf, 1, 2)
	for i := range v.NumField() {
		name, f := v.Type().Field(i).Name, v.Field(i)
		switch name {
		case "Buf":
			if len(p.Buf) != 3 || &p.Buf[0] != &buf[0] {
				t.Error("Reset did not point Buf at buf")
			}
		case "Off", "Len":
			if p.Off != 1 || p.Len != 2 {
				t.Errorf("Off, Len = %d, %d after Reset, want 1, 2", p.Off, p.Len)
			}
		case "Op":
		default:
			if !f.IsZero() {
				t.Errorf("Reset left %s = %v", name, f.Interface())
			}
		}
	}
}
