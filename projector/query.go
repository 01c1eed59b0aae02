package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// The query micro service: name, version and endpoint subjects.
const (
	QueryService        = "agentlog-query"
	QueryServiceVersion = "0.1.0"
	MessagesSubject     = "agentlog.query.messages"
	SurfaceSubject      = "agentlog.query.surface"
)

// Query timeouts, in milliseconds: the minSeq wait when the request gives no timeoutMs, and the
// longest wait a request may ask for.
const (
	DefaultTimeoutMs = 5000
	MaxTimeoutMs     = 60000
)

// Query error codes (micro error codes of the agentlog-query service).
const (
	CodeBadRequest  = "400" // malformed request or invalid session id
	CodeNotFound    = "404" // unknown session, or no projection stored yet
	CodeTimeout     = "408" // minSeq not reached within timeoutMs
	CodeStopped     = "409" // the session's projection was stopped by a bad log
	CodeInternal    = "500" // KV or log read failure
	CodeUnavailable = "503" // the projector is stopping
)

// QueryRequest is the request of both endpoints: {"session": id, "minSeq"?: n, "timeoutMs"?: n}.
// MinSeq (an event seq) makes the service wait until the projection's asOfSeq >= minSeq, for at
// most TimeoutMs milliseconds (default 5000, at most 60000). A negative or absent minSeq does not
// wait.
type QueryRequest struct {
	Session   string `json:"session"`
	MinSeq    *int64 `json:"minSeq,omitempty"`
	TimeoutMs *int64 `json:"timeoutMs,omitempty"`
}

// MessagesReply is the reply of the messages endpoint: the session, the projection's asOfSeq and
// replaceGeneration, the surface nodes (seqs) and deriveMessages of those nodes, one message per
// node that derives one.
type MessagesReply struct {
	Session           string            `json:"session"`
	AsOfSeq           int64             `json:"asOfSeq"`
	ReplaceGeneration int64             `json:"replaceGeneration"`
	Nodes             []int64           `json:"nodes"`
	Messages          []json.RawMessage `json:"messages"`
}

// QueryError is an error reply of the agentlog-query service: Code is one of the Code* constants,
// Description names the session.
type QueryError struct {
	Code        string
	Description string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("%s: %s (code %s)", QueryService, e.Description, e.Code)
}

// addService starts the agentlog-query micro service (queue group "q", micro's default).
func (p *Projector) addService() (micro.Service, error) {
	svc, err := micro.AddService(p.nc, micro.Config{
		Name:        QueryService,
		Version:     QueryServiceVersion,
		Description: "agentlog projections: derived messages and stored surfaces of sessions",
		Metadata:    map[string]string{"instance": p.name},
	})
	if err != nil {
		return nil, fmt.Errorf("projector: starting service %s: %w", QueryService, err)
	}
	if err := svc.AddEndpoint("messages", p.async(p.handleMessages), micro.WithEndpointSubject(MessagesSubject)); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("projector: adding endpoint messages: %w", err)
	}
	if err := svc.AddEndpoint("surface", p.async(p.handleSurface), micro.WithEndpointSubject(SurfaceSubject)); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("projector: adding endpoint surface: %w", err)
	}
	return svc, nil
}

// async runs a handler in its own goroutine (at most cap(p.slots) at once), so that a request
// waiting for minSeq does not hold up the others.
func (p *Projector) async(h func(context.Context, micro.Request)) micro.HandlerFunc {
	return func(req micro.Request) {
		p.reqMu.Lock()
		if p.closing {
			p.reqMu.Unlock()
			respondErr(req, CodeUnavailable, fmt.Sprintf("projector %s is stopping", p.name))
			return
		}
		p.reqs.Add(1)
		p.reqMu.Unlock()
		p.slots <- struct{}{}
		go func() {
			defer func() { <-p.slots; p.reqs.Done() }()
			h(p.runCtx, req)
		}()
	}
}

func respondErr(req micro.Request, code, desc string) {
	_ = req.Error(code, desc, nil)
}

// parseQuery decodes and checks a request; on failure it has already answered "400".
func parseQuery(req micro.Request) (QueryRequest, string, bool) {
	var q QueryRequest
	dec := json.NewDecoder(bytes.NewReader(req.Data()))
	if err := dec.Decode(&q); err != nil {
		respondErr(req, CodeBadRequest, fmt.Sprintf("bad request: not a JSON object {\"session\", \"minSeq\"?, \"timeoutMs\"?}: %v", err))
		return q, "", false
	}
	if q.Session == "" {
		respondErr(req, CodeBadRequest, "bad request: \"session\" is required")
		return q, "", false
	}
	token, err := ajs.Token(q.Session)
	if err != nil {
		respondErr(req, CodeBadRequest, fmt.Sprintf("bad request: session %q: %v", q.Session, err))
		return q, "", false
	}
	return q, token, true
}

// readProjection reads the stored projection, waiting for minSeq when the request gives one.
// On failure it has already answered. It returns the raw stored value too.
func (p *Projector) readProjection(ctx context.Context, req micro.Request, q QueryRequest, token string, allowStopped bool) (Projection, []byte, bool) {
	key := Key(token)
	if q.MinSeq == nil || *q.MinSeq < 0 {
		e, err := p.store.Projections.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			respondErr(req, CodeNotFound, fmt.Sprintf("session %q: no projection (unknown session, or none of its events projected yet)", q.Session))
			return Projection{}, nil, false
		}
		if err != nil {
			respondErr(req, CodeInternal, fmt.Sprintf("session %q: reading projection %s: %v", q.Session, key, err))
			return Projection{}, nil, false
		}
		return p.checkStored(req, q, e.Value(), allowStopped)
	}
	minSeq := *q.MinSeq
	timeoutMs := int64(DefaultTimeoutMs)
	if q.TimeoutMs != nil && *q.TimeoutMs > 0 {
		timeoutMs = min(*q.TimeoutMs, MaxTimeoutMs)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(timeoutMs)*time.Millisecond)
	defer cancel()
	w, err := p.store.Projections.Watch(wctx, key)
	if err != nil {
		respondErr(req, CodeInternal, fmt.Sprintf("session %q: watching projection %s: %v", q.Session, key, err))
		return Projection{}, nil, false
	}
	defer func() { _ = w.Stop() }()
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	var last *Projection
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				respondErr(req, CodeInternal, fmt.Sprintf("session %q: watch of projection %s ended", q.Session, key))
				return Projection{}, nil, false
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			proj, _, err := decodeProjection(e.Value())
			if err != nil {
				continue
			}
			last = &proj
			if proj.Error != nil || proj.AsOfSeq >= minSeq {
				return p.checkStored(req, q, e.Value(), allowStopped)
			}
		case <-wctx.Done():
			if ctx.Err() != nil {
				respondErr(req, CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
				return Projection{}, nil, false
			}
			at := "no projection yet"
			if last != nil {
				at = fmt.Sprintf("asOfSeq %d", last.AsOfSeq)
			}
			respondErr(req, CodeTimeout, fmt.Sprintf("session %q: projection did not reach seq %d within %d ms (%s)", q.Session, minSeq, timeoutMs, at))
			return Projection{}, nil, false
		}
	}
}

// checkStored decodes a stored value and, unless allowStopped, answers "409" for a stopped
// projection.
func (p *Projector) checkStored(req micro.Request, q QueryRequest, raw []byte, allowStopped bool) (Projection, []byte, bool) {
	proj, ok, err := decodeProjection(raw)
	if err != nil {
		respondErr(req, CodeInternal, fmt.Sprintf("session %q: %v", q.Session, err))
		return Projection{}, nil, false
	}
	if !ok {
		respondErr(req, CodeNotFound, fmt.Sprintf("session %q: stored projection has another stateVersion; it is being rebuilt", q.Session))
		return Projection{}, nil, false
	}
	if proj.Error != nil && !allowStopped {
		respondErr(req, CodeStopped, fmt.Sprintf("session %q: projection stopped at seq %d (rule %s): %s", q.Session, proj.Error.Seq, proj.Error.Rule, proj.Error.Message))
		return Projection{}, nil, false
	}
	return proj, raw, true
}

// handleMessages serves MessagesSubject: the stored projection's nodes, and their messages derived
// (session.DeriveMessages) from the session's events read from the log. It does not refold the log.
func (p *Projector) handleMessages(ctx context.Context, req micro.Request) {
	q, token, ok := parseQuery(req)
	if !ok {
		return
	}
	proj, _, ok := p.readProjection(ctx, req, q, token, false)
	if !ok {
		return
	}
	events, _, err := p.store.Read(ctx, q.Session)
	if err != nil {
		respondErr(req, CodeInternal, fmt.Sprintf("session %q: reading the log: %v", q.Session, err))
		return
	}
	byseq := func(seq int64) (session.Event, error) {
		if seq >= 0 && seq < int64(len(events)) && events[seq].Seq == seq {
			return events[seq], nil
		}
		for _, ev := range events {
			if ev.Seq == seq {
				return ev, nil
			}
		}
		return session.Event{}, fmt.Errorf("session %q: surface node seq %d is not in the log", q.Session, seq)
	}
	msgs, err := session.DeriveMessages(proj.State.Nodes, byseq)
	if err != nil {
		respondErr(req, CodeInternal, fmt.Sprintf("session %q: deriving messages at asOfSeq %d: %v", q.Session, proj.AsOfSeq, err))
		return
	}
	if msgs == nil {
		msgs = []json.RawMessage{}
	}
	_ = req.RespondJSON(MessagesReply{
		Session:           q.Session,
		AsOfSeq:           proj.AsOfSeq,
		ReplaceGeneration: proj.State.ReplaceGeneration,
		Nodes:             proj.State.Nodes,
		Messages:          msgs,
	})
}

// handleSurface serves SurfaceSubject: the stored projection JSON, as stored (Projection),
// including its "error" when the projection is stopped (no "409" here: this endpoint is how a
// stopped projection is inspected).
func (p *Projector) handleSurface(ctx context.Context, req micro.Request) {
	q, token, ok := parseQuery(req)
	if !ok {
		return
	}
	_, raw, ok := p.readProjection(ctx, req, q, token, true)
	if !ok {
		return
	}
	_ = req.Respond(raw)
}

// request sends q to subject and returns the reply body, or a *QueryError for an error reply.
func request(ctx context.Context, nc *nats.Conn, subject string, q QueryRequest) ([]byte, error) {
	if q.Session == "" {
		return nil, errors.New("agentlog-query: session id is empty")
	}
	if _, ok := ctx.Deadline(); !ok {
		wait := int64(0)
		if q.MinSeq != nil {
			wait = DefaultTimeoutMs
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(wait)*time.Millisecond+10*time.Second)
		defer cancel()
	} else if q.MinSeq != nil {
		// Let the service answer "408" before the client gives up.
		dl, _ := ctx.Deadline()
		ms := time.Until(dl).Milliseconds() - 250
		if ms < 1 {
			ms = 1
		}
		ms = min(ms, MaxTimeoutMs)
		q.TimeoutMs = &ms
	}
	data, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%s: no instance is serving %s (is a projector running?): %w", QueryService, subject, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: session %q: %w", QueryService, q.Session, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &QueryError{Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	return msg.Data, nil
}

// QueryMessages asks the agentlog-query service for the derived messages of session id. With
// minSeq >= 0 the service waits until the projection has applied seq minSeq (bounded by ctx's
// deadline, else 5000 ms); minSeq -1 does not wait. Error replies come back as *QueryError.
func QueryMessages(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (MessagesReply, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, MessagesSubject, q)
	if err != nil {
		return MessagesReply{}, err
	}
	var r MessagesReply
	if err := json.Unmarshal(body, &r); err != nil {
		return MessagesReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return r, nil
}

// QuerySurface asks the agentlog-query service for the stored projection of session id (the
// value of "messages.<token>" in agentlog_projections); minSeq as in QueryMessages. A stopped
// projection is returned with its Error set, not as an error.
func QuerySurface(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (Projection, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, SurfaceSubject, q)
	if err != nil {
		return Projection{}, err
	}
	var pr Projection
	if err := json.Unmarshal(body, &pr); err != nil {
		return Projection{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return pr, nil
}
