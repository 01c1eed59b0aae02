package inspector

import (
	"encoding/json"
	"fmt"
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

// MsgView is one message of the model view or the transcript.
type MsgView struct {
	Seq       int64 // the surface node / transcript event (-1: unknown)
	Role      string
	Blocks    []BlockView
	JSON      string // the message as served (model view only), cut at InlineJSONBytes
	JSONBytes int    // the whole message's size when JSON is cut (0: whole)
	EventURL  string // where the whole event is, when JSON is cut
	Note      string
	NoteClass string
}

// BlockView is one content block.
type BlockView struct {
	Type    string
	Text    string
	Name    string
	IsError bool
}

// Views are the model view and the transcript of a session, and where they differ.
type Views struct {
	Model, Transcript           []MsgView
	ModelTotal, TranscriptTotal int
	AsOfSeq                     int64
	Note                        string // why the model view is missing or stale
	Differs                     bool
	DiffNote                    string
	Hidden                      int // transcript entries the model does not see
}

func msgView(seq int64, raw []byte) MsgView {
	v := MsgView{Seq: seq, JSON: string(raw)}
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
		v.Blocks = append(v.Blocks, bv)
	}
	return v
}

// buildViews pairs the served messages with their surface nodes (by deriving each node from the
// log read: a node without a message is an assistant message with empty content) and derives
// the transcript (append-origin surface events) from the same events.
func buildViews(events []session.Event, reply *client.MessagesReply, note string, all bool) Views {
	v := Views{Note: note, AsOfSeq: -1}
	lookup := func(seq int64) (session.Event, error) {
		if seq < 0 || seq >= int64(len(events)) || events[seq].Seq != seq {
			return session.Event{}, fmt.Errorf("seq %d not read", seq)
		}
		return events[seq], nil
	}
	derive := func(seq int64) (json.RawMessage, bool) {
		ms, err := session.DeriveMessages([]int64{seq}, lookup)
		if err != nil || len(ms) == 0 {
			return nil, false
		}
		return ms[0], true
	}
	// replacedBy: a node a compaction hid -> the replace that stands for it.
	replacedBy := map[int64]int64{}
	var transcript []int64
	for i := range events {
		ev := &events[i]
		if !session.SurfaceEligible(ev.Type) {
			continue
		}
		if replaceOp(ev.SurfaceOp) != nil {
			var srcs []int64
			_ = json.Unmarshal(ev.SourceEventSeqs, &srcs)
			for _, s := range srcs {
				replacedBy[s] = ev.Seq
			}
		} else if string(ev.SurfaceOp) == `"append"` {
			transcript = append(transcript, ev.Seq)
		}
	}
	nodes := map[int64]bool{}
	limit := viewLimit
	if all {
		limit = -1
	}
	if reply != nil {
		v.AsOfSeq = reply.AsOfSeq
		for _, n := range reply.Nodes {
			nodes[n] = true
		}
		v.ModelTotal = len(reply.Messages)
		// Pair the messages with their nodes from the end (the shown ones): each node that derives
		// a message takes the previous one.
		k := len(reply.Messages) - 1
		for i := len(reply.Nodes) - 1; i >= 0 && k >= 0 && (limit < 0 || len(v.Model) < limit); i-- {
			n := reply.Nodes[i]
			if n < int64(len(events)) {
				if _, ok := derive(n); !ok {
					continue
				}
			}
			mv := msgView(n, reply.Messages[k])
			if n < int64(len(events)) && replaceOp(events[n].SurfaceOp) != nil {
				var srcs []int64
				_ = json.Unmarshal(events[n].SourceEventSeqs, &srcs)
				mv.Note, mv.NoteClass = "compaction: stands for seqs "+seqList(srcs), "info"
			}
			v.Model = append(v.Model, mv)
			k--
		}
		if limit < 0 || len(v.Model) < limit {
			for ; k >= 0; k-- { // pairing failed: show the rest without a seq
				v.Model = append(v.Model, msgView(-1, reply.Messages[k]))
			}
		}
		slices.Reverse(v.Model)
	}
	// The transcript entries: every append-origin surface event that derives a message (the shown
	// ones are derived; the count takes every append of user/message and tool/result, and the
	// assistant messages whose content is not empty).
	first := 0
	if limit >= 0 {
		first = max(0, len(transcript)-limit)
		for _, seq := range transcript[:first] {
			if seq < int64(len(events)) && events[seq].Type == "assistant/message" {
				if _, ok := derive(seq); !ok {
					continue
				}
			}
			v.TranscriptTotal++
			if reply != nil && !nodes[seq] {
				v.Hidden++
			}
		}
	}
	for _, seq := range transcript[first:] {
		raw, ok := derive(seq)
		if !ok {
			continue
		}
		mv := msgView(seq, raw)
		mv.JSON = "" // the model view carries the JSON; a transcript entry links its event
		if reply != nil && !nodes[seq] {
			v.Hidden++
			if r, ok := replacedBy[seq]; ok {
				mv.Note = fmt.Sprintf("hidden from the model: replaced by seq %d", r)
			} else {
				mv.Note = "hidden from the model"
			}
			mv.NoteClass = "warn"
		}
		v.Transcript = append(v.Transcript, mv)
		v.TranscriptTotal++
	}
	if v.Hidden > 0 || len(replacedBy) > 0 {
		v.Differs = true
		var rs []int64
		for _, r := range replacedBy {
			if !slices.Contains(rs, r) {
				rs = append(rs, r)
			}
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
