package session

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// ForkBoundary is one range of valid fork boundaries of a log: a fork at any seq from Seq to
// Through (inclusive) is accepted, since the last turn event at or before it is the turn/end at
// Seq (or, for Turn 0, there is no turn event yet). Turn is the turn that ended there (0: the
// events before the first turn), Reason its turn/end reason.kind, Time the turn/end's time (Unix
// ms). UserSeq and UserText are the turn's first user/message (-1 and "" when it has none), the
// text cut to ForkBoundaryTextRunes runes.
type ForkBoundary struct {
	Seq      int64  `json:"seq"`
	Through  int64  `json:"through"`
	Turn     int64  `json:"turn"`
	Reason   string `json:"reason,omitempty"`
	Time     int64  `json:"time"`
	UserSeq  int64  `json:"userSeq"`
	UserText string `json:"userText"`
}

// ForkBoundaryTextRunes bounds ForkBoundary.UserText.
const ForkBoundaryTextRunes = 200

// BoundaryScan finds the valid fork boundaries of a log read in order (one event at a time, so a
// long log is never held): the same rule ForkSeed applies (a boundary may not fall inside an open
// turn). Feed it every event with Add, then read Boundaries.
type BoundaryScan struct {
	out      []ForkBoundary
	open     bool // inside a turn (a turn/start with no turn/end yet)
	turn     int64
	userSeq  int64
	userText string
}

// NewBoundaryScan returns a scan of an empty log.
func NewBoundaryScan() *BoundaryScan { return &BoundaryScan{userSeq: -1} }

// Add takes the log's next event (seqs 0, 1, ... in order; the scan does not check the log's
// other rules).
func (b *BoundaryScan) Add(ev *Event) {
	switch ev.Type {
	case "turn/start":
		b.open, b.userSeq, b.userText = true, -1, ""
		b.turn = turnNumber(ev.Data)
		return
	case "turn/end":
		b.open = false
		fb := ForkBoundary{Seq: ev.Seq, Through: ev.Seq, Turn: b.turn, Time: timeMillis(ev.Time), UserSeq: b.userSeq, UserText: b.userText}
		if k, ok := LookupJSON(ev.Data, "reason", "kind"); ok {
			_ = json.Unmarshal(k, &fb.Reason)
		}
		if t := turnNumber(ev.Data); t != 0 {
			fb.Turn = t
		}
		b.out = append(b.out, fb)
		return
	case "user/message":
		if b.open && b.userSeq < 0 {
			b.userSeq, b.userText = ev.Seq, CutRunes(MessageText(ev.Data), ForkBoundaryTextRunes)
		}
	}
	if b.open {
		return
	}
	if n := len(b.out); n > 0 {
		b.out[n-1].Through = ev.Seq
		return
	}
	// Events before the first turn: boundaries too (the whole log, when it has no turn).
	b.out = append(b.out, ForkBoundary{Seq: ev.Seq, Through: ev.Seq, Time: timeMillis(ev.Time), UserSeq: -1})
}

// Boundaries returns the ranges found, in seq order (a copy).
func (b *BoundaryScan) Boundaries() []ForkBoundary {
	return append([]ForkBoundary{}, b.out...)
}

// ForkBoundaries returns the valid fork boundaries of events (a whole log, seq order).
func ForkBoundaries(events []Event) []ForkBoundary {
	b := NewBoundaryScan()
	for i := range events {
		b.Add(&events[i])
	}
	return b.Boundaries()
}

// MessageText returns the text of a message (a user/message's data, or the message of an
// assistant/message or tool/result): its text blocks joined by newlines (reasoning and tool-call
// blocks left out); for a tool-result block the text of its content. Data that is not such a
// message gives "".
func MessageText(msg json.RawMessage) string {
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(WellFormed(msg), &m) != nil {
		return ""
	}
	return contentText(m.Content)
}

func contentText(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var parts []string
	for _, bl := range blocks {
		switch {
		case (bl.Type == "text" || bl.Type == "") && bl.Text != "":
			parts = append(parts, bl.Text)
		case bl.Type == "tool-result" && len(bl.Content) > 0:
			if t := contentText(bl.Content); t != "" {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n")
}

// CutRunes returns s cut to at most n runes, with "…" in place of what was cut.
func CutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for k := range s {
		if i == n-1 {
			return s[:k] + "…"
		}
		i++
	}
	return s
}

// turnNumber reads data.turn as an integer (0 when it is not one).
func turnNumber(data json.RawMessage) int64 {
	v, ok := LookupJSON(data, "turn")
	if !ok {
		return 0
	}
	var f float64
	if json.Unmarshal(v, &f) != nil || f != float64(int64(f)) {
		return 0
	}
	return int64(f)
}

// timeMillis reads an event's time as Unix ms (0 when it is not a number).
func timeMillis(t json.Number) int64 {
	f, ok := timeValue(t)
	if !ok {
		return 0
	}
	return int64(f)
}
