package projector

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/agentlog/agentlog/session"
)

// Keys of the built-in projection units.
const (
	UnitMessages   = "messages" // surface nodes, replaceGeneration (the log's rules)
	UnitTranscript = "transcript"
	UnitTitle      = "title"
	UnitTodos      = "todos"
	UnitUsage      = "usage"
	UnitTools      = "tools"
	UnitTurns      = "turns"
)

// Builtins returns the built-in units, "messages" first:
//
//   - messages (State): the surface (nodes, replaceGeneration), transcript and open turn, folded
//     with session.Surface.Apply. It is the gate: it checks every event against the log's rules
//     before any other unit sees it, and a refusal stops every unit of the session.
//   - transcript (TranscriptState): the append-origin surface events (the reference's transcript).
//   - title (TitleState): from session/title; the latest wins.
//   - todos (TodosState): from todo/write; the whole list, the latest wins.
//   - usage (UsageState): token totals; per (turn, step) the last usage chunk
//     (assistant/chunk {chunk:{type:"usage"}}) wins, as in the reference's BlockAssembler, and
//     assistant/message.usage counts only for a step that streamed no usage chunk.
//   - tools (ToolsState): tool/call and tool/result counts by tool name; a result is an error when
//     it carries data.error or a tool-result block with isError true.
//   - turns (TurnsState): the turn/start count, the open turn, the last turn/end reason.
//
// usage and turns also split their figures into the session's own (events at seq >= the header's
// seedLength; every event of a session that is not a fork) and the inherited (a fork's seed).
// Text in the states is read as the reference reads a log: ill-formed UTF-8 becomes U+FFFD.
func Builtins() []Definer {
	return []Definer{
		Definition{Key: UnitMessages, StateVersion: messagesStateVersion, gate: true,
			view: func(s any) any { return s },
			decode: func(raw []byte) (any, error) {
				var st State
				if err := json.Unmarshal(raw, &st); err != nil {
					return nil, err
				}
				return st, nil
			}},
		TranscriptUnit, TitleUnit, TodosUnit, UsageUnit, ToolsUnit, TurnsUnit,
	}
}

// TranscriptState is the transcript unit's state: the seqs of append-origin surface events.
type TranscriptState struct {
	Seqs []int64 `json:"seqs"`
}

// TranscriptUnit keeps the transcript: every accepted surface event with surfaceOp "append".
var TranscriptUnit = Def[TranscriptState]{
	Key: UnitTranscript, StateVersion: 1,
	Reads: []string{"user/message", "assistant/message", "tool/result"},
	Init:  func() TranscriptState { return TranscriptState{Seqs: []int64{}} },
	ApplyScanned: func(s TranscriptState, ev *session.Scanned) (TranscriptState, error) {
		if !session.StringIs(bytes.Trim(ev.SurfaceOp, " \t\r\n"), "append") {
			return s, nil
		}
		return TranscriptState{Seqs: append(s.Seqs[:len(s.Seqs):len(s.Seqs)], ev.Seq)}, nil
	},
}

// TitleState is the title unit's state: the latest session/title event's title, its seq (-1:
// none) and its source.
type TitleState struct {
	Title  *string         `json:"title"`
	Seq    int64           `json:"seq"`
	Source json.RawMessage `json:"source,omitempty"`
}

// Caps of the text a built-in unit's view carries in one field, in bytes: a session's views are
// shown in lists (the inspector's sessions list and summary, its projections panel), where a
// 600 KB title made a 1.8 MB page. Longer text is cut on a character boundary and ends with "…";
// the field's whole length is given beside it (titleBytes, contentBytes). The stored state keeps
// the whole text (the unit's state, and its event in the log).
const (
	MaxTitleViewBytes = 256
	MaxTodoViewBytes  = 1024
)

// CapText returns s cut to at most max bytes on a character boundary with "…" appended (the
// ellipsis beyond max), and whether it was cut.
func CapText(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…", true
}

// TitleView is the title unit's view: its state, the title capped at MaxTitleViewBytes
// (TitleBytes is then the whole title's length).
type TitleView struct {
	Title      *string         `json:"title"`
	Seq        int64           `json:"seq"`
	Source     json.RawMessage `json:"source,omitempty"`
	TitleBytes int             `json:"titleBytes,omitempty"`
}

// TitleUnit keeps the latest session/title {title, messageSeqs, source}; its view caps the title
// (TitleView).
var TitleUnit = Def[TitleState]{
	Key: UnitTitle, StateVersion: 1, Reads: []string{"session/title"},
	View: func(s TitleState) any {
		v := TitleView{Title: s.Title, Seq: s.Seq, Source: s.Source}
		if s.Title != nil {
			if t, cut := CapText(*s.Title, MaxTitleViewBytes); cut {
				v.Title, v.TitleBytes = &t, len(*s.Title)
			}
		}
		return v
	},
	Init: func() TitleState { return TitleState{Seq: -1} },
	Apply: func(s TitleState, ev session.Event) (TitleState, error) {
		var d struct {
			Title  *string         `json:"title"`
			Source json.RawMessage `json:"source"`
		}
		if err := json.Unmarshal(session.WellFormed(ev.Data), &d); err != nil || d.Title == nil {
			return s, unitDataError(ev, `{title: string, ...}`, err)
		}
		return TitleState{Title: d.Title, Seq: ev.Seq, Source: d.Source}, nil
	},
}

// TodosState is the todos unit's state: the latest todo/write list ([{content, status}]) and its
// seq (-1: none).
type TodosState struct {
	Todos json.RawMessage `json:"todos"`
	Seq   int64           `json:"seq"`
}

// TodosUnit keeps the latest todo/write list (the whole list; the last write wins).
var TodosUnit = Def[TodosState]{
	Key: UnitTodos, StateVersion: 1, Reads: []string{"todo/write"},
	Init: func() TodosState { return TodosState{Todos: json.RawMessage(`[]`), Seq: -1} },
	Apply: func(s TodosState, ev session.Event) (TodosState, error) {
		var d struct {
			Todos json.RawMessage `json:"todos"`
		}
		var probe []json.RawMessage
		if err := json.Unmarshal(session.WellFormed(ev.Data), &d); err != nil || json.Unmarshal(d.Todos, &probe) != nil || d.Todos[0] != '[' {
			return s, unitDataError(ev, `{todos: [{content, status}]}`, err)
		}
		return TodosState{Todos: d.Todos, Seq: ev.Seq}, nil
	},
	View: func(s TodosState) any {
		return TodosState{Todos: capTodos(s.Todos), Seq: s.Seq}
	},
}

// capTodos is a todo list with each entry's content capped at MaxTodoViewBytes: a cut entry ends
// with "…" and carries contentBytes, the whole content's length. Entries that need no cut are
// kept byte for byte.
func capTodos(todos json.RawMessage) json.RawMessage {
	if len(todos) <= MaxTodoViewBytes {
		return todos
	}
	var entries []json.RawMessage
	if json.Unmarshal(todos, &entries) != nil {
		return todos
	}
	changed := false
	for i, e := range entries {
		var entry map[string]json.RawMessage
		var content string
		if len(e) <= MaxTodoViewBytes || json.Unmarshal(e, &entry) != nil || json.Unmarshal(entry["content"], &content) != nil {
			continue
		}
		t, cut := CapText(content, MaxTodoViewBytes)
		if !cut {
			continue
		}
		entry["content"], _ = json.Marshal(t)
		entry["contentBytes"], _ = json.Marshal(len(content))
		if b, err := json.Marshal(entry); err == nil {
			entries[i], changed = b, true
		}
	}
	if !changed {
		return todos
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return todos
	}
	return b
}

// Usage is token accounting (the reference's TokenUsage), in tokens.
type Usage struct {
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	CacheReadTokens  int64 `json:"cacheReadTokens"`
	CacheWriteTokens int64 `json:"cacheWriteTokens"`
	ReasoningTokens  int64 `json:"reasoningTokens"`
}

func (u Usage) add(v Usage, sign int64) Usage {
	return Usage{
		InputTokens:      u.InputTokens + sign*v.InputTokens,
		OutputTokens:     u.OutputTokens + sign*v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + sign*v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + sign*v.CacheWriteTokens,
		ReasoningTokens:  u.ReasoningTokens + sign*v.ReasoningTokens,
	}
}

// UsageState is the usage unit's state: the totals, the number of steps that reported usage, and
// the step being accounted (its turn and step, whether a usage chunk was seen, and what it counted).
// Own and OwnSteps count the events at seq >= SeedLength (the header's; 0 for a session that is
// not a fork), and CountedOwn whether Count is part of Own.
type UsageState struct {
	Total Usage `json:"total"`
	Steps int64 `json:"steps"`
	Turn  int64 `json:"turn"`
	Step  int64 `json:"step"`
	Chunk bool  `json:"chunk"`
	Count Usage `json:"counted"`

	SeedLength int64 `json:"seedLength"`
	Own        Usage `json:"own"`
	OwnSteps   int64 `json:"ownSteps"`
	CountedOwn bool  `json:"countedOwn"`
}

// UsageView is what the usage unit's queries return: the totals over the whole log, and split
// into the session's own and what a fork inherited with its seed.
type UsageView struct {
	Usage
	Steps      int64       `json:"steps"`
	Own        UsageTotals `json:"own"`
	Inherited  UsageTotals `json:"inherited"`
	SeedLength int64       `json:"seedLength"`
}

// UsageTotals is token usage and the number of steps that reported it.
type UsageTotals struct {
	Usage
	Steps int64 `json:"steps"`
}

// seedLength is h's seedLength, 0 when it has none (every event is the session's own).
func seedLength(h session.Header) int64 {
	if h.SeedLength != nil && *h.SeedLength > 0 {
		return *h.SeedLength
	}
	return 0
}

// UsageUnit sums token usage: for each (turn, step) the last usage chunk wins (as the reference's
// BlockAssembler keeps the last one); assistant/message.usage is the fallback for a step that
// streamed no usage chunk.
//
// An assistant/chunk is a usage chunk when data.chunk.type is the string "usage", read as the
// reference's JSON.parse reads it (names are case-sensitive; the last of repeated names wins);
// every other chunk is ignored without reading further, whatever else its data holds (most chunks
// are text, reasoning and tool-call deltas). StateVersion 2: version 1 decoded every chunk's data
// with encoding/json, so it stopped on a malformed text chunk and matched names case-insensitively.
// StateVersion 3 adds the own and inherited figures (InitSession reads the header's seedLength).
var UsageUnit = Def[UsageState]{
	Key: UnitUsage, StateVersion: 3, Reads: []string{"assistant/chunk", "assistant/message"},
	Init:        func() UsageState { return UsageState{} },
	InitSession: func(h session.Header) UsageState { return UsageState{SeedLength: seedLength(h)} },
	ApplyScanned: func(s UsageState, sc *session.Scanned) (UsageState, error) {
		ev := sc.Event
		if ev.Type == "assistant/chunk" {
			// Most chunks are text, reasoning or tool-call deltas: read only chunk.type for those
			// (located by the event's scan: nothing is parsed).
			if !sc.Field("chunk", "type").IsString("usage") {
				return s, nil
			}
		}
		var d struct {
			Turn  jsInt `json:"turn"`
			Step  jsInt `json:"step"`
			Chunk *struct {
				Type  string `json:"type"`
				Usage *Usage `json:"usage"`
			} `json:"chunk"`
			Usage *Usage `json:"usage"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return s, unitDataError(ev, `{turn, step, chunk|usage}`, err)
		}
		var u *Usage
		fromChunk := false
		switch ev.Type {
		case "assistant/chunk":
			if d.Chunk == nil || d.Chunk.Type != "usage" {
				return s, nil
			}
			if d.Chunk.Usage == nil {
				return s, unitDataError(ev, `{chunk:{type:"usage", usage:{inputTokens, outputTokens, ...}}}`, nil)
			}
			u, fromChunk = d.Chunk.Usage, true
		default:
			u = d.Usage
		}
		if u == nil {
			return s, nil
		}
		own := ev.Seq >= s.SeedLength
		if turn, step := int64(d.Turn), int64(d.Step); s.Steps == 0 || s.Turn != turn || s.Step != step {
			s = UsageState{Total: s.Total, Steps: s.Steps + 1, Turn: turn, Step: step,
				SeedLength: s.SeedLength, Own: s.Own, OwnSteps: s.OwnSteps}
			if own {
				s.OwnSteps++
			}
		} else if s.Chunk && !fromChunk {
			return s, nil // the step's usage chunk already counted
		}
		s.Total = s.Total.add(s.Count, -1).add(*u, 1)
		if s.CountedOwn {
			s.Own = s.Own.add(s.Count, -1)
		}
		if own {
			s.Own = s.Own.add(*u, 1)
		}
		s.Count, s.Chunk, s.CountedOwn = *u, s.Chunk || fromChunk, own
		return s, nil
	},
	View: func(s UsageState) any {
		return UsageView{Usage: s.Total, Steps: s.Steps, SeedLength: s.SeedLength,
			Own:       UsageTotals{Usage: s.Own, Steps: s.OwnSteps},
			Inherited: UsageTotals{Usage: s.Total.add(s.Own, -1), Steps: s.Steps - s.OwnSteps}}
	},
}

// ToolCounts counts one tool's calls, results and error results.
type ToolCounts struct {
	Calls   int64 `json:"calls"`
	Results int64 `json:"results"`
	Errors  int64 `json:"errors"`
}

// ToolsState is the tools unit's state: counts by tool name, and the calls without a result yet
// (callId -> name). A result whose call was not seen counts under the name "".
type ToolsState struct {
	ByName map[string]ToolCounts `json:"byName"`
	Open   map[string]string     `json:"open"`
}

// ToolsUnit counts tool calls, results and errors by tool name. It reads the data as JSON.parse
// does (names case-sensitive, the last of repeated names wins), from what the event's scan
// located: a tool result's output is not parsed. StateVersion 2: version 1 decoded the whole data
// with encoding/json, which matched names case-insensitively.
var ToolsUnit = Def[ToolsState]{
	Key: UnitTools, StateVersion: 2, Reads: []string{"tool/call", "tool/result"},
	Init: func() ToolsState { return ToolsState{ByName: map[string]ToolCounts{}, Open: map[string]string{}} },
	ApplyScanned: func(s ToolsState, sc *session.Scanned) (ToolsState, error) {
		ev := sc.Event
		if ev.Type == "tool/call" {
			callID, ok1, err1 := fieldString(sc.Field("callId"))
			name, ok2, err2 := fieldString(sc.Field("name"))
			if err := cmp.Or(err1, err2); err != nil || !ok1 || !ok2 {
				return s, unitDataError(ev, `{callId: string, name: string, ...}`, err)
			}
			next := cloneTools(s)
			c := next.ByName[name]
			c.Calls++
			next.ByName[name] = c
			next.Open[callID] = name
			return next, nil
		}
		callID, isErr, err := readToolResult(sc)
		if err != nil {
			return s, unitDataError(ev, `{message: {content, source: {callId}}, error?}`, err)
		}
		next := cloneTools(s)
		name := next.Open[callID]
		delete(next.Open, callID)
		c := next.ByName[name]
		c.Results++
		if isErr {
			c.Errors++
		}
		next.ByName[name] = c
		return next, nil
	},
}

// cloneTools is a copy of s that Apply may change.
func cloneTools(s ToolsState) ToolsState {
	next := ToolsState{ByName: maps.Clone(s.ByName), Open: maps.Clone(s.Open)}
	if next.ByName == nil {
		next.ByName = map[string]ToolCounts{}
	}
	if next.Open == nil {
		next.Open = map[string]string{}
	}
	return next
}

// readToolResult reads a tool/result's call id (message.source.callId, else the first tool-result
// block's toolCallId) and whether it is an error (a non-null data.error, or a tool-result block
// with isError true). Values of the wrong type are an error; absent and null ones are empty.
func readToolResult(sc *session.Scanned) (callID string, isErr bool, err error) {
	msg := sc.Field("message")
	if err := wantKind(msg, "message", session.Field.IsObject); err != nil {
		return "", false, err
	}
	source := msg.Get("source")
	if err := wantKind(source, "message.source", session.Field.IsObject); err != nil {
		return "", false, err
	}
	if callID, _, err = fieldString(source.Get("callId")); err != nil {
		return "", false, err
	}
	if e := sc.Field("error"); e.Exists() && !e.IsNull() {
		isErr = true
	}
	content := msg.Get("content")
	if err := wantKind(content, "message.content", session.Field.IsArray); err != nil {
		return "", false, err
	}
	for b := range content.Elems() {
		if err := wantKind(b, "a content block", session.Field.IsObject); err != nil {
			return "", false, err
		}
		typ, _, err := fieldString(b.Get("type"))
		if err != nil {
			return "", false, err
		}
		id, _, err := fieldString(b.Get("toolCallId"))
		if err != nil {
			return "", false, err
		}
		flag := b.Get("isError")
		if err := wantKind(flag, "isError", session.Field.IsBool); err != nil {
			return "", false, err
		}
		if typ == "tool-result" {
			if callID == "" {
				callID = id
			}
			isErr = isErr || flag.IsTrue()
		}
	}
	return callID, isErr, nil
}

// wantKind is nil when f is absent, null or of the kind is tests; else an error naming what.
func wantKind(f session.Field, what string, is func(session.Field) bool) error {
	if !f.Exists() || f.IsNull() || is(f) {
		return nil
	}
	return fmt.Errorf("%s is %s", what, f.Raw()[:min(len(f.Raw()), 40)])
}

// fieldString decodes f as a string, as encoding/json decodes the well-formed text (ill-formed
// UTF-8 and lone surrogates become U+FFFD); ok is false when f is absent or null, err set when
// it is something else.
func fieldString(f session.Field) (s string, ok bool, err error) {
	if !f.Exists() || f.IsNull() {
		return "", false, nil
	}
	if err := json.Unmarshal(session.WellFormed(f.Raw()), &s); err != nil {
		return "", false, err
	}
	return s, true, nil
}

// TurnsState is the turns unit's state: the number of turn/start events, the open turn (nil: none)
// and the reason of the last turn/end (nil: none yet). Count splits into OwnCount, the turns
// started at seq >= SeedLength (the header's; 0 for a session that is not a fork), and
// InheritedCount, those of a fork's seed.
type TurnsState struct {
	Count         int64           `json:"count"`
	OpenTurn      *int64          `json:"openTurn"`
	LastEndReason json.RawMessage `json:"lastEndReason"`

	OwnCount       int64 `json:"ownCount"`
	InheritedCount int64 `json:"inheritedCount"`
	SeedLength     int64 `json:"seedLength"`
}

// TurnsUnit counts turns and keeps the open turn and the last end reason. StateVersion 2 adds
// the own and inherited counts (InitSession reads the header's seedLength).
var TurnsUnit = Def[TurnsState]{
	Key: UnitTurns, StateVersion: 2, Reads: []string{"turn/start", "turn/end"},
	Init: func() TurnsState { return TurnsState{LastEndReason: json.RawMessage("null")} },
	InitSession: func(h session.Header) TurnsState {
		return TurnsState{LastEndReason: json.RawMessage("null"), SeedLength: seedLength(h)}
	},
	Apply: func(s TurnsState, ev session.Event) (TurnsState, error) {
		var d struct {
			Turn   *jsInt          `json:"turn"`
			Reason json.RawMessage `json:"reason"`
		}
		if err := json.Unmarshal(session.WellFormed(ev.Data), &d); err != nil || d.Turn == nil {
			return s, unitDataError(ev, `{turn: integer, reason?}`, err)
		}
		next := s
		if ev.Type == "turn/start" {
			t := int64(*d.Turn)
			next.Count, next.OpenTurn = s.Count+1, &t
			if ev.Seq >= s.SeedLength {
				next.OwnCount++
			} else {
				next.InheritedCount++
			}
			return next, nil
		}
		next.OpenTurn, next.LastEndReason = nil, d.Reason
		if len(d.Reason) == 0 {
			next.LastEndReason = json.RawMessage("null")
		}
		return next, nil
	},
}

// unitDataError is a unit's refusal of an event's data: a *session.Error without the session,
// which the unit does not know (unitError names it).
func unitDataError(ev session.Event, want string, err error) error {
	msg := "data is not " + want
	if err != nil {
		msg += ": " + err.Error()
	}
	return &session.Error{Seq: ev.Seq, Rule: session.RuleUnitData, Reason: msg}
}

// jsInt decodes a JSON number that is an integer in JavaScript's sense: 1, 1.0 and 1e3 alike, as
// the reference reads turn and step numbers (a JS number); a fraction or a value beyond 2^53 is an
// error.
type jsInt int64

func (n *jsInt) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("%s is not a number", b)
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("%s is not a safe integer", b)
	}
	*n = jsInt(f)
	return nil
}
