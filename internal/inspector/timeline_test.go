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
	if got := rowsText(v); got != "0:diff[m3|t0] 2:both[m2]" || v.ModelTotal != 2 || v.TranscriptTotal != 2 || v.Hidden != 1 || !v.Differs || v.RowsTotal != 2 {
		t.Fatalf("rows %s (model %d, transcript %d, hidden %d, differs %v)", got, v.ModelTotal, v.TranscriptTotal, v.Hidden, v.Differs)
	}
	if r := v.Rows[0]; r.Model.Note != "compaction: stands for seqs [0 1]" || r.Transcript[0].Note != "hidden from the model: replaced by seq 3" || r.Transcript[0].JSON != "" || r.Model.JSON == "" {
		t.Errorf("the compaction row: %+v", r)
	}
	if r := v.Rows[1]; r.Model.Role != "assistant" || !strings.Contains(r.Model.JSON, `"id":"a"`) {
		t.Errorf("the shared row: %+v", r.Model)
	}
}

// rowsText is a conversation's rows as "SEQ:KIND[mNODE|tSEQ,...]".
func rowsText(v Views) string {
	var parts []string
	for _, r := range v.Rows {
		var cells []string
		if r.Model != nil {
			cells = append(cells, fmt.Sprintf("m%d", r.Model.Seq))
		}
		if len(r.Transcript) > 0 {
			var ts []string
			for _, e := range r.Transcript {
				ts = append(ts, fmt.Sprint(e.Seq))
			}
			cells = append(cells, "t"+strings.Join(ts, ","))
		}
		parts = append(parts, fmt.Sprintf("%d:%s[%s]", r.Seq, r.Kind, strings.Join(cells, "|")))
	}
	return strings.Join(parts, " ")
}

// served is the messages reply of nodes, derived from evs as the query service derives them.
func served(t *testing.T, evs []session.Event, nodes ...int64) *client.MessagesReply {
	t.Helper()
	msgs, err := session.DeriveMessages(nodes, func(seq int64) (session.Event, error) { return evs[seq], nil })
	if err != nil {
		t.Fatal(err)
	}
	return &client.MessagesReply{AsOfSeq: int64(len(evs)) - 1, Nodes: nodes, Messages: msgs}
}

// TestConversationAlignment: the model view and the transcript are aligned by seq; where they
// are the same message it is one row (no repetition without compaction); a compaction's replace
// sits at the first seq it stands for, beside the entries it hides, a replace of a replace
// beside all of them; a served message unlike its event is a difference; without a model view the
// transcript stands alone.
func TestConversationAlignment(t *testing.T) {
	u := func(id string) string {
		return `{"id":"` + id + `","role":"user","content":[{"type":"text","text":"` + id + `"}],"source":{"kind":"user"}}`
	}
	evs := log(
		"user/message", u("u0"), // 0
		"assistant/message", asstMsg, // 1
		"user/message", u("u2"), // 2
		"assistant/message", asstMsg, // 3
	)
	v := buildViews(evs, served(t, evs, 0, 1, 2, 3), "", false)
	if got := rowsText(v); got != "0:both[m0] 1:both[m1] 2:both[m2] 3:both[m3]" || v.Differs || v.Hidden != 0 || v.TranscriptTotal != 4 {
		t.Errorf("no compaction: %s (differs %v)", got, v.Differs)
	}
	if v.Rows[0].Model.Blocks[0].HTML == "" {
		t.Errorf("a user message's text is not rendered as markdown: %+v", v.Rows[0].Model.Blocks)
	}

	// Two compactions: 4 replaces 0..1, then 5 replaces 4 and 2; 3 stays.
	evs = log(
		"user/message", u("u0"), // 0
		"assistant/message", asstMsg, // 1
		"user/message", u("u2"), // 2
		"assistant/message", asstMsg, // 3
		"user/message", `replace 0 1 [0,1]|`+u("s4"), // 4
		"user/message", `replace 4 2 [4,2]|`+u("s5"), // 5
		"user/message", u("u6"), // 6
	)
	v = buildViews(evs, served(t, evs, 5, 3, 6), "", false)
	if got := rowsText(v); got != "0:diff[m5|t0,1,2] 3:both[m3] 6:both[m6]" || v.Hidden != 3 || !v.Differs || v.ModelTotal != 3 || v.TranscriptTotal != 5 {
		t.Errorf("nested compaction: %s (hidden %d, model %d, transcript %d)", got, v.Hidden, v.ModelTotal, v.TranscriptTotal)
	}
	if n := v.Rows[0].Transcript[2].Note; n != "hidden from the model: replaced by seq 5" {
		t.Errorf("seq 2's note: %q", n)
	}

	// A served message that is not its event's message.
	r := served(t, evs, 5, 3, 6)
	r.Messages[2] = json.RawMessage(`{"id":"other","role":"user","content":[]}`)
	v = buildViews(evs, r, "", false)
	if got := rowsText(v); got != "0:diff[m5|t0,1,2] 3:both[m3] 6:diff[m6|t6]" || !strings.Contains(v.Rows[2].Model.Note, "differs") {
		t.Errorf("a served message unlike its event: %s", got)
	}

	// No model view: the transcript alone.
	v = buildViews(evs, nil, "the projection is stopped", false)
	if got := rowsText(v); got != "0:transcript[t0] 1:transcript[t1] 2:transcript[t2] 3:transcript[t3] 6:transcript[t6]" || v.HasModel {
		t.Errorf("without a model view: %s", got)
	}

	// A long conversation: the last viewLimit rows, each paired with its own message.
	var pairs []string
	var nodes []int64
	for i := range viewLimit + 10 {
		pairs = append(pairs, "user/message", u(fmt.Sprintf("n%d", i)))
		nodes = append(nodes, int64(i))
	}
	evs = log(pairs...)
	v = buildViews(evs, served(t, evs, nodes...), "", false)
	if len(v.Rows) != viewLimit || v.RowsTotal != viewLimit+10 || v.Rows[0].Seq != 10 || !strings.Contains(v.Rows[0].Model.JSON, `"n10"`) ||
		!strings.Contains(v.Rows[viewLimit-1].Model.JSON, fmt.Sprintf(`"n%d"`, viewLimit+9)) {
		t.Errorf("a long conversation: %d rows of %d, first %d %s", len(v.Rows), v.RowsTotal, v.Rows[0].Seq, v.Rows[0].Model.JSON)
	}
	if all := buildViews(evs, served(t, evs, nodes...), "", true); len(all.Rows) != viewLimit+10 {
		t.Errorf("all: %d rows", len(all.Rows))
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

// TestTimelineTimes: rows carry how long what they end took (a turn, a step, a tool call, a
// streamed reply), folds their start and end, and each fork boundary its turn's first user
// message and the next turn's (a compaction's summary is neither).
func TestTimelineTimes(t *testing.T) {
	evs := log(
		"turn/start", `{"turn":1}`, // 0
		"user/message", userMsg, // 1
		"step/start", `{"turn":1,"step":1}`, // 2
		"assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"o"}}`, // 3
		"assistant/message", asstMsg, // 4
		"tool/call", `{"turn":1,"step":1,"callId":"c1","name":"read","arguments":"{}"}`, // 5
		"tool/result", toolResult("c1", ""), // 6
		"step/end", `{"turn":1,"step":1}`, // 7
		"turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, // 8
		"turn/start", `{"turn":2}`, // 9
		"user/message", `replace 1 1 [1]|{"id":"s","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}}`, // 10
		"turn/end", `{"turn":2,"reason":{"kind":"completed"}}`, // 11
		"turn/start", `{"turn":3}`, // 12
		"user/message", `{"id":"u3","role":"user","content":[{"type":"text","text":"third"}],"source":{"kind":"user"}}`, // 13
		"turn/end", `{"turn":3,"reason":{"kind":"completed"}}`, // 14
	)
	for i := range evs { // seq i at 1785000000000 + i*i*100 ms
		evs[i].Time = json.Number(fmt.Sprint(1785000000000 + int64(i*i*100)))
	}
	tl := BuildTimeline("s", evs)
	took := map[int64]string{}
	for _, r := range tl.Rows {
		if r.Took >= 0 {
			took[r.Seq] = fmt.Sprintf("%s %d", r.TookWhat, r.Took)
		}
	}
	want := map[int64]string{4: "stream 700", 6: "call 1100", 7: "step 4500", 8: "turn 6400", 11: "turn 4000", 14: "turn 5200"}
	if fmt.Sprint(took) != fmt.Sprint(want) {
		t.Errorf("took %v, want %v", took, want)
	}
	top := tl.Page(0)
	if top[0].Kind != "turn" || top[0].Start != 1785000000000 || top[0].End != 1785000006400 ||
		top[0].Children[2].Kind != "step" || top[0].Children[2].Start != 1785000000400 || top[0].Children[2].End != 1785000004900 {
		t.Errorf("turn 1: %+v, step 1: %+v", top[0], top[0].Children[2])
	}
	var bs []string
	for _, r := range tl.Rows {
		if r.ForkAt {
			bs = append(bs, fmt.Sprintf("%d:first %d next %d %q", r.Seq, r.First, r.Next, r.NextText))
		}
	}
	if got := strings.Join(bs, "; "); got != `8:first 1 next -1 ""; 11:first -1 next 13 "third"; 14:first 13 next -1 ""` {
		t.Errorf("boundaries: %s", got)
	}
}

func TestDuration(t *testing.T) {
	for ms, want := range map[int64]string{0: "0 ms", 850: "850 ms", 4200: "4.20 s", 12345: "12.3 s", 192000: "3 min 12 s", 7440000: "2 h 04 min", -1: "-"} {
		if got := duration(ms); got != want {
			t.Errorf("duration(%d) = %q, want %q", ms, got, want)
		}
	}
}
