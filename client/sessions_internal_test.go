package client

import (
	"slices"
	"strings"
	"testing"
)

// TestSelectRows: the binary-searched run equals a filter over every row.
func TestSelectRows(t *testing.T) {
	var all []meta
	for _, id := range []string{"a", "ab", "abc", "b", "ba", "bb", "c"} {
		all = append(all, meta{id: id})
	}
	for _, prefix := range []string{"", "a", "ab", "b", "z", "bb"} {
		for _, after := range []string{"", "a", "aa", "abc", "b", "bz", "c", "d"} {
			var want []string
			for _, m := range all {
				if strings.HasPrefix(m.id, prefix) && m.id > after {
					want = append(want, m.id)
				}
			}
			var got []string
			for _, m := range selectRows(all, prefix, after) {
				got = append(got, m.id)
			}
			if !slices.Equal(got, want) {
				t.Errorf("prefix %q after %q: %v, want %v", prefix, after, got, want)
			}
		}
	}
}
