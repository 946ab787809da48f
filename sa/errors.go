package sa

import (
	"fmt"
	"strings"
)

// ConfigError is one problem found in an SA file. It names where the problem
// is (file, line, entry, field) and what it is; it never carries key material.
type ConfigError struct {
	File  string // file name as given to the loader
	Line  int    // 1-based; 0 when unknown
	Entry string // e.g. "sa[1] (spi 0x1002)", "spd[0]", or a setkey statement head
	Field string // e.g. "enc-key"; empty when the whole entry is at fault
	Err   error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Entry != "" {
		b.WriteString(": ")
		b.WriteString(e.Entry)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
