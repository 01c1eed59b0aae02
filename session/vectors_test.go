package session

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

const vectorsPath = "../../shared/conformance/vectors.json"

type vector struct {
	ID      string            `json:"id"`
	Base    string            `json:"base"`
	BaseSeq int64             `json:"baseSeq"`
	Events  []json.RawMessage `json:"events"`
	Append  []json.RawMessage `json:"append"`
	Expect  json.RawMessage   `json:"expect"`
	Cases   json.RawMessage   `json:"cases"`
	Header  json.RawMessage   `json:"header"`
}

func loadVectors(t *testing.T) map[string]vector {
	t.Helper()
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Skipf("conformance vectors not available at %s (%v)", vectorsPath, err)
	}
	var doc struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]vector{}
	for _, v := range doc.Vectors {
		out[v.ID] = v
	}
	return out
}

// vectorEvents decodes a vector's events (base first) with Event.UnmarshalJSON.
func vectorEvents(t *testing.T, all map[string]vector, v vector) []Event {
	t.Helper()
	var raws []json.RawMessage
	if v.Base != "" {
		raws = append(raws, all[v.Base].Events...)
	}
	raws = append(raws, v.Events...)
	raws = append(raws, v.Append...)
	out := make([]Event, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			t.Fatalf("%s: event %d: %v", v.ID, i, err)
		}
	}
	return out
}

// derivedText returns the text of a derived message's first text block.
func derivedText(t *testing.T, msg json.RawMessage) (role string, text string, blocks []string) {
	t.Helper()
	var m struct {
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("derived message %s: %v", msg, err)
	}
	for _, b := range m.Content {
		blocks = append(blocks, b.Type)
		if b.Type == "text" && text == "" {
			text = b.Text
		}
	}
	return m.Role, text, blocks
}

// TestVectorsSurfaceAndDerive runs the surface and derive vectors that list events.
func TestVectorsSurfaceAndDerive(t *testing.T) {
	all := loadVectors(t)
	ran := 0
	for _, id := range []string{"surface-basic", "surface-append-tool-result-after-turn-end", "surface-replace-range-all",
		"surface-replace-prefix", "surface-replace-middle", "surface-replace-single", "derive-skip-chunks-and-boundaries",
		"derive-empty-assistant-null", "derive-replace-shadows", "derive-injected-context", "real-compaction-recovery"} {
		v, ok := all[id]
		if !ok {
			t.Errorf("vector %s missing", id)
			continue
		}
		ran++
		s := mustLoad(t, id, vectorEvents(t, all, v))
		var want struct {
			Nodes             []int64           `json:"nodes"`
			ReplaceGeneration *int64            `json:"replaceGeneration"`
			DerivedRoles      []string          `json:"derivedRoles"`
			DerivedTexts      []string          `json:"derivedTexts"`
			DerivedCount      *int              `json:"derivedCount"`
			Derived           []json.RawMessage `json:"derived"`
		}
		if err := json.Unmarshal(v.Expect, &want); err != nil {
			t.Fatal(err)
		}
		sf := s.Surface()
		msgs := s.DeriveMessages()
		if want.Nodes != nil && !reflect.DeepEqual(sf.Nodes, want.Nodes) {
			t.Errorf("%s: nodes %v, want %v", id, sf.Nodes, want.Nodes)
		}
		if want.ReplaceGeneration != nil && sf.ReplaceGeneration != *want.ReplaceGeneration {
			t.Errorf("%s: replaceGeneration %d, want %d", id, sf.ReplaceGeneration, *want.ReplaceGeneration)
		}
		if want.DerivedCount != nil && len(msgs) != *want.DerivedCount {
			t.Errorf("%s: %d messages, want %d", id, len(msgs), *want.DerivedCount)
		}
		var roles, texts []string
		for _, m := range msgs {
			r, tx, _ := derivedText(t, m)
			roles, texts = append(roles, r), append(texts, tx)
		}
		if want.DerivedRoles != nil && !reflect.DeepEqual(roles, want.DerivedRoles) {
			t.Errorf("%s: roles %v, want %v", id, roles, want.DerivedRoles)
		}
		if want.DerivedTexts != nil && !reflect.DeepEqual(texts, want.DerivedTexts) {
			t.Errorf("%s: texts %v, want %v", id, texts, want.DerivedTexts)
		}
		for i, w := range want.Derived {
			if i >= len(msgs) {
				t.Errorf("%s: only %d messages", id, len(msgs))
				break
			}
			var wm map[string]any
			_ = json.Unmarshal(w, &wm)
			if seq, ok := wm["seq"]; ok { // real-compaction-recovery: {seq, role, blocks}
				r, _, blocks := derivedText(t, msgs[i])
				if float64(sf.Nodes[i]) != seq || r != wm["role"] || fmt.Sprint(blocks) != fmt.Sprint(wm["blocks"]) {
					t.Errorf("%s: message %d = node %d %s %v, want %v", id, i, sf.Nodes[i], r, blocks, wm)
				}
				continue
			}
			var gm map[string]any
			_ = json.Unmarshal(msgs[i], &gm)
			for k, wv := range wm { // the vector lists a subset of the message's fields
				if !reflect.DeepEqual(gm[k], wv) {
					t.Errorf("%s: message %d field %s = %v, want %v", id, i, k, gm[k], wv)
				}
			}
		}
		if id == "derive-empty-assistant-null" {
			for _, seq := range []int64{1, 2} {
				data, _ := jsvalue.Parse(s.Events()[seq].Data)
				if m, err := deriveEvent(s.Events()[seq].Type, data); m != nil || err != nil {
					t.Errorf("%s: deriveEventMessage(seq %d) = %v, %v; want null", id, seq, m, err)
				}
			}
		}
	}
	t.Logf("ran %d surface/derive vectors", ran)
}

// TestVectorDeriveCache: a replace bumps replaceGeneration and rebuilds the cache; a previously
// returned slice keeps its length (vector derive-cache-replace-generation).
func TestVectorDeriveCache(t *testing.T) {
	all := loadVectors(t)
	v := all["derive-cache-replace-generation"]
	evs := vectorEvents(t, all, v)
	s := mustLoad(t, "c", evs[:3])
	before := s.DeriveMessages()
	if s.Surface().ReplaceGeneration != 0 || len(before) != 2 {
		t.Fatalf("before: gen %d, %d messages", s.Surface().ReplaceGeneration, len(before))
	}
	if err := s.Append(evs[3]); err != nil {
		t.Fatal(err)
	}
	after := s.DeriveMessages()
	if s.Surface().ReplaceGeneration != 1 || len(after) != 1 || !reflect.DeepEqual(s.Surface().Nodes, []int64{3}) {
		t.Fatalf("after: gen %d, %d messages, nodes %v", s.Surface().ReplaceGeneration, len(after), s.Surface().Nodes)
	}
	if len(before) != 2 {
		t.Fatalf("a previously returned slice changed length")
	}
}

// TestVectorSurfaceErrors checks the exact texts of vector surface-errors.
func TestVectorSurfaceErrors(t *testing.T) {
	all := loadVectors(t)
	var cases []struct {
		Setup string `json:"setup"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(all["surface-errors"].Cases, &cases); err != nil {
		t.Fatal(err)
	}
	u := func(seq int64, opts ...func(*Event)) Event {
		return mk(seq, "user/message", userMsg(fmt.Sprint("u", seq), "x"), opts...)
	}
	tr := func(seq int64, text string, opts ...func(*Event)) Event {
		return mk(seq, "tool/result", toolResult(1, 1, "t", "c", text), opts...)
	}
	build := map[string][]Event{
		"nodes [0]; append replace start=5,end=0":                     {u(0, appendOp), u(1, replaceOp(5, 0), src(`[0]`))},
		"nodes [0]; append replace start=0,end=99":                    {u(0, appendOp), u(1, replaceOp(0, 99), src(`[0]`))},
		"nodes [0,1]; append replace start=1,end=0":                   {u(0, appendOp), u(1, appendOp), u(2, replaceOp(1, 0), src(`[0,1]`))},
		"nodes [0,1]; replace start=0,end=1 with sourceEventSeqs [0]": {u(0, appendOp), u(1, appendOp), u(2, replaceOp(0, 1), src(`[0]`))},
		"events seq 0 then seq 2":                                     {u(0, appendOp), mk(2, "x/y", `{}`)},
		"user/message without surfaceOp":                              {u(0)},
		"turn/start with surfaceOp append":                            {mk(0, "turn/start", `{"turn":1}`, appendOp)},
		"turn/start with sourceEventSeqs":                             {mk(0, "turn/start", `{"turn":1}`, src(`[0]`))},
		"user/message seq 0 with sourceEventSeqs [0]":                 {u(0, appendOp, src(`[0]`))},
		"user/message with sourceEventSeqs []":                        {u(0, appendOp, src(`[]`))},
		"sourceEventSeqs [0,0]":                                       {u(0, appendOp), u(1, appendOp, src(`[0,0]`))},
		"tool/result replace spanning 2 nodes":                        {tr(0, "a", appendOp), tr(1, "b", appendOp), tr(2, "c", replaceOp(0, 1), src(`[0,1]`))},
		"tool/result replace targeting a user/message node":           {u(0, appendOp), tr(1, "c", replaceOp(0, 0), src(`[0]`))},
		"tool/result replace changing toolCallId/isError/meta":        {tr(0, "a", appendOp), mk(1, "tool/result", `{"turn":1,"step":1,"message":{"id":"t","role":"user","content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":true}],"source":{"kind":"tool","callId":"c"}},"meta":{}}`, replaceOp(0, 0), src(`[0]`))},
	}
	for _, c := range cases {
		evs, ok := build[c.Setup]
		if !ok {
			t.Errorf("no construction for setup %q", c.Setup)
			continue
		}
		_, err := Load("s", evs)
		if err == nil || !strings.Contains(err.Error(), c.Error) {
			t.Errorf("%s: got %v, want text %q", c.Setup, err, c.Error)
		}
	}
}

// TestVectorForks covers the fork vectors: exact texts and codes, end-seed markers.
func TestVectorForks(t *testing.T) {
	all := loadVectors(t)
	closedTurn := []Event{
		mk(0, "turn/start", `{"turn":1}`),
		mk(1, "user/message", userMsg("m1", "hello"), appendOp),
		mk(2, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
	}
	b := func(n int64) *int64 { return &n }

	// fork-v0-empty-parent / end-seed-explicit-empty-seed: an empty seed gets a marker at 0.
	seed, ferr := ForkSeed("empty-parent", nil, nil)
	if ferr != nil || len(seed) != 0 {
		t.Fatalf("empty parent: %v %v", seed, ferr)
	}
	child, ferr := ForkChild(seed, 5)
	if ferr != nil || len(child) != 1 || child[0].Type != "session/end-seed" || child[0].Seq != 0 || string(child[0].Data) != "{}" || child[0].Time != "5" {
		t.Fatalf("empty child: %+v %v", child, ferr)
	}
	// A seed that already ends with session/end-seed is not re-marked.
	again, ferr := ForkChild(child, 6)
	if ferr != nil || len(again) != 1 {
		t.Fatalf("re-marked: %+v %v", again, ferr)
	}

	// fork-v0-default-boundary / end-seed-replay: seed verbatim + end-seed at seq N.
	seed, ferr = ForkSeed("parent", closedTurn, nil)
	if ferr != nil || len(seed) != 3 {
		t.Fatalf("default boundary: %v", ferr)
	}
	child, ferr = ForkChild(seed, 7)
	if ferr != nil || len(child) != 4 || child[3].Type != "session/end-seed" || child[3].Seq != 3 {
		t.Fatalf("child: %+v %v", child, ferr)
	}
	if !reflect.DeepEqual(child[:3], closedTurn) {
		t.Fatalf("seed not copied verbatim")
	}

	// fork-v0-earlier-boundary: fork at 2 while turn 3 is open.
	parent := append(append([]Event{}, closedTurn...),
		mk(3, "turn/start", `{"turn":2}`), mk(4, "user/message", userMsg("m2", "second"), appendOp), mk(5, "turn/end", `{"turn":2}`),
		mk(6, "turn/start", `{"turn":3}`), mk(7, "user/message", userMsg("m3", "open 3"), appendOp))
	seed, ferr = ForkSeed("parent", parent, b(2))
	if ferr != nil || len(seed) != 3 {
		t.Fatalf("earlier boundary: %v", ferr)
	}
	cs := mustLoad(t, "child", mustChild(t, seed))
	if msgs := cs.DeriveMessages(); len(msgs) != 1 || !strings.Contains(string(msgs[0]), `"first"`) && !strings.Contains(string(msgs[0]), `"hello"`) {
		t.Fatalf("child messages %s", msgs)
	}

	// fork-v0-log-only-tail and fork-v0-open-bracket: a log-only tail is a valid boundary.
	tail := append(append([]Event{}, closedTurn...), mk(3, "test/log-only", `{"value":"after execution"}`))
	seed, ferr = ForkSeed("parent", tail, nil)
	if ferr != nil || len(seed) != 4 || seed[3].Type != "test/log-only" {
		t.Fatalf("log-only tail: %v", ferr)
	}
	if c := mustChild(t, seed); c[4].Type != "session/end-seed" {
		t.Fatalf("open bracket child end-seed at %d", c[4].Seq)
	}

	// fork-v0-open-turn-rejections.
	var openCases []struct {
		Source   string   `json:"source"`
		Events   []string `json:"events"`
		Boundary int64    `json:"boundary"`
		Error    string   `json:"error"`
	}
	if err := json.Unmarshal(all["fork-v0-open-turn-rejections"].Cases, &openCases); err != nil {
		t.Fatal(err)
	}
	for _, c := range openCases {
		evs := []Event{mk(0, "turn/start", `{"turn":1}`)}
		for i := 1; i < len(c.Events); i++ {
			evs = append(evs, mk(int64(i), "step/start", `{"turn":1,"step":1}`))
		}
		_, ferr := ForkSeed(c.Source, evs, b(c.Boundary))
		if ferr == nil || ferr.Code != CodeOpenTurn || ferr.Msg != c.Error {
			t.Errorf("%s: got %+v, want OPEN_TURN %q", c.Source, ferr, c.Error)
		}
	}
	threeEvents := append([]Event{}, closedTurn...)
	for _, c := range []struct {
		id       string
		events   []Event
		boundary int64
		msg      string
	}{
		{"empty", nil, 0, `fork boundary 0 does not exist in session "empty" (last seq: none)`},
		{"parent", threeEvents, -1, `fork boundary for session "parent" must be a non-negative safe integer, got -1`},
		{"parent", threeEvents, 9007199254740992, `fork boundary for session "parent" must be a non-negative safe integer, got 9007199254740992`},
		{"parent", threeEvents, 3, `fork boundary 3 does not exist in session "parent" (last seq: 2)`},
		{"corrupt-parent", []Event{closedTurn[0], closedTurn[1], mk(99, "turn/end", `{"turn":1}`)}, 2, `fork boundary 2 does not match a contiguous event seq in session "corrupt-parent"`},
	} {
		_, ferr := ForkSeed(c.id, c.events, b(c.boundary))
		if ferr == nil || ferr.Code != CodeInvalidBoundary || ferr.Msg != c.msg {
			t.Errorf("boundary %d: got %+v, want %q", c.boundary, ferr, c.msg)
		}
	}
	// fork-v0-source-and-child-errors: the texts the forker service raises.
	if e := SessionNotFound("missing"); e.Code != CodeSessionNotFound || e.Msg != `session "missing" not found` {
		t.Errorf("not found: %+v", e)
	}
	if e := SessionAlreadyExists("child"); e.Code != CodeSessionAlreadyExists || e.Msg != `session "child" already exists` {
		t.Errorf("already exists: %+v", e)
	}
	// fork-v0-every-turn-end-reason.
	var reasons []json.RawMessage
	raw, _ := os.ReadFile(vectorsPath)
	var doc struct {
		Vectors []struct {
			ID      string            `json:"id"`
			Reasons []json.RawMessage `json:"reasons"`
		} `json:"vectors"`
	}
	_ = json.Unmarshal(raw, &doc)
	for _, v := range doc.Vectors {
		if v.ID == "fork-v0-every-turn-end-reason" {
			reasons = v.Reasons
		}
	}
	for _, r := range reasons {
		evs := []Event{mk(0, "turn/start", `{"turn":1}`), mk(1, "turn/end", `{"turn":1,"reason":`+string(r)+`}`)}
		if _, ferr := ForkSeed("p", evs, b(1)); ferr != nil {
			t.Errorf("reason %s: %v", r, ferr)
		}
	}
}

func mustChild(t *testing.T, seed []Event) []Event {
	t.Helper()
	c, ferr := ForkChild(seed, 1)
	if ferr != nil {
		t.Fatalf("ForkChild: %v", ferr)
	}
	return c
}

// TestForkChildSeedTexts checks the code-less seed-validation texts of ForkChild.
func TestForkChildSeedTexts(t *testing.T) {
	ok := mk(0, "turn/start", `{"turn":1}`)
	cases := []struct {
		seed []Event
		msg  string
	}{
		{[]Event{mk(0, "user/message", `{"role":"user","content":[],"source":{"kind":"user"}}`, appendOp)}, "seed user/message at index 0 lacks an identified message"},
		{[]Event{ok, mk(1, "request/header", `{"header":{"config":{"provider":"p"}},"reason":"initial"}`)}, "seed request/header at index 1 lacks provider/model"},
		{[]Event{ok, mk(1, "request/header", `{"header":{"config":{"provider":"p","model":"m","reasoningEffort":3}},"reason":"initial"}`)}, "seed request/header at index 1 has an invalid reasoningEffort"},
		{[]Event{ok, mk(1, "request/header", `{"header":{"config":{"provider":"p","model":"m"},"adapterDefaults":{"maxTokens":true}},"reason":"initial"}`)}, "seed request/header at index 1 has invalid adapterDefaults"},
		{[]Event{ok, mk(1, "request/header", `{"header":{"config":{"provider":"p","model":"m"}},"reason":"fallback"}`)}, `seed event at index 1 uses unsupported legacy request/header reason "fallback"`},
		{[]Event{mk(0, "request/header-delta", `{}`)}, "seed event at index 0 uses unsupported legacy request/header-delta format"},
		{[]Event{{Type: "x", Seq: 0, Time: "1.5", Data: json.RawMessage(`{}`)}}, "seed event at index 0 has an invalid event envelope"},
		{[]Event{{Type: "x", Seq: 0, Time: "1e999", Data: json.RawMessage(`{}`)}}, "seed event at index 0 is not losslessly JSON-serializable"},
		{[]Event{{Type: "x", Seq: 0, Time: "1", Data: json.RawMessage(`{"a":-0}`)}}, "seed event at index 0 is not losslessly JSON-serializable"},
		{[]Event{{Type: "x", Seq: 0, Time: "1"}}, "seed event at index 0 has an invalid event envelope"},
		{[]Event{ok, mk(5, "x", `{}`)}, "seed event at index 1 has seq 5 (expected 1); seed must be contiguous from 0"},
		{[]Event{mk(0, "user/message", userMsg("a", "x"))}, `invalid seed event at index 0: session event "user/message" is surface-eligible and requires a surfaceOp marker`},
		{[]Event{mk(0, "assistant/message", `{"message":{"id":"a","role":"user","content":[],"source":{"kind":"model"}}}`, appendOp)}, `seed assistant/message at index 0 message must have role "assistant"`},
		{[]Event{mk(0, "assistant/message", `{"message":{"id":"a","role":"assistant","content":[],"source":{"kind":"model"}}}`, appendOp)}, "seed assistant/message at index 0 message must have model source"},
		{[]Event{mk(0, "tool/result", `{"message":{"id":"a","role":"user","content":[],"source":{"kind":"tool","callId":"c"}}}`, appendOp)}, "seed tool/result at index 0 message must contain one tool-result block"},
		{[]Event{mk(0, "tool/result", `{"message":{"id":"a","role":"user","content":[{"type":"tool-result","toolCallId":"d","content":[]}],"source":{"kind":"tool","callId":"c"}}}`, appendOp)}, "seed tool/result at index 0 message has mismatched tool call ids"},
		{[]Event{mk(0, "tool/result", `{"message":{"id":"a","role":"user","content":[],"source":{"kind":""}}}`, appendOp)}, "seed tool/result at index 0 message has invalid source"},
		{[]Event{mk(0, "user/message", `{"id":"a","role":"user","content":{},"source":{"kind":"user"}}`, appendOp)}, "seed user/message at index 0 message has invalid content"},
	}
	for _, c := range cases {
		_, ferr := ForkChild(c.seed, 1)
		if ferr == nil || ferr.Code != "" || ferr.Msg != c.msg {
			t.Errorf("got %+v, want %q", ferr, c.msg)
		}
	}
}

// TestVectorRepairClosers: interruptedTurnClosers, byte for byte where the vector is complete.
func TestVectorRepairClosers(t *testing.T) {
	all := loadVectors(t)
	var cases []struct {
		Closers json.RawMessage `json:"closers"`
	}
	if err := json.Unmarshal(all["repair-closers"].Cases, &cases); err != nil {
		t.Fatal(err)
	}
	open2 := []Event{
		mk(0, "turn/start", `{"turn":2}`),
		mk(1, "step/start", `{"turn":2,"step":1}`),
		mk(2, "assistant/message", assistantMsg(2, 1, "a", `[{"type":"text","text":"x"},{"type":"tool-call","id":"call-1","name":"n","arguments":"{}"}]`), appendOp),
	}
	inputs := [][]Event{
		{mk(0, "turn/start", `{"turn":1}`), mk(1, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`)},
		{},
		{mk(0, "turn/start", `{"turn":1}`)},
		{mk(0, "turn/start", `{"turn":1}`), mk(1, "step/start", `{"turn":1,"step":1}`)},
		open2,
		append(append([]Event{}, open2...), mk(3, "tool/result", toolResult(2, 1, "t", "call-1", "ok"), appendOp)),
	}
	if len(cases) != len(inputs) {
		t.Fatalf("%d cases, %d inputs", len(cases), len(inputs))
	}
	for i, c := range cases {
		s := mustLoad(t, "r", inputs[i])
		got := s.Repair()
		free := Repair(inputs[i])
		if !reflect.DeepEqual(got, free) {
			t.Errorf("case %d: Session.Repair and Repair differ", i)
		}
		var want []json.RawMessage
		var names []string
		if err := json.Unmarshal(c.Closers, &want); err != nil {
			if err := json.Unmarshal(c.Closers, &names); err != nil {
				t.Fatal(err)
			}
		}
		if names != nil {
			var gotTypes []string
			for _, e := range got {
				gotTypes = append(gotTypes, e.Type)
			}
			if !reflect.DeepEqual(gotTypes, names) {
				t.Errorf("case %d: closers %v, want %v", i, gotTypes, names)
			}
			continue
		}
		if len(got) != len(want) {
			t.Fatalf("case %d: %d closers, want %d", i, len(got), len(want))
		}
		for k := range want {
			var wm map[string]json.RawMessage
			_ = json.Unmarshal(want[k], &wm)
			line, err := got[k].MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var gm map[string]json.RawMessage
			_ = json.Unmarshal(line, &gm)
			if string(gm["time"]) != string(inputs[i][len(inputs[i])-1].Time) {
				t.Errorf("case %d closer %d: time %s, want the last event's", i, k, gm["time"])
			}
			for key, wv := range wm {
				if key == "data" && len(wv) > 0 && k == 0 && got[k].Type == "tool/result" {
					// complete in the vector: byte-identical
					compact, err := appendCompact(nil, wv)
					if err != nil {
						t.Fatal(err)
					}
					if string(gm[key]) != string(compact) {
						t.Errorf("case %d closer %d data:\n got %s\nwant %s", i, k, gm[key], wv)
					}
					continue
				}
				if !jsonEqual(t, gm[key], wv) && !jsonSubset(t, gm[key], wv) {
					t.Errorf("case %d closer %d %s = %s, want %s", i, k, key, gm[key], wv)
				}
			}
		}
	}
}

// jsonSubset reports whether every field of want is in got with an equal value.
func jsonSubset(t *testing.T, got, want []byte) bool {
	t.Helper()
	g, ok1 := jsonValue(t, got).(map[string]any)
	w, ok2 := jsonValue(t, want).(map[string]any)
	if !ok1 || !ok2 {
		return false
	}
	for k, v := range w {
		if !reflect.DeepEqual(g[k], v) {
			return false
		}
	}
	return true
}

// TestRepairMapOrderAndStarted: a tool/call marks its call started; re-setting a key keeps its
// Map position (and forgets the tool/call); results and step/end clear entries.
func TestRepairMapOrderAndStarted(t *testing.T) {
	evs := []Event{
		mk(0, "turn/start", `{"turn":1}`),
		mk(1, "step/start", `{"turn":1,"step":1}`),
		mk(2, "assistant/message", assistantMsg(1, 1, "a", `[{"type":"tool-call","id":"k1"},{"type":"tool-call","id":"k2"},{"type":"tool-call","id":"k3"}]`), appendOp),
		mk(3, "tool/call", `{"turn":1,"step":1,"callId":"k1"}`),
		mk(4, "tool/call", `{"turn":1,"step":1,"callId":"k2"}`),
		mk(5, "tool/result", toolResult(1, 1, "t", "k3", "ok"), appendOp),
		mk(6, "assistant/message", assistantMsg(1, 1, "b", `[{"type":"tool-call","id":"k1"},{"type":"tool-call","id":"k4"}]`), appendOp),
	}
	got := Repair(evs)
	var ids []string
	for _, e := range got {
		var d struct {
			Message struct {
				ID string `json:"id"`
			} `json:"message"`
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(e.Data, &d)
		ids = append(ids, e.Type+" "+d.Message.ID+" "+d.Error.Code+" "+string(e.SourceEventSeqs))
	}
	want := []string{
		"tool/result interrupted-tool-result-k1-7 TOOL_NOT_STARTED ", // re-set: position kept, tool/call forgotten
		"tool/result interrupted-tool-result-k2-8 TOOL_OUTCOME_UNKNOWN [4]",
		"tool/result interrupted-tool-result-k4-9 TOOL_NOT_STARTED ",
		"step/end   ",
		"turn/end   ",
	}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("closers:\n%s\nwant:\n%s", strings.Join(ids, "\n"), strings.Join(want, "\n"))
	}
	if got[3].Seq != 10 || got[4].Seq != 11 || got[4].Time != evs[6].Time {
		t.Fatalf("seq/time: %+v", got[3:])
	}
}
