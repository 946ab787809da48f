// Package secret owns the two rules that keep keys out of sight: which
// user-written text an error message may quote, and how a file holding keys
// is written.
//
// Every parser of a file that can hold keys (SA files, setkey files, the
// gateway configuration, scenario files, and any SA format added later)
// quotes what the user wrote only through Word, Number or Hidden, so a key
// typed into the wrong field, after a forgotten algorithm name or as a stray
// token is never printed. The rule is that a value is shown only when it is
// evidently something other than a key: a near miss of a word the field
// accepts (a typo worth pointing at), or a short number, address, duration
// or count. Anything else is described by its length.
package secret

import (
	"fmt"
	"strings"
)

// maxShown is the longest value ever quoted.
const maxShown = 40

// Hidden describes a value without showing any of it.
func Hidden(s string) string {
	return fmt.Sprintf("(a %d-character value, not shown)", len(s))
}

// Word quotes s for a message about a field whose values are the words in
// known (algorithm names, modes, field names): s is shown only when it is
// within a few edits of one of them, so "hmac-sha1-69" is quoted and
// "randomSecretValue" is not, or when it is tiny (at most 4 characters,
// such as "ah"), far too short to be a key.
func Word(s string, known ...string) string {
	if !plain(s) || hexRun(s) >= 8 {
		return Hidden(s)
	}
	if tiny(s) {
		return fmt.Sprintf("%q", s)
	}
	low := strings.ToLower(s)
	for _, k := range known {
		k = strings.ToLower(k)
		if distance(low, k, max(2, len(k)/3)) {
			return fmt.Sprintf("%q", s)
		}
	}
	return Hidden(s)
}

// Number quotes s for a message about a field that takes a number, an
// address, a prefix, a port, a duration or a count: s is shown only when it
// is short, holds a digit and is made of the characters such values are
// written with (digits, hex digits, 0x, . : / - + , [ ] _ and unit
// letters), or when it is tiny (at most 4 characters). A run of 8 or more
// hex digits with a letter among them is shown only as a 0x-prefixed
// 32-bit number (an SPI): anything longer could be part of a hex key.
func Number(s string) string {
	if !plain(s) || len(s) > 24 {
		return Hidden(s)
	}
	if tiny(s) {
		return fmt.Sprintf("%q", s)
	}
	if !strings.ContainsAny(s, "0123456789") {
		return Hidden(s)
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(numberChars, rune(s[i])) {
			return Hidden(s)
		}
	}
	if r := hexLetterRun(s); r >= 8 && !(r <= 8 && len(s) <= 10 && (strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"))) {
		return Hidden(s)
	}
	return fmt.Sprintf("%q", s)
}

// tiny reports whether s is at most 4 characters with fewer than 4 hex
// digits in a row: every key is at least 16 bytes, so such a token is
// neither a key nor a telling part of one.
func tiny(s string) bool { return len(s) <= 4 && hexRun(s) < 4 }

// hexLetterRun is the length of the longest run of hex digits in s that
// holds at least one of a-f (a run of decimal digits is a number).
func hexLetterRun(s string) int {
	longest, n, letter := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			n++
		case 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F':
			n++
			letter = true
		default:
			n, letter = 0, false
			continue
		}
		if letter {
			longest = max(longest, n)
		}
	}
	return longest
}

// numberChars are what numbers, addresses, prefixes, ports, durations and
// counts are written with: hex digits, 0x, separators, and the unit letters
// of durations (ns us ms s m h d) and counts (k K M G T Ki Mi Gi).
const numberChars = "0123456789abcdefABCDEFxX.:/-+,[]_%nsumhdkKMGTi"

// plain reports whether s is short printable ASCII without spaces, quotes
// or backslashes: text a key typed with a forgotten colon, or a quoted
// setkey key, rarely is.
func plain(s string) bool {
	if s == "" || len(s) > maxShown {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\'' || c == '\\' || c == '`' {
			return false
		}
	}
	return true
}

// hexRun is the length of the longest run of hex digits in s.
func hexRun(s string) int {
	longest, n := 0, 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' {
			n++
			longest = max(longest, n)
		} else {
			n = 0
		}
	}
	return longest
}

// distance reports whether the edit (Levenshtein) distance between a and b
// is at most limit.
func distance(a, b string, limit int) bool {
	if d := len(a) - len(b); d > limit || -d > limit {
		return false
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)] <= limit
}

// Scrub hides the values a YAML decoder quotes in its messages (yaml.v3
// writes "cannot unmarshal !!str `abcdefg...` into int" and "unknown
// anchor 'x' referenced"): every span in backquotes, single or double
// quotes is kept only if Number would show it.
func Scrub(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexAny(msg, "`'\"")
		if i < 0 {
			break
		}
		q := msg[i]
		j := strings.IndexByte(msg[i+1:], q)
		if j < 0 {
			break
		}
		v := msg[i+1 : i+1+j]
		b.WriteString(msg[:i])
		bare := strings.TrimSuffix(v, "...")
		if Number(bare)[0] == '"' {
			b.WriteString(string(q) + v + string(q))
		} else {
			b.WriteString("(a value, not shown)")
		}
		msg = msg[i+2+j:]
	}
	b.WriteString(msg)
	return b.String()
}

// Value quotes s for a field that takes either a number or one of the
// words in known (a protocol name or number, a priority or low/def/high):
// s is shown when Number or Word would show it.
func Value(s string, known ...string) string {
	if q := Number(s); q[0] == '"' {
		return q
	}
	return Word(s, known...)
}

// Name quotes s for a message about a name or a path of names (a field
// path such as traffic.steps[0].ping, a metric, an expression over
// metrics and numbers): s is shown when it is made of lower-case letters,
// digits, spaces and the punctuation of paths and expressions
// (. - _ [ ] : + * / < > = ! % ,), at most 80 characters, with no run of 8
// hex digits; anything else (upper case, quotes, a long hex run) is
// described by its length.
func Name(s string) string {
	if s == "" || len(s) > 80 || hexRun(s) >= 8 {
		return Hidden(s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte(" .-_[]:+*/<>=!%,", c) >= 0) {
			return Hidden(s)
		}
	}
	return fmt.Sprintf("%q", s)
}

// Unquoted is a quoted value shown without its quotes (for a field
// path printed as part of a message); a description stays as it is.
func Unquoted(q string) string {
	if len(q) >= 2 && q[0] == '"' && q[len(q)-1] == '"' {
		return q[1 : len(q)-1]
	}
	return q
}
