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

// maxErrors bounds how many problems one load reports, so a file of garbage
// gives a readable answer.
const maxErrors = 20

// echo returns a user-written token fit to quote in an error message, or a
// neutral description when the token could be (part of) a key: a long value,
// one with spaces (YAML folds a forgotten colon into the previous value), or
// one with a run of 8 or more hex digits.
func echo(s string) string {
	if len(s) > 40 || strings.ContainsAny(s, " \t\r\n\"'\\") || hexRun(s) >= 8 {
		return fmt.Sprintf("(a %d-character value, not shown)", len(s))
	}
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			return fmt.Sprintf("(a %d-character value, not shown)", len(s))
		}
	}
	return fmt.Sprintf("%q", s)
}

// hexRun is the length of the longest run of hex digits in s.
func hexRun(s string) int {
	longest, n := 0, 0
	for i := 0; i < len(s); i++ {
		if isHex(s[i]) {
			n++
			longest = max(longest, n)
		} else {
			n = 0
		}
	}
	return longest
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// echoShort is echo for fields that never hold keys (SPIs), where a short
// hex number is what the user wrote and worth showing: runs of more than 11
// hex digits (more than a mistyped 32-bit SPI) are still hidden.
func echoShort(s string) string {
	if len(s) <= 18 && hexRun(s) < 12 && !strings.ContainsAny(s, " \t\r\n\"'\\") {
		return fmt.Sprintf("%q", s)
	}
	return echo(s)
}
