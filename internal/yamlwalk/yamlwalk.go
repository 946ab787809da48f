// Package yamlwalk reads YAML node trees a mapping at a time, for errors
// that name the line and the field: the one walker of the SA file, the
// gateway configuration and the scenarios.
//
// A mapping's fields are checked against the names the caller knows:
// unknown names, repeated names (YAML's last-wins would drop the first
// silently) and keys that are not names are problems, returned for the
// caller to report in its own words of where it is. Merge keys (<<:
// *defaults) are expanded where asked for, within bounds.
package yamlwalk

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/secret"
)

// Field is one key: value pair of a mapping.
type Field struct {
	Key, Val *yaml.Node
}

// Fields are the fields of a mapping, in the order written, each name
// once.
type Fields []Field

// Get finds the field called name.
func (fs Fields) Get(name string) (Field, bool) {
	for _, f := range fs {
		if f.Key.Value == name {
			return f, true
		}
	}
	return Field{}, false
}

// Val is the value of the field called name, nil if it is not set.
func (fs Fields) Val(name string) *yaml.Node {
	f, _ := fs.Get(name)
	return f.Val
}

// Problem is something wrong with a mapping: at Node, about Field (empty:
// the mapping itself).
type Problem struct {
	Node  *yaml.Node
	Field string
	Msg   string
}

// Options say how a mapping is read.
type Options struct {
	// Noun is what the mapping's keys are called in messages ("field",
	// "setting").
	Noun string
	// Prefix goes before a field's name in Problem.Field ("tun.").
	Prefix string
	// Merge expands merge keys.
	Merge bool
}

// MaxAliasDepth bounds alias and merge-key chains: a YAML alias may point
// into its own anchor.
const MaxAliasDepth = 8

// MaxMerges bounds the merge keys a Walker expands, so that merges of
// merges cannot multiply into a long read.
const MaxMerges = 10000

// Walker reads the mappings of one document. Its zero value is ready.
type Walker struct {
	merges int
	probs  []Problem
}

// Resolve follows aliases (*name) to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < MaxAliasDepth; i++ {
		n = n.Alias
	}
	return n
}

// KindName names a node's kind in messages.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return "single value"
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// Lookup finds key in the mapping m: its key and value nodes, nil if m is
// not a mapping or has no such key.
func Lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// Fields reads the mapping m (an alias is followed) against the names in
// known. The problems are valid until the next call.
func (w *Walker) Fields(m *yaml.Node, known []string, opt Options) (Fields, []Problem) {
	w.probs = w.probs[:0]
	fs := w.fields(m, known, opt, 0)
	return fs, w.probs
}

func (w *Walker) fail(n *yaml.Node, field, format string, args ...any) {
	w.probs = append(w.probs, Problem{n, field, fmt.Sprintf(format, args...)})
}

func (w *Walker) fields(m *yaml.Node, known []string, opt Options, depth int) Fields {
	m = Resolve(m)
	where := strings.TrimSuffix(opt.Prefix, ".")
	if m.Kind != yaml.MappingNode {
		w.fail(m, where, "want a mapping of %ss, got a %s", opt.Noun, KindName(m))
		return nil
	}
	out := make(Fields, 0, min(len(m.Content)/2, len(known)))
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], Resolve(m.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			w.fail(k, where, "a %s name is a %s, want a name", opt.Noun, KindName(k))
			continue
		}
		if opt.Merge && k.Value == "<<" && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		ki := slices.Index(known, k.Value)
		if ki < 0 {
			w.fail(k, where, "unknown %s %s (want one of %s)", opt.Noun, secret.Word(k.Value, known...), strings.Join(known, ", "))
			continue
		}
		// The name problems and fields carry is the caller's own, never
		// a piece of the input (which a streaming reader may not copy).
		k.Value = known[ki]
		if prev, dup := out.Get(k.Value); dup {
			w.fail(k, opt.Prefix+k.Value, "given twice (first on line %d)", prev.Key.Line)
			continue
		}
		out = append(out, Field{k, v})
	}
	for _, mv := range merges {
		w.merges++
		if depth >= MaxAliasDepth || w.merges > MaxMerges {
			w.fail(mv, "<<", "merges nested more than %d deep or more than %d in all", MaxAliasDepth, MaxMerges)
			break
		}
		srcs := []*yaml.Node{mv}
		if mv.Kind == yaml.SequenceNode {
			srcs = mv.Content // in YAML's order of precedence
		}
		for _, src := range srcs {
			for _, f := range w.fields(src, known, opt, depth+1) {
				if _, set := out.Get(f.Key.Value); !set {
					out = append(out, f)
				}
			}
		}
	}
	return out
}
