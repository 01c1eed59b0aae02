package inspector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
)

// sessionPage is what the session page renders.
type sessionPage struct {
	ID              string
	Header          *session.Header
	Self            *client.LineageNode
	Lineage         client.Lineage
	LastSeq         int64
	Events          int64
	LastActivity    int64
	OpenTurn        int64
	Turns           int   // turns started
	Duration        int64 // ms from the first event to the last
	Tab             string
	Boundaries      []Boundary // the last maxBoundaries unless all
	BoundariesTotal int

	Timeline *Timeline
	Page     int
	Pages    int
	Nodes    []*Node
	OnLast   bool

	Views Views
	Proj  Projections
	All   bool

	Reports []ErrorReport // the latest agent/error reports, oldest first

	// StreamSeq is the stream seq of the log's last record the page shows (0: none), which its
	// live stream resumes after.
	StreamSeq uint64

	AllowFork  bool
	AllowAdmin bool
	// State is the session's lifecycle state ("active", "archived") and hold.
	State  client.SessionState
	CSRF   string
	LoadMs int64
}

// maxBoundaries is how many fork boundaries (the last ones) the fork tab lists unless all are
// asked for.
const maxBoundaries = 50

// Boundary is a fork boundary: a turn's end (its seq, the turn, when it ended) with the turn's
// first user message.
type Boundary struct {
	Seq, Turn, Time int64
	Message         string
}

// loadError is a page that cannot be shown: its HTTP status and text.
type loadError struct {
	status int
	title  string
	text   string
}

func (e *loadError) Error() string { return e.text }

func asLoadError(id string, err error) *loadError {
	var le *loadError
	if errors.As(err, &le) {
		return le
	}
	switch {
	case errors.Is(err, client.ErrRemoving):
		return &loadError{http.StatusNotFound, "Session not found", client.RemovingText(id) + ": `agentlog rm " + shellquote.Quote(id) + "` finishes it."}
	case errors.Is(err, client.ErrNotFound):
		return &loadError{http.StatusNotFound, "Session not found", fmt.Sprintf("There is no session %q (no metadata in agentlog_sessions).", id)}
	case errors.Is(err, client.ErrBadRequest):
		return &loadError{http.StatusBadRequest, "Bad session id", err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, client.ErrTimeout):
		return &loadError{http.StatusGatewayTimeout, "Timed out", fmt.Sprintf("Reading session %q timed out: %v", id, err)}
	}
	return &loadError{http.StatusServiceUnavailable, "Cannot read the session", fmt.Sprintf("Reading session %q failed: %v", id, err)}
}

// reports reads session id's latest agent/error reports (none when they cannot be read: the page
// is shown without them rather than failing).
func (s *Server) reports(ctx context.Context, id string) []ErrorReport {
	raw, err := s.c.ErrorReports(ctx, id, maxReports)
	if err != nil {
		return nil
	}
	var out []ErrorReport
	for _, b := range raw {
		var r ErrorReport
		if json.Unmarshal(b, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// fail answers a request about session id that failed with err: its error page.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, id string, err error) {
	le := asLoadError(id, err)
	s.errorPage(w, r, le.status, le.title, le.text)
}

// sessionData is a session read once: its lineage, its events, and the queries at its last seq.
type sessionData struct {
	lineage client.Lineage
	events  []session.Event
	pos     client.Position // the log position after events
	msgs    *client.MessagesReply
	msgNote string
	snap    *client.SnapshotReply
	snapErr string
	reports []ErrorReport
	state   client.SessionState
}

// ErrorReport is an agent/error report of a failed write (publisher.ErrorReport).
type ErrorReport = publisher.ErrorReport

// maxReports is how many of a session's latest agent/error reports a page shows.
const maxReports = 20

// read reads session id: its lineage, its events, and the messages and the snapshot, all at
// once; when the projection had not reached the last event read, the queries are asked again,
// waiting for it (at most QueryTimeout; a lagging or stopped projection is shown as it is, with a
// note).
func (s *Server) read(parent context.Context, id string) (*sessionData, error) {
	ctx, cancel := context.WithTimeout(parent, s.o.QueryTimeout)
	defer cancel()
	d := &sessionData{}
	var wg sync.WaitGroup
	var lerr, eerr error
	var msgs client.MessagesReply
	var merr error
	var snap client.SnapshotReply
	var serr error
	wg.Add(6)
	go func() { defer wg.Done(); d.reports = s.reports(ctx, id) }()
	go func() {
		defer wg.Done()
		if st, err := s.c.State(ctx, id); err == nil {
			d.state = st
		}
	}()
	go func() {
		defer wg.Done()
		// The fork tree reads every header (about 0.3 s per 100,000 sessions when idle).
		lctx, cancel := context.WithTimeout(parent, 6*s.o.QueryTimeout)
		defer cancel()
		d.lineage, lerr = s.c.Lineage(lctx, id)
	}()
	go func() {
		defer wg.Done()
		eerr = s.c.Events(ctx, id, client.EventsQuery{Reached: func(p client.Position) { d.pos = p }}, func(ev session.Event) error {
			d.events = append(d.events, ev)
			return nil
		})
	}()
	go func() { defer wg.Done(); msgs, merr = s.c.Messages(ctx, id) }()
	go func() { defer wg.Done(); snap, serr = s.c.Snapshot(ctx, id) }()
	wg.Wait()
	if lerr != nil {
		return nil, lerr
	}
	if eerr != nil {
		return nil, eerr
	}
	last := int64(len(d.events)) - 1
	if merr == nil && serr == nil && msgs.AsOfSeq >= last && snap.AsOfSeq >= last {
		d.msgs, d.snap = &msgs, &snap // the projection had caught up: no second round
		return d, nil
	}
	s.query(ctx, id, last, d)
	return d, nil
}

// query fills d's messages and snapshot as of lastSeq.
func (s *Server) query(ctx context.Context, id string, lastSeq int64, d *sessionData) {
	if lastSeq < 0 {
		d.msgs = &client.MessagesReply{Session: id, AsOfSeq: -1}
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		r, err := s.c.Messages(ctx, id, client.MinSeq(lastSeq))
		if errors.Is(err, client.ErrTimeout) {
			if r, err = s.c.Messages(context.WithoutCancel(ctx), id, client.Timeout(2*time.Second)); err == nil {
				d.msgNote = fmt.Sprintf("The projection lags behind the log: the model view is as of seq %d, the log ends at seq %d.", r.AsOfSeq, lastSeq)
			}
		}
		switch {
		case err == nil:
			d.msgs = &r
		case errors.Is(err, client.ErrStopped):
			d.msgNote = "The messages projection of this session is stopped: " + err.Error()
		case errors.Is(err, client.ErrNotFound):
			d.msgNote = "The projector has not folded this session yet."
		default:
			d.msgNote = "The model view cannot be read: " + err.Error()
		}
	}()
	go func() {
		defer wg.Done()
		r, err := s.c.Snapshot(ctx, id, client.MinSeq(lastSeq))
		if errors.Is(err, client.ErrTimeout) || errors.Is(err, client.ErrStopped) {
			r, err = s.c.Snapshot(context.WithoutCancel(ctx), id, client.Timeout(2*time.Second))
		}
		if err != nil {
			d.snapErr = "The projections cannot be read: " + err.Error()
			return
		}
		d.snap = &r
	}()
	wg.Wait()
}

// page builds the session page of d, showing timeline page p (-1: the last; seq >= 0: the page
// holding that seq).
func (s *Server) page(id string, d *sessionData, p int, seq int64, all bool) *sessionPage {
	t := BuildTimeline(id, d.events)
	if seq >= 0 {
		p = t.PageOf(seq)
	}
	if p < 0 || p >= t.Pages() {
		p = t.Pages() - 1
	}
	sp := &sessionPage{ID: id, Lineage: d.lineage, LastSeq: t.LastSeq, Events: t.LastSeq + 1, OpenTurn: t.OpenTurn,
		Timeline: t, Page: p, Pages: t.Pages(), Nodes: t.Page(p), OnLast: p == t.Pages()-1,
		Views: buildViews(d.events, d.msgs, d.msgNote, all), Proj: buildProjections(d.snap, t.LastSeq, d.snapErr),
		All: all, AllowFork: s.o.AllowFork, AllowAdmin: s.o.AllowAdmin, CSRF: s.csrf, Reports: d.reports, Tab: tabs[0]}
	for i := range t.Rows {
		r := &t.Rows[i]
		if r.Type == "turn/start" {
			sp.Turns++
		}
		if r.ForkAt {
			b := Boundary{Seq: r.Seq, Turn: r.Turn, Time: r.Time}
			if r.First >= 0 && r.First < int64(len(d.events)) {
				b.Message = cut(userText(d.events[r.First].Data), summaryRunes)
			}
			sp.Boundaries = append(sp.Boundaries, b)
		}
	}
	sp.BoundariesTotal = len(sp.Boundaries)
	if !all && len(sp.Boundaries) > maxBoundaries {
		sp.Boundaries = sp.Boundaries[len(sp.Boundaries)-maxBoundaries:]
	}
	editAt := map[int64]int64{} // a turn's first user message -> the boundary before it
	for i := range t.Rows {
		if r := &t.Rows[i]; r.ForkAt && r.Next >= 0 {
			editAt[r.Next] = r.Seq
		}
	}
	fix := func(m *MsgView) {
		if m.JSONBytes > 0 && m.Seq >= 0 {
			m.EventURL = eventPath(id, m.Seq)
		}
		if b, ok := editAt[m.Seq]; ok && m.Role == "user" && m.Seq < int64(len(d.events)) {
			m.EditAt, m.EditText = b, userText(d.events[m.Seq].Data)
		}
	}
	for i := range sp.Views.Rows {
		r := &sp.Views.Rows[i]
		if r.Model != nil {
			fix(r.Model)
		}
		for j := range r.Transcript {
			fix(&r.Transcript[j])
		}
	}
	sp.Self = findNode(d.lineage.Root, id)
	sp.State = d.state
	if n := len(d.events); n > 0 {
		sp.LastActivity = timeMs(d.events[n-1].Time)
		sp.Duration = sp.LastActivity - timeMs(d.events[0].Time)
	}
	return sp
}

// Created is the session's createdAt (Unix ms) from its header (0: unknown).
func (sp *sessionPage) Created() int64 {
	switch {
	case sp.Header != nil && sp.Header.CreatedAt > 0:
		return sp.Header.CreatedAt
	case sp.Self != nil:
		return sp.Self.CreatedAt
	}
	return 0
}

func findNode(n *client.LineageNode, id string) *client.LineageNode {
	if n == nil {
		return nil
	}
	if n.ID == id {
		return n
	}
	for _, c := range n.Children {
		if f := findNode(c, id); f != nil {
			return f
		}
	}
	return nil
}

// handleSession serves the session page. Once the session is known to exist, the head and the top
// bar are sent at once (the browser fetches the stylesheet and paints while the session is read);
// a failure after that is a banner in the page.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.PathValue("id")
	q := r.URL.Query()
	p, seq := -1, int64(-1)
	if v := q.Get("page"); v != "" {
		p, _ = strconv.Atoi(v)
	}
	if v := q.Get("seq"); v != "" {
		seq, _ = strconv.ParseInt(v, 10, 64)
	}
	hctx, cancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	h, err := s.c.Header(hctx, id)
	cancel()
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if err := s.tmpl.ExecuteTemplate(w, "sessionstart", id); err != nil {
		return
	}
	_ = http.NewResponseController(w).Flush()
	d, err := s.read(r.Context(), id)
	if err != nil {
		le := asLoadError(id, err)
		_ = s.tmpl.ExecuteTemplate(w, "loaderror", map[string]string{"title": le.title, "text": le.text})
		return
	}
	sp := s.page(id, d, p, seq, q.Get("all") == "1")
	sp.Header = &h
	if q.Has("seq") || q.Has("page") {
		sp.Tab = "timeline"
	}
	sp.LoadMs = time.Since(start).Milliseconds()
	if int64(len(d.events))-1 == sp.LastSeq && d.pos.NextSeq == sp.LastSeq+1 {
		sp.StreamSeq = d.pos.StreamSeq
		s.rendered.put(id, d.events, d.pos) // for the page's live stream
	}
	var b bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&b, "sessionmain", sp); err != nil {
		s.log.Error("inspector: render", "template", "sessionmain", "err", err)
		_ = s.tmpl.ExecuteTemplate(w, "loaderror", map[string]string{"title": "Cannot render the session", "text": err.Error()})
		return
	}
	_, _ = w.Write(b.Bytes())
}

// handleRaw serves the session's JSONL as `agentlog events` prints it (header line, then one
// event per line); from/to select seqs, inline shows it in the browser instead of downloading.
func (s *Server) handleRaw(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	defer cancel()
	q := r.URL.Query()
	from, _ := strconv.ParseInt(q.Get("from"), 10, 64)
	to := int64(-1)
	if v := q.Get("to"); v != "" {
		to, _ = strconv.ParseInt(v, 10, 64)
	}
	h, err := s.c.Header(ctx, id)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	var events []session.Event
	err = s.c.Events(ctx, id, client.EventsQuery{FromSeq: max(from, 0)}, func(ev session.Event) error {
		if to >= 0 && ev.Seq > to {
			return errStop
		}
		events = append(events, ev)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		s.fail(w, r, id, err)
		return
	}
	hp := &h
	if from > 0 || q.Get("header") == "0" {
		hp = nil
	}
	w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
	if q.Get("inline") == "" {
		w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(id)+".jsonl")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	bw := bufio.NewWriter(w)
	if err := session.WriteJSONL(bw, hp, events, session.WriteOptions{}); err != nil {
		s.log.Warn("inspector: write JSONL", "session", id, "err", err)
	}
	_ = bw.Flush()
}

var errStop = errors.New("stop")

// handleEvent serves event {seq} of the session whole, as its JSON line (application/json, so a
// browser shows it as text): what a page cut (InlineJSONBytes) loads on demand.
func (s *Server) handleEvent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
	if err != nil || seq < 0 {
		s.errorPage(w, r, http.StatusBadRequest, "Bad seq", fmt.Sprintf("%q is not a seq (a number >= 0).", r.PathValue("seq")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	defer cancel()
	var line []byte
	err = s.c.Events(ctx, id, client.EventsQuery{FromSeq: seq}, func(ev session.Event) error {
		b, err := ev.AppendJSON(nil)
		if err != nil {
			return err
		}
		line = b
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		s.fail(w, r, id, err)
		return
	}
	if line == nil {
		if _, err := s.c.Header(ctx, id); err != nil { // an unknown session is not found, not short of events
			s.fail(w, r, id, err)
			return
		}
		s.errorPage(w, r, http.StatusNotFound, "No such event", fmt.Sprintf("Session %q has no event at seq %d.", id, seq))
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(append(line, '\n'))
}

// handleChunks shows the text of a run of streamed chunks (from..to), joined.
func (s *Server) handleChunks(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	q := r.URL.Query()
	from, err1 := strconv.ParseInt(q.Get("from"), 10, 64)
	to, err2 := strconv.ParseInt(q.Get("to"), 10, 64)
	if err1 != nil || err2 != nil || from < 0 || to < from {
		s.errorPage(w, r, http.StatusBadRequest, "Bad range", "from and to must be seqs with from <= to.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	defer cancel()
	n := 0
	kinds := map[string]*strings.Builder{}
	var order []string
	err := s.c.Events(ctx, id, client.EventsQuery{FromSeq: from}, func(ev session.Event) error {
		if ev.Seq > to {
			return errStop
		}
		d := decodeData(&ev)
		if ev.Type != "assistant/chunk" || d.Chunk == nil {
			return nil
		}
		n++
		k := d.Chunk.Type
		if kinds[k] == nil {
			kinds[k] = &strings.Builder{}
			order = append(order, k)
		}
		kinds[k].WriteString(d.Chunk.Text + d.Chunk.ArgumentsDelta)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		s.fail(w, r, id, err)
		return
	}
	type part struct{ Kind, Text string }
	var parts []part
	for _, k := range order {
		parts = append(parts, part{k, kinds[k].String()})
	}
	data := struct {
		ID       string
		From, To int64
		N        int
		Parts    []part
		Fragment bool
	}{id, from, to, n, parts, q.Get("fragment") == "1"}
	name := "chunks.html"
	if data.Fragment {
		name = "chunksfrag"
	}
	s.render(w, http.StatusOK, name, data)
}

// handleMessagesJSON serves the derived messages as `agentlog messages` prints them: as of the
// log's last event (waiting for the projection to apply it, at most QueryTimeout).
func (s *Server) handleMessagesJSON(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	defer cancel()
	last, err := s.c.LastSeq(ctx, id)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	var opts []client.Option
	if last >= 0 {
		opts = append(opts, client.MinSeq(last))
	}
	reply, err := s.c.Messages(ctx, id, opts...)
	if err != nil && (!errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrRemoving)) {
		s.fail(w, r, id, err)
		return
	}
	if reply.Messages == nil {
		reply.Messages = []json.RawMessage{}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = writeJSON(w, reply.Messages)
}
