// Package labyaml is how the lab reads its YAML files.
//
// It is how the lab reads its YAML files (scenarios and the impairments
// inside them): strict decoding into structs, where an unknown field or a
// wrong type is an error naming the file, the line and, where known, the
// field. (The SA file and the gateway configuration, and the scenarios'
// own node lookups, walk yaml.Node trees with internal/yamlwalk instead,
// for errors that name the SA entry.)
package labyaml

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/espgw/espgw/internal/secret"
)

// Error is a problem at a place in a file.
type Error struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		// A field path may hold what the user wrote (an unknown field, a
		// matrix path, a metric): shown only if it reads as one.
		b.WriteString(": " + secret.Unquoted(secret.Name(e.Field)))
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Decode decodes the YAML document data (from file) into v, rejecting
// fields v does not have.
func Decode(file string, data []byte, v any) error {
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true)
	if err := d.Decode(v); err != nil {
		return Wrap(file, err)
	}
	return nil
}

// DecodeNode decodes node into v as strictly as Decode, for UnmarshalYAML
// methods: yaml.v3 checks unknown fields only when decoding a document, so
// the node is written out and decoded again, and the lines in the errors
// are moved back to where the node sits in its file.
func DecodeNode(node *yaml.Node, v any) error {
	b, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(v); err != nil {
		return errors.New(lineRE.ReplaceAllStringFunc(err.Error(), func(m string) string {
			n, _ := strconv.Atoi(m[5:])
			return fmt.Sprintf("line %d", n+node.Line-1)
		}))
	}
	return nil
}

var lineRE = regexp.MustCompile(`line \d+`)

// Wrap turns a yaml.v3 error ("yaml: unmarshal errors:\n  line 3: ...")
// into an *Error with its line, its text cleared of anything secret.
func Wrap(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		var line int
		if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
			msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
		}
		return &Error{File: file, Line: line, Err: errors.New(secret.Scrub(msg))}
	}
	msg := secret.Scrub(err.Error())
	var line int
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &line)
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	// The line goes in front of the message once, as file:line.
	msg = strings.TrimPrefix(msg, fmt.Sprintf("line %d: ", line))
	return &Error{File: file, Line: line, Err: errors.New(msg)}
}
