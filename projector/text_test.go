package projector

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentlog/agentlog/session"
)

// A log stored with ill-formed UTF-8 (a byte-cut emoji F0 9F 98, a raw surrogate) and lone
// surrogate escapes, written as is (as before Append repaired text): the messages query serves
// what the oracle prints (session/testdata/text), and the stored states hold no ill-formed byte.
func TestServedTextIsTheReferences(t *testing.T) {
	raw, err := os.ReadFile("../session/testdata/text/text-edge.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var exp session.InspectResult
	if b, err := os.ReadFile("../session/testdata/text/text-edge.expected.json"); err != nil || json.Unmarshal(b, &exp) != nil {
		t.Fatalf("oracle output: %v", err)
	}
	_, events, err := session.ReadJSONL(bytes.NewReader(raw), "text")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.startProjector("p1")
	e.create("text")
	e.appendRecord("text", events)
	r, err := queryMessages(ctx(t), e.nc, "text", int64(len(events)-1))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != len(exp.Messages) {
		t.Fatalf("%d messages, oracle %d", len(r.Messages), len(exp.Messages))
	}
	for i, m := range r.Messages {
		if !utf8.Valid(m) || !jsonEqual(m, exp.Messages[i]) {
			t.Errorf("message %d:\n got %s\nwant %s", i, m, exp.Messages[i])
		}
	}
	if !strings.Contains(string(r.Messages[0]), `lone \ud83d and \ude00`) || !strings.Contains(string(r.Messages[1]), "\"cut emoji \uFFFD\"") {
		t.Errorf("served %s", r.Messages)
	}
	snap, err := querySnapshot(ctx(t), e.nc, "text", -1)
	if err != nil {
		t.Fatal(err)
	}
	for k, u := range snap.Units {
		if !utf8.Valid(u.View) || u.Error != nil {
			t.Errorf("unit %s: %s %+v", k, u.View, u.Error)
		}
	}
	if got := string(snap.Units[UnitTools].View); !strings.Contains(got, "\"read\uFFFD\"") {
		t.Errorf("tools %s", got)
	}
	if got := string(snap.Units[UnitTitle].View); !strings.Contains(got, "\"t\uFFFD \uFFFD\"") {
		t.Errorf("title %s", got) // a Go string cannot hold the lone surrogate: U+FFFD
	}
}
