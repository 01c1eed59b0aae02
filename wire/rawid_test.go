package wire

import (
	"strings"
	"testing"
)

func TestCheckRawIDFields(t *testing.T) {
	for _, c := range []struct {
		body string
		bad  bool
	}{
		{`{"session":"abc"}`, false},
		{`{"session":"\u00e9\ud83d\ude00"}`, false},
		{"{\"session\":\"\xff\"}", true},
		{`{"session":"\ud800"}`, true},
		{`{"session":"\udc00x"}`, true},
		{`{"session":"\ud800\u0041"}`, true},
		{`{"Session":"x\ud800"}`, true},
		{`{"unit":"\ud800","session":"a"}`, false},
		{`{"session":"a\\ud800"}`, false}, // an escaped backslash, then text
		{`{"session":"\ud800`, false},     // not JSON: left to decoding
	} {
		err := CheckRawIDFields([]byte(c.body), "session")
		if (err != nil) != c.bad || (err != nil && !strings.Contains(err.Error(), "rule id-utf8")) {
			t.Errorf("%q: %v", c.body, err)
		}
	}
	long := strings.Repeat("é", 600)
	if q := QuoteID(long); q != `"`+strings.Repeat("é", 20)+`"...` {
		t.Errorf("QuoteID: %s", q)
	}
	if q := QuoteID("ab"); q != `"ab"` {
		t.Errorf("QuoteID: %s", q)
	}
	if _, err := Token(long); err == nil || len(err.Error()) > 200 {
		t.Errorf("Token: %v", err)
	}
}
