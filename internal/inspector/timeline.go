package inspector

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
)

// The events timeline: a session's events as rows (one per event, one per run of streamed
// chunks), paged by row count, each page folded into turns and steps.

// rowsPerPage bounds the rows of one timeline page (a run of chunks is one row, whatever its
// length), so that a page of a long session stays small. An event's JSON is not in the page: a
// row links its line of the raw log (the script loads it in place).
const rowsPerPage = 100

// summaryRunes bounds a row's one-line summary.
const summaryRunes = 240

// coreTypes are the event types of the dsh format; any other type is a plugin's and is dimmed.
var coreTypes = map[string]bool{
	"turn/start": true, "turn/end": true, "step/start": true, "step/end": true,
	"user/message": true, "assistant/chunk": true, "assistant/message": true,
	"tool/call": true, "tool/result": true, "todo/write": true,
	"request/header": true, "request/context": true, "session/end-seed": true,
}

// Mark is a note on a row: Class is ok, warn, bad or info; Seq, when >= 0, links another event.
type Mark struct {
	Class string
	Text  string
	Seq   int64
}

// Row is one timeline row: an event, or a run of consecutive assistant/chunk events (Seq..Last).
type Row struct {
	Seq, Last  int64
	Type       string
	Time       int64 // Unix ms of the first event
	Turn, Step int64 // the turn and step the row is in (0: none)
	Summary    string
	Dim        bool // ignorable or plugin event
	Marks      []Mark
	// Stream is a run of streamed chunks: the row's own (an assistant/chunk row: the run has no
	// assistant/message after it, e.g. a stream cut off) or the one its assistant/message
	// collapses.
	Stream *Stream

	ForkAt      bool   // a turn boundary: "fork from here" (boundary = Seq)
	ForkRefusal string // a boundary inside an open turn: the reference's refusal text
	// Took is how long what the row ends took, in ms (-1: nothing): a turn or a step (from its
	// start), a tool call (to its result), a streamed reply (from its first chunk).
	Took     int64
	TookWhat string
	// Next is, on a fork boundary, the seq of the next turn's first user message (-1: none), and
	// NextText its text (for "fork from here and edit the next message"; set when shown).
	Next     int64
	NextText string
	// First is, on a fork boundary, the seq of its turn's first user message (-1: none).
	First int64

	message bool // Summary is the event's message, derived when the row is shown
}

// span is when a turn or a step started and ended (Unix ms; 0: not seen).
type span struct{ start, end int64 }

// Stream is a run of consecutive assistant/chunk events (From..To) of one step.
type Stream struct {
	From, To int64
	Chunks   int
	Kinds    string // "text-delta ×12, usage ×1"
	Chars    int    // about the characters of the run's deltas (bytes of their JSON strings)
	Start    int64  // Unix ms of the first chunk
	kinds    []chunkKind
}

type chunkKind struct {
	kind string
	n    int
}

// Node is one fold of a page: a turn, a step, or a row (Row set).
type Node struct {
	Kind      string // "turn", "step" or "row"
	ID        string // stable element id of a fold ("turn-3", "step-3-2")
	Label     string
	Continued bool  // the fold began on an earlier page
	Open      bool  // a turn without turn/end yet
	Start     int64 // Unix ms of its turn/start or step/start (0: not in the log)
	End       int64 // Unix ms of its turn/end or step/end (0: none yet)
	Row       *Row
	Children  []*Node
}

// Timeline is the rows of a whole session and where its pages start.
type Timeline struct {
	Rows     []Row
	OpenTurn int64 // the open turn at the end of the log (0: none)
	LastSeq  int64
	events   []session.Event
	spans    map[string]span // by fold ID
}

// Pages is the number of pages (at least 1).
func (t *Timeline) Pages() int { return max(1, (len(t.Rows)+rowsPerPage-1)/rowsPerPage) }

// PageOf returns the page holding event seq (the last page when seq is past the end).
func (t *Timeline) PageOf(seq int64) int {
	for i, r := range t.Rows {
		if seq <= r.Last {
			return i / rowsPerPage
		}
	}
	return t.Pages() - 1
}

// Page folds the rows of page p (clamped) into turns and steps.
func (t *Timeline) Page(p int) []*Node {
	p = min(max(p, 0), t.Pages()-1)
	rows := t.Rows[min(p*rowsPerPage, len(t.Rows)):min((p+1)*rowsPerPage, len(t.Rows))]
	for i := range rows { // the message summaries of the rows shown only
		r := &rows[i]
		if r.Seq >= int64(len(t.events)) || t.events[r.Seq].Seq != r.Seq {
			continue
		}
		ev := &t.events[r.Seq]
		if r.Next >= 0 && r.NextText == "" && r.Next < int64(len(t.events)) {
			r.NextText = userText(t.events[r.Next].Data)
		}
		if r.message {
			r.message = false
			if ev.Type == "user/message" {
				r.Summary = summarize(ev.Data)
			} else if m, ok := session.LookupJSON(ev.Data, "message"); ok {
				r.Summary = summarize(m)
			}
		}
	}
	var top []*Node
	var turn, step *Node
	for i := range rows {
		r := &rows[i]
		if r.Type == "turn/start" || (r.Turn != 0 && (turn == nil || turn.ID != turnID(r.Turn))) {
			step = nil
			turn = &Node{Kind: "turn", ID: turnID(r.Turn), Label: fmt.Sprintf("turn %d", r.Turn), Continued: r.Type != "turn/start"}
			turn.Start, turn.End = t.spans[turn.ID].start, t.spans[turn.ID].end
			top = append(top, turn)
		}
		if r.Turn == 0 {
			turn, step = nil, nil
		}
		if r.Step != 0 && (r.Type == "step/start" || step == nil || step.ID != stepID(r.Turn, r.Step)) {
			step = &Node{Kind: "step", ID: stepID(r.Turn, r.Step), Label: fmt.Sprintf("step %d", r.Step), Continued: r.Type != "step/start"}
			step.Start, step.End = t.spans[step.ID].start, t.spans[step.ID].end
			turn.Children = append(turn.Children, step)
		}
		if r.Step == 0 {
			step = nil
		}
		n := &Node{Kind: "row", Row: r}
		switch {
		case step != nil:
			step.Children = append(step.Children, n)
		case turn != nil:
			turn.Children = append(turn.Children, n)
		default:
			top = append(top, n)
		}
		if turn != nil && r.Seq == t.LastSeq && t.OpenTurn == r.Turn && r.Type != "turn/end" {
			turn.Open = true
		}
	}
	return top
}

func turnID(turn int64) string       { return fmt.Sprintf("turn-%d", turn) }
func stepID(turn, step int64) string { return fmt.Sprintf("step-%d-%d", turn, step) }

// eventData is what the timeline reads of an event's data (absent fields stay zero).
type eventData struct {
	Turn    *float64        `json:"turn"`
	Step    *float64        `json:"step"`
	CallID  string          `json:"callId"`
	Name    string          `json:"name"`
	Args    json.RawMessage `json:"arguments"`
	Reason  json.RawMessage `json:"reason"`
	Message json.RawMessage `json:"message"`
	Chunk   *struct {
		Type           string `json:"type"`
		Text           string `json:"text"`
		ArgumentsDelta string `json:"argumentsDelta"`
	} `json:"chunk"`
	Interrupted bool `json:"interrupted"`
	Error       *struct {
		Code string `json:"code"`
		Name string `json:"name"`
	} `json:"error"`
	Title string          `json:"title"`
	Todos json.RawMessage `json:"todos"`
}

// message is what the timeline and the views read of a message.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Source  struct {
		Kind   string `json:"kind"`
		CallID string `json:"callId"`
	} `json:"source"`
}

// block is one content block of a message.
type block struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments"`
	ToolCallID string          `json:"toolCallId"`
	Content    json.RawMessage `json:"content"`
	IsError    bool            `json:"isError"`
}

func decodeData(ev *session.Event) eventData {
	var d eventData
	_ = json.Unmarshal(session.WellFormed(ev.Data), &d) // a shape the timeline does not know shows as JSON only
	return d
}

// BuildTimeline turns a session's events (seq order) into timeline rows: chunks collapsed into
// runs, tool calls paired with their results (orphans and synthetic results marked),
// interruptions, compaction replaces and fork boundaries marked. id names the session in the
// refusal text of a boundary inside an open turn.
func BuildTimeline(id string, events []session.Event) *Timeline {
	t := &Timeline{LastSeq: -1, events: events, Rows: make([]Row, 0, len(events)/3+8), spans: map[string]span{}}
	calls := map[string]int{}        // callId -> row index of its tool/call
	results := map[string]int64{}    // callId -> seq of its tool/result
	callNames := map[string]string{} // callId -> tool name
	var turn, step int64
	callTimes := map[string]int64{} // callId -> Unix ms of its tool/call
	var turnStart, stepStart int64  // Unix ms of the open turn's turn/start, the open step's step/start
	var boundaries []int            // row indexes of the fork boundaries since the last turn
	var pending []int               // the boundaries before the open turn, waiting for its first user message
	firstUser := int64(-1)          // the open turn's first user message
	for i := range events {
		ev := &events[i]
		t.LastSeq = ev.Seq
		if ev.Type == "assistant/chunk" { // most events of a log: read only the chunk's type and text
			if run := t.lastRun(ev.Seq, turn, step); run != nil {
				run.Last = ev.Seq
				run.Stream.add(ev)
				continue
			}
			r := Row{Seq: ev.Seq, Last: ev.Seq, Type: ev.Type, Time: timeMs(ev.Time), Turn: turn, Step: step, Dim: ev.Ignorable,
				Stream: &Stream{From: ev.Seq, Start: timeMs(ev.Time)}, Took: -1, Next: -1, First: -1}
			r.Stream.add(ev)
			t.Rows = append(t.Rows, r)
			continue
		}
		var d eventData
		if ev.Type != "user/message" && ev.Type != "assistant/message" {
			d = decodeData(ev)
		}
		switch ev.Type {
		case "turn/start":
			if d.Turn != nil {
				turn, step = int64(*d.Turn), 0
			}
		case "step/start":
			if d.Step != nil {
				step = int64(*d.Step)
			}
		}
		r := Row{Seq: ev.Seq, Last: ev.Seq, Type: ev.Type, Time: timeMs(ev.Time), Turn: turn, Step: step,
			Dim: ev.Ignorable || !coreTypes[ev.Type], Took: -1, Next: -1, First: -1}
		took := func(since int64, what string) {
			if since > 0 && r.Time >= since {
				r.Took, r.TookWhat = r.Time-since, what
			}
		}
		switch ev.Type {
		case "turn/start":
			r.Summary = fmt.Sprintf("turn %d starts", turn)
			turnStart = r.Time
			t.spans[turnID(turn)] = span{start: r.Time}
			firstUser = -1
			pending, boundaries = boundaries, nil
		case "turn/end":
			kind := reasonKind(d.Reason)
			r.Summary = fmt.Sprintf("turn %d ends: %s", turn, kind)
			took(turnStart, "turn")
			sp := t.spans[turnID(turn)]
			sp.end = r.Time
			t.spans[turnID(turn)] = sp
			turnStart = 0
			switch kind {
			case "completed":
			case "interrupted":
				r.Marks = append(r.Marks, Mark{Class: "bad", Text: "interrupted (closed by crash repair)", Seq: -1})
			default:
				r.Marks = append(r.Marks, Mark{Class: "warn", Text: kind, Seq: -1})
			}
			r.ForkAt = true
			r.First = firstUser
			boundaries = append(boundaries, len(t.Rows))
		case "step/start":
			r.Summary = fmt.Sprintf("step %d starts", step)
			stepStart = r.Time
			t.spans[stepID(turn, step)] = span{start: r.Time}
		case "step/end":
			r.Summary = fmt.Sprintf("step %d ends", step)
			took(stepStart, "step")
			sp := t.spans[stepID(turn, step)]
			sp.end = r.Time
			t.spans[stepID(turn, step)] = sp
			stepStart = 0
		case "user/message":
			r.message = true
			if firstUser < 0 && turn != 0 && string(ev.SurfaceOp) == `"append"` {
				firstUser = ev.Seq
			}
			if string(ev.SurfaceOp) == `"append"` { // not a compaction's summary
				next := &pending // the turn's first user message is the next message of the boundaries before it
				if turn == 0 {
					next = &boundaries // one between turns (an edit-then-fork's)
				}
				for _, bi := range *next {
					t.Rows[bi].Next = ev.Seq
				}
				*next = nil
			}
		case "assistant/message":
			r.message = true
			if run := t.lastRun(ev.Seq, turn, step); run != nil { // the message collapses its stream
				r.Stream = run.Stream
				t.Rows = t.Rows[:len(t.Rows)-1]
				took(r.Stream.Start, "stream")
			}
			if v, ok := session.LookupJSON(ev.Data, "interrupted"); ok && string(v) == "true" {
				r.Marks = append(r.Marks, Mark{Class: "bad", Text: "interrupted", Seq: -1})
			}
		case "tool/call":
			r.Summary = d.Name + "(" + argsText(d.Args) + ")"
			calls[d.CallID] = len(t.Rows)
			callNames[d.CallID] = d.Name
			callTimes[d.CallID] = r.Time
		case "tool/result":
			var m message
			_ = json.Unmarshal(session.WellFormed(d.Message), &m)
			callID := m.Source.CallID
			isErr := false
			for _, b := range blocks(m.Content) {
				if b.Type == "tool-result" {
					if callID == "" {
						callID = b.ToolCallID
					}
					isErr = isErr || b.IsError
				}
			}
			r.message = true
			if ci, ok := calls[callID]; ok {
				r.Marks = append(r.Marks, Mark{Class: "ok", Text: "result of " + callNames[callID] + " (call)", Seq: t.Rows[ci].Seq})
				took(callTimes[callID], "call")
				t.Rows[ci].Marks = append(t.Rows[ci].Marks, Mark{Class: "ok", Text: "result", Seq: ev.Seq})
				results[callID] = ev.Seq
				delete(calls, callID)
			} else if _, dup := results[callID]; dup {
				r.Marks = append(r.Marks, Mark{Class: "warn", Text: fmt.Sprintf("second result for callId %q", callID), Seq: results[callID]})
			} else {
				r.Marks = append(r.Marks, Mark{Class: "bad", Text: fmt.Sprintf("orphan: no tool/call with callId %q", callID), Seq: -1})
			}
			if d.Error != nil && (d.Error.Code == "TOOL_NOT_STARTED" || d.Error.Code == "TOOL_OUTCOME_UNKNOWN") {
				r.Marks = append(r.Marks, Mark{Class: "bad", Text: "interrupted: synthetic result " + d.Error.Code, Seq: -1})
			} else if isErr || d.Error != nil {
				r.Marks = append(r.Marks, Mark{Class: "warn", Text: "error result", Seq: -1})
			}
		case "session/end-seed":
			r.Summary = "end of seed: this lifecycle's own writes begin"
			r.Marks = append(r.Marks, Mark{Class: "info", Text: "end-seed", Seq: -1})
		case "session/title":
			t, cut := projector.CapText(d.Title, projector.MaxTitleViewBytes)
			r.Summary = "title: " + t
			if cut {
				r.Summary += fmt.Sprintf(" (%d bytes)", len(d.Title))
			}
		case "todo/write":
			r.Summary = "todos: " + cut(string(d.Todos), summaryRunes)
		default:
			r.Summary = cut(string(ev.Data), summaryRunes)
		}
		if op := replaceOp(ev.SurfaceOp); op != nil {
			var srcs []int64
			_ = json.Unmarshal(ev.SourceEventSeqs, &srcs)
			r.Marks = append(r.Marks, Mark{Class: "info", Text: fmt.Sprintf("compaction: replaces nodes %d..%d (sourceEventSeqs %s)", op.Start, op.End, seqList(srcs)), Seq: op.Start})
		}
		t.Rows = append(t.Rows, r)
		if ev.Type == "turn/end" {
			for cid, ci := range calls { // calls of the ended turn that never got a result
				if t.Rows[ci].Turn == turn {
					t.Rows[ci].Marks = append(t.Rows[ci].Marks, Mark{Class: "bad", Text: "orphan: no result before the turn ended", Seq: -1})
					delete(calls, cid)
				}
			}
			turn, step = 0, 0
			firstUser = -1
			pending = nil
		}
		if ev.Type == "step/end" {
			step = 0
		}
	}
	for i := range t.Rows {
		if r := &t.Rows[i]; r.Stream != nil {
			r.Stream.describe()
			if r.Type == "assistant/chunk" {
				r.Summary = fmt.Sprintf("%d streamed chunks (%s), about %d characters, without an assistant/message", r.Stream.Chunks, r.Stream.Kinds, r.Stream.Chars)
			}
		}
	}
	for _, ci := range calls {
		t.Rows[ci].Marks = append(t.Rows[ci].Marks, Mark{Class: "warn", Text: "no result yet", Seq: -1})
	}
	t.OpenTurn = turn
	if turn != 0 && len(t.Rows) > 0 {
		last := &t.Rows[len(t.Rows)-1]
		last.ForkRefusal = OpenTurnRefusal(id, t.LastSeq, turn)
	}
	return t
}

// OpenTurnRefusal is the reference's OPEN_TURN text for a fork at boundary inside open turn turn.
func OpenTurnRefusal(id string, boundary, turn int64) string {
	return fmt.Sprintf("fork boundary %d in session \"%s\" ends inside open turn %d", boundary, id, turn)
}

// lastRun returns the last row when it is a chunk run of turn and step that ends at seq-1.
func (t *Timeline) lastRun(seq, turn, step int64) *Row {
	if n := len(t.Rows); n > 0 {
		if r := &t.Rows[n-1]; r.Type == "assistant/chunk" && r.Last == seq-1 && r.Turn == turn && r.Step == step {
			return r
		}
	}
	return nil
}

// add adds chunk event ev to the run, reading only data.chunk's type and its text (or
// argumentsDelta).
func (st *Stream) add(ev *session.Event) {
	st.To = ev.Seq
	st.Chunks++
	kind := "?"
	if v, ok := session.LookupJSON(ev.Data, "chunk", "type"); ok {
		_ = json.Unmarshal(v, &kind)
	}
	for _, f := range []string{"text", "argumentsDelta"} {
		if v, ok := session.LookupJSON(ev.Data, "chunk", f); ok && len(v) > 1 && v[0] == '"' {
			st.Chars += len(v) - 2
		}
	}
	for i := range st.kinds {
		if st.kinds[i].kind == kind {
			st.kinds[i].n++
			return
		}
	}
	st.kinds = append(st.kinds, chunkKind{kind, 1})
}

// describe sets Kinds.
func (st *Stream) describe() {
	parts := make([]string, len(st.kinds))
	for i, k := range st.kinds {
		parts[i] = fmt.Sprintf("%s ×%d", k.kind, k.n)
	}
	st.Kinds = strings.Join(parts, ", ")
}

type replace struct {
	Op         string `json:"op"`
	Start, End int64
}

func replaceOp(raw json.RawMessage) *replace {
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	var r replace
	if json.Unmarshal(raw, &r) != nil || r.Op != "replace" {
		return nil
	}
	return &r
}

func reasonKind(raw json.RawMessage) string {
	var r struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(raw, &r) != nil || r.Kind == "" {
		return "unknown reason"
	}
	return r.Kind
}

func timeMs(n json.Number) int64 {
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, _ := n.Float64()
	return int64(f)
}

// blocks decodes a message's content: an array of blocks, or a string (one text block).
func blocks(content json.RawMessage) []block {
	var bs []block
	if json.Unmarshal(session.WellFormed(content), &bs) == nil {
		return bs
	}
	var s string
	if json.Unmarshal(session.WellFormed(content), &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	return nil
}

// summarize is a message's text on one line: text blocks, then [tool-call name] and the like.
func summarize(msg json.RawMessage) string {
	var m message
	if json.Unmarshal(session.WellFormed(msg), &m) != nil {
		return cut(string(msg), summaryRunes)
	}
	return cut(strings.Join(blockTexts(blocks(m.Content)), " "), summaryRunes)
}

func blockTexts(bs []block) []string {
	var parts []string
	for _, b := range bs {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "reasoning":
			parts = append(parts, "[reasoning] "+b.Text)
		case "tool-call":
			parts = append(parts, "[tool-call "+b.Name+"("+argsText(b.Arguments)+")]")
		case "tool-result":
			inner := blockTexts(blocks(b.Content))
			parts = append(parts, strings.Join(inner, " "))
		case "image":
			parts = append(parts, "[image]")
		default:
			parts = append(parts, "["+b.Type+"]")
		}
	}
	return parts
}

// argsText is a tool call's arguments: the raw JSON text they are stored as, or their JSON.
func argsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func seqList(seqs []int64) string {
	if len(seqs) > 12 {
		return fmt.Sprintf("%v … (%d seqs)", seqs[:12], len(seqs))
	}
	return fmt.Sprint(seqs)
}

// cut shortens s to at most n runes, marking the cut.
func cut(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// userText is the text of a user/message event's data (its text blocks, joined by blank lines).
func userText(data json.RawMessage) string {
	var m message
	if json.Unmarshal(session.WellFormed(data), &m) != nil {
		return ""
	}
	var parts []string
	for _, b := range blocks(m.Content) {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}
