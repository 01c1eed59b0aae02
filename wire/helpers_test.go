package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// ev builds a log-only event with seq and a small payload.
func ev(seq int64, payload string) session.Event {
	data, _ := json.Marshal(map[string]any{"turn": 1, "note": payload})
	return session.Event{Type: "test/note", Seq: seq, Time: json.Number(strconv.FormatInt(1785000000000+seq, 10)), Data: data}
}

// marshalCompact encodes v as compact JSON without HTML escaping and without a trailing newline.
func marshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// mustJSON returns the compact JSON of v for comparisons.
func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := marshalCompact(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
