package session

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

func TestWellFormed(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"cut \xf0\x9f\x98", "cut \uFFFD"},             // one U+FFFD for a truncated 4-byte sequence, as Node
		{"cut \xf0\x9f\x98\"", "cut \uFFFD\""},         // the ASCII byte after it is kept
		{"raw \xed\xa0\xbd", "raw \uFFFD\uFFFD\uFFFD"}, // a raw surrogate: three, as Node
		{"\x80\x80", "\uFFFD\uFFFD"},
		{`esc \ud83d`, `esc \ud83d`}, // escapes are text
	} {
		if got := string(WellFormed([]byte(c.in))); got != c.want {
			t.Errorf("WellFormed(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	b := []byte("valid 😀")
	if got := WellFormed(b); &got[0] != &b[0] {
		t.Error("WellFormed copied valid UTF-8")
	}
}

func TestSanitizeText(t *testing.T) {
	for _, c := range []struct {
		in, want, keep string
		n, keepN       int
	}{
		{in: `{"a":"x"}`, want: `{"a":"x"}`, keep: `{"a":"x"}`},
		{in: `{"a":"\ud83d\ude00","b":"\uD83D\uDE00"}`, want: `{"a":"\ud83d\ude00","b":"\uD83D\uDE00"}`, keep: `{"a":"\ud83d\ude00","b":"\uD83D\uDE00"}`},
		{in: `{"a":"x\ud83d"}`, want: "{\"a\":\"x\uFFFD\"}", keep: `{"a":"x\ud83d"}`, n: 1},
		{in: `{"a":"\uDE00\ud83d\ud83d\ude00"}`, want: "{\"a\":\"\uFFFD\uFFFD\\ud83d\\ude00\"}", keep: `{"a":"\uDE00\ud83d\ud83d\ude00"}`, n: 1},
		{in: `{"a":"\\ud83d"}`, want: `{"a":"\\ud83d"}`, keep: `{"a":"\\ud83d"}`}, // the text \ud83d
		{in: "{\"a\":\"\xf0\x9f\x98\",\"b\":\"\xed\xa0\xbd\",\"c\":\"\\ud83d\"}", want: "{\"a\":\"\uFFFD\",\"b\":\"\uFFFD\uFFFD\uFFFD\",\"c\":\"\uFFFD\"}",
			keep: "{\"a\":\"\uFFFD\",\"b\":\"\uFFFD\uFFFD\uFFFD\",\"c\":\"\\ud83d\"}", n: 3, keepN: 2},
		{in: "{\"\xf0\x9f\x98\":1}", want: "{\"\uFFFD\":1}", keep: "{\"\uFFFD\":1}", n: 1, keepN: 1},           // keys too
		{in: "{\"a\":\"\\\xf0\"}", want: "{\"a\":\"\\\uFFFD\"}", keep: "{\"a\":\"\\\uFFFD\"}", n: 1, keepN: 1}, // not JSON: still no ill-formed byte
		{in: "{\"a\":\"\\u\xf0\"}", want: "{\"a\":\"\\u\uFFFD\"}", keep: "{\"a\":\"\\u\uFFFD\"}", n: 1, keepN: 1},
	} {
		got, n := SanitizeText([]byte(c.in), false)
		if string(got) != c.want || n != c.n {
			t.Errorf("SanitizeText(%q) = %q, %d; want %q, %d", c.in, got, n, c.want, c.n)
		}
		if !utf8.Valid(got) {
			t.Errorf("SanitizeText(%q) = %q: not valid UTF-8", c.in, got)
		}
		got, n = SanitizeText([]byte(c.in), true)
		if string(got) != c.keep || n != c.keepN {
			t.Errorf("SanitizeText(%q, keep) = %q, %d; want %q, %d", c.in, got, n, c.keep, c.keepN)
		}
	}
	b := []byte(`{"a":"\ud83d\ude00 \\ud800 \\\\ud800 😀"}`)
	if got, n := SanitizeText(b, false); n != 0 || &got[0] != &b[0] {
		t.Errorf("SanitizeText changed or copied %s: %s", b, got)
	}
	if hasLoneSurrogateEscape(b) {
		t.Errorf("hasLoneSurrogateEscape(%s)", b)
	}
}

// The messages Load derives from a log with a byte-cut emoji, a raw surrogate and lone surrogate
// escapes are valid UTF-8 and, as JavaScript values, equal the oracle's
// (testdata/text/text-edge.expected.json): JSON.stringify of them gives its bytes.
func TestMessagesTextEqualInspect(t *testing.T) {
	raw, err := os.ReadFile("testdata/text/text-edge.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	_, events, err := ReadJSONL(bytes.NewReader(raw), "text-edge")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load("text-edge", events)
	if err != nil {
		t.Fatal(err)
	}
	res := Inspect(bytes.NewReader(raw), false)
	var exp struct{ Messages []json.RawMessage }
	if b, err := os.ReadFile("testdata/text/text-edge.expected.json"); err != nil || json.Unmarshal(b, &exp) != nil {
		t.Fatalf("oracle output: %v", err)
	}
	same := func(what string, i int, got json.RawMessage) {
		t.Helper()
		v, err := jsvalue.Parse(got)
		if !utf8.Valid(got) || err != nil || !bytes.Equal(jsvalue.Stringify(v), exp.Messages[i]) || !bytes.Equal(res.Messages[i], exp.Messages[i]) {
			t.Errorf("%s message %d:\n got %s\nwant %s (Inspect %s)", what, i, got, exp.Messages[i], res.Messages[i])
		}
	}
	got := s.DeriveMessages()
	if len(got) != len(exp.Messages) || len(got) != len(res.Messages) || len(got) != 2 {
		t.Fatalf("%d messages, Inspect %d, oracle %d", len(got), len(res.Messages), len(exp.Messages))
	}
	for i := range got {
		same("Session.DeriveMessages", i, got[i])
	}
	free, err := DeriveMessages(s.Surface().Nodes, func(seq int64) (Event, error) { return events[seq], nil })
	if err != nil {
		t.Fatal(err)
	}
	for i := range free {
		same("DeriveMessages", i, free[i])
	}
}

// SanitizeText's output is valid UTF-8, needs no further repair, and is JSON whenever its input is.
func FuzzSanitizeText(f *testing.F) {
	for _, s := range []string{`{"a":"x\ud83d"}`, "{\"a\":\"\xf0\x9f\x98\"}", `"\uDE00\ud83d\ude00"`, `"\\ud800"`, "\"\\\xed\xa0\xbd\"", `"\u12"`} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, keep bool) {
		out, n := SanitizeText(b, keep)
		if !utf8.Valid(out) {
			t.Fatalf("SanitizeText(%q) = %q: not valid UTF-8", b, out)
		}
		if again, m := SanitizeText(out, keep); m != 0 || !bytes.Equal(again, out) {
			t.Fatalf("SanitizeText(%q) = %q, not a fixed point: %q (%d)", b, out, again, m)
		}
		if slow, _ := sanitizeSlow(b, keep); !bytes.Equal(slow, out) {
			t.Fatalf("SanitizeText(%q) = %q, its slow path %q", b, out, slow)
		}
		if (n == 0) != bytes.Equal(out, b) {
			t.Fatalf("SanitizeText(%q) = %q, %d", b, out, n)
		}
		if _, err := jsvalue.Parse(b); err == nil {
			if _, err := jsvalue.Parse(out); err != nil {
				t.Fatalf("SanitizeText(%q) = %q: not JSON: %v", b, out, err)
			}
		}
	})
}

// BenchmarkSanitizeText measures the check on 8 KiB of valid tool output (with escapes and a
// surrogate pair): what every Append pays.
func BenchmarkSanitizeText(b *testing.B) {
	long := []byte(`{"arguments":"` + strings.Repeat(`line of tool output with \"quotes\", tabs\t, a pair \ud83d\ude00 and é\n`, 120) + `"}`)
	b.SetBytes(int64(len(long)))
	for range b.N {
		if _, n := SanitizeText(long, false); n != 0 {
			b.Fatal(n)
		}
	}
}
