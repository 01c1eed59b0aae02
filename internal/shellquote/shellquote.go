// Package shellquote quotes a word for a POSIX shell, for commands that messages tell the user to
// run (`agentlog rm ID`).
package shellquote

import "strings"

// Quote returns s as it is when it holds only [A-Za-z0-9._/:-], else in single quotes (a single
// quote inside is closed, escaped with a backslash, and reopened).
func Quote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/:-", r)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
