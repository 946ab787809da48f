// Package shell quotes words for a POSIX sh command line.
package shell

import "strings"

// special are the bytes that make sh read a word other than as written
// (a word of the arguments: an = there is plain).
const special = " \t\n'\"\\$`()<>|&;*?[]{}#~!"

// Quote returns w as one sh word: as it is when sh reads it unchanged,
// else in single quotes, each single quote inside it closed, escaped
// and reopened.
func Quote(w string) string {
	if w != "" && !strings.ContainsAny(w, special) {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
