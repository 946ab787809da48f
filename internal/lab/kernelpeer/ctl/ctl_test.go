package ctl_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/espgw/espgw/internal/lab/kernelpeer/ctl"
)

// The wire form is the one the agent already in a prepared guest image
// reads: the field names may not change.
func TestWireForm(t *testing.T) {
	for _, tc := range []struct {
		v    any
		wire string
		into any
	}{
		{ctl.Request{ID: 1, Argv: []string{"ip", "xfrm", "state"}, TimeoutMS: 5000}, `{"id":1,"argv":["ip","xfrm","state"],"timeout_ms":5000}`, &ctl.Request{}},
		{ctl.Response{ID: 1, Exit: 0, Output: []byte("ok\n")}, `{"id":1,"exit":0,"output":"b2sK"}`, &ctl.Response{}},
		{ctl.Response{ID: 2, Exit: -1, Error: "timed out after 1s"}, `{"id":2,"exit":-1,"output":null,"error":"timed out after 1s"}`, &ctl.Response{}},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.wire {
			t.Errorf("%+v is %s, want %s", tc.v, b, tc.wire)
		}
		if err := json.Unmarshal(b, tc.into); err != nil {
			t.Fatal(err)
		}
		if got := reflect.ValueOf(tc.into).Elem().Interface(); !reflect.DeepEqual(got, tc.v) {
			t.Errorf("read back %+v, want %+v", got, tc.v)
		}
	}
	if ctl.PortName != "org.espgw.ctl" {
		t.Errorf("port name %q", ctl.PortName)
	}
}
