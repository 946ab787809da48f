package sa

import (
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// The SA file reader: a scanner for the YAML that SA files are written in
// (block mappings and lists, one-line flow mappings and lists, plain and
// simply quoted scalars, comments), which hands the entries of the sa: and
// spd: lists one at a time to the same walker that reads yaml.v3's node
// tree. It builds each entry's nodes in a reused arena, so a file of any
// size is read in the memory of one entry plus the SAs it yields. Anything
// outside that subset (anchors, aliases, tags, merge keys, escapes, block
// scalars, multi-line flow collections or scalars, tabs, CR, non-ASCII,
// a second document) makes it give up, and yaml.v3 reads the whole file.
// A fuzz test holds the two to the same trees wherever the scanner accepts.

// errNotSubset is the scanner giving up: the file is read by yaml.v3.
var errNotSubset = errors.New("outside the streamed YAML subset")

// entrySink receives the scanner's entries: list is "sa" or "spd", line
// where the list starts, n the entry's nodes (valid until the next call).
type entrySink interface {
	list(name string, keyLine, line int)
	entry(name string, n *yaml.Node)
}

// streamReader scans src. The nodes handed out live in arena chunks that
// are reused from one entry to the next.
type streamReader struct {
	src  string
	pos  int // the next byte to read
	line int // the line pos is on, 1-based
	bol  int // where that line begins

	chunks [][]yaml.Node
	chunk  int // the chunk in use
	used   int // nodes used of it
	kids   []*yaml.Node
	stack  []*yaml.Node
	keep   bool // allocate fresh nodes (a whole tree is being built)

	// in, when set, is read a window at a time (see fill): src is then
	// the window's bytes.
	in     io.Reader
	window []byte
	done   bool // in is at its end
}

const nodeChunk = 256

func (r *streamReader) reset() {
	if r.keep {
		r.chunks, r.kids = nil, nil
	}
	r.chunk, r.used = 0, 0
	r.kids = r.kids[:0]
}

func (r *streamReader) node(kind yaml.Kind, line, col int) *yaml.Node {
	if r.chunk == len(r.chunks) {
		r.chunks = append(r.chunks, make([]yaml.Node, nodeChunk))
	}
	n := &r.chunks[r.chunk][r.used]
	*n = yaml.Node{Kind: kind, Line: line, Column: col}
	if r.used++; r.used == nodeChunk {
		r.chunk, r.used = r.chunk+1, 0
	}
	return n
}

// children moves the nodes pushed on the stack since mark into n.Content.
func (r *streamReader) children(n *yaml.Node, mark int) {
	k := r.stack[mark:]
	if cap(r.kids)-len(r.kids) < len(k) {
		r.kids = make([]*yaml.Node, 0, max(1024, len(k)))
	}
	start := len(r.kids)
	r.kids = append(r.kids, k...)
	n.Content = r.kids[start:len(r.kids):len(r.kids)]
	clear(r.stack[mark:])
	r.stack = r.stack[:mark]
}

func (r *streamReader) col() int { return r.pos - r.bol + 1 }

func (r *streamReader) peek() byte {
	if r.pos < len(r.src) {
		return r.src[r.pos]
	}
	return '\n'
}

// endLine moves to the start of the next line; the rest of this one must
// be blank or a comment.
func (r *streamReader) endLine() error {
	for r.pos < len(r.src) && r.src[r.pos] == ' ' {
		r.pos++
	}
	if r.pos < len(r.src) && r.src[r.pos] == '#' {
		if r.pos > 0 && r.src[r.pos-1] != ' ' {
			return errNotSubset
		}
		for r.pos < len(r.src) && r.src[r.pos] != '\n' {
			r.pos++
		}
	}
	if r.pos < len(r.src) {
		if r.src[r.pos] != '\n' {
			return errNotSubset
		}
		r.pos++
		r.line++
		r.bol = r.pos
	}
	return nil
}

// skipBlank moves over blank and comment-only lines to the first
// character of the next line with content, and returns its indentation
// (-1 at the end of the input).
func (r *streamReader) skipBlank() int {
	for r.pos < len(r.src) {
		i := r.pos
		for i < len(r.src) && r.src[i] == ' ' {
			i++
		}
		if i < len(r.src) && r.src[i] != '\n' && r.src[i] != '#' {
			r.pos = i
			return i - r.bol
		}
		for i < len(r.src) && r.src[i] != '\n' {
			i++
		}
		if i < len(r.src) {
			i++
			r.line++
			r.bol = i
		}
		r.pos = i
	}
	return -1
}

// checkBytes refuses what the scanner does not read: tabs, CR, other
// control characters, non-ASCII (yaml.v3 checks encodings), a byte order
// mark, and the characters that start anchors, aliases, tags, directives
// and block scalars anywhere (a cheap over-approximation: a quoted value
// holding one is read by yaml.v3).
func checkBytes(s []byte) error {
	if badByte(s) >= 0 {
		return errNotSubset
	}
	return nil
}

// badByte is the index of the first byte checkBytes refuses, -1 if none.
func badByte(s []byte) int {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
		case c < ' ' || c >= 0x7f:
			return i
		case c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '@' || c == '`' || c == '\\':
			return i
		}
	}
	return -1
}

// document scans a whole SA file: a mapping of sa: and spd: (in that
// order, each once), each a block list.
func (r *streamReader) document(sink entrySink) error {
	if r.line == 0 {
		r.line = 1
	}
	seen := 0
	for {
		ind, err := r.nextContent()
		if err != nil {
			return err
		}
		if ind < 0 {
			break
		}
		if ind != 0 {
			return errNotSubset
		}
		keyLine := r.line
		var name string
		switch {
		case hasWordColon(r.src[r.pos:], "sa") && seen == 0:
			name, r.pos, seen = "sa", r.pos+3, 1
		case hasWordColon(r.src[r.pos:], "spd") && seen == 1:
			name, r.pos, seen = "spd", r.pos+4, 2
		default:
			return errNotSubset
		}
		if err := r.endLine(); err != nil {
			return err
		}
		if ind, err = r.nextContent(); err != nil {
			return err
		}
		if ind < 0 || !r.atDash() {
			return errNotSubset
		}
		sink.list(name, keyLine, r.line)
		for {
			r.reset()
			line := r.line
			n, err := r.seqItem(ind)
			if err != nil {
				return err
			}
			if r.more() && r.pos >= len(r.src) {
				return fmt.Errorf("line %d: %w: an entry of more than %d bytes", line, errNotSubset, maxStreamedEntry)
			}
			sink.entry(name, n)
			next, err := r.nextContent()
			if err != nil {
				return err
			}
			if next < 0 || next == 0 && !r.atDash() {
				break
			}
			if next != ind || !r.atDash() {
				return errNotSubset
			}
		}
	}
	if seen == 0 {
		return errNotSubset
	}
	return nil
}

// nextContent is skipBlank, reading more of a windowed input as it
// needs: at least maxStreamedEntry bytes are in the window after pos,
// unless the input ends first.
func (r *streamReader) nextContent() (int, error) {
	for {
		ind := r.skipBlank()
		if err := r.fill(); err != nil {
			return 0, err
		}
		if ind >= 0 || !r.more() {
			return ind, nil
		}
	}
}

// hasWordColon reports whether s starts with word, a colon and a space or
// the end of the line.
func hasWordColon(s, word string) bool {
	n := len(word)
	return len(s) > n && s[:n] == word && s[n] == ':' && (len(s) == n+1 || s[n+1] == ' ' || s[n+1] == '\n')
}

// atDash reports whether a list item starts at pos: "-" and a space or
// the end of the line.
func (r *streamReader) atDash() bool {
	s := r.src[r.pos:]
	return len(s) > 0 && s[0] == '-' && (len(s) == 1 || s[1] == ' ' || s[1] == '\n')
}

// seqItem reads a list item whose dash is at pos, in column ind.
func (r *streamReader) seqItem(ind int) (*yaml.Node, error) {
	r.pos++
	if r.peek() != ' ' {
		return nil, errNotSubset // "-" alone: the item on the lines below
	}
	for r.peek() == ' ' {
		r.pos++
	}
	switch c := r.peek(); c {
	case '\n', '#', '-', '?', ':', ',', ']', '}':
		return nil, errNotSubset
	case '{', '[':
		n, err := r.flow()
		if err != nil {
			return nil, err
		}
		return n, r.endLine()
	}
	if r.keyAhead() {
		return r.blockMapping(r.pos - r.bol)
	}
	n, err := r.blockScalar()
	if err != nil {
		return nil, err
	}
	return n, r.endLine()
}

// keyAhead reports whether the line from pos holds a mapping key: a
// scalar followed by ": " or ":" at the end of the line.
func (r *streamReader) keyAhead() bool {
	s := r.src[r.pos:]
	if len(s) > 0 && (s[0] == '"' || s[0] == '\'') {
		end := 1
		for end < len(s) && s[end] != s[0] && s[end] != '\n' {
			end++
		}
		return end+1 < len(s) && s[end] == s[0] && s[end+1] == ':' && (end+2 == len(s) || s[end+2] == ' ' || s[end+2] == '\n')
	}
	for i := 0; i < len(s) && s[i] != '\n'; i++ {
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\n') {
			return true
		}
		if s[i] == '#' && i > 0 && s[i-1] == ' ' {
			return false
		}
	}
	return false
}

// blockMapping reads a block mapping whose first key is at pos, in column
// ind (counted from 0).
func (r *streamReader) blockMapping(ind int) (*yaml.Node, error) {
	m := r.node(yaml.MappingNode, r.line, r.col())
	m.Tag = "!!map"
	mark := len(r.stack)
	for {
		k, err := r.blockKey()
		if err != nil {
			return nil, err
		}
		for r.peek() == ' ' {
			r.pos++
		}
		var v *yaml.Node
		if c := r.peek(); c == '\n' || c == '#' {
			if err := r.endLine(); err != nil {
				return nil, err
			}
			if v, err = r.blockValue(ind); err != nil {
				return nil, err
			}
		} else {
			if v, err = r.inlineValue(); err != nil {
				return nil, err
			}
			if err := r.endLine(); err != nil {
				return nil, err
			}
		}
		r.stack = append(r.stack, k, v)
		next := r.skipBlank()
		if next < ind {
			break
		}
		if next > ind || r.atDash() {
			return nil, errNotSubset
		}
	}
	r.children(m, mark)
	return m, nil
}

// blockValue reads the value of a key whose line ended after the colon:
// a list or mapping on the lines below, indented more than the key (a
// list may also stand at the key's own column).
func (r *streamReader) blockValue(ind int) (*yaml.Node, error) {
	next := r.skipBlank()
	switch {
	case next >= ind && r.atDash():
		return r.blockSeq(next)
	case next > ind && r.keyAhead():
		return r.blockMapping(next)
	}
	return nil, errNotSubset // an empty value, or a scalar on its own line
}

// blockSeq reads a block list whose first dash is at pos, in column ind.
func (r *streamReader) blockSeq(ind int) (*yaml.Node, error) {
	s := r.node(yaml.SequenceNode, r.line, r.col())
	s.Tag = "!!seq"
	mark := len(r.stack)
	for {
		n, err := r.seqItem(ind)
		if err != nil {
			return nil, err
		}
		r.stack = append(r.stack, n)
		next := r.skipBlank()
		if next < ind || next == ind && !r.atDash() {
			break
		}
		if next > ind {
			return nil, errNotSubset
		}
	}
	r.children(s, mark)
	return s, nil
}

// blockKey reads a key and its colon.
func (r *streamReader) blockKey() (*yaml.Node, error) {
	var k *yaml.Node
	if c := r.peek(); c == '"' || c == '\'' {
		var err error
		if k, err = r.quoted(); err != nil {
			return nil, err
		}
	} else {
		if isIndicator(c) || c == '-' || c == '?' || c == ':' {
			return nil, errNotSubset
		}
		start, line, col := r.pos, r.line, r.col()
		for r.pos < len(r.src) && r.src[r.pos] != '\n' && !(r.src[r.pos] == ':' && (r.pos+1 == len(r.src) || r.src[r.pos+1] == ' ' || r.src[r.pos+1] == '\n')) {
			if r.src[r.pos] == '#' && r.src[r.pos-1] == ' ' {
				return nil, errNotSubset
			}
			r.pos++
		}
		if r.pos > start && r.src[r.pos-1] == ' ' {
			return nil, errNotSubset // a space before the colon
		}
		k = r.plain(r.src[start:r.pos], line, col)
	}
	if r.peek() != ':' || k.Value == "<<" && k.Style == 0 {
		return nil, errNotSubset
	}
	r.pos++
	if c := r.peek(); c != ' ' && c != '\n' {
		return nil, errNotSubset
	}
	return k, nil
}

// inlineValue reads a value that follows its key on the same line.
func (r *streamReader) inlineValue() (*yaml.Node, error) {
	switch r.peek() {
	case '{', '[':
		return r.flow()
	}
	return r.blockScalar()
}

// blockScalar reads a scalar that runs to the end of the line (or a
// comment).
func (r *streamReader) blockScalar() (*yaml.Node, error) {
	c := r.peek()
	if c == '"' || c == '\'' {
		return r.quoted()
	}
	// A scalar that starts with '?' or ':' is left to yaml.v3, whose rules
	// for them differ from YAML 1.2's in corners ({k: :v}); so is one that
	// starts with '-' and a space (a list item).
	if isIndicator(c) || c == '?' || c == ':' || c == '-' && (r.pos+1 >= len(r.src) || r.src[r.pos+1] == ' ' || r.src[r.pos+1] == '\n') {
		return nil, errNotSubset
	}
	start, line, col := r.pos, r.line, r.col()
	end := r.pos
	for r.pos < len(r.src) && r.src[r.pos] != '\n' {
		switch r.src[r.pos] {
		case ':':
			if r.pos+1 == len(r.src) || r.src[r.pos+1] == ' ' || r.src[r.pos+1] == '\n' {
				return nil, errNotSubset
			}
		case '#':
			if r.src[r.pos-1] == ' ' {
				return r.plain(r.src[start:end], line, col), nil
			}
		}
		if r.src[r.pos] != ' ' {
			end = r.pos + 1
		}
		r.pos++
	}
	return r.plain(r.src[start:end], line, col), nil
}

// isIndicator reports whether c cannot start a plain scalar here.
func isIndicator(c byte) bool {
	switch c {
	case '[', ']', '{', '}', ',', '#', '&', '*', '!', '|', '>', '%', '@', '`', '\n', ' ':
		return true
	}
	return false
}

// plain makes the node of a plain scalar.
func (r *streamReader) plain(v string, line, col int) *yaml.Node {
	n := r.node(yaml.ScalarNode, line, col)
	n.Value = v
	n.Tag = "!!str"
	switch v {
	case "", "~", "null", "Null", "NULL":
		n.Tag = "!!null"
	}
	return n
}

// quoted reads a single- or double-quoted scalar without escapes that
// ends on its line.
func (r *streamReader) quoted() (*yaml.Node, error) {
	q := r.src[r.pos]
	line, col := r.line, r.col()
	start := r.pos + 1
	end := start
	for end < len(r.src) && r.src[end] != q {
		if r.src[end] == '\n' {
			return nil, errNotSubset
		}
		end++
	}
	if end == len(r.src) || q == '\'' && end+1 < len(r.src) && r.src[end+1] == '\'' {
		return nil, errNotSubset
	}
	r.pos = end + 1
	n := r.node(yaml.ScalarNode, line, col)
	n.Value, n.Tag, n.Style = r.src[start:end], "!!str", yaml.DoubleQuotedStyle
	if q == '\'' {
		n.Style = yaml.SingleQuotedStyle
	}
	return n, nil
}

// flow reads a flow mapping or list that closes on its line.
func (r *streamReader) flow() (*yaml.Node, error) {
	open := r.src[r.pos]
	kind, tag, closer := yaml.MappingNode, "!!map", byte('}')
	if open == '[' {
		kind, tag, closer = yaml.SequenceNode, "!!seq", ']'
	}
	n := r.node(kind, r.line, r.col())
	n.Tag, n.Style = tag, yaml.FlowStyle
	r.pos++
	mark := len(r.stack)
	r.spaces()
	if r.peek() == closer {
		r.pos++
		r.children(n, mark)
		return n, nil
	}
	for {
		if kind == yaml.MappingNode {
			k, err := r.flowScalar(true)
			if err != nil {
				return nil, err
			}
			if r.peek() != ':' || k.Value == "<<" && k.Style == 0 {
				return nil, errNotSubset
			}
			r.pos++
			if r.peek() != ' ' {
				return nil, errNotSubset
			}
			r.spaces()
			r.stack = append(r.stack, k)
		}
		var v *yaml.Node
		var err error
		if c := r.peek(); c == '{' || c == '[' {
			v, err = r.flow()
		} else {
			v, err = r.flowScalar(false)
		}
		if err != nil {
			return nil, err
		}
		r.stack = append(r.stack, v)
		r.spaces()
		switch r.peek() {
		case ',':
			r.pos++
			r.spaces()
			if c := r.peek(); c == '}' || c == ']' || c == ',' {
				return nil, errNotSubset
			}
			continue
		case closer:
			r.pos++
			r.children(n, mark)
			return n, nil
		}
		return nil, errNotSubset
	}
}

func (r *streamReader) spaces() {
	for r.pos < len(r.src) && r.src[r.pos] == ' ' {
		r.pos++
	}
}

// flowScalar reads a scalar inside a flow collection: a key up to its
// colon and space, a value up to a comma or the closing bracket. A colon
// inside a value is part of it unless a space or a bracket follows (an
// IPv6 address is one value); a key holding one is left to yaml.v3.
func (r *streamReader) flowScalar(key bool) (*yaml.Node, error) {
	c := r.peek()
	if c == '"' || c == '\'' {
		return r.quoted()
	}
	// As in blockScalar, a scalar that starts with '?' or ':' is left to
	// yaml.v3.
	if isIndicator(c) || c == '?' || c == ':' || c == '-' && (r.pos+1 >= len(r.src) || isIndicator(r.src[r.pos+1]) || r.src[r.pos+1] == ':') {
		return nil, errNotSubset
	}
	start, line, col := r.pos, r.line, r.col()
	end := r.pos
	for ; r.pos < len(r.src); r.pos++ {
		switch c := r.src[r.pos]; c {
		case '\n', '#', '[', ']', '{', '}', ',', '"', '\'':
			if key || c == '#' || c == '\n' || c == '"' || c == '\'' {
				return nil, errNotSubset
			}
			return r.plain(r.src[start:end], line, col), nil
		case ':':
			next := byte('\n')
			if r.pos+1 < len(r.src) {
				next = r.src[r.pos+1]
			}
			if key && next == ' ' && end == r.pos {
				return r.plain(r.src[start:end], line, col), nil
			}
			if key || next == ' ' || next == '\n' || next == ',' || next == ']' || next == '}' || next == '[' || next == '{' {
				return nil, errNotSubset
			}
		}
		if r.src[r.pos] != ' ' {
			end = r.pos + 1
		}
	}
	return nil, errNotSubset
}
