package scenario

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// keyLike matches what may be key material: 16 or more hex digits.
var keyLike = regexp.MustCompile(`[0-9a-fA-F]{16,}`)

// FuzzParse: any scenario file yields scenarios or a ParseError naming the
// file, never a panic; an error never repeats key-like input; what parses
// has traffic and something to check, and no more than MaxMatrix runs.
// Documents are parsed as if they were in scenarios/, so their pcap files
// are found.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("../../../scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no bundled scenarios to seed from: %v", err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("sa: {keys: 0xa1b2c3d4e5f6a7b8c9dad1e2f3a4b5c6}\ntraffic: {steps: [{ping: {}}]}\nexpect: {delivered: 1}\n"))
	f.Add([]byte("timeout: -5s\nsa: {replay-window: 100000, lifetimes: {soft: {time: -1s}}}\nengine: turbo\ntraffic: {steps: [{ping: {interval: -10ms}}]}\nexpect: {delivered: 1}\n"))
	f.Add([]byte(matrixBomb()))
	f.Add([]byte(""))
	path := filepath.Join("..", "..", "..", "scenarios", "fuzz.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		scs, err := Parse(path, data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != path {
				t.Fatalf("error is not a ParseError naming the file: %v", err)
			}
			msg := err.Error()
			for _, run := range keyLike.FindAllString(msg, -1) {
				if strings.ContainsAny(run, "abcdefABCDEF") && bytes.Contains(data, []byte(run)) {
					t.Fatalf("error repeats key-like input %q: %s", run, msg)
				}
			}
			return
		}
		if len(scs) == 0 || len(scs) > MaxMatrix {
			t.Fatalf("%d scenarios", len(scs))
		}
		for _, s := range scs {
			if len(s.Traffic.Steps) == 0 || len(s.Expect) == 0 || s.Timeout <= 0 {
				t.Fatalf("parsed a scenario that cannot run: %+v", s)
			}
		}
	})
}
