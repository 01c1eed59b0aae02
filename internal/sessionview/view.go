// Package sessionview is the view model of `agentlog show`: a session's events folded into turns
// and steps, messages and tool calls (with their results), runs of streamed chunks folded into
// the message they built, usage per step and per turn. The usage, title and turn figures are the projector's own units
// folded over the events read, the message texts the session package's: nothing here re-derives
// what those define. Builder takes events in seq order and
// reports each terminal line as it becomes final; Finish gives the whole View (show --output json).
package sessionview

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
)

// Node is one node of the view: a turn, a step, or an item of either (kind user, assistant,
// stream, tool, event). Seq..LastSeq are its events (a turn's turn/start to turn/end, an
// assistant message's first chunk to the message, a tool call to its result); Time is its first
// event's (Unix ms) and DurationMs the time to its last, for turns, steps and tool calls with a
// result. Text is cut to the view's limit unless --full (Cut says so; TextRunes is its length).
type Node struct {
	Kind       string   `json:"kind"`
	Seq        int64    `json:"seq"`
	LastSeq    int64    `json:"lastSeq"`
	Time       int64    `json:"time"`
	DurationMs *int64   `json:"durationMs,omitempty"`
	Turn       int64    `json:"turn,omitempty"`
	Step       int64    `json:"step,omitempty"`
	Type       string   `json:"type,omitempty"` // the event type of an event item
	Text       string   `json:"text,omitempty"`
	TextRunes  int      `json:"textRunes,omitempty"`
	Cut        bool     `json:"cut,omitempty"`
	Chunks     int      `json:"chunks,omitempty"` // streamed chunks folded into it
	Reasoning  int      `json:"reasoningRunes,omitempty"`
	Calls      []string `json:"calls,omitempty"` // tool calls an assistant message asks for
	Tool       string   `json:"tool,omitempty"`
	CallID     string   `json:"callId,omitempty"`
	Arguments  string   `json:"arguments,omitempty"`
	Result     *Text    `json:"result,omitempty"`
	ResultSeq  *int64   `json:"resultSeq,omitempty"`
	Error      bool     `json:"error,omitempty"` // an error result
	Reason     string   `json:"reason,omitempty"`
	Inherited  bool     `json:"inherited,omitempty"` // from a fork's seed (seq < seedLength)
	Usage      *Usage   `json:"usage,omitempty"`
	Marks      []string `json:"marks,omitempty"` // compaction, repair, interrupted, end-seed, orphan
	Children   []*Node  `json:"children,omitempty"`

	start int64 // time of its first event, for durations
	usage projector.UsageState
}

// Text is a text cut to the view's limit.
type Text struct {
	Text  string `json:"text"`
	Runes int    `json:"runes"`
	Cut   bool   `json:"cut,omitempty"`
}

// Usage is the usage unit's view of a turn's or step's events: its totals, split into the
// session's own and what a fork inherited.
type Usage = projector.UsageView

// View is the whole view (`show --output json`): the session's header, the units' figures over
// the whole log, and the nodes (turns, and items outside any turn).
type View struct {
	Session       string               `json:"session"`
	Title         *string              `json:"title"`
	CreatedAt     int64                `json:"createdAt"`
	Cwd           string               `json:"cwd,omitempty"`
	CwdRestorable bool                 `json:"cwdRestorable"`
	ParentSession string               `json:"parentSession,omitempty"`
	SeedLength    *int64               `json:"seedLength,omitempty"`
	LastSeq       int64                `json:"lastSeq"`
	Events        int64                `json:"events"`
	Turns         projector.TurnsState `json:"turns"`
	Usage         Usage                `json:"usage"`
	Compactions   int                  `json:"compactions"`
	Repairs       int                  `json:"repairs"`
	Nodes         []*Node              `json:"nodes"`
}

// Builder folds events into a View, one at a time, and reports each line of the
// terminal view as it becomes final (for --follow).
type Builder struct {
	v      *View
	hdr    session.Header
	limit  int // runes a text is cut to (0: none)
	emit   func(Line)
	turn   *Node
	step   *Node
	run    *Node            // a run of streamed chunks not yet folded
	runTxt strings.Builder  // its text deltas
	calls  map[string]*Node // open tool calls by callId
	title  projector.TitleState
	turns  projector.TurnsState
	usage  projector.UsageState
	seed   int64
}

// Line is one line of the terminal view: a node's start or end, at depth (0 top level).
type Line struct {
	Node  *Node
	Depth int
	End   bool // the end of a turn or step, or a tool call's result
}

// NewBuilder starts the view of the session of header h: texts cut to limit runes (0: none), each
// final terminal line handed to emit.
func NewBuilder(h session.Header, limit int, emit func(Line)) *Builder {
	b := &Builder{hdr: h, limit: limit, emit: emit, calls: map[string]*Node{}}
	b.v = &View{Session: h.ID, CreatedAt: h.CreatedAt, Cwd: h.Cwd, CwdRestorable: session.CwdRestorable(h.Cwd),
		ParentSession: h.ParentSession, SeedLength: h.SeedLength, LastSeq: -1, Nodes: []*Node{}}
	b.title = projector.TitleUnit.Init()
	b.turns = projector.TurnsUnit.InitSession(h)
	b.usage = projector.UsageUnit.InitSession(h)
	if h.SeedLength != nil {
		b.seed = *h.SeedLength
	}
	return b
}

// cut cuts s to the view's limit.
func (b *Builder) cut(s string) Text {
	n := utf8.RuneCountInString(s)
	if b.limit <= 0 || n <= b.limit {
		return Text{Text: s, Runes: n}
	}
	return Text{Text: session.CutRunes(s, b.limit), Runes: n, Cut: true}
}

func (b *Builder) setText(n *Node, s string) {
	t := b.cut(s)
	n.Text, n.TextRunes, n.Cut = t.Text, t.Runes, t.Cut
}

// depth is the depth of a new item: under the open step, else the open turn, else the top.
func (b *Builder) depth() int {
	switch {
	case b.step != nil:
		return 2
	case b.turn != nil:
		return 1
	}
	return 0
}

// place adds an item under the open step, turn, or at the top, and emits its line.
func (b *Builder) place(n *Node) {
	switch {
	case b.step != nil:
		b.step.Children = append(b.step.Children, n)
	case b.turn != nil:
		b.turn.Children = append(b.turn.Children, n)
	default:
		b.v.Nodes = append(b.v.Nodes, n)
	}
	b.emit(Line{Node: n, Depth: b.depth()})
}

// flushRun emits a run of chunks that no assistant/message followed (a stream cut off).
func (b *Builder) flushRun() {
	if b.run == nil {
		return
	}
	r := b.run
	b.run = nil
	b.setText(r, b.runTxt.String())
	r.Marks = append(r.Marks, "no assistant/message followed (stream cut off)")
	b.place(r)
}

// unitApply folds ev into a unit's state with the projector's own unit; a refusal (data the unit
// cannot read) keeps the state, as the projector would stop only that unit.
func unitApply[S any](d projector.Def[S], s S, ev session.Event) S {
	for _, t := range d.Reads {
		if t == ev.Type {
			var next S
			var err error
			if d.Apply != nil {
				next, err = d.Apply(s, ev)
			} else {
				sc := session.Scan(ev)
				next, err = d.ApplyScanned(s, &sc)
			}
			if err == nil {
				return next
			}
			return s
		}
	}
	return s
}

// Add folds the log's next event into the view.
func (b *Builder) Add(ev session.Event) {
	v := b.v
	v.LastSeq, v.Events = ev.Seq, ev.Seq+1
	b.title = unitApply(projector.TitleUnit, b.title, ev)
	b.turns = unitApply(projector.TurnsUnit, b.turns, ev)
	b.usage = unitApply(projector.UsageUnit, b.usage, ev)
	if b.turn != nil {
		b.turn.usage = unitApply(projector.UsageUnit, b.turn.usage, ev)
	}
	if b.step != nil {
		b.step.usage = unitApply(projector.UsageUnit, b.step.usage, ev)
	}
	t := timeMsOf(ev.Time)
	inherited := ev.Seq < b.seed
	if ev.Type == "assistant/chunk" {
		if b.run == nil {
			b.run = &Node{Kind: "stream", Seq: ev.Seq, Time: t, Turn: turnOf(ev.Data), Step: stepOf(ev.Data), Inherited: inherited}
			b.runTxt.Reset()
		}
		b.run.LastSeq = ev.Seq
		b.run.Chunks++
		if ct, ok := session.LookupJSON(ev.Data, "chunk", "type"); ok && session.StringIs(ct, "text-delta") {
			if tx, ok := session.LookupJSON(ev.Data, "chunk", "text"); ok {
				var s string
				if json.Unmarshal(tx, &s) == nil && (b.limit <= 0 || b.runTxt.Len() < 4*b.limit) {
					b.runTxt.WriteString(s)
				}
			}
		}
		return
	}
	if ev.Type != "assistant/message" {
		b.flushRun()
	}
	n := &Node{Seq: ev.Seq, LastSeq: ev.Seq, Time: t, Inherited: inherited, start: t}
	if op := replaceSpan(ev.SurfaceOp); op != "" {
		n.Marks = append(n.Marks, "compaction: replaces nodes "+op)
		v.Compactions++
	}
	switch ev.Type {
	case "turn/start":
		b.closeStep(ev.Seq, t)
		b.closeTurn(ev.Seq, t, "")
		n.Kind, n.Turn = "turn", turnOf(ev.Data)
		n.usage = projector.UsageUnit.InitSession(b.hdr)
		v.Nodes = append(v.Nodes, n)
		b.emit(Line{Node: n, Depth: 0})
		b.turn = n
	case "turn/end":
		b.closeStep(ev.Seq, t)
		reason := ""
		if k, ok := session.LookupJSON(ev.Data, "reason", "kind"); ok {
			_ = json.Unmarshal(k, &reason)
		}
		if b.turn == nil { // a turn/end without its start: an item of its own
			n.Kind, n.Type, n.Reason, n.Text = "event", ev.Type, reason, reason
			b.place(n)
			return
		}
		if reason == "interrupted" {
			b.turn.Marks = append(b.turn.Marks, "repair: closed by crash repair (interrupted)")
			v.Repairs++
		}
		b.closeTurn(ev.Seq, t, reason)
	case "step/start":
		b.closeStep(ev.Seq, t)
		n.Kind, n.Turn, n.Step = "step", turnOf(ev.Data), stepOf(ev.Data)
		n.usage = projector.UsageUnit.InitSession(b.hdr)
		b.place(n)
		b.step = n
	case "step/end":
		b.closeStep(ev.Seq, t)
	case "user/message":
		n.Kind = "user"
		b.setText(n, session.MessageText(ev.Data))
		b.place(n)
	case "assistant/message":
		n.Kind = "assistant"
		n.Turn, n.Step = turnOf(ev.Data), stepOf(ev.Data)
		if b.run != nil && b.run.Turn == n.Turn && b.run.Step == n.Step { // the message folds its stream
			n.Seq, n.Time, n.Chunks, n.start = b.run.Seq, b.run.Time, b.run.Chunks, b.run.Time
			b.run = nil
		} else {
			b.flushRun()
		}
		msg, _ := session.LookupJSON(ev.Data, "message")
		b.setText(n, session.MessageText(msg))
		n.Reasoning, n.Calls = assistantExtras(msg)
		if iv, ok := session.LookupJSON(ev.Data, "interrupted"); ok && string(iv) == "true" {
			n.Marks = append(n.Marks, "interrupted")
		}
		b.place(n)
	case "tool/call":
		var d struct {
			CallID    string          `json:"callId"`
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		_ = json.Unmarshal(session.WellFormed(ev.Data), &d)
		n.Kind, n.Tool, n.CallID = "tool", d.Name, d.CallID
		n.Arguments = b.cut(argumentsText(d.Arguments)).Text
		b.calls[d.CallID] = n
		b.place(n)
	case "tool/result":
		msg, _ := session.LookupJSON(ev.Data, "message")
		callID := ""
		if c, ok := session.LookupJSON(msg, "source", "callId"); ok {
			_ = json.Unmarshal(c, &callID)
		}
		res := b.cut(session.MessageText(msg))
		isErr := resultIsError(ev.Data, msg)
		var marks []string
		if code := syntheticResult(ev.Data); code != "" {
			marks = append(marks, "repair: synthetic result "+code)
			v.Repairs++
		}
		call, ok := b.calls[callID]
		if !ok { // an orphan result: an item of its own
			n.Kind, n.CallID, n.Result, n.Error = "tool", callID, &res, isErr
			n.Marks = append(n.Marks, append(marks, fmt.Sprintf("orphan: no tool/call with callId %q", callID))...)
			b.place(n)
			return
		}
		delete(b.calls, callID)
		seq := ev.Seq
		call.Result, call.ResultSeq, call.Error, call.LastSeq = &res, &seq, isErr, ev.Seq
		call.Marks = append(call.Marks, n.Marks...)
		call.Marks = append(call.Marks, marks...)
		d := t - call.start
		call.DurationMs = &d
		b.emit(Line{Node: call, Depth: b.depth(), End: true})
	case "session/end-seed":
		n.Kind, n.Type = "event", ev.Type
		n.Marks = append(n.Marks, "end-seed: this lifecycle's own writes begin")
		b.place(n)
	default:
		n.Kind, n.Type = "event", ev.Type
		b.setText(n, eventSummary(ev))
		if ev.Ignorable {
			n.Marks = append(n.Marks, "ignorable")
		}
		b.place(n)
	}
}

// closeStep ends the open step at the event seq (time t).
func (b *Builder) closeStep(seq, t int64) {
	s := b.step
	if s == nil {
		return
	}
	b.flushRun()
	b.step = nil
	s.LastSeq = seq
	d := t - s.start
	s.DurationMs = &d
	u := projector.UsageUnit.View(s.usage).(projector.UsageView)
	if u.Steps > 0 {
		s.Usage = &u
	}
	depth := 0
	if b.turn != nil {
		depth = 1
	}
	b.emit(Line{Node: s, Depth: depth, End: true})
}

// closeTurn ends the open turn at the event seq (time t), with the turn/end's reason ("" when a
// turn/start came first: the turn never ended).
func (b *Builder) closeTurn(seq, t int64, reason string) {
	tn := b.turn
	if tn == nil {
		return
	}
	b.flushRun()
	b.turn = nil
	if reason == "" {
		tn.Marks = append(tn.Marks, "no turn/end before the next turn/start")
		return
	}
	tn.LastSeq, tn.Reason = seq, reason
	d := t - tn.start
	tn.DurationMs = &d
	u := projector.UsageUnit.View(tn.usage).(projector.UsageView)
	tn.Usage = &u
	b.emit(Line{Node: tn, Depth: 0, End: true})
}

// Finish completes the view of the events added so far (a pending stream is shown; an open turn
// stays open).
func (b *Builder) Finish() *View {
	b.flushRun()
	v := b.v
	v.Title = b.title.Title
	v.Turns = b.turns
	v.Usage = projector.UsageUnit.View(b.usage).(projector.UsageView)
	return v
}

// replaceSpan is "a..b" for a surfaceOp replace, "" otherwise.
func replaceSpan(op json.RawMessage) string {
	if len(op) == 0 || op[0] != '{' {
		return ""
	}
	var r struct {
		Op         string `json:"op"`
		Start, End int64
	}
	if json.Unmarshal(op, &r) != nil || r.Op != "replace" {
		return ""
	}
	return fmt.Sprintf("%d..%d", r.Start, r.End)
}

// assistantExtras reads what an assistant message holds besides its text: the runes of its
// reasoning blocks and the names of the tools it calls.
func assistantExtras(msg json.RawMessage) (reasoning int, calls []string) {
	var m struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
			Name string `json:"name"`
		} `json:"content"`
	}
	_ = json.Unmarshal(session.WellFormed(msg), &m)
	for _, c := range m.Content {
		switch c.Type {
		case "reasoning":
			reasoning += utf8.RuneCountInString(c.Text)
		case "tool-call":
			calls = append(calls, c.Name)
		}
	}
	return reasoning, calls
}

// argumentsText is a tool call's arguments as one line: a JSON string's text, else the JSON.
func argumentsText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// resultIsError reports whether a tool/result is an error: data.error, or a tool-result block
// with isError (the tools unit's rule).
func resultIsError(data, msg json.RawMessage) bool {
	if e, ok := session.LookupJSON(data, "error"); ok && string(e) != "null" {
		return true
	}
	var m struct {
		Content []struct {
			IsError bool `json:"isError"`
		} `json:"content"`
	}
	_ = json.Unmarshal(session.WellFormed(msg), &m)
	for _, c := range m.Content {
		if c.IsError {
			return true
		}
	}
	return false
}

// syntheticResult is the code of a crash-repair tool result (TOOL_NOT_STARTED,
// TOOL_OUTCOME_UNKNOWN), "" for another.
func syntheticResult(data json.RawMessage) string {
	c, ok := session.LookupJSON(data, "error", "code")
	if !ok {
		return ""
	}
	var code string
	_ = json.Unmarshal(c, &code)
	if code == "TOOL_NOT_STARTED" || code == "TOOL_OUTCOME_UNKNOWN" {
		return code
	}
	return ""
}

// eventSummary is a one-line summary of an event that is not a message, a tool call or a turn
// or step boundary.
func eventSummary(ev session.Event) string {
	switch ev.Type {
	case "request/header":
		p, _ := session.LookupJSON(ev.Data, "header", "config", "provider")
		m, _ := session.LookupJSON(ev.Data, "header", "config", "model")
		return strings.Trim(string(p), `"`) + "/" + strings.Trim(string(m), `"`)
	case "session/title":
		if t, ok := session.LookupJSON(ev.Data, "title"); ok {
			var s string
			_ = json.Unmarshal(t, &s)
			return s
		}
	case "todo/write":
		if t, ok := session.LookupJSON(ev.Data, "todos"); ok {
			var todos []json.RawMessage
			_ = json.Unmarshal(t, &todos)
			return strconv.Itoa(len(todos)) + " todos"
		}
	}
	return string(session.WellFormed(ev.Data))
}

func turnOf(data json.RawMessage) int64 { return intField(data, "turn") }
func stepOf(data json.RawMessage) int64 { return intField(data, "step") }

func intField(data json.RawMessage, key string) int64 {
	v, ok := session.LookupJSON(data, key)
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0
	}
	return int64(f)
}

// timeMsOf is an event's time in Unix ms (0 when it is not a number).
func timeMsOf(t json.Number) int64 {
	f, err := strconv.ParseFloat(string(t), 64)
	if err != nil {
		return 0
	}
	return int64(f)
}
