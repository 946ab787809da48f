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

// TestCountOneIsCount: a batch of one counted with CountOne gives the
// Stats that Count gives it, for every status.
func TestCountOneIsCount(t *testing.T) {
	ops := []*Op{
		{Buf: make([]byte, 100), Status: OK},
		{Buf: make([]byte, 7), Status: BadICV},
		{Buf: make([]byte, 30), Status: BadLength},
		{Buf: nil, Status: Failed},
	}
	var one, batch Counters
	for _, op := range ops {
		one.CountOne(op)
		batch.Count([]*Op{op})
	}
	batch.Count(ops[:2])
	one.Count(ops[:2])
	if got, want := one.Stats(), batch.Stats(); got != want {
		t.Errorf("CountOne: %+v, Count: %+v", got, want)
	}
	if s := one.Stats(); s.Ops != 6 || s.Batches != 5 || s.Bytes != 244 || s.BadICV != 2 || s.Errors != 2 {
		t.Errorf("stats %+v, want 6 ops in 5 batches, 244 bytes, 2 bad ICVs, 2 errors", s)
	}
}
