package inspector

import (
	"slices"
	"sync"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
)

// renderedLogs keeps, for a short while, the events a session page was rendered from and the log
// position after them, so that the page's live stream resumes there (client.Events with After)
// instead of reading the whole log again. An entry is taken once; the oldest go first beyond
// renderedMaxBytes of events, and every entry after renderedTTL (a page whose live stream never
// came).
type renderedLogs struct {
	mu    sync.Mutex
	byKey map[renderedKey]*renderedLog
	order []renderedKey // oldest first
	bytes int64
}

// renderedKey names what a page rendered: the session, its last seq and the stream seq of the
// record it ends with (what the page's live request names).
type renderedKey struct {
	id        string
	lastSeq   int64
	streamSeq uint64
}

type renderedLog struct {
	events []session.Event
	pos    client.Position
	at     time.Time
	size   int64
}

const (
	renderedTTL      = time.Minute
	renderedMaxBytes = 64 << 20
)

func newRenderedLogs() *renderedLogs { return &renderedLogs{byKey: map[renderedKey]*renderedLog{}} }

// eventsSize is the bytes events take, about.
func eventsSize(events []session.Event) int64 {
	n := int64(0)
	for i := range events {
		ev := &events[i]
		n += int64(len(ev.Type)+len(ev.Time)+len(ev.Data)+len(ev.SurfaceOp)+len(ev.SourceEventSeqs)) + 96
	}
	return n
}

// put keeps the events of session id a page rendered, up to pos (its last record).
func (r *renderedLogs) put(id string, events []session.Event, pos client.Position) {
	if pos.StreamSeq == 0 || len(events) == 0 {
		return
	}
	size := eventsSize(events)
	if size > renderedMaxBytes/4 {
		return // a log that large is read again rather than held
	}
	k := renderedKey{id: id, lastSeq: events[len(events)-1].Seq, streamSeq: pos.StreamSeq}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(time.Now())
	if _, ok := r.byKey[k]; ok {
		return
	}
	r.byKey[k] = &renderedLog{events: slices.Clip(events), pos: pos, at: time.Now(), size: size}
	r.order = append(r.order, k)
	r.bytes += size
	for r.bytes > renderedMaxBytes && len(r.order) > 0 {
		r.drop(r.order[0])
	}
}

// take returns and forgets the events kept for k, and the position after them.
func (r *renderedLogs) take(k renderedKey) ([]session.Event, client.Position, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(time.Now())
	e := r.byKey[k]
	if e == nil {
		return nil, client.Position{}, false
	}
	r.drop(k)
	return e.events, e.pos, true
}

func (r *renderedLogs) expire(now time.Time) {
	for len(r.order) > 0 {
		e := r.byKey[r.order[0]]
		if e != nil && now.Sub(e.at) < renderedTTL {
			return
		}
		r.drop(r.order[0])
	}
}

func (r *renderedLogs) drop(k renderedKey) {
	if e := r.byKey[k]; e != nil {
		r.bytes -= e.size
		delete(r.byKey, k)
	}
	if i := slices.Index(r.order, k); i >= 0 {
		r.order = slices.Delete(r.order, i, i+1)
	}
}
