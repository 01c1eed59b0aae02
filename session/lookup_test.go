package session

import "testing"

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
