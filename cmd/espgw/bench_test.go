package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Bad bench flags are refused with what was wrong, before anything is built.
func TestBenchRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--encaps", "gre"}, `--encaps "gre": want none or udp`},
		{[]string{"--frames", "64,9000"}, "--frames: frame size 9000: want 62 to 1418"},
		{[]string{"--frames", "jumbo"}, `--frames: frame size "jumbo"`},
		{[]string{"--baseline", "strongswan", "--frames", "64"}, `baseline "strongswan"`},
		{[]string{"--suites", "aes-xts", "--baseline", "none", "--frames", "64"}, "aes-xts"},
		{[]string{"--ike-tunnels", "3", "--ike-sides", "racoon"}, `side "racoon": want espgw or charon`},
		{[]string{"--ike-tunnels", "3", "--ike-proposals", "aes128-md5-modp768"}, "IKE proposals"},
		{[]string{"--ike-tunnels", "3", "--ike-parallel", "-1"}, "-1 in flight"},
		{[]string{"--ike-tunnels", "3", "--ike-gateway-tunnels", "-2"}, "-2 gateway tunnels"},
	} {
		root := newRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(append([]string{"bench", "-q"}, tc.args...))
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("espgw bench %v: error %v, want one with %q", tc.args, err, tc.want)
		}
	}
}
