package session

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// mk builds an event; opts set surfaceOp / sourceEventSeqs.
func mk(seq int64, typ, data string, opts ...func(*Event)) Event {
	ev := Event{Type: typ, Seq: seq, Time: json.Number(fmt.Sprint(1000 + seq)), Data: json.RawMessage(data)}
	for _, o := range opts {
		o(&ev)
	}
	return ev
}

func op(raw string) func(*Event)  { return func(e *Event) { e.SurfaceOp = json.RawMessage(raw) } }
func src(raw string) func(*Event) { return func(e *Event) { e.SourceEventSeqs = json.RawMessage(raw) } }

var appendOp = op(`"append"`)

func replaceOp(start, end int64) func(*Event) {
	return op(fmt.Sprintf(`{"op":"replace","start":%d,"end":%d}`, start, end))
}

func userMsg(id, text string) string {
	return fmt.Sprintf(`{"id":%q,"role":"user","content":[{"type":"text","text":%q}],"source":{"kind":"user"}}`, id, text)
}

func assistantMsg(turn, step int, id, contentJSON string) string {
	return fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":%q,"role":"assistant","content":%s,"source":{"kind":"model","provider":"p","model":"m"}}}`,
		turn, step, id, contentJSON)
}

func toolResult(turn, step int, id, callID, text string) string {
	return fmt.Sprintf(`{"turn":%d,"step":%d,"message":{"id":%q,"role":"user","content":[{"type":"tool-result","toolCallId":%q,"content":[{"type":"text","text":%q}]}],"source":{"kind":"tool","callId":%q}}}`,
		turn, step, id, callID, text, callID)
}

// mustLoad loads events or fails the test.
func mustLoad(t *testing.T, id string, events []Event) *Session {
	t.Helper()
	s, err := Load(id, events)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

// jsonValue decodes JSON into a generic value for comparisons.
func jsonValue(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	return normalizeNumbers(v)
}

// normalizeNumbers turns json.Number into float64 so that 1 and 1.0 compare equal.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = normalizeNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalizeNumbers(x[k])
		}
	}
	return v
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	return reflect.DeepEqual(jsonValue(t, a), jsonValue(t, b))
}

// readLog reads a JSONL file with ReadJSONL, failing the test on error.
func readLog(t *testing.T, path string) (*Header, []Event) {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, evs, err := ReadJSONL(bytes.NewReader(in), "session")
	if err != nil {
		t.Fatalf("%s: ReadJSONL: %v", path, err)
	}
	return h, evs
}

// wantRule asserts err is an *Error with the rule, naming the session (unless it has none) and the seq.
func wantRule(t *testing.T, err error, session string, seq int64, rule Rule) {
	t.Helper()
	e, ok := err.(*Error)
	if !ok || e == nil {
		t.Fatalf("want *Error rule %s, got %T %v", rule, err, err)
	}
	if e.Rule != rule || e.Session != session || e.Seq != seq {
		t.Fatalf("want session %q seq %d rule %s, got session %q seq %d rule %s: %s", session, seq, rule, e.Session, e.Seq, e.Rule, e.Error())
	}
	for _, part := range []string{fmt.Sprintf("%q", session), fmt.Sprintf("seq %d", seq), "rule " + string(rule)} {
		if seq < 0 && strings.HasPrefix(part, "seq") || session == "" && part == `""` {
			continue
		}
		if !strings.Contains(e.Error(), part) {
			t.Fatalf("error text %q does not name %s", e.Error(), part)
		}
	}
}
