package inspector

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestMsgViewCutsLargeJSON: a message's JSON over InlineJSONBytes is cut there, at a character
// boundary, with its whole size kept; a smaller one is whole.
func TestMsgViewCutsLargeJSON(t *testing.T) {
	small := []byte(`{"role":"user","content":[{"type":"text","text":"hi"}]}`)
	if v := msgView(1, small); v.JSON != string(small) || v.JSONBytes != 0 {
		t.Fatalf("small message: %d bytes shown, JSONBytes %d", len(v.JSON), v.JSONBytes)
	}
	text, _ := json.Marshal("é" + strings.Repeat("€", InlineJSONBytes))
	big := []byte(`{"role":"user","content":[{"type":"text","text":` + string(text) + `}]}`)
	v := msgView(2, big)
	if v.JSONBytes != len(big) || len(v.JSON) > InlineJSONBytes || len(v.JSON) < InlineJSONBytes-utf8.UTFMax || !utf8.ValidString(v.JSON) || !strings.HasPrefix(string(big), v.JSON) {
		t.Fatalf("large message: %d bytes shown (valid UTF-8 %v), JSONBytes %d of %d", len(v.JSON), utf8.ValidString(v.JSON), v.JSONBytes, len(big))
	}
	if len(v.Blocks) != 1 || utf8.RuneCountInString(v.Blocks[0].Text) > blockText+1 {
		t.Fatalf("blocks of the large message: %+v", len(v.Blocks))
	}
}
