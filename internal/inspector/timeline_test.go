package inspector

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/session"
)

// log builds events from (type, data) pairs, seqs from 0; surface types get "append" unless
// the data is prefixed with "replace S E [srcs]|".
func log(pairs ...string) []session.Event {
	var evs []session.Event
	for i := 0; i+1 < len(pairs); i += 2 {
		seq := int64(len(evs))
		e := session.Event{Type: pairs[i], Seq: seq, Time: json.Number(fmt.Sprint(1785000000000 + seq)), Data: json.RawMessage(pairs[i+1])}
		if op, data, ok := strings.Cut(pairs[i+1], "|"); ok {
			var s, end int64
			var srcs string
			fmt.Sscanf(op, "replace %d %d %s", &s, &end, &srcs)
			e.Data = json.RawMessage(data)
			e.SurfaceOp = json.RawMessage(fmt.Sprintf(`{"op":"replace","start":%d,"end":%d}`, s, end))
			e.SourceEventSeqs = json.RawMessage(srcs)
		} else if session.SurfaceEligible(e.Type) {
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		if !coreTypes[e.Type] {
			e.Ignorable = true
		}
		evs = append(evs, e)
	}
	return evs
}

const (
	userMsg = `{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`
	asstMsg = `{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}}}`
)

func toolResult(callID, extra string) string {
	return `{"turn":1,"step":1,"message":{"id":"r` + callID + `","role":"user","content":[{"type":"tool-result","toolCallId":"` + callID + `","content":[{"type":"text","text":"out"}]}],"source":{"kind":"tool","callId":"` + callID + `"}}` + extra + `}`
}

func marks(r Row) string {
	var parts []string
	for _, m := range r.Marks {
		parts = append(parts, fmt.Sprintf("%s:%s@%d", m.Class, m.Text, m.Seq))
	}
	return strings.Join(parts, "; ")
}

func TestBuildTimeline(t *testing.T) {
	evs := log(
		"turn/start", `{"turn":1}`, // 0
		"user/message", userMsg, // 1
		"step/start", `{"turn":1,"step":1}`, // 2
		"assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"o"}}`, // 3
		"assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"k"}}`, // 4
		"assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"usage","usage":{}}}`, // 5
		"assistant/message", asstMsg, // 6
		"tool/call", `{"turn":1,"step":1,"callId":"c1","name":"read","arguments":"{}"}`, // 7
		"tool/call", `{"turn":1,"step":1,"callId":"c2","name":"write","arguments":"{}"}`, // 8
		"tool/result", toolResult("c1", ""), // 9
		"tool/result", toolResult("zz", ""), // 10: orphan
		"step/end", `{"turn":1,"step":1}`, // 11
		"turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, // 12: c2 never answered
		"compaction/start", `{"compactionId":"k","turn":2}`, // 13: a plugin event
		"user/message", `replace 1 9 [1,6,9]|{"id":"s","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"plugin","plugin":"c"}}`, // 14
		"turn/start", `{"turn":2}`, // 15
		"tool/call", `{"turn":2,"step":1,"callId":"c3","name":"run","arguments":"{}"}`, // 16
		"tool/result", toolResult("c3", `,"error":{"name":"x","code":"TOOL_OUTCOME_UNKNOWN"}`), // 17
		"turn/end", `{"turn":2,"reason":{"kind":"interrupted"}}`, // 18
		"turn/start", `{"turn":3}`, // 19: left open
	)
	tl := BuildTimeline("s \"q\"", evs)
	bySeq := map[int64]Row{}
	for _, r := range tl.Rows {
		bySeq[r.Seq] = r
	}
	if r := bySeq[6]; r.Stream == nil || r.Stream.Chunks != 3 || r.Stream.From != 3 || r.Stream.To != 5 || r.Stream.Kinds != "text-delta ×2, usage ×1" {
		t.Errorf("the assistant message does not collapse its stream: %+v", r)
	}
	for _, seq := range []int64{3, 4, 5} {
		if _, ok := bySeq[seq]; ok {
			t.Errorf("chunk %d has a row of its own", seq)
		}
	}
	checks := map[int64]string{
		7:  "ok:result@9",
		8:  "bad:orphan: no result before the turn ended@-1",
		9:  "ok:result of read (call)@7",
		10: `bad:orphan: no tool/call with callId "zz"@-1`,
		14: "info:compaction: replaces nodes 1..9 (sourceEventSeqs [1 6 9])@1",
		17: "ok:result of run (call)@16; bad:interrupted: synthetic result TOOL_OUTCOME_UNKNOWN@-1",
		18: "bad:interrupted (closed by crash repair)@-1",
	}
	for seq, want := range checks {
		if got := marks(bySeq[seq]); got != want {
			t.Errorf("seq %d marks %q, want %q", seq, got, want)
		}
	}
	if !bySeq[13].Dim || bySeq[12].Dim {
		t.Errorf("dimmed: plugin %v, turn/end %v", bySeq[13].Dim, bySeq[12].Dim)
	}
	if !bySeq[12].ForkAt || !bySeq[18].ForkAt || bySeq[19].ForkAt {
		t.Error("fork boundaries: want the turn ends only")
	}
	if want := `fork boundary 19 in session "s "q"" ends inside open turn 3`; bySeq[19].ForkRefusal != want || tl.OpenTurn != 3 {
		t.Errorf("refusal %q, open turn %d", bySeq[19].ForkRefusal, tl.OpenTurn)
	}
	nodes := tl.Page(0)
	if len(nodes) != 5 || nodes[0].Label != "turn 1" || nodes[1].Kind != "row" || nodes[3].Label != "turn 2" || nodes[4].Label != "turn 3" || !nodes[4].Open || nodes[3].Open {
		t.Fatalf("folds: %+v", nodes)
	}
	if step := nodes[0].Children[2]; step.Kind != "step" || step.Label != "step 1" || len(step.Children) != 7 {
		t.Errorf("step fold: %+v", step)
	}
	if r := bySeq[1]; r.Summary != "" {
		t.Errorf("a summary computed before the row is shown: %q", r.Summary)
	}
	if got := tl.Rows[1].Summary; got != "hi" {
		t.Errorf("summary of a shown row: %q", got)
	}
}

// TestStreamWithoutMessage: a stream that no assistant/message follows stays a row of its own.
func TestStreamWithoutMessage(t *testing.T) {
	chunk := `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"par"}}`
	tl := BuildTimeline("x", log("turn/start", `{"turn":1}`, "step/start", `{"turn":1,"step":1}`,
		"assistant/chunk", chunk, "assistant/chunk", chunk, "step/end", `{"turn":1,"step":1}`))
	r := tl.Rows[2]
	if r.Type != "assistant/chunk" || r.Seq != 2 || r.Last != 3 || r.Stream == nil || r.Stream.Chunks != 2 || r.Stream.Chars != 6 ||
		r.Summary != "2 streamed chunks (text-delta ×2), about 6 characters, without an assistant/message" || len(tl.Rows) != 4 {
		t.Errorf("%d rows; run %+v", len(tl.Rows), r)
	}
	if tl.PageOf(3) != 0 {
		t.Error("page of a chunk")
	}
}

func TestTimelinePages(t *testing.T) {
	var pairs []string
	pairs = append(pairs, "turn/start", `{"turn":1}`)
	for range 2*rowsPerPage + rowsPerPage/2 {
		pairs = append(pairs, "user/message", userMsg)
	}
	tl := BuildTimeline("p", log(pairs...))
	if tl.Pages() != 3 || tl.PageOf(rowsPerPage+rowsPerPage/2) != 1 || tl.PageOf(1e9) != 2 {
		t.Fatalf("pages %d, page of 200: %d", tl.Pages(), tl.PageOf(200))
	}
	n := tl.Page(1)
	if len(n) != 1 || !n[0].Continued || len(n[0].Children) != rowsPerPage || n[0].Children[0].Row.Seq != rowsPerPage {
		t.Errorf("page 1: %+v", n)
	}
}

func TestBuildViews(t *testing.T) {
	evs := log(
		"user/message", userMsg, // 0
		"assistant/message", `{"turn":1,"step":1,"message":{"id":"e","role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"}}}`, // 1: no message
		"assistant/message", asstMsg, // 2
		"user/message", `replace 0 1 [0,1]|{"id":"s","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}}`, // 3
	)
	msgs, err := session.DeriveMessages([]int64{3, 2}, func(seq int64) (session.Event, error) { return evs[seq], nil })
	if err != nil {
		t.Fatal(err)
	}
	v := buildViews(evs, &client.MessagesReply{AsOfSeq: 3, Nodes: []int64{3, 2}, Messages: msgs}, "", false)
	if len(v.Model) != 2 || v.Model[0].Seq != 3 || v.Model[1].Seq != 2 || v.Model[0].Note == "" || v.ModelTotal != 2 {
		t.Errorf("model view: %+v", v.Model)
	}
	if len(v.Transcript) != 2 || v.TranscriptTotal != 2 || v.Transcript[0].Seq != 0 || v.Transcript[0].Note != "hidden from the model: replaced by seq 3" ||
		v.Hidden != 1 || !v.Differs || v.Transcript[0].JSON != "" {
		t.Errorf("transcript: %+v (hidden %d)", v.Transcript, v.Hidden)
	}
}

func BenchmarkPage10k(b *testing.B) {
	evs := sessiontest.AgentTurns(10000)
	for b.Loop() {
		t := BuildTimeline("long", evs)
		_ = t.Page(t.Pages() - 1)
		_ = buildViews(evs, nil, "", false)
	}
}
