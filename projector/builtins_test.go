package projector

import (
	"encoding/json"
	"github.com/agentlog/agentlog/client"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

func foldViews(t *testing.T, events []session.Event) client.SnapshotReply {
	t.Helper()
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Fold(reg, "s", events)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestBuiltinUnits(t *testing.T) {
	evs := []session.Event{
		ev(0, "turn/start", `{"turn":1}`, "", ""),
		ev(1, "session/title", `{"title":"first","messageSeqs":[],"source":{"kind":"fallback"}}`, "", ""),
		ev(2, "step/start", `{"turn":1,"step":1}`, "", ""),
		userMsg(3, "m1", "hi"),
		ev(4, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"usage","usage":{"inputTokens":10,"outputTokens":2}}}`, "", ""),
		// A second usage chunk of the same step replaces the first (the last one wins).
		ev(5, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"usage","usage":{"inputTokens":11,"outputTokens":3,"reasoningTokens":1}}}`, "", ""),
		// The message's usage is not counted again for a step that streamed a usage chunk.
		ev(6, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":11,"outputTokens":3}}`, "append", ""),
		ev(7, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`, "", ""),
		ev(8, "tool/result", `{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"no"}],"isError":true}],"source":{"kind":"tool","callId":"c1"}},"error":{"name":"FsError","code":"X"}}`, "append", ""),
		ev(9, "step/end", `{"turn":1,"step":1}`, "", ""),
		ev(10, "step/start", `{"turn":1,"step":2}`, "", ""),
		// No usage chunk in step 2: the message's usage is the fallback.
		ev(11, "assistant/message", `{"turn":1,"step":2,"message":{"id":"a2","role":"assistant","content":[{"type":"text","text":"done"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":5,"outputTokens":1,"cacheReadTokens":7}}`, "append", ""),
		ev(12, "todo/write", `{"todos":[{"content":"a","status":"pending"}]}`, "", ""),
		ev(13, "step/end", `{"turn":1,"step":2}`, "", ""),
		ev(14, "session/title", `{"title":"second","messageSeqs":[3],"source":{"kind":"llm"}}`, "", ""),
		ev(15, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, "", ""),
		ev(16, "turn/start", `{"turn":2}`, "", ""),
	}
	r := foldViews(t, evs)
	want := map[string]string{
		UnitTranscript: `{"seqs":[3,6,8,11]}`,
		UnitTitle:      `{"title":"second","seq":14,"source":{"kind":"llm"}}`,
		UnitTodos:      `{"todos":[{"content":"a","status":"pending"}],"seq":12}`,
		UnitUsage: `{"inputTokens":16,"outputTokens":4,"cacheReadTokens":7,"cacheWriteTokens":0,"reasoningTokens":1,"steps":2,` +
			`"own":{"inputTokens":16,"outputTokens":4,"cacheReadTokens":7,"cacheWriteTokens":0,"reasoningTokens":1,"steps":2},` +
			`"inherited":{"inputTokens":0,"outputTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0,"reasoningTokens":0,"steps":0},"seedLength":0}`,
		UnitTools:    `{"byName":{"ls":{"calls":1,"results":1,"errors":1}},"open":{}}`,
		UnitTurns:    `{"count":2,"openTurn":2,"lastEndReason":{"kind":"completed"},"ownCount":2,"inheritedCount":0,"seedLength":0}`,
		UnitMessages: `{"nodes":[3,6,8,11],"replaceGeneration":0,"transcript":[3,6,8,11],"openTurn":2}`,
	}
	for k, w := range want {
		u := r.Units[k]
		if string(u.View) != w || u.AsOfSeq != 16 || u.Error != nil {
			t.Errorf("unit %s: asOfSeq %d view %s error %+v\nwant %s", k, u.AsOfSeq, u.View, u.Error, w)
		}
	}
}

func TestUnitErrorStopsOnlyThatUnit(t *testing.T) {
	evs := []session.Event{
		ev(0, "turn/start", `{"turn":1}`, "", ""),
		ev(1, "todo/write", `{"todos":"not a list"}`, "", ""),
		ev(2, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, "", ""),
	}
	r := foldViews(t, evs)
	td := r.Units[UnitTodos]
	if td.Error == nil || td.Error.Seq != 1 || td.Error.Rule != "unit-data" || td.AsOfSeq != 0 || !strings.Contains(td.Error.Message, `session "s"`) {
		t.Fatalf("todos: %+v %+v", td, td.Error)
	}
	if tu := r.Units[UnitTurns]; tu.Error != nil || tu.AsOfSeq != 2 {
		t.Fatalf("turns must go on: %+v", tu)
	}
}

func TestUnitPanicIsAnError(t *testing.T) {
	boom := Def[int]{Key: "boom", StateVersion: 1, Init: func() int { return 0 },
		Apply: func(n int, ev session.Event) (int, error) {
			if ev.Seq == 1 {
				var m map[string]int
				//lint:ignore SA5000 the panic is what is tested
				m["x"] = 1 // panics
			}
			return n + 1, nil
		}}
	reg, err := NewRegistry(boom)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Fold(reg, "s", []session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""), ev(1, "step/start", `{"turn":1,"step":1}`, "", "")})
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Units["boom"]; u.Error == nil || u.Error.Seq != 1 || u.AsOfSeq != 0 || string(u.View) != "1" {
		t.Fatalf("boom: %+v %+v", u, u.Error)
	}
}

func TestRegistryRefusals(t *testing.T) {
	reg, _ := NewRegistry()
	ok := Def[int]{Key: "x", StateVersion: 1, Init: func() int { return 0 }, Apply: func(n int, _ session.Event) (int, error) { return n, nil }}
	for _, bad := range []Def[int]{
		{Key: "", StateVersion: 1, Init: ok.Init, Apply: ok.Apply},
		{Key: "a.b", StateVersion: 1, Init: ok.Init, Apply: ok.Apply},
		{Key: "x", StateVersion: 0, Init: ok.Init, Apply: ok.Apply},
		{Key: "x", StateVersion: 1, Apply: ok.Apply},
		{Key: "messages", StateVersion: 1, Init: ok.Init, Apply: ok.Apply},
	} {
		if err := reg.Register(bad); err == nil {
			t.Errorf("Register(%+v) accepted", bad)
		}
	}
	if err := reg.Register(ok); err != nil {
		t.Fatal(err)
	}
}

func TestSameState(t *testing.T) {
	s := TranscriptState{Seqs: []int64{1, 2}}
	if !sameState(s, s) || sameState(s, TranscriptState{Seqs: append([]int64{}, s.Seqs...)}) {
		t.Fatal("slice identity")
	}
	m := map[string]int{}
	if !sameState(m, m) || sameState(m, map[string]int{}) || !sameState(3, 3) || sameState(3, 4) {
		t.Fatal("map/scalar identity")
	}
}

// TestTurnsUnitReadsJSIntegers: a turn number written 1.0 (a JavaScript integer, accepted by the
// reference and by session.Load) folds like 1; a fractional turn stops the unit with a clear error.
func TestTurnsUnitReadsJSIntegers(t *testing.T) {
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	evs := []session.Event{
		{Type: "turn/start", Seq: 0, Time: "1", Data: json.RawMessage(`{"turn":1.0}`)},
		{Type: "turn/end", Seq: 1, Time: "2", Data: json.RawMessage(`{"turn":1e0,"reason":{"kind":"completed"}}`)},
	}
	snap, err := Fold(reg, "s", evs)
	if err != nil {
		t.Fatal(err)
	}
	u := snap.Units[UnitTurns]
	if u.Error != nil || u.AsOfSeq != 1 || !strings.Contains(string(u.View), `"count":1`) {
		t.Fatalf("turns unit: %+v view %s", u.Error, u.View)
	}
	var n jsInt
	if err := n.UnmarshalJSON([]byte("1.5")); err == nil {
		t.Fatal("1.5 accepted as a turn number")
	}
}

// TestUnchangedFastPath checks that the == fast path of Def.Definition is taken only for states
// where == is safe and means what sameState means.
func TestUnchangedFastPath(t *testing.T) {
	type withIface struct{ V any }
	for _, c := range []struct {
		name string
		def  Definition
		fast bool
	}{
		{"usage", UsageUnit.Definition(), true},
		{"turns (raw JSON slice)", TurnsUnit.Definition(), false},
		{"tools (maps)", ToolsUnit.Definition(), false},
		{"interface field", Def[withIface]{Key: "x", StateVersion: 1}.Definition(), false},
		{"int", Def[int]{Key: "y", StateVersion: 1}.Definition(), true},
	} {
		if got := c.def.same != nil; got != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.name, got, c.fast)
		}
	}
	u := UsageUnit.Definition()
	s := UsageState{Steps: 1}
	if !u.unchanged(s, s) || u.unchanged(UsageState{Steps: 2}, s) {
		t.Error("usage: unchanged must compare by value")
	}
	wi := Def[withIface]{Key: "x", StateVersion: 1}.Definition()
	m := map[string]int{}
	if !wi.unchanged(withIface{V: m}, withIface{V: m}) { // sameState: same map, no panic
		t.Error("interface field holding a map: want unchanged")
	}
}

// TestViewsAreCapped: the title and todos views cut text longer than their caps on a character
// boundary, mark the cut ("…", titleBytes, contentBytes), and leave shorter text and the stored
// state whole.
func TestViewsAreCapped(t *testing.T) {
	if got, cut := CapText("héllo", 2); got != "h…" || !cut {
		t.Fatalf("CapText cut inside é: %q %v", got, cut)
	}
	if got, cut := CapText("héllo", 3); got != "hé…" || !cut {
		t.Fatalf("CapText: %q %v", got, cut)
	}
	if got, cut := CapText("short", 10); got != "short" || cut {
		t.Fatalf("CapText of short text: %q %v", got, cut)
	}
	long := strings.Repeat("é", 300<<10)
	data, _ := json.Marshal(map[string]any{"title": long, "messageSeqs": []int{}, "source": map[string]string{"kind": "fallback"}})
	todos, _ := json.Marshal(map[string]any{"todos": []map[string]string{{"content": "short", "status": "pending"}, {"content": long, "status": "done"}}})
	snap := foldViews(t, []session.Event{
		{Type: "session/title", Seq: 0, Time: "1", Data: data},
		{Type: "todo/write", Seq: 1, Time: "1", Data: todos},
	})
	var title TitleView
	if err := json.Unmarshal(snap.Units[UnitTitle].View, &title); err != nil || title.Title == nil ||
		len(*title.Title) > MaxTitleViewBytes+3 || !strings.HasSuffix(*title.Title, "é…") || title.TitleBytes != len(long) {
		t.Fatalf("title view: %.200s (%v)", snap.Units[UnitTitle].View, err)
	}
	var tv struct {
		Todos []struct {
			Content      string `json:"content"`
			Status       string `json:"status"`
			ContentBytes int    `json:"contentBytes"`
		} `json:"todos"`
	}
	if err := json.Unmarshal(snap.Units[UnitTodos].View, &tv); err != nil || len(tv.Todos) != 2 || tv.Todos[0].Content != "short" ||
		tv.Todos[0].ContentBytes != 0 || tv.Todos[1].Status != "done" || tv.Todos[1].ContentBytes != len(long) ||
		len(tv.Todos[1].Content) > MaxTodoViewBytes+3 || !strings.HasSuffix(tv.Todos[1].Content, "…") {
		t.Fatalf("todos view: %.300s (%v)", snap.Units[UnitTodos].View, err)
	}
	// The state is whole: a fold's state, not its view.
	st, err := TitleUnit.Apply(TitleState{Seq: -1}, session.Event{Type: "session/title", Seq: 0, Time: "1", Data: data})
	if err != nil || st.Title == nil || *st.Title != long {
		t.Fatalf("title state cut: %v", err)
	}
}
