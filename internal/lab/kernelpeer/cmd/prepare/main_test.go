package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Offline, with nothing unpacked, prepare refuses, says what to run, and
// writes nothing into the folder it was given but its lock; bad command
// lines are refused.
func TestRunRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kernel")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"offline, nothing there", []string{"-offline", "-dir", dir}, "kernel peer not prepared"},
		{"unknown flag", []string{"-fast"}, "flag provided but not defined: -fast"},
		{"stray argument", []string{"-offline", "-dir", dir, "now"}, `unexpected arguments ["now"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, &out, &errOut); err != nil || !strings.Contains(errOut.String(), "-offline") {
		t.Errorf("-h: %v, usage %q", err, errOut.String())
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".lock" {
			t.Errorf("an offline refusal left %s in %s", e.Name(), dir)
		}
	}
}
