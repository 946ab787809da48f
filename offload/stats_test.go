package offload

import (
	"reflect"
	"strings"
	"testing"
)

// TestStatsPlusEveryField: Plus carries every counter, a field added to
// Stats included: counts summed, Max fields the larger.
func TestStatsPlusEveryField(t *testing.T) {
	var a, b Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		va.Field(i).SetUint(uint64(10 + i))
		vb.Field(i).SetUint(uint64(100 + 2*i))
	}
	sum := reflect.ValueOf(a.Plus(b))
	for i := range sum.NumField() {
		name := sum.Type().Field(i).Name
		want := uint64(10+i) + uint64(100+2*i)
		if strings.HasPrefix(name, "Max") {
			want = uint64(100 + 2*i)
		}
		if got := sum.Field(i).Uint(); got != want {
			t.Errorf("Plus: %s = %d, want %d", name, got, want)
		}
	}
}
