package wire

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTokenExamples(t *testing.T) {
	cases := []struct{ id, token string }{
		{"parent", "parent"},
		{"Session-42", "Session-42"},
		{"a.b", "a_2Eb"},
		{"x_y", "x_5Fy"},
		{"*", "_2A"},
		{">", "_3E"},
		{"a b", "a_20b"},
		{"tab\there", "tab_09here"},
		{"é", "_C3_A9"},
		{"_2E", "_5F2E"}, // an id that looks like an escape is escaped itself
		{"agentlog.session.>", "agentlog_2Esession_2E_3E"},
	}
	for _, c := range cases {
		got, err := Token(c.id)
		if err != nil || got != c.token {
			t.Errorf("Token(%q) = %q, %v; want %q", c.id, got, err, c.token)
			continue
		}
		back, err := IDFromToken(got)
		if err != nil || back != c.id {
			t.Errorf("IDFromToken(%q) = %q, %v; want %q", got, back, err, c.id)
		}
	}
}

func TestTokenRefusesBadIDs(t *testing.T) {
	cases := []struct{ id, rule string }{
		{"", "id-empty"},
		{strings.Repeat("a", MaxSessionIDBytes+1), "id-too-long"},
		{"ok\xffno", "id-utf8"},
		{"\xc3", "id-utf8"},
	}
	for _, c := range cases {
		tok, err := Token(c.id)
		if err == nil {
			t.Errorf("Token(%q) = %q, want an error with rule %s", c.id, tok, c.rule)
			continue
		}
		if !strings.Contains(err.Error(), c.rule) {
			t.Errorf("Token(%q) error %q does not name rule %s", c.id, err, c.rule)
		}
	}
	// The longest id is accepted: 256 bytes, all escaped.
	long := strings.Repeat("é", MaxSessionIDBytes/2)
	tok, err := Token(long)
	if err != nil || len(tok) != 3*MaxSessionIDBytes {
		t.Fatalf("Token(256 bytes of é) = %d bytes, %v", len(tok), err)
	}
	if back, err := IDFromToken(tok); err != nil || back != long {
		t.Fatalf("round trip of the longest id failed: %v", err)
	}
}

func TestIDFromTokenRefusesNonCanonical(t *testing.T) {
	for _, tok := range []string{
		"",                // empty
		"a.b",             // '.' is never in a token
		"a*", "a>", "a b", // wildcards, space
		"_41",                                    // 'A' is kept, so its escape is not canonical
		"_2e",                                    // lowercase hex
		"_2",                                     // truncated escape
		"abc_",                                   // truncated escape
		"_G0",                                    // not hex
		"_C3",                                    // decodes to invalid UTF-8
		"_FF_FE",                                 // decodes to invalid UTF-8
		"x\u00e9",                                // non-ASCII byte in the token
		strings.Repeat("a", MaxSessionIDBytes+1), // decodes to a too long id
	} {
		if id, err := IDFromToken(tok); err == nil {
			t.Errorf("IDFromToken(%q) = %q, want an error", tok, id)
		}
	}
}

func TestPartition(t *testing.T) {
	// FNV-1a 32-bit values computed independently: "a" → 0xe40c292c, "abc" → 0x1a47e90b.
	cases := []struct {
		token string
		n     int
		want  int
	}{
		{"a", 16, 12}, {"a", 7, 5}, {"abc", 16, 11}, {"abc", 7, 5}, {"a_2Eb", 16, 10}, {"abc", 1, 0},
	}
	for _, c := range cases {
		if got := Partition(c.token, c.n); got != c.want {
			t.Errorf("Partition(%q, %d) = %d, want %d", c.token, c.n, got, c.want)
		}
	}
	subj, err := SessionSubject("a.b", 16)
	if err != nil || subj != "agentlog.session.10.a_2Eb" {
		t.Fatalf("SessionSubject(a.b) = %q, %v", subj, err)
	}
	p, tok, id, err := ParseSubject(subj, 16)
	if err != nil || p != 10 || tok != "a_2Eb" || id != "a.b" {
		t.Fatalf("ParseSubject(%q) = %d %q %q %v", subj, p, tok, id, err)
	}
	for _, bad := range []string{"agentlog.session.3.a_2Eb", "agentlog.session.x.abc", "agentlog.session.010.a_2Eb", "agentlog.errors.1.abc", "agentlog.session.10.a.b", "agentlog.session.10"} {
		if _, _, _, err := ParseSubject(bad, 16); err == nil {
			t.Errorf("ParseSubject(%q) accepted", bad)
		}
	}
	if PartitionSubject(3) != "agentlog.session.3.*" {
		t.Errorf("PartitionSubject(3) = %q", PartitionSubject(3))
	}
	if s, err := ErrorsSubject("a b"); err != nil || s != "agentlog.errors.a_20b" {
		t.Errorf("ErrorsSubject = %q, %v", s, err)
	}
}

// checkTokenShape fails when tok has a byte outside [A-Za-z0-9_-].
func checkTokenShape(t *testing.T, id, tok string) {
	t.Helper()
	if tok == "" {
		t.Fatalf("Token(%q) is empty", id)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; !keepByte(c) && c != '_' {
			t.Fatalf("Token(%q) = %q has forbidden byte 0x%02X", id, tok, c)
		}
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"parent", "a.b", "a_2Eb", "_", "*", ">", " ", "é", "\x00", "a\tb", "日本語", "_5F"} {
		f.Add(s, s+"x")
	}
	f.Add("a.b", "a_2Eb")
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, erra := Token(a)
		tb, errb := Token(b)
		valid := func(s string) bool { return s != "" && len(s) <= MaxSessionIDBytes && utf8.ValidString(s) }
		if (erra == nil) != valid(a) {
			t.Fatalf("Token(%q) error %v, valid %v", a, erra, valid(a))
		}
		if erra == nil {
			checkTokenShape(t, a, ta)
			if back, err := IDFromToken(ta); err != nil || back != a {
				t.Fatalf("IDFromToken(Token(%q)) = %q, %v", a, back, err)
			}
		}
		if erra == nil && errb == nil && (ta == tb) != (a == b) {
			t.Fatalf("not injective: Token(%q) = %q, Token(%q) = %q", a, ta, b, tb)
		}
		// Any token IDFromToken accepts is canonical: Token gives it back.
		if id, err := IDFromToken(a); err == nil {
			if back, err := Token(id); err != nil || back != a {
				t.Fatalf("Token(IDFromToken(%q)) = %q, %v", a, back, err)
			}
		}
	})
}
