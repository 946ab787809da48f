package labyaml

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type inner struct {
	N int `yaml:"n"`
}

func (i *inner) UnmarshalYAML(n *yaml.Node) error {
	type plain inner
	return DecodeNode(n, (*plain)(i))
}

type doc struct {
	Name  string `yaml:"name"`
	Inner inner  `yaml:"inner"`
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line       int
		want       string
	}{
		{"good", "name: x\ninner: {n: 3}\n", 0, ""},
		{"unknown field", "name: x\nnmae: y\n", 2, "field nmae not found"},
		{"wrong type", "name: x\ninner:\n  n: many\n", 3, "cannot unmarshal"},
		{"unknown field inside an UnmarshalYAML", "name: x\n\ninner:\n  n: 1\n  m: 2\n", 5, "field m not found"},
		{"not YAML", "name: [\n", 1, "did not find expected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			err := Decode("f.yaml", []byte(tc.text), &d)
			if tc.want == "" {
				if err != nil || d.Inner.N != 3 {
					t.Fatalf("%v %+v", err, d)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "f.yaml:") {
				t.Fatalf("%v, want an *Error with %q", err, tc.want)
			}
			if e.Line != tc.line {
				t.Fatalf("line %d (%v), want %d", e.Line, err, tc.line)
			}
		})
	}
}
