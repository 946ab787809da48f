package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIKEInitiateBadInput: each bad flag is an error naming it, before any
// socket opens; the PSK never shows in one.
func TestIKEInitiateBadInput(t *testing.T) {
	psk := filepath.Join(t.TempDir(), "psk")
	if err := os.WriteFile(psk, []byte("a-secret-psk\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"--local": "192.0.2.1", "--remote": "192.0.2.2", "--local-id": "@gw1", "--psk-file": psk,
		"--local-ts": "198.51.100.0/24", "--remote-ts": "203.0.113.0/24", "--out": filepath.Join(t.TempDir(), "sas.yaml")}
	for _, tc := range []struct{ flag, value, want string }{
		{"--local", "gw1", "--local"},
		{"--remote", "300.1.1.1", "--remote"},
		{"--local-id", "@#xyz", "--local-id: key id"},
		{"--psk-file", "/nonexistent/psk", "--psk-file"},
		{"--proposals", "aes128-sha256", "--proposals: IKE proposal 1"},
		{"--esp-proposals", "camellia128-sha256", `--esp-proposals: ESP proposal 1 "camellia128-sha256"`},
		{"--local-ts", "198.51.100.0", "--local-ts"},
		{"--key", "/nonexistent/key.pem", "--cert and --key go together"},
		{"--ca", "/nonexistent/ca.pem", "--ca: certificates"},
		{"--ca", psk, `--ca: certificates in "` + psk + `": no PEM CERTIFICATE block`},
	} {
		args := []string{"ike", "initiate"}
		for k, v := range base {
			if k != tc.flag {
				args = append(args, k, v)
			}
		}
		args = append(args, tc.flag, tc.value)
		root := newRoot()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(args)
		err := root.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "a-secret-psk") {
			t.Errorf("%s %s: error %v, want one with %q", tc.flag, tc.value, err, tc.want)
		}
	}
}
