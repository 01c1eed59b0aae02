package loggen

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

func TestGenerateDeterministic(t *testing.T) {
	for i := 0; i < 20; i++ {
		s := LogSeed(9, i)
		a, b := Generate(s).JSONL(), Generate(s).JSONL()
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: two runs differ", s)
		}
		c1, c2 := Corrupt(Generate(s), s), Corrupt(Generate(s), s)
		if !bytes.Equal(c1.JSONL, c2.JSONL) || c1.Fault != c2.Fault {
			t.Fatalf("seed %d: two corruptions differ", s)
		}
	}
	if bytes.Equal(Generate(1).JSONL(), Generate(2).JSONL()) {
		t.Fatal("seeds 1 and 2 give the same log")
	}
}

// TestGeneratedFeatures checks that the generator writes every shape the issue asks for.
func TestGeneratedFeatures(t *testing.T) {
	seen := map[string]int{}
	for i := 0; i < 400; i++ {
		l := Generate(LogSeed(10, i))
		if l.Header == nil {
			seen["no header"]++
		}
		if l.Cut {
			seen["crash cut"]++
		}
		for _, ln := range l.Render() {
			if ln.Count > 1 {
				seen["row "+mustGet(ln.Fields, "type").(string)]++
			}
		}
		calls, results := map[string]bool{}, map[string]bool{}
		for _, e := range l.Events {
			seen[e.Type]++
			if e.Ignorable {
				seen["ignorable"]++
			}
			if strings.HasPrefix(e.Type, "x-plugin/") && !e.Ignorable {
				seen["unknown type without ignorable"]++
			}
			if _, ok := e.SurfaceOp.(Obj); ok {
				seen["replace "+e.Type]++
			}
			d, _ := e.Data.(Obj)
			switch e.Type {
			case "assistant/message":
				msg := mustGet(d, "message").(Obj)
				content := mustGet(msg, "content").(Arr)
				if len(content) == 0 {
					seen["empty assistant message"]++
				}
				for _, b := range content {
					if mustGet(b.(Obj), "type") == "tool-call" {
						calls[mustGet(b.(Obj), "id").(string)] = true
					}
				}
			case "tool/result":
				msg := mustGet(d, "message").(Obj)
				id := mustGet(mustGet(msg, "source").(Obj), "callId").(string)
				results[id] = true
				if strings.HasPrefix(mustGet(msg, "id").(string), "interrupted-tool-result-") {
					seen["repair closer"]++
				}
			case "assistant/chunk":
				seen["chunk "+mustGet(mustGet(d, "chunk").(Obj), "type").(string)]++
			}
		}
		for id := range calls {
			if !results[id] {
				seen["tool call without result"]++
			}
		}
	}
	for _, want := range []string{
		"no header", "crash cut", "row text-chunks", "row reasoning-chunks", "row tool-call-chunks",
		"turn/start", "turn/end", "step/start", "step/end", "user/message", "assistant/message",
		"tool/call", "tool/result", "todo/write", "session/title", "request/header", "request/context",
		"llm/retry", "session/end-seed", "compaction/start", "compaction/summary", "compaction/end",
		"ignorable", "unknown type without ignorable", "replace user/message", "replace assistant/message",
		"replace tool/result", "empty assistant message", "tool call without result", "repair closer",
		"chunk text-delta", "chunk reasoning-delta", "chunk tool-call-delta", "chunk usage", "chunk finish",
	} {
		if seen[want] == 0 {
			t.Errorf("400 generated logs have no %q", want)
		}
	}
}

// TestGeneratedLogsLoad checks generated logs with session.Load (no oracle needed), and the
// generator's port of interruptedTurnClosers against session.Repair.
func TestGeneratedLogsLoad(t *testing.T) {
	n := 300
	if raceEnabled {
		n = 60
	}
	for i := 0; i < n; i++ {
		l := Generate(LogSeed(11, i))
		evs := l.sessionEvents()
		s, err := session.Load(l.ID, evs)
		if err != nil {
			t.Fatalf("log seed %d: Load refused a generated log: %v", l.Seed, err)
		}
		var want []json.RawMessage
		for _, c := range closers(l.Events) {
			want = append(want, JSON(c.Envelope()))
		}
		got := s.Repair()
		if len(got) != len(want) {
			t.Fatalf("log seed %d: Repair gave %d closers, want %d", l.Seed, len(got), len(want))
		}
		for k := range want {
			if d := jsonDiff(string(want[k]), mustJSON(got[k])); d != "" {
				t.Fatalf("log seed %d: closer %d: %s", l.Seed, k, d)
			}
		}
	}
}

// TestCorruptKinds checks that every fault kind applies to generated logs and that session.Inspect
// refuses or accepts each corrupted log as the corrupter predicts (a node-free differential check
// of the predictions; TestDifferential checks the predictions against the reference itself).
func TestCorruptKinds(t *testing.T) {
	per := 25
	if raceEnabled {
		per = 5
	}
	for _, kind := range append(append([]FaultKind{}, RequiredKinds...), ExtraKinds...) {
		made := 0
		for i := 0; i < 20*per && made < per; i++ {
			c, ok := CorruptKind(Generate(LogSeed(12, i)), kind, uint64(i))
			if !ok {
				continue
			}
			made++
			if c.Fault.Kind != kind {
				t.Fatalf("asked for %s, got %s", kind, c.Fault.Kind)
			}
			got, panicked := inspectJSON(c.JSONL)
			if panicked != "" {
				t.Errorf("%s: Inspect panicked: %s", c.Fault, panicked)
				continue
			}
			var res struct {
				OK       bool   `json:"ok"`
				Error    string `json:"error"`
				Accepted *int   `json:"acceptedEvents"`
			}
			if err := json.Unmarshal(got, &res); err != nil {
				t.Fatal(err)
			}
			switch c.Fault.Expect {
			case Refused:
				if res.OK || res.Accepted == nil || *res.Accepted != c.Fault.Accepted {
					t.Errorf("%s (log seed %d): Inspect ok=%v acceptedEvents=%v", c.Fault, LogSeed(12, i), res.OK, deref(res.Accepted))
				} else if !(strings.Contains(res.Error, "session ") || emptyID(c.JSONL)) || !(strings.Contains(res.Error, "seq") || strings.Contains(res.Error, "line")) {
					t.Errorf("%s: the refusal names neither the session and seq nor the line: %q", c.Fault, res.Error)
				}
			case Accepted:
				if !res.OK {
					t.Errorf("%s (log seed %d): Inspect refused: %s", c.Fault, LogSeed(12, i), res.Error)
				}
			}
		}
		if made == 0 {
			t.Errorf("fault kind %s never applied", kind)
		}
	}
}

// emptyID reports whether the log's header names the session "" (a refusal then names no session).
func emptyID(jsonl []byte) bool {
	first, _, _ := bytes.Cut(jsonl, []byte("\n"))
	return bytes.Contains(first, []byte(`"type":"session"`)) && bytes.Contains(first, []byte(`"id":""`))
}
