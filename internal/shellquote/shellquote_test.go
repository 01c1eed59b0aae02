package shellquote

import "testing"

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"s1":          "s1",
		"a/b.c:d-e_f": "a/b.c:d-e_f",
		"two words":   "'two words'",
		"it's":        `'it'\''s'`,
		"$(rm -rf ~)": "'$(rm -rf ~)'",
		"ü":           "'ü'",
		"":            "",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}
