package session

import (
	"math/rand/v2"
	"testing"
)

func TestLookupJSON(t *testing.T) {
	data := []byte(` {"turn":1, "chunk" : {"type":"text-delta","text":"a\"b\\c"}, "chunk":{"t\u0079pe" : "usage","usage":{"inputTokens":3}}, "x":[1,{"chunk":2}]} `)
	for _, c := range []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"turn"}, `1`, true},
		{[]string{"chunk", "type"}, `"usage"`, true}, // the last "chunk" wins; the key is unescaped
		{[]string{"chunk", "usage", "inputTokens"}, `3`, true},
		{[]string{"chunk", "text"}, ``, false}, // only in the first, overridden "chunk"
		{[]string{"x"}, `[1,{"chunk":2}]`, true},
		{[]string{"x", "chunk"}, ``, false}, // not an object
		{[]string{"missing"}, ``, false},
		{nil, ``, false},
	} {
		got, ok := LookupJSON(data, c.path...)
		if ok != c.ok || string(got) != c.want {
			t.Errorf("LookupJSON(%v) = %q, %v; want %q, %v", c.path, got, ok, c.want, c.ok)
		}
	}
	for _, bad := range []string{``, `[]`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `"a"`, `{"a":tru}`} {
		if v, ok := LookupJSON([]byte(bad), "a"); ok {
			t.Errorf("LookupJSON(%q, a) = %q, true; want false (a syntax error on the path)", bad, v)
		}
	}
	if !StringIs([]byte(`"us\u0061ge"`), "usage") || StringIs([]byte(`"usage2"`), "usage") || StringIs([]byte(`7`), "usage") {
		t.Error("StringIs")
	}
	if StringIs([]byte("\"\xff\""), "\uFFFD") != true {
		t.Error("StringIs must compare the lossy decoding of invalid UTF-8, as JSON.parse does")
	}
}

// TestPlainRun checks the eight-bytes-at-a-time scan against a byte loop on random strings rich in
// the bytes it must stop at and their neighbours.
func TestPlainRun(t *testing.T) {
	alphabet := []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a', 'z'}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 20000; n++ {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = 'a' + byte(r.IntN(26))
			}
		}
		for start := 0; start <= len(b); start++ {
			want := len(b)
			for i := start; i < len(b); i++ {
				if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
					want = i
					break
				}
			}
			if got := plainRun(b, start); got != want {
				t.Fatalf("plainRun(%q, %d) = %d, want %d", b, start, got, want)
			}
		}
	}
}
