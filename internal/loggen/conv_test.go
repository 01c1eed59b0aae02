package loggen

import (
	"encoding/json"
	"strconv"

	"github.com/agentlog/agentlog/session"
)

// event converts e to a session.Event (raw JSON fields).
func (e Ev) event() session.Event {
	ev := session.Event{
		Type:      e.Type,
		Seq:       e.Seq,
		Time:      json.Number(strconv.FormatInt(e.Time, 10)),
		Data:      json.RawMessage(JSON(e.Data)),
		Ignorable: e.Ignorable,
	}
	if e.SurfaceOp != nil {
		ev.SurfaceOp = json.RawMessage(JSON(e.SurfaceOp))
	}
	if e.HasSources {
		ev.SourceEventSeqs = json.RawMessage(JSON(append([]int64{}, e.Sources...)))
	}
	return ev
}

// sessionEvents converts the events to session.Events.
func (l *Log) sessionEvents() []session.Event {
	out := make([]session.Event, len(l.Events))
	for i, e := range l.Events {
		out[i] = e.event()
	}
	return out
}
