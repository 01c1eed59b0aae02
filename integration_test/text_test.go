package integration_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/session"
)

// textLog has a byte-cut emoji (F0 9F 98) in a tool result and a tool name, a raw surrogate and
// lone surrogate escapes in a user message; its oracle output is beside it.
const textLog = "../session/testdata/text/text-edge.jsonl"

// TestImportTextAsTheReferenceReadsIt imports textLog: the stored events are the file's as the
// reference reads it (ill-formed UTF-8 decoded to U+FFFD, lone surrogate escapes kept), and the
// projector's messages (agentlog messages) equal inspect's and the oracle's.
func TestImportTextAsTheReferenceReadsIt(t *testing.T) {
	id := "it/" + runTag(t) + "text-edge"
	mustAgentlog(t, nil, "import", textLog, "--session", id)

	_, want := sessiontest.ReadLog(t, textLog, id)
	_, got, err := session.ReadJSONL(strings.NewReader(mustAgentlog(t, nil, "events", id)), id)
	if err != nil || len(got) != len(want) {
		t.Fatalf("events: %d read, %d imported (%v)", len(got), len(want), err)
	}
	for i := range want {
		w := want[i]
		w.Data = session.WellFormed(w.Data)
		if !sameImportedEvent(w, got[i]) {
			t.Errorf("event %d:\nimported %s\nread     %s", i, mustJSON(w), mustJSON(got[i]))
		}
	}
	if !strings.Contains(string(got[1].Data), `lone \ud83d and \ude00`) {
		t.Errorf("import did not keep the lone surrogates: %s", got[1].Data)
	}

	exp := readExpected(t, textLog)
	var inspected expected
	if err := json.Unmarshal([]byte(mustAgentlog(t, strings.NewReader(readFile(t, textLog)), "inspect")), &inspected); err != nil {
		t.Fatal(err)
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "messages", id)), &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || len(exp.Messages) != 2 || len(inspected.Messages) != 2 {
		t.Fatalf("messages: %d served, %d inspected, %d from the oracle", len(msgs), len(inspected.Messages), len(exp.Messages))
	}
	for i, m := range msgs {
		if !utf8.Valid(m) || !sessiontest.JSONEqual(t, m, exp.Messages[i]) || string(inspected.Messages[i]) != string(exp.Messages[i]) {
			t.Errorf("message %d:\nserved    %s\ninspected %s\noracle    %s", i, m, inspected.Messages[i], exp.Messages[i])
		}
	}
	if !strings.Contains(string(msgs[1]), "\"cut emoji \uFFFD\"") || !strings.Contains(string(msgs[0]), `lone \ud83d and \ude00`) {
		t.Errorf("served %s", msgs)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
