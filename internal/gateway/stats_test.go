package gateway_test

import (
	"testing"

	"github.com/espgw/espgw/internal/gateway"
)

// Stats.SA finds the SA in force by SPI, never a retired one.
func TestStatsSA(t *testing.T) {
	st := gateway.Stats{SAs: []gateway.SAStats{
		{SPI: "0x1001", Retired: true, LastSeq: 1},
		{SPI: "retired", Retired: true},
		{SPI: "0x1001", LastSeq: 2},
		{SPI: "0x2001", LastSeq: 3},
	}}
	if s := st.SA(0x1001); s == nil || s.LastSeq != 2 {
		t.Errorf("SA(0x1001) = %+v, want the one in force", s)
	}
	if s := st.SA(0x2001); s == nil || s.LastSeq != 3 {
		t.Errorf("SA(0x2001) = %+v", s)
	}
	if s := st.SA(0x3001); s != nil {
		t.Errorf("SA(0x3001) = %+v, want nil", s)
	}
}
