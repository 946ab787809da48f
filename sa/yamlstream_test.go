package sa

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// treeSink collects the streamed entries into the tree yaml.v3 would
// build of the same file.
type treeSink struct {
	root *yaml.Node
}

func (t *treeSink) list(name string, keyLine, line int) {
	if len(t.root.Content) == 0 {
		t.root.Line, t.root.Column = keyLine, 1
	}
	t.root.Content = append(t.root.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Value: name, Line: keyLine, Column: 1},
		&yaml.Node{Kind: yaml.SequenceNode, Line: line})
}

func (t *treeSink) entry(name string, n *yaml.Node) {
	seq := t.root.Content[len(t.root.Content)-1]
	if len(seq.Content) == 0 {
		seq.Column = n.Column - 2
	}
	seq.Content = append(seq.Content, copyNode(n))
}

func copyNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = nil
	for _, k := range n.Content {
		c.Content = append(c.Content, copyNode(k))
	}
	return &c
}

// streamTree reads data with the streaming reader into a node tree.
func streamTree(data []byte) (*yaml.Node, error) {
	if err := checkBytes(data); err != nil {
		return nil, err
	}
	t := &treeSink{root: &yaml.Node{Kind: yaml.MappingNode}}
	r := &streamReader{src: string(data), keep: true}
	if err := r.document(t); err != nil {
		return nil, err
	}
	return t.root, nil
}

// sameTree compares what the SA walker reads of two trees: kinds, values,
// lines, whether a scalar is null, and the children.
func sameTree(a, b *yaml.Node, path string) error {
	if a.Kind != b.Kind || a.Value != b.Value || a.Line != b.Line || (a.Tag == "!!null") != (b.Tag == "!!null") || len(a.Content) != len(b.Content) {
		return fmt.Errorf("%s: streamed %v %q line %d tag %s (%d children), yaml.v3 %v %q line %d tag %s (%d children)",
			path, a.Kind, a.Value, a.Line, a.Tag, len(a.Content), b.Kind, b.Value, b.Line, b.Tag, len(b.Content))
	}
	if a.Kind == yaml.ScalarNode && a.Column != b.Column {
		return fmt.Errorf("%s: %q streamed at column %d, yaml.v3 %d", path, a.Value, a.Column, b.Column)
	}
	for i := range a.Content {
		if err := sameTree(a.Content[i], b.Content[i], fmt.Sprintf("%s/%d", path, i)); err != nil {
			return err
		}
	}
	return nil
}

// checkStreamed holds the streaming reader to yaml.v3 on data: where it
// reads the file at all, yaml.v3 reads it too, to the same tree, and
// ParseYAML gives the same SAs or the same errors by either road.
func checkStreamed(t *testing.T, data []byte) bool {
	t.Helper()
	got, err := streamTree(data)
	if err != nil {
		return false
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("streamed, but yaml.v3 says %v:\n%s", err, data)
	}
	if len(doc.Content) != 1 {
		t.Fatalf("streamed, but yaml.v3 has %d nodes at the top", len(doc.Content))
	}
	if err := sameTree(got, doc.Content[0], ""); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if strings.Contains(string(data), "random") {
		return true
	}
	c1, err1 := ParseYAML("f.yaml", data)
	p := &yamlParser{file: "f.yaml"}
	c2, err2, _ := p.finish(p.config(&doc))
	if fmt.Sprint(err1) != fmt.Sprint(err2) {
		t.Fatalf("streamed errors:\n%v\ntree errors:\n%v", err1, err2)
	}
	if err1 == nil && (!reflect.DeepEqual(c1.SAs, c2.SAs) || !reflect.DeepEqual(c1.SPD, c2.SPD)) {
		t.Fatalf("streamed and tree SAs differ:\n%s", data)
	}
	return true
}

// The streaming reader reads every SA file of the tests and the README's
// example, both generated styles and the shapes of hand-written files,
// to what yaml.v3 reads of them; what it does not read goes to yaml.v3.
func TestStreamedMatchesYAMLv3(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	streamed := 0
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if checkStreamed(t, data) {
			streamed++
		}
	}
	for _, c := range []struct {
		data     string
		streamed bool
	}{
		{string(scaleYAML(20, false)), true},
		{string(scaleYAML(20, true)), true},
		{baseSA, true},
		{"sa:\n- {spi: 0x1001, src: 2001:db8::1, dst: 2001:db8::2, enc: aes-gcm-16, enc-key: 0x00112233445566778899aabbccddeeff00112233}\n", true},
		{"sa:\n  - spi: 4097   # the first\n    src: '192.0.2.1'\n    dst: \"192.0.2.2\"\n    enc: aes-cbc\n    enc-key: 0x00112233445566778899aabbccddeeff\n    auth: hmac-sha1-96\n    auth-key: 0x0102030405060708090a0b0c0d0e0f1011121314\n    lifetimes:\n      soft: {bytes: 1M}\n      hard:\n        bytes: 2M\n    selectors:\n    - {src: 198.51.100.0/24, dst: 203.0.113.0/24}\n    - src: 198.51.101.0/24\n\n# policies\nspd:\n- {priority: -5, action: bypass}\n", true},
		{"sa:\n- {spi: 1, src: ::1}\n", false},
		{"sa:\n- {spi: 1}\n  - x\n", false},
		{"sa:\n- spi: 1\n  src: a\n   b\n", false},
		{"sa:\n- {spi: 1,\n  src: a}\n", false},
		{"sa:\n- &x {spi: 1}\n- *x\n", false},
		{"sa:\n- {<<: {spi: 1}}\n", false},
		{"sa:\n- {spi: \"a\\x\"}\n", false},
		{"sa:\n- {spi: 1}\n---\nsa: []\n", false},
		{"sa:\r\n- {spi: 1}\r\n", false},
		{"sa:\n\t- {spi: 1}\n", false},
		{"sa: []\n", false},
		{"spd:\n- {action: bypass}\nsa:\n- {spi: 1}\n", false},
		{"sa:\n- spi:\n", false},
		{"sa:\n- {a: b, }\n", false},
		{"sa:\n- {a:b}\n", false},
		{"sa:\n- {a : b}\n", false},
		{"sa:\n- a : b\n", false},
		{"sa:\n- {spi: 1} x\n", false},
		{"sa:\n- {spi: 1}\nfoo: 2\n", false},
		{"sa:\n- a: b: c\n", false},
		{"sa:\n- {spi: 1}\n- 7\n- [1, 2]\n- ''\n- {}\n- k: []\n", true},
		{"sa:\n- k: x#y\n  j: 'a#b' # c\n", true},
		{"sa:\n  -   {spi: 1}\n", true},
	} {
		if got := checkStreamed(t, []byte(c.data)); got != c.streamed {
			t.Errorf("streamed %v, want %v:\n%s", got, c.streamed, c.data)
		}
	}
	t.Logf("%d of %d test files streamed", streamed, len(files))
}

// FuzzStreamedYAML: wherever the streaming reader reads an input, yaml.v3
// reads it to the same tree, and ParseYAML says the same by both roads.
func FuzzStreamedYAML(f *testing.F) {
	seeds(f, "*.yaml")
	f.Add(scaleYAML(3, false))
	f.Add(scaleYAML(3, true))
	f.Add([]byte(baseSA))
	f.Add([]byte("sa:\n- {spi: 1, src: 2001:db8::1, dst: 10.0.0.1:80}\n- k: x#y\n  j: 'a#b' # c\n  l:\n  - [a, {b: c}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkStreamed(t, data)
	})
}

// ConvertStream writes what ConvertFor writes, for every output format,
// whether it streams the input (YAML, esp_sa) or reads it whole.
func TestConvertStreamMatchesConvert(t *testing.T) {
	yamlIn := scaleYAML(300, false)
	inputs := map[string][]byte{"yaml": yamlIn, "block.yaml": scaleYAML(300, true), "setkey": setkeySAs(300)}
	c, err := ParseYAML("in", yamlIn)
	if err != nil {
		t.Fatal(err)
	}
	espSA, err := MarshalEspSA(c)
	if err != nil {
		t.Fatal(err)
	}
	inputs["esp-sa"] = espSA
	for name, in := range inputs {
		for _, to := range WriteFormats {
			want, err := ConvertFor(name, in, "", to, netip.Addr{})
			if err != nil {
				t.Fatalf("%s to %s: %v", name, to, err)
			}
			var got bytes.Buffer
			if err := ConvertStream(name, bytes.NewReader(in), "", to, netip.Addr{}, &got); err != nil {
				t.Fatalf("%s to %s streamed: %v", name, to, err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("%s to %s: streamed output differs (%d bytes, want %d)", name, to, got.Len(), len(want))
			}
		}
	}
	local := netip.MustParseAddr("198.51.100.1")
	want, err := ConvertFor("yaml", yamlIn, "", FormatXFRM, local)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := ConvertStream("yaml", bytes.NewReader(yamlIn), "", FormatXFRM, local, &got); err != nil || !bytes.Equal(got.Bytes(), want) {
		t.Errorf("ip-xfrm for %s streamed: %v, same output %v", local, err, bytes.Equal(got.Bytes(), want))
	}
}

// Errors in a streamed file are those of the loader, capped; a file the
// streaming reader does not read is refused beyond MaxConvertSize, saying
// where and why, and read whole below it.
func TestConvertStreamErrors(t *testing.T) {
	var out bytes.Buffer
	bad := "sa:\n" + strings.Repeat("- {spi: 0x1001, src: 192.0.2.1, dst: 192.0.2.2, enc: aes-cbcc, enc-key: 0x00112233445566778899aabbccddeeff, auth: hmac-sha1-96, auth-key: 0x0102030405060708090a0b0c0d0e0f1011121314}\n", 50)
	err := ConvertStream("bad.yaml", strings.NewReader(bad), "", FormatSetkey, netip.Addr{}, &out)
	want, _ := ParseYAML("bad.yaml", []byte(bad))
	_, wantErr := ParseYAML("bad.yaml", []byte(bad))
	if want != nil || err == nil || err.Error() != wantErr.Error() || !strings.Contains(err.Error(), "more problems not shown") {
		t.Errorf("streamed errors:\n%v\nwant the loader's:\n%v", err, wantErr)
	}
	anchored := "sa:\n- &a {spi: 0x1001, src: 192.0.2.1, dst: 192.0.2.2, enc: aes-gcm-16, enc-key: 0x00112233445566778899aabbccddeeff00112233}\n"
	out.Reset()
	if err := ConvertStream("small.yaml", strings.NewReader(anchored), "", FormatSetkey, netip.Addr{}, &out); err != nil {
		t.Errorf("a small file with an anchor: %v", err)
	}
	big := anchored + strings.Repeat("# padding\n", MaxConvertSize/10+1)
	err = ConvertStream("big.yaml", strings.NewReader(big), "", FormatSetkey, netip.Addr{}, &out)
	if err == nil || !strings.Contains(err.Error(), "big.yaml:2: sa convert streams a YAML file larger than") {
		t.Errorf("a large file with an anchor: %v", err)
	}
	err = ConvertStream("big.setkey", strings.NewReader(string(setkeySAs(40000))), "", FormatYAML, netip.Addr{}, &out)
	if err == nil || !strings.Contains(err.Error(), "streams larger files of YAML and esp_sa only") {
		t.Errorf("a large setkey file: %v", err)
	}
}
