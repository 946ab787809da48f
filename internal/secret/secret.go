// Package secret keeps keys out of error messages and files.
//
// It owns the two rules that keep keys out of sight: which user-written text
// an error message may quote, and how a file holding keys is written.
//
// Every parser of a file that can hold keys (SA files, setkey files, the
// gateway configuration, scenario files, and any SA format added later)
// quotes what the user wrote only through Quote (or Word, Number, Value and
// Name, which are Quote with a hint), and describes the value of a key field
// only with Hidden. The one rule: a value is shown unless it could be a key
// or part of one — a run of 8 or more hex digits with a letter among them
// (except a 0x-prefixed 32-bit number, an SPI), a run of 16 or more digits
// or of 16 or more base64 characters, or text with quotes, control
// characters or runs of spaces, or longer than 40 characters — so a misspelt word ("AES-CBCC", "bogus-opt") is shown,
// with the nearest valid names when there are any.
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

// Quote is s quoted when the rule shows it (it cannot be a key), else
// Hidden(s).
func Quote(s string) string {
	if !plain(s) || keyLike(s) {
		return Hidden(s)
	}
	return fmt.Sprintf("%q", s)
}

// keyLike reports whether s holds what could be a key or part of one: a
// run of 8 or more hex digits with a letter among them, other than a
// 0x-prefixed 32-bit number, a run of 16 or more digits, or a run of 16 or
// more base64 characters.
func keyLike(s string) bool {
	if r := hexLetterRun(s); r >= 8 && !(r == 8 && len(s) <= 10 && (strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"))) {
		return true
	}
	if hexRun(s) >= 16 {
		return true
	}
	return base64Run(s) >= 16
}

// base64Run is the length of the longest run of base64 characters
// (letters, digits, + and /) in s.
func base64Run(s string) int {
	longest, n := 0, 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '/' {
			n++
			longest = max(longest, n)
		} else {
			n = 0
		}
	}
	return longest
}

// Word quotes s for a message about a field whose values are the words in
// known (algorithm names, modes, field names), by Quote's rule, and names
// the nearest of them when s is a near miss: "AES-CBCC" (did you mean
// "AES-CBC"?).
func Word(s string, known ...string) string {
	q := Quote(s)
	if q[0] != '"' {
		return q
	}
	if near := Nearest(s, known...); near != "" && !strings.EqualFold(strings.SplitN(near, " [", 2)[0], s) && !strings.EqualFold(near, s) {
		return fmt.Sprintf("%s (did you mean %q?)", q, near)
	}
	return q
}

// Nearest is the word of known closest to s, ignoring case, within a few
// edits of it (of the whole word, or of its name before a " [" reference),
// or "" when none is.
func Nearest(s string, known ...string) string {
	low := strings.ToLower(s)
	best, bestD := "", -1
	for _, k := range known {
		for _, form := range []string{k, strings.SplitN(k, " [", 2)[0]} {
			f := strings.ToLower(form)
			if f == low {
				return k
			}
			limit := max(1, len(f)/3)
			if d := editDistance(low, f, limit); d <= limit && (bestD < 0 || d < bestD || d == bestD && k < best) {
				best, bestD = k, d
			}
		}
	}
	return best
}

// Number quotes s for a message about a field that takes a number, an
// address, a prefix, a port, a duration or a count: Quote's rule.
func Number(s string) string { return Quote(s) }

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

// plain reports whether s is short printable ASCII without quotes,
// backslashes or white space other than single spaces between words
// ("AES-CBC [RFC3602]"): text a key typed with a forgotten colon, or a
// quoted setkey key, rarely is.
func plain(s string) bool {
	if s == "" || len(s) > maxShown || s[0] == ' ' || s[len(s)-1] == ' ' || strings.Contains(s, "  ") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\'' || c == '\\' || c == '`' {
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

// editDistance is the edit distance between a and b (insertions,
// deletions, substitutions and swaps of neighbours: "mdoe" is one from
// "mode"), or limit+1 when it is more than limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit+1)
}

// Scrub hides the values a YAML decoder quotes in its messages (yaml.v3
// writes "cannot unmarshal !!str `abcdefg...` into int" and "unknown
// anchor 'x' referenced"): every span in backquotes, single or double
// quotes is kept only if Quote would show it and it is not cut short.
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
		// yaml.v3 cuts long values to their first characters and "...":
		// what follows is unseen, so a cut value is never shown.
		if !strings.HasSuffix(v, "...") && Quote(v)[0] == '"' {
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
// as Word does.
func Value(s string, known ...string) string { return Word(s, known...) }

// Name quotes s for a message about a name or a path of names (a field
// path such as traffic.steps[0].ping, a metric, an expression over
// metrics and numbers): Quote's rule, for names of up to 80 characters
// with spaces between their words.
func Name(s string) string {
	if len(s) > 80 || s == "" {
		return Hidden(s)
	}
	for _, w := range strings.Fields(s) {
		if Quote(w)[0] != '"' {
			return Hidden(s)
		}
	}
	if strings.ContainsAny(s, "\t\n\r\"'`\\") {
		return Hidden(s)
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
