package yamlwalk

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func root(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// Fields keeps the known fields in the order written and returns every
// problem with its line and field; merge keys fill in only what the
// mapping does not set, and only when asked for.
func TestFields(t *testing.T) {
	known := []string{"a", "b", "c"}
	for _, c := range []struct {
		name, src string
		opt       Options
		fields    string
		problems  []string
	}{
		{"plain", "b: 2\na: 1\n", Options{Noun: "field"}, "b=2 a=1", nil},
		{"unknown", "a: 1\nbb: 2\n", Options{Noun: "setting"}, "a=1", []string{`2 "": unknown setting "bb" (did you mean "b"?) (want one of a, b, c)`}},
		{"twice", "a: 1\nb: 2\na: 3\n", Options{Noun: "field", Prefix: "tun."}, "a=1 b=2", []string{"3 tun.a: given twice (first on line 1)"}},
		{"not a name", "[x]: 1\nc: 3\n", Options{Noun: "field"}, "c=3", []string{`1 "": a field name is a list, want a name`}},
		{"not a mapping", "[1, 2]\n", Options{Noun: "field", Prefix: "tun."}, "", []string{"1 tun: want a mapping of fields, got a list"}},
		{"merge", "d: &d {a: 1, b: 2}\nm:\n  <<: *d\n  b: 3\n", Options{Noun: "field", Merge: true}, "b=3 a=1", nil},
		{"merge list", "x: &x {a: 1}\ny: &y {a: 2, c: 4}\nm: {<<: [*x, *y]}\n", Options{Noun: "field", Merge: true}, "a=1 c=4", nil},
		{"no merge", "d: &d {a: 1}\nm: {<<: *d}\n", Options{Noun: "field"}, "", []string{`2 "": unknown field "<<" (want one of a, b, c)`}},
		{"merge loop", "m: &m {<<: *m}\n", Options{Noun: "field", Merge: true}, "", []string{`1 <<: merges nested more than 8 deep or more than 10000 in all`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := root(t, c.src)
			if _, m := Lookup(n, "m"); m != nil {
				n = m
			}
			var w Walker
			fs, probs := w.Fields(n, known, c.opt)
			var got []string
			for _, f := range fs {
				got = append(got, f.Key.Value+"="+f.Val.Value)
			}
			if strings.Join(got, " ") != c.fields {
				t.Errorf("fields %q, want %q", strings.Join(got, " "), c.fields)
			}
			var gotP []string
			for _, p := range probs {
				field := p.Field
				if field == "" {
					field = `""`
				}
				gotP = append(gotP, fmt.Sprintf("%d %s: %s", p.Node.Line, field, p.Msg))
			}
			if strings.Join(gotP, "\n") != strings.Join(c.problems, "\n") {
				t.Errorf("problems\n%s\nwant\n%s", strings.Join(gotP, "\n"), strings.Join(c.problems, "\n"))
			}
		})
	}
}

// Lookup and Resolve find what is there and nothing else; KindName names
// every kind.
func TestLookupResolveKind(t *testing.T) {
	n := root(t, "a: &x 1\nb: *x\n")
	if k, v := Lookup(n, "b"); k == nil || Resolve(v).Value != "1" || KindName(v) != "alias" {
		t.Errorf("b: %v %v", k, v)
	}
	if k, v := Lookup(n, "c"); k != nil || v != nil {
		t.Error("c found")
	}
	if k, _ := Lookup(nil, "a"); k != nil {
		t.Error("found in nil")
	}
	for kind, want := range map[yaml.Kind]string{yaml.ScalarNode: "single value", yaml.SequenceNode: "list", yaml.MappingNode: "mapping", yaml.DocumentNode: "document"} {
		if got := KindName(&yaml.Node{Kind: kind}); got != want {
			t.Errorf("%v: %s, want %s", kind, got, want)
		}
	}
}
