package inspector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
)

// sse writes Server-Sent Events.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startSSE(w http.ResponseWriter) (*sse, bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	return s, s.rc.Flush() == nil
}

// send writes one event whose data is v as JSON (HTML in it is \u003c-escaped by encoding/json).
func (s *sse) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) comment(text string) error {
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// liveUpdate is the "update" event of a session page: the re-rendered parts after new events.
type liveUpdate struct {
	LastSeq     int64  `json:"lastSeq"`
	Pages       int    `json:"pages"`
	Summary     string `json:"summary"`
	Timeline    string `json:"timeline,omitempty"` // the last timeline page, for a page showing it
	Pager       string `json:"pager,omitempty"`
	Views       string `json:"views"`
	Projections string `json:"projections"`
	Boundaries  string `json:"boundaries"`
}

// handleSessionLive streams a session page's updates: it follows the session's subject (the
// stored log, then direct gets woken by a core subscription for what is appended: client.Events with Follow; from
// the position the page was rendered at, ?pos=STREAMSEQ, when this instance rendered it) and, for
// each burst of new events after ?after=SEQ, re-queries the messages and the snapshot as of the
// last one and sends the re-rendered parts ("update"); a fork of a session in the page's tree
// re-renders the tree ("tree").
func (s *Server) handleSessionLive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil {
		after = -1
	}
	page, err := strconv.Atoi(q.Get("page"))
	if err != nil {
		page = -1
	}
	onLast, all := q.Get("last") == "1", q.Get("all") == "1"
	pos, _ := strconv.ParseUint(q.Get("pos"), 10, 64)
	ctx := r.Context()
	lineage, err := s.c.Lineage(ctx, id)
	if err != nil {
		le := asLoadError(id, err)
		http.Error(w, le.text, le.status)
		return
	}
	header, err := s.c.Header(ctx, id)
	if err != nil {
		le := asLoadError(id, err)
		http.Error(w, le.text, le.status)
		return
	}
	out, ok := startSSE(w)
	if !ok {
		return
	}
	var (
		mu     sync.Mutex
		events []session.Event
		notify = make(chan struct{}, 1)
		errc   = make(chan error, 1)
	)
	// The events the page was rendered from, when this instance rendered it: the read resumes
	// after them (client.Events with After) instead of reading the log again.
	read := client.EventsQuery{Follow: true}
	if kept, at, ok := s.rendered.take(renderedKey{id: id, lastSeq: after, streamSeq: pos}); ok {
		events, read.After = kept, at
	}
	go func() {
		for {
			err := s.c.Events(ctx, id, read, func(ev session.Event) error {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
				select {
				case notify <- struct{}{}:
				default:
				}
				return nil
			})
			if read.After.StreamSeq == 0 || !errors.Is(err, client.ErrLogChanged) {
				errc <- err
				return
			}
			// The log was purged and written again since the page: read it from the start.
			mu.Lock()
			events = nil
			mu.Unlock()
			read.After = client.Position{}
		}
	}()
	sessions, unsubscribe := s.hub.subscribe()
	defer unsubscribe()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	sent := after
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-errc:
			if ctx.Err() == nil {
				_ = out.send("failed", map[string]string{"error": fmt.Sprintf("following session %q stopped: %v", id, err)})
			}
			return
		case <-tick.C:
			if out.comment("keep-alive") != nil {
				return
			}
		case ev := <-sessions:
			if ev.ParentSession == "" || findNode(lineage.Root, ev.ParentSession) == nil {
				continue
			}
			if l, err := s.c.Lineage(ctx, id); err == nil {
				lineage = l
			}
			html, err := s.fragment("tree", &sessionPage{ID: id, Lineage: lineage})
			if err != nil || out.send("tree", map[string]string{"html": html, "child": ev.ID}) != nil {
				return
			}
		case <-notify:
			// Let a burst of appends (a streamed reply) settle into one update.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			mu.Lock()
			evs := slices.Clone(events)
			mu.Unlock()
			last := int64(len(evs)) - 1
			if last <= sent {
				continue
			}
			u, err := s.update(ctx, id, &header, lineage, evs, page, onLast, all)
			if err != nil {
				s.log.Error("inspector: live update", "session", id, "err", err)
				return
			}
			if out.send("update", u) != nil {
				return
			}
			sent = last
		}
	}
}

func (s *Server) update(ctx context.Context, id string, h *session.Header, lineage client.Lineage, evs []session.Event, page int, onLast, all bool) (*liveUpdate, error) {
	qctx, cancel := context.WithTimeout(ctx, s.o.QueryTimeout)
	defer cancel()
	d := &sessionData{lineage: lineage, events: evs, reports: s.reports(qctx, id)}
	s.query(qctx, id, int64(len(evs))-1, d)
	if onLast {
		page = -1
	}
	sp := s.page(id, d, page, -1, all)
	sp.Header = h
	u := &liveUpdate{LastSeq: sp.LastSeq, Pages: sp.Pages}
	var err error
	render := func(dst *string, name string) {
		if err == nil {
			*dst, err = s.fragment(name, sp)
		}
	}
	render(&u.Summary, "summary")
	if onLast {
		render(&u.Timeline, "timelinepage")
		render(&u.Pager, "pager")
	}
	render(&u.Views, "views")
	render(&u.Projections, "projections")
	render(&u.Boundaries, "boundaries")
	return u, err
}

// handleRestore brings an archived session back to the hot stream (client.Restore), with
// --allow-fork (it writes) and the page's CSRF token, then shows the session again.
func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.o.AllowFork {
		s.errorPage(w, r, http.StatusForbidden, "Read-only", "This inspector is read-only: start it with --allow-fork to restore sessions.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !s.csrfOK(r) {
		s.errorPage(w, r, http.StatusForbidden, "Forbidden", "The restore request is cross-origin or lacks the page's CSRF token: restore from the inspector's own page.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if _, err := s.c.Restore(ctx, id); err != nil {
		s.errorPage(w, r, http.StatusServiceUnavailable, "Restore failed", err.Error())
		return
	}
	http.Redirect(w, r, sessURL(id)+"?restored=1", http.StatusSeeOther)
}
