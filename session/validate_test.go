package session

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestAppendRefusals checks every refusal rule: the rule, the reference's text, the session and
// seq named, and that a refused append leaves the session unchanged.
func TestAppendRefusals(t *testing.T) {
	toolBase := []Event{
		mk(0, "turn/start", `{"turn":1}`),
		mk(1, "step/start", `{"turn":1,"step":1}`),
		mk(2, "assistant/message", assistantMsg(1, 1, "a1", `[{"type":"tool-call","id":"c1","name":"x","arguments":"{}"},{"type":"tool-call","id":"c2","name":"x","arguments":"{}"}]`), appendOp),
		mk(3, "tool/result", toolResult(1, 1, "t1", "c1", "ok"), appendOp),
		mk(4, "tool/result", toolResult(1, 1, "t2", "c2", "ok"), appendOp),
	}
	users := []Event{
		mk(0, "user/message", userMsg("u0", "a"), appendOp),
		mk(1, "user/message", userMsg("u1", "b"), appendOp),
	}
	cases := []struct {
		name string
		base []Event
		ev   Event
		rule Rule
		text string // the reference's text, when it has one
	}{
		{"seq gap", users, mk(3, "x/y", `{}`), RuleSeqContiguous, "session event seq 3 is not contiguous; expected 2"},
		{"seq repeated", users, mk(1, "x/y", `{}`), RuleSeqContiguous, "session event seq 1 is not contiguous; expected 2"},
		{"no data", users, Event{Type: "x/y", Seq: 2, Time: "1"}, RuleData, `session event "x/y" has no data`},
		{"data not JSON", users, mk(2, "x/y", `{"a":`), RuleJSON, "invalid JSON"},
		{"negative zero", users, mk(2, "x/y", `{"a":[1,-0.0]}`), RuleLosslessJSON, `session event "x/y" carries non-JSON-serializable data`},
		{"overflow", users, mk(2, "x/y", `{"a":1e999}`), RuleLosslessJSON, `session event "x/y" carries non-JSON-serializable data`},
		{"lossy surface metadata", users, mk(2, "user/message", userMsg("u2", "c"), appendOp, src(`[-0]`)), RuleLosslessJSON, `session event "user/message" carries non-JSON-serializable surface metadata`},
		{"header delta", users, mk(2, "request/header-delta", `{}`), RuleLegacyRequestHeader, `session event "request/header-delta" uses unsupported legacy request/header-delta format`},
		{"header fallback", users, mk(2, "request/header", `{"header":{},"reason":"fallback"}`), RuleLegacyRequestHeader, `session event "request/header" uses unsupported legacy request/header reason "fallback"`},
		{"surface without op", users, mk(2, "user/message", userMsg("u2", "c")), RuleSurfaceOp, `session event "user/message" is surface-eligible and requires a surfaceOp marker`},
		{"op on non-surface", users, mk(2, "turn/start", `{"turn":1}`, appendOp), RuleSurfaceOp, `session event "turn/start" is not surface-eligible and cannot carry surfaceOp`},
		{"sources on non-surface", users, mk(2, "turn/start", `{"turn":1}`, src(`[0]`)), RuleSurfaceOp, `session event "turn/start" is not surface-eligible and cannot carry sourceEventSeqs`},
		{"op null", users, mk(2, "user/message", userMsg("u2", "c"), op(`null`)), RuleSurfaceOp, `session event "user/message" carries an invalid surfaceOp`},
		{"op other string", users, mk(2, "user/message", userMsg("u2", "c"), op(`"replace"`)), RuleSurfaceOp, `session event "user/message" carries an invalid surfaceOp`},
		{"replace extra key", users, mk(2, "user/message", userMsg("u2", "c"), op(`{"op":"replace","start":0,"end":0,"x":1}`), src(`[0]`)), RuleSurfaceOp, `session event "user/message" carries an invalid replace surfaceOp`},
		{"replace negative", users, mk(2, "user/message", userMsg("u2", "c"), op(`{"op":"replace","start":-1,"end":0}`), src(`[0]`)), RuleSurfaceOp, `carries an invalid replace surfaceOp`},
		{"sources not array", users, mk(2, "user/message", userMsg("u2", "c"), appendOp, src(`{"a":0}`)), RuleSourceEventSeqs, "sourceEventSeqs on event at seq 2 must be an array when present"},
		{"sources empty", users, mk(2, "user/message", userMsg("u2", "c"), appendOp, src(`[]`)), RuleSourceEventSeqs, "sourceEventSeqs must not be empty except on assistant/message"},
		{"sources bad element", users, mk(2, "user/message", userMsg("u2", "c"), appendOp, src(`[0,1.5]`)), RuleSourceEventSeqs, `session event "user/message" sourceEventSeqs must densely contain non-negative safe integers`},
		{"sources duplicate", users, mk(2, "user/message", userMsg("u2", "c"), appendOp, src(`[0,0]`)), RuleSourceEventSeqs, "sourceEventSeqs must not contain duplicates"},
		{"sources not earlier", users, mk(2, "user/message", userMsg("u2", "c"), appendOp, src(`[0,2]`)), RuleSourceEventSeqs, "sourceEventSeqs must reference earlier events: 2 >= current seq 2"},
		{"replace start", users, mk(2, "user/message", userMsg("u2", "c"), replaceOp(5, 0), src(`[0]`)), RuleReplaceStart, "surface replace: start seq 5 not found in surface"},
		{"replace end", users, mk(2, "user/message", userMsg("u2", "c"), replaceOp(0, 99), src(`[0]`)), RuleReplaceEnd, "surface replace: end seq 99 not found in surface"},
		{"replace order", users, mk(2, "user/message", userMsg("u2", "c"), replaceOp(1, 0), src(`[0,1]`)), RuleReplaceOrder, "surface replace: start seq 1 (index 1) is after end seq 0 (index 0)"},
		{"replace coverage", users, mk(2, "user/message", userMsg("u2", "c"), replaceOp(0, 1), src(`[0]`)), RuleReplaceCoverage, "surface replace: sourceEventSeqs must include every shadowed surface node; missing 1"},
		{"tool replace two nodes", toolBase, mk(5, "tool/result", toolResult(1, 1, "t1", "c1", "x"), replaceOp(3, 4), src(`[3,4]`)), RuleToolResultReplace, "tool/result surface replacement must rewrite exactly one current node"},
		{"tool replace non-tool target", toolBase, mk(5, "tool/result", toolResult(1, 1, "t1", "c1", "x"), replaceOp(2, 2), src(`[2]`)), RuleToolResultReplace, "tool/result surface replacement must target a current tool/result"},
		{"tool replace changes id", toolBase, mk(5, "tool/result", toolResult(1, 1, "t9", "c1", "x"), replaceOp(3, 3), src(`[3]`)), RuleToolResultReplace, "tool/result surface replacement may change only content"},
		{"old assistant/message", users, mk(2, "assistant/message", `{"turn":1,"step":1,"content":[]}`, appendOp), RuleEventShape, "data.message is undefined"},
		{"old tool/result", users, mk(2, "tool/result", `{"turn":1,"step":1,"callId":"c","content":[]}`, appendOp), RuleEventShape, "older dsh event format"},
		{"null content block", users, mk(2, "assistant/message", assistantMsg(1, 1, "a", `[null]`), appendOp), RuleEventShape, "data.message.content[0] is null"},
		{"content not iterable", users, mk(2, "assistant/message", assistantMsg(1, 1, "a", `{"a":1}`), appendOp), RuleEventShape, "content must be an array"},
		{"turn/start without turn", users, mk(2, "turn/start", `{}`), RuleEventShape, "turn/start data.turn must be an integer"},
		{"turn/start null data", users, mk(2, "turn/start", `null`), RuleEventShape, "data is null"},
		{"tool/call null data", users, mk(2, "tool/call", `null`), RuleEventShape, "data is null"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustLoad(t, "sess", c.base)
			before := s.Surface()
			err := s.Append(c.ev)
			wantRule(t, err, "sess", c.ev.Seq, c.rule)
			if !strings.Contains(err.Error(), c.text) {
				t.Errorf("error %q does not contain %q", err.Error(), c.text)
			}
			if err2 := s.Check(c.ev); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Check disagrees with Append: %v vs %v", err2, err)
			}
			if s.NextSeq() != int64(len(c.base)) || !reflect.DeepEqual(s.Surface(), before) {
				t.Errorf("refused append changed the session")
			}
		})
	}
}

// TestAppendAccepts covers the accepted side of the same rules.
func TestAppendAccepts(t *testing.T) {
	events := []Event{
		mk(0, "turn/start", `{"turn":1}`),
		mk(1, "step/start", `{"turn":1,"step":1}`),
		mk(2, "assistant/message", assistantMsg(1, 1, "a1", `[{"type":"tool-call","id":"c1","name":"x","arguments":"{}"}]`), appendOp, src(`[]`)),
		mk(3, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"x","arguments":"{}"}`),
		mk(4, "tool/result", toolResult(1, 1, "t1", "c1", "a long result"), appendOp, src(`[3]`)),
		mk(5, "tool/result", toolResult(1, 1, "t1", "c1", "short"), replaceOp(4, 4), src(`[4]`)),
		mk(6, "step/end", `{"turn":1,"step":1}`),
		mk(7, "plugin/thing", `"any data at all"`, func(e *Event) { e.Ignorable = true }),
		mk(8, "request/header", `{"header":{"config":{}},"reason":"initial"}`),
		mk(9, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
		mk(10, "user/message", `0`, appendOp), // falsy data: on the surface, derives nothing
		mk(11, "assistant/message", assistantMsg(2, 1, "a2", `"text"`), appendOp),
	}
	s := mustLoad(t, "ok", events)
	sf := s.Surface()
	if !reflect.DeepEqual(sf.Nodes, []int64{2, 5, 10, 11}) || sf.ReplaceGeneration != 1 || !reflect.DeepEqual(sf.Transcript, []int64{2, 4, 10, 11}) {
		t.Fatalf("surface = %+v", sf)
	}
	if sf.OpenTurn != nil || sf.AsOfSeq != 11 {
		t.Fatalf("open turn %v, asOfSeq %d", sf.OpenTurn, sf.AsOfSeq)
	}
	msgs := s.DeriveMessages()
	if len(msgs) != 3 || !strings.Contains(string(msgs[1]), `"short"`) {
		t.Fatalf("messages = %s", msgs)
	}
	// A message is the exact bytes inside its event's data.
	if !strings.Contains(string(events[2].Data), string(msgs[0])) {
		t.Fatalf("message is not a sub-slice of the event data")
	}
	if !s.Events()[7].Ignorable {
		t.Fatalf("ignorable dropped")
	}
}

func TestAppendStampsTime(t *testing.T) {
	s := New("t")
	ev := mk(0, "x/y", `{}`)
	ev.Time = ""
	if err := s.Append(ev); err != nil {
		t.Fatal(err)
	}
	if f, ok := timeValue(s.Events()[0].Time); !ok || f < 1e12 {
		t.Fatalf("time not stamped: %q", s.Events()[0].Time)
	}
}

// TestSurfaceApplyWindowAndLookup folds a window whose seqs start at 400000 (vector
// surface-window-baseSeq), persists the Surface as JSON and continues with a Lookup.
func TestSurfaceApplyWindowAndLookup(t *testing.T) {
	sf := Surface{AsOfSeq: 399999}
	stored := map[int64]Event{}
	lookup := func(seq int64) (Event, error) {
		ev, ok := stored[seq]
		if !ok {
			return Event{}, errors.New("not stored")
		}
		return ev, nil
	}
	apply := func(ev Event) error {
		if err := sf.Apply("w", ev, lookup); err != nil {
			return err
		}
		stored[ev.Seq] = ev
		return nil
	}
	for _, ev := range []Event{
		mk(400000, "user/message", `{"role":"user","content":[],"source":{"kind":"user"}}`, appendOp),
		mk(400001, "user/message", `{"role":"user","content":[],"source":{"kind":"user"}}`, appendOp),
		mk(400002, "user/message", `{"role":"user","content":[],"source":{"kind":"user"}}`, replaceOp(400000, 400000), src(`[400000]`)),
	} {
		if err := apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(sf.Nodes, []int64{400002, 400001}) || sf.ReplaceGeneration != 1 {
		t.Fatalf("surface %+v", sf)
	}
	raw, err := json.Marshal(sf)
	if err != nil {
		t.Fatal(err)
	}
	var back Surface
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	sf = back
	// A tool/result replace reads its target through the Lookup.
	for _, ev := range []Event{
		mk(400003, "turn/start", `{"turn":4}`),
		mk(400004, "tool/result", toolResult(4, 1, "t", "c", "long"), appendOp),
		mk(400005, "tool/result", toolResult(4, 1, "t", "c", "short"), replaceOp(400004, 400004), src(`[400004]`)),
	} {
		if err := apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	if sf.OpenTurn == nil || *sf.OpenTurn != 4 || sf.AsOfSeq != 400005 {
		t.Fatalf("surface %+v", sf)
	}
	delete(stored, 400005)
	err = sf.Check("w", mk(400006, "tool/result", toolResult(4, 1, "t", "c", "x"), replaceOp(400005, 400005), src(`[400005]`)), lookup)
	wantRule(t, err, "w", 400006, RuleLookup)
	err = sf.Check("w", mk(400007, "x/y", `{}`), lookup)
	wantRule(t, err, "w", 400007, RuleSeqContiguous)
}
