package wire

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTokenRefusesInvalidUTF8: ids that are not valid UTF-8, which the shared vectors
// (testdata/vectors.json, TestVectorsTokens) cannot carry in JSON.
func TestTokenRefusesInvalidUTF8(t *testing.T) {
	for _, id := range []string{"ok\xffno", "\xc3", "a\xed\xa0\x80"} {
		tok, err := Token(id)
		if err == nil || !strings.Contains(err.Error(), "id-utf8") {
			t.Errorf("Token(%q) = %q, %v; want rule id-utf8", id, tok, err)
		}
	}
}

// TestParseSubjectRefuses: the partitions and subjects themselves are the shared vectors'
// (TestVectorsSubjects).
func TestParseSubjectRefuses(t *testing.T) {
	for _, bad := range []string{"agentlog.session.3.a_2Eb", "agentlog.session.x.abc", "agentlog.session.010.a_2Eb", "agentlog.errors.1.abc", "agentlog.session.10.a.b", "agentlog.session.10"} {
		if _, _, _, err := ParseSubject(bad, 16); err == nil {
			t.Errorf("ParseSubject(%q) accepted", bad)
		}
	}
	if PartitionSubject(3) != "agentlog.session.3.*" {
		t.Errorf("PartitionSubject(3) = %q", PartitionSubject(3))
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
