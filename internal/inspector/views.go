package inspector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
)

// viewLimit is how many entries of the model view and of the transcript a page shows (the last
// ones) unless all are asked for.
const viewLimit = 50

// blockText bounds the characters of one content block shown.
const blockText = 4000

// InlineJSONBytes bounds the bytes of one message's JSON a page carries: a longer one (a 5 MiB
// tool result) is cut there, marked, and its whole event is loaded on demand (eventPath).
const InlineJSONBytes = 64 << 10

// MsgView is one message of the conversation: a model view's message or a transcript entry.
type MsgView struct {
	Seq       int64 // the surface node / transcript event (-1: unknown)
	Role      string
	Blocks    []BlockView
	JSON      string // the message as served (model view only), cut at InlineJSONBytes
	JSONBytes int    // the whole message's size when JSON is cut (0: whole)
	EventURL  string // where the whole event is, when JSON is cut
	Note      string
	NoteClass string
	Time      int64 // Unix ms of its event (0: unknown)
	// EditAt, when >= 0, is the fork boundary before this message: the turn end before the turn
	// this user message opens ("fork from here and edit the next message"); EditText its whole
	// text, the form's starting point.
	EditAt   int64
	EditText string
}

// PlainText is the message's text blocks, joined by blank lines.
func (m MsgView) PlainText() string {
	var parts []string
	for _, b := range m.Blocks {
		if b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// BlockView is one content block: Text, or for a text block of a user or assistant message HTML,
// its markdown rendered and sanitised.
type BlockView struct {
	Type    string
	Text    string
	HTML    template.HTML
	Name    string
	IsError bool
}

// ConvRow is one row of the conversation, the model view and the transcript aligned by seq:
// Kind "both" is a message they share, shown once (Model; the transcript folded into it);
// "diff" is where they differ: the model's entry (Model: a compaction's replace, or nil) beside
// the transcript entries hidden from it (Transcript); "transcript" is an entry of a transcript
// shown without a model view (the projection cannot be read).
type ConvRow struct {
	Seq        int64 // the row's first seq (its anchor, conv-SEQ)
	Kind       string
	Model      *MsgView
	Transcript []MsgView
}

// Views are a session's model view and transcript, aligned by seq into rows.
type Views struct {
	Rows                        []ConvRow // the last viewLimit rows, or all
	RowsTotal                   int
	ModelTotal, TranscriptTotal int
	AsOfSeq                     int64
	Note                        string // why the model view is missing or stale
	Differs                     bool
	DiffNote                    string
	Hidden                      int // transcript entries the model does not see
	HasModel                    bool
}

// Shown is the number of rows on the page.
func (v Views) Shown() int { return len(v.Rows) }

func msgView(seq int64, raw []byte) MsgView {
	v := MsgView{Seq: seq, JSON: string(raw), EditAt: -1}
	if len(raw) > InlineJSONBytes {
		n := InlineJSONBytes
		for n > InlineJSONBytes-utf8.UTFMax && !utf8.RuneStart(raw[n]) {
			n--
		}
		v.JSON, v.JSONBytes = string(raw[:n]), len(raw)
	}
	var m message
	if json.Unmarshal(session.WellFormed(raw), &m) != nil {
		v.Role = "?"
		return v
	}
	v.Role = m.Role
	prose := m.Source.Kind != "tool" // a tool result's text is output, not markdown
	for _, b := range blocks(m.Content) {
		bv := BlockView{Type: b.Type, Text: b.Text, Name: b.Name, IsError: b.IsError}
		switch b.Type {
		case "tool-call":
			bv.Text = argsText(b.Arguments)
			if bv.Name == "" {
				bv.Name = b.ID
			}
		case "tool-result":
			bv.Name = b.ToolCallID
			bv.Text = strings.Join(blockTexts(blocks(b.Content)), "\n")
		case "image":
			bv.Text = "[image]"
		}
		bv.Text = cut(bv.Text, blockText)
		if prose && (b.Type == "text" || b.Type == "reasoning") && (m.Role == "user" || m.Role == "assistant") {
			bv.HTML = renderMarkdown(bv.Text)
		}
		v.Blocks = append(v.Blocks, bv)
	}
	return v
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// buildViews aligns the served messages (the model view) with the transcript (the append-origin
// surface events, derived from the events read with the projector's own session.DeriveMessages)
// by seq. A served message is paired with its surface node by deriving each node from the log (a
// node without a message is an assistant message with empty content), from the end. Rows are in
// surface order: a message of both views is one row; a compaction's replace is a row at the
// first seq it stands for, beside the transcript entries it hides. Only the rows shown (the last
// viewLimit unless all) are derived and rendered.
func buildViews(events []session.Event, reply *client.MessagesReply, note string, all bool) Views {
	v := Views{Note: note, AsOfSeq: -1, HasModel: reply != nil}
	cache := map[int64]json.RawMessage{}
	derive := func(seq int64) (json.RawMessage, bool) {
		if m, ok := cache[seq]; ok {
			return m, m != nil
		}
		if seq < 0 || seq >= int64(len(events)) || events[seq].Seq != seq {
			return nil, false
		}
		ms, err := session.DeriveMessages([]int64{seq}, func(int64) (session.Event, error) { return events[seq], nil })
		var m json.RawMessage
		if err == nil && len(ms) > 0 {
			m = ms[0]
		}
		cache[seq] = m
		return m, m != nil
	}
	// hasMessage: user/message and tool/result always derive one; assistant/message unless its
	// content is empty.
	hasMessage := func(seq int64) bool {
		if seq >= int64(len(events)) {
			return true // past the events read: as served
		}
		if seq >= 0 && events[seq].Type != "assistant/message" {
			return true
		}
		_, ok := derive(seq)
		return ok
	}
	// replacedBy: a node a compaction hid -> the replace that stands for it; sources: a replace's
	// sourceEventSeqs.
	replacedBy := map[int64]int64{}
	sources := map[int64][]int64{}
	var transcript []int64
	for i := range events {
		ev := &events[i]
		if !session.SurfaceEligible(ev.Type) {
			continue
		}
		if replaceOp(ev.SurfaceOp) != nil {
			var srcs []int64
			_ = json.Unmarshal(ev.SourceEventSeqs, &srcs)
			sources[ev.Seq] = srcs
			for _, s := range srcs {
				replacedBy[s] = ev.Seq
			}
		} else if string(ev.SurfaceOp) == `"append"` {
			transcript = append(transcript, ev.Seq)
		}
	}
	inTranscript := make(map[int64]bool, len(transcript))
	for _, t := range transcript {
		inTranscript[t] = true
	}
	current := map[int64]bool{}
	if reply != nil {
		v.AsOfSeq = reply.AsOfSeq
		v.ModelTotal = len(reply.Messages)
		for _, n := range reply.Nodes {
			current[n] = true
		}
	}

	// The rows, unrendered: key (the first seq), the model node (-1: none), the transcript seqs.
	type row struct {
		key   int64
		node  int64
		trans []int64
	}
	var rows []*row
	groups := map[int64]*row{} // a model-only node -> its row
	if reply != nil {
		for _, n := range reply.Nodes {
			if inTranscript[n] || n >= int64(len(events)) {
				rows = append(rows, &row{key: n, node: n, trans: []int64{n}})
				continue
			}
			r := &row{key: n, node: n}
			for _, s := range sources[n] {
				r.key = min(r.key, s)
			}
			groups[n] = r
			rows = append(rows, r)
		}
	}
	for _, t := range transcript {
		if reply != nil && current[t] {
			continue
		}
		if !hasMessage(t) {
			continue
		}
		v.TranscriptTotal++
		if reply == nil {
			rows = append(rows, &row{key: t, node: -1, trans: []int64{t}})
			continue
		}
		v.Hidden++
		r := replacedBy[t]
		for seen := 0; !current[r] && seen < 64; seen++ { // a replace replaced in turn: the one standing now
			nr, ok := replacedBy[r]
			if !ok {
				break
			}
			r = nr
		}
		if g := groups[r]; g != nil && current[r] {
			g.trans = append(g.trans, t)
			g.key = min(g.key, t)
			continue
		}
		rows = append(rows, &row{key: t, node: -1, trans: []int64{t}})
	}
	if reply != nil {
		for _, n := range reply.Nodes {
			if inTranscript[n] && hasMessage(n) {
				v.TranscriptTotal++
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].key < rows[j].key })
	// Drop the rows without a message (an assistant message with empty content, in both views).
	kept := rows[:0]
	for _, r := range rows {
		if r.node >= 0 && len(r.trans) == 1 && r.trans[0] == r.node && !hasMessage(r.node) {
			continue
		}
		kept = append(kept, r)
	}
	rows = kept
	v.RowsTotal = len(rows)
	first := 0
	if !all {
		first = max(0, len(rows)-viewLimit)
	}
	shown := rows[first:]

	// Pair the served messages with the shown rows' nodes, from the end: each node that derives
	// a message takes the previous one.
	msgOf := map[int64]int{}
	if reply != nil {
		need := map[int64]bool{}
		for _, r := range shown {
			if r.node >= 0 {
				need[r.node] = true
			}
		}
		want := len(need)
		k := len(reply.Messages) - 1
		for i := len(reply.Nodes) - 1; i >= 0 && k >= 0 && want > 0; i-- {
			n := reply.Nodes[i]
			if !hasMessage(n) {
				continue
			}
			if need[n] {
				msgOf[n] = k
				want--
			}
			k--
		}
	}
	entry := func(seq int64) MsgView {
		raw, _ := derive(seq)
		mv := msgView(seq, raw)
		mv.JSON, mv.JSONBytes = "", 0 // the model view carries the JSON; a transcript entry links its event
		mv.Time = timeMs(events[seq].Time)
		return mv
	}
	for _, r := range shown {
		cr := ConvRow{Seq: r.key}
		var model *MsgView
		if r.node >= 0 {
			if k, ok := msgOf[r.node]; ok {
				mv := msgView(r.node, reply.Messages[k])
				if r.node < int64(len(events)) {
					mv.Time = timeMs(events[r.node].Time)
				}
				model = &mv
			} else {
				mv := MsgView{Seq: r.node, Role: "?", Note: "no served message pairs with this node", NoteClass: "bad", EditAt: -1}
				model = &mv
			}
		}
		switch {
		case reply == nil:
			cr.Kind = "transcript"
			cr.Transcript = []MsgView{entry(r.trans[0])}
		case model != nil && len(r.trans) == 1 && r.trans[0] == r.node:
			cr.Kind, cr.Model = "both", model
			if raw, ok := derive(r.node); ok && !sameJSON(raw, []byte(reply.Messages[msgOf[r.node]])) {
				cr.Kind = "diff"
				model.Note, model.NoteClass = "the served message differs from its event's", "bad"
				cr.Transcript = []MsgView{entry(r.node)}
			}
		default:
			cr.Kind, cr.Model = "diff", model
			if model != nil && r.node < int64(len(events)) && replaceOp(events[r.node].SurfaceOp) != nil {
				model.Note, model.NoteClass = "compaction: stands for seqs "+seqList(sources[r.node]), "info"
			}
			for _, t := range r.trans {
				mv := entry(t)
				if rb, ok := replacedBy[t]; ok {
					mv.Note = fmt.Sprintf("hidden from the model: replaced by seq %d", rb)
				} else {
					mv.Note = "hidden from the model"
				}
				mv.NoteClass = "warn"
				cr.Transcript = append(cr.Transcript, mv)
			}
		}
		v.Rows = append(v.Rows, cr)
	}
	if v.Hidden > 0 || len(sources) > 0 {
		v.Differs = true
		rs := make([]int64, 0, len(sources))
		for r := range sources {
			rs = append(rs, r)
		}
		slices.Sort(rs)
		v.DiffNote = fmt.Sprintf("The model view differs from the transcript: %d transcript entries are hidden from the model by the compaction replace(s) at seq %s.", v.Hidden, seqList(rs))
	}
	return v
}

// UnitPanel is one projection unit of the snapshot, with its decoded view for the known units.
type UnitPanel struct {
	Name    string
	AsOfSeq int64
	Lag     int64
	Error   *client.ProjectionError
	JSON    string // the view, cut

	Title *projector.TitleView
	Todos []Todo
	Usage *projector.UsageView
	Tools []ToolRow
	Open  []ToolRow // calls without a result: Name, CallID
	Turns *projector.TurnsState
}

// Todo is one entry of the todos unit's list.
type Todo struct{ Content, Status string }

// ToolRow is one tool's counts (or an open call: Name and CallID).
type ToolRow struct {
	Name   string
	CallID string
	projector.ToolCounts
}

// Projections are a snapshot's units, the title first.
type Projections struct {
	AsOfSeq    int64
	Units      []UnitPanel
	Title      string // capped (projector.MaxTitleViewBytes)
	TitleBytes int    // the whole title's length when Title is cut, else 0
	Stopped    int
	Note       string // why the snapshot is missing
}

func buildProjections(snap *client.SnapshotReply, lastSeq int64, note string) Projections {
	p := Projections{Note: note, AsOfSeq: -1}
	if snap == nil {
		return p
	}
	p.AsOfSeq = snap.AsOfSeq
	order := map[string]int{projector.UnitTitle: 0, projector.UnitTurns: 1, projector.UnitUsage: 2, projector.UnitTodos: 3, projector.UnitTools: 4}
	for name, u := range snap.Units {
		up := UnitPanel{Name: name, AsOfSeq: u.AsOfSeq, Lag: lastSeq - u.AsOfSeq, Error: u.Error, JSON: cut(string(u.View), 2000)}
		if u.Error != nil {
			p.Stopped++
		}
		switch name {
		case projector.UnitTitle:
			var t projector.TitleView
			if json.Unmarshal(u.View, &t) == nil {
				if t.Title != nil {
					p.Title, p.TitleBytes = capTitle(t)
					t.Title, t.TitleBytes = &p.Title, p.TitleBytes
				}
				up.Title = &t
			}
		case projector.UnitTodos:
			var t struct {
				Todos []Todo `json:"todos"`
			}
			if json.Unmarshal(u.View, &t) == nil {
				up.Todos = t.Todos
			}
		case projector.UnitUsage:
			var t projector.UsageView
			if json.Unmarshal(u.View, &t) == nil {
				up.Usage = &t
			}
		case projector.UnitTools:
			var t projector.ToolsState
			if json.Unmarshal(u.View, &t) == nil {
				for n, c := range t.ByName {
					up.Tools = append(up.Tools, ToolRow{Name: n, ToolCounts: c})
				}
				sort.Slice(up.Tools, func(i, j int) bool { return up.Tools[i].Name < up.Tools[j].Name })
				for id, n := range t.Open {
					up.Open = append(up.Open, ToolRow{Name: n, CallID: id})
				}
				sort.Slice(up.Open, func(i, j int) bool { return up.Open[i].CallID < up.Open[j].CallID })
			}
		case projector.UnitTurns:
			var t projector.TurnsState
			if json.Unmarshal(u.View, &t) == nil {
				up.Turns = &t
			}
		}
		p.Units = append(p.Units, up)
	}
	sort.Slice(p.Units, func(i, j int) bool {
		oi, iok := order[p.Units[i].Name]
		oj, jok := order[p.Units[j].Name]
		if iok != jok {
			return iok
		}
		if iok {
			return oi < oj
		}
		return p.Units[i].Name < p.Units[j].Name
	})
	return p
}
