package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	QueryServiceVersion = "0.2.0" // 0.2.0: paged messages replies (partial, nodes)
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
	CodeTooLarge    = "413" // the reply is larger than the server's max payload
)

// QueryRequest is the request of both endpoints: {"session": id, "minSeq"?: n, "timeoutMs"?: n}.
// MinSeq (an event seq) makes the service wait until the projection's asOfSeq >= minSeq, for at
// most TimeoutMs milliseconds (default 5000, at most 60000). A negative or absent minSeq does not
// wait.
type QueryRequest struct {
	Session   string `json:"session"`
	MinSeq    *int64 `json:"minSeq,omitempty"`
	TimeoutMs *int64 `json:"timeoutMs,omitempty"`
	// Unit is the projection unit's key (projection endpoint only).
	Unit string `json:"unit,omitempty"`
	// Nodes (messages endpoint only) asks for the messages of these surface nodes (event seqs)
	// instead of the projection's: the continuation of a reply with Partial set. Every seq must
	// be a user/message, assistant/message or tool/result event at or below the projection's
	// asOfSeq ("400" otherwise).
	Nodes []int64 `json:"nodes,omitempty"`

	deadline time.Time // when waiting for minSeq ends: set once, when the request arrives
}

// MessagesReply is the reply of the messages endpoint: the session, the projection's asOfSeq and
// replaceGeneration, the surface nodes (seqs; for a request with Nodes, those) and deriveMessages
// of those nodes, one message per node that derives one.
//
// One reply carries at most the server's max payload (1 MiB by default). When the messages do not
// fit, Partial is set to k: Messages then holds the messages of the first k nodes asked for only
// (k may be 0 on a first page), and a request with Nodes = the nodes not covered yet continues. A
// first page's Nodes are all the projection's nodes; a continuation's are the nodes it covers. The
// events of surface nodes never change (the log is append-only), so the pages of one query are
// consistent with its first reply's asOfSeq. QueryMessages does this paging itself and returns
// the whole history.
type MessagesReply struct {
	Session           string            `json:"session"`
	AsOfSeq           int64             `json:"asOfSeq"`
	ReplaceGeneration int64             `json:"replaceGeneration"`
	Nodes             []int64           `json:"nodes"`
	Messages          []json.RawMessage `json:"messages"`
	Partial           *int              `json:"partial,omitempty"`
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
	// Requests are handed to goroutines at once (endpoint); the subscription's own buffer only
	// has to absorb bursts while the handler parses: 256 MiB or 100,000 requests per endpoint.
	pending := micro.WithEndpointPendingLimits(100_000, 256<<20)
	if err := svc.AddEndpoint("messages", p.endpoint(false, p.answerMessages), micro.WithEndpointSubject(MessagesSubject), pending); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("projector: adding endpoint messages: %w", err)
	}
	if err := svc.AddEndpoint("surface", p.endpoint(true, p.answerSurface), micro.WithEndpointSubject(SurfaceSubject), pending); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("projector: adding endpoint surface: %w", err)
	}
	if err := svc.AddEndpoint("projection", p.endpoint(true, p.answerSnapshot), micro.WithEndpointSubject(ProjectionSubject), pending); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("projector: adding endpoint projection: %w", err)
	}
	if err := svc.AddEndpoint("snapshot", p.endpoint(true, p.answerSnapshot), micro.WithEndpointSubject(SnapshotSubject), pending); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("projector: adding endpoint snapshot: %w", err)
	}
	return svc, nil
}

// responder answers one request: through micro while the handler runs (so the endpoint's stats
// count it), or, for a request handed to a goroutine to wait for minSeq, by publishing the same
// reply (micro's error headers) to its reply subject.
type responder interface {
	respond(data []byte)
	fail(code, desc string)
}

type syncResponder struct {
	req     micro.Request
	session string // named in the error of a reply that could not be sent ("" before parsing)
}

func (r syncResponder) respond(b []byte) {
	if err := r.req.Respond(b); err != nil {
		r.fail(replyErrCode(err), replyErrDesc(r.session, len(b), err))
	}
}
func (r syncResponder) fail(code, desc string) { _ = r.req.Error(code, desc, nil) }

// replyErrCode is the code of a reply that could not be sent: 413 when it is larger than the
// server's max payload, 500 otherwise.
func replyErrCode(err error) string {
	// micro reports a failed Respond as its own error type, with nats.go's text in it.
	if errors.Is(err, nats.ErrMaxPayload) || strings.Contains(err.Error(), nats.ErrMaxPayload.Error()) {
		return CodeTooLarge
	}
	return CodeInternal
}

func replyErrDesc(id string, n int, err error) string {
	return fmt.Sprintf("session %q: the reply of %d bytes could not be sent (the server's max payload bounds one reply): %v", id, n, err)
}

type replyResponder struct {
	nc      *nats.Conn
	reply   string
	session string
}

func (r replyResponder) respond(b []byte) {
	if r.reply != "" {
		if err := r.nc.Publish(r.reply, b); err != nil {
			r.fail(replyErrCode(err), replyErrDesc(r.session, len(b), err))
		}
	}
}

func (r replyResponder) fail(code, desc string) {
	if r.reply != "" {
		_ = r.nc.PublishMsg(&nats.Msg{Subject: r.reply, Header: nats.Header{
			micro.ErrorHeader: []string{desc}, micro.ErrorCodeHeader: []string{code}}})
	}
}

// answerFunc answers a request from a projection that satisfies it (raw is the stored value).
type answerFunc func(ctx context.Context, r responder, q QueryRequest, proj Projection, raw []byte)

// readStatus is the outcome of readNow.
type readStatus int

const (
	answered readStatus = iota // an error reply was sent
	ready                      // the projection satisfies the request
	mustWait                   // minSeq is not reached yet
)

// endpoint builds a handler. The handler only parses the request and hands it to a goroutine: at
// most cap(p.work) are being answered at once and cap(p.slots) more are waiting for minSeq; beyond
// that the request is answered "503" at once. The subscription is thus never held up by a slow
// answer (a large history, a KV read) and does not fall behind and drop requests (a slow
// consumer), and a burst of large queries cannot starve small ones for long.
func (p *Projector) endpoint(allowStopped bool, answer answerFunc) micro.HandlerFunc {
	return func(req micro.Request) {
		r := syncResponder{req: req}
		q, token, ok := parseQuery(r, req.Data())
		if !ok {
			return
		}
		r.session = q.Session
		q.deadline = time.Now().Add(time.Duration(q.timeoutMs()) * time.Millisecond)
		p.reqMu.Lock()
		if p.closing {
			p.reqMu.Unlock()
			r.fail(CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
			return
		}
		p.reqs.Add(1)
		p.reqMu.Unlock()
		select {
		case p.work <- struct{}{}:
		default:
			p.reqs.Done()
			r.fail(CodeUnavailable, fmt.Sprintf("session %q: projector %s is answering %d queries already; retry", q.Session, p.name, cap(p.work)))
			return
		}
		ar := replyResponder{nc: p.nc, reply: req.Reply(), session: q.Session}
		go func() {
			defer p.reqs.Done()
			ctx := p.runCtx
			proj, raw, st := p.readNow(ctx, ar, q, token, allowStopped)
			// A session whose state outgrew KV is answered by folding its log, which may wait
			// for minSeq and for a fold slot: that is waiting, not answering.
			slow := st == ready && !allowStopped && proj.Error != nil && proj.Error.Rule == RuleStateTooLarge
			switch {
			case st == answered:
				<-p.work
				return
			case st == ready && !slow:
				answer(ctx, ar, q, proj, raw)
				<-p.work
				return
			}
			// Waiting frees the work slot for others and takes a wait slot.
			<-p.work
			select {
			case p.slots <- struct{}{}:
			default:
				ar.fail(CodeUnavailable, fmt.Sprintf("session %q: projector %s has %d queries waiting already", q.Session, p.name, cap(p.slots)))
				return
			}
			defer func() { <-p.slots }()
			if st == mustWait {
				var ok bool
				if proj, raw, ok = p.waitProjection(ctx, ar, q, token, allowStopped); !ok {
					return
				}
			}
			answer(ctx, ar, q, proj, raw)
		}()
	}
}

// parseQuery decodes and checks a request; on failure it has already answered "400".
func parseQuery(r responder, data []byte) (QueryRequest, string, bool) {
	var q QueryRequest
	if err := json.Unmarshal(data, &q); err != nil {
		// Name the session when the request names one, even if another field is wrong.
		var named struct {
			Session string `json:"session"`
		}
		where := ""
		if json.Unmarshal(data, &named) == nil && named.Session != "" {
			where = fmt.Sprintf("session %q: ", named.Session)
		}
		r.fail(CodeBadRequest, fmt.Sprintf("bad request: %snot a JSON object {\"session\", \"minSeq\"?, \"timeoutMs\"?, \"unit\"?, \"nodes\"?}: %v", where, err))
		return q, "", false
	}
	if q.Session == "" {
		r.fail(CodeBadRequest, "bad request: \"session\" is required")
		return q, "", false
	}
	token, err := ajs.Token(q.Session)
	if err != nil {
		r.fail(CodeBadRequest, fmt.Sprintf("bad request: session %q: %v", q.Session, err))
		return q, "", false
	}
	return q, token, true
}

// timeoutMs is how long q may wait for minSeq, in ms.
func (q QueryRequest) timeoutMs() int64 {
	if q.TimeoutMs != nil && *q.TimeoutMs > 0 {
		return min(*q.TimeoutMs, MaxTimeoutMs)
	}
	return DefaultTimeoutMs
}

// waits reports whether q asks to wait for a seq.
func (q QueryRequest) waits() bool { return q.MinSeq != nil && *q.MinSeq >= 0 }

// readNow reads the stored projection once.
func (p *Projector) readNow(ctx context.Context, r responder, q QueryRequest, token string, allowStopped bool) (Projection, []byte, readStatus) {
	key := Key(token)
	e, err := p.store.Projections.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if q.waits() {
			return Projection{}, nil, mustWait
		}
		r.fail(CodeNotFound, fmt.Sprintf("session %q: no projection (unknown session, or none of its events projected yet)", q.Session))
		return Projection{}, nil, answered
	}
	if err != nil {
		r.fail(CodeInternal, fmt.Sprintf("session %q: reading projection %s: %v", q.Session, key, err))
		return Projection{}, nil, answered
	}
	proj, current, err := decodeProjection(e.Value())
	switch {
	case err != nil:
		r.fail(CodeInternal, fmt.Sprintf("session %q: projection %s: %v", q.Session, key, err))
		return Projection{}, nil, answered
	case !current && q.waits():
		return Projection{}, nil, mustWait
	case !current:
		r.fail(CodeNotFound, fmt.Sprintf("session %q: stored projection has another stateVersion; it is being rebuilt", q.Session))
		return Projection{}, nil, answered
	case proj.Error != nil && allowStopped:
		return proj, e.Value(), ready
	case proj.Error != nil && proj.Error.Rule == RuleStateTooLarge:
		// Not a broken log: the state outgrew one KV value. answerMessages folds the log itself.
		return proj, e.Value(), ready
	case proj.Error != nil:
		r.fail(CodeStopped, stoppedText(q.Session, proj.Error))
		return Projection{}, nil, answered
	case q.waits() && proj.AsOfSeq < *q.MinSeq:
		return Projection{}, nil, mustWait
	}
	return proj, e.Value(), ready
}

func stoppedText(id string, pe *ProjectionError) string {
	return fmt.Sprintf("session %q: projection stopped at seq %d (rule %s): %s", id, pe.Seq, pe.Rule, pe.Message)
}

// waitProjection watches the projection's KV key until asOfSeq >= minSeq (or the projection
// stops), for at most timeoutMs. On failure it has already answered: "408" on timeout, "409" for a
// stopped projection (unless allowStopped), "503" when the projector stops meanwhile.
func (p *Projector) waitProjection(ctx context.Context, r responder, q QueryRequest, token string, allowStopped bool) (Projection, []byte, bool) {
	key := Key(token)
	minSeq := *q.MinSeq
	timeoutMs := q.timeoutMs()
	wctx, cancel := context.WithDeadline(ctx, q.deadline)
	defer cancel()
	w, err := p.store.Projections.Watch(wctx, key)
	if err != nil {
		r.fail(CodeInternal, fmt.Sprintf("session %q: watching projection %s: %v", q.Session, key, err))
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
				r.fail(CodeInternal, fmt.Sprintf("session %q: watch of projection %s ended", q.Session, key))
				return Projection{}, nil, false
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			proj, current, err := decodeProjection(e.Value())
			if err != nil || !current {
				continue
			}
			last = &proj
			if proj.Error != nil {
				if allowStopped || proj.Error.Rule == RuleStateTooLarge {
					return proj, e.Value(), true // too large: answerMessages folds the log
				}
				r.fail(CodeStopped, stoppedText(q.Session, proj.Error))
				return Projection{}, nil, false
			}
			if proj.AsOfSeq >= minSeq {
				return proj, e.Value(), true
			}
		case <-wctx.Done():
			if ctx.Err() != nil {
				r.fail(CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
				return Projection{}, nil, false
			}
			at := "no projection yet"
			if last != nil {
				at = fmt.Sprintf("asOfSeq %d", last.AsOfSeq)
			}
			r.fail(CodeTimeout, fmt.Sprintf("session %q: projection did not reach seq %d within %d ms (%s)", q.Session, minSeq, timeoutMs, at))
			return Projection{}, nil, false
		}
	}
}

// answerMessages serves MessagesSubject: the stored projection's nodes, and their messages
// derived (session.DeriveMessages) from the session's events read from the log. It does not
// refold the log.
func (p *Projector) answerMessages(ctx context.Context, r responder, q QueryRequest, proj Projection, _ []byte) {
	tooLarge := proj.Error != nil && proj.Error.Rule == RuleStateTooLarge
	var folded map[int64]session.Event // the surface events read by foldLog
	if tooLarge && q.Nodes == nil {
		// The session's surface is larger than the stored state may be: fold its log here, for
		// this query (slower, but the history is still served).
		var ok bool
		if proj, folded, ok = p.foldLog(ctx, r, q); !ok {
			return
		}
	}
	nodes := proj.State.Nodes
	if q.Nodes != nil {
		for _, seq := range q.Nodes {
			if seq < 0 || (seq > proj.AsOfSeq && !tooLarge) {
				r.fail(CodeBadRequest, fmt.Sprintf("bad request: session %q: node seq %d is not an event at or below the projection's asOfSeq %d", q.Session, seq, proj.AsOfSeq))
				return
			}
		}
		nodes = q.Nodes
	}
	events := folded
	if events == nil {
		var err error
		if events, err = p.nodes.events(ctx, p.store, q.Session, nodes, q.Nodes == nil); err != nil {
			r.fail(CodeInternal, fmt.Sprintf("session %q: %v", q.Session, err))
			return
		}
	}
	byseq := func(seq int64) (session.Event, error) {
		if ev, ok := events[seq]; ok {
			return ev, nil
		}
		return session.Event{}, fmt.Errorf("session %q: surface node seq %d is not a user, assistant or tool-result event of its log", q.Session, seq)
	}
	reply := MessagesReply{
		Session:           q.Session,
		AsOfSeq:           proj.AsOfSeq,
		ReplaceGeneration: proj.State.ReplaceGeneration,
		Nodes:             nodes,
		Messages:          []json.RawMessage{},
	}
	// A first page carries every node; a continuation only the nodes it covers, added below.
	first := q.Nodes == nil
	if !first {
		reply.Nodes = []int64{}
	}
	envelope, err := encodeReply(reply)
	if err != nil {
		r.fail(CodeInternal, fmt.Sprintf("session %q: encoding the reply: %v", q.Session, err))
		return
	}
	// A reply without headers (success) may take the whole max payload; keep a little room.
	limit := int64(1 << 62)
	if max := p.nc.MaxPayload(); max > 0 {
		limit = max - 64
	}
	if int64(len(envelope)) > limit {
		r.fail(CodeTooLarge, fmt.Sprintf("session %q: its %d surface nodes alone take %d bytes, more than one reply can carry (the server's max payload is %d bytes)",
			q.Session, len(nodes), len(envelope), p.nc.MaxPayload()))
		return
	}
	// Room for `,"partial":k` too, in case the reply cannot cover every node.
	size := int64(len(envelope) + len(`,"partial":`) + len(strconv.Itoa(len(nodes))))
	covered := len(nodes)
	for i, seq := range nodes {
		msgs, err := session.DeriveMessages([]int64{seq}, byseq)
		if err != nil {
			code := CodeInternal
			if q.Nodes != nil {
				code = CodeBadRequest
			}
			msg := err.Error()
			var se *session.Error
			if errors.As(err, &se) && se.Session == "" {
				msg = strings.TrimPrefix(se.Msg, `session "" `) // DeriveMessages does not know the session; this reply names it
			}
			r.fail(code, fmt.Sprintf("session %q: deriving the message of surface node seq %d at asOfSeq %d: %s", q.Session, seq, proj.AsOfSeq, msg))
			return
		}
		var add int64
		for _, m := range msgs {
			add += int64(len(m)) + 1 // the message and its comma
		}
		if !first {
			add += int64(len(strconv.FormatInt(seq, 10))) + 1 // the node and its comma
		}
		if size+add > limit {
			if i == 0 && !first {
				// Alone on a page with the smallest envelope, it still does not fit.
				r.fail(CodeTooLarge, fmt.Sprintf("session %q: the message of surface node seq %d takes %d bytes; with the reply's other %d bytes that is more than one reply can carry (the server's max payload is %d bytes)",
					q.Session, seq, add, size, p.nc.MaxPayload()))
				return
			}
			covered = i
			reply.Partial = &covered
			break
		}
		size += add
		reply.Messages = append(reply.Messages, msgs...)
	}
	if !first {
		reply.Nodes = nodes[:covered]
	}
	b, err := encodeReply(reply)
	if err != nil {
		r.fail(CodeInternal, fmt.Sprintf("session %q: encoding the reply: %v", q.Session, err))
		return
	}
	r.respond(b)
}

// foldLog folds the whole log of q's session into a surface, for a session whose stored messages
// state stopped with RuleStateTooLarge, and returns it with the log's surface-eligible events (all
// that deriving its messages reads). The log is streamed record by record and only those events
// are kept (copied), and at most cap(p.folds) such folds run at once, since these sessions are
// large by definition. With minSeq, it first waits for the log to reach it. Both waits end at
// q's deadline. It has answered (false) when the log breaks a rule, cannot be read, or does not
// reach minSeq in time.
func (p *Projector) foldLog(ctx context.Context, r responder, q QueryRequest) (Projection, map[int64]session.Event, bool) {
	deadline := q.deadline
	if deadline.IsZero() {
		deadline = time.Now().Add(time.Duration(q.timeoutMs()) * time.Millisecond)
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	gone := func() {
		if ctx.Err() != nil {
			r.fail(CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
		} else {
			what := "no fold of a whole log was free"
			if q.waits() {
				what = fmt.Sprintf("its log did not reach seq %d, or no fold of a whole log was free", *q.MinSeq)
			}
			r.fail(CodeTimeout, fmt.Sprintf("session %q: %s within %d ms (its state is too large to store; messages are folded from the log)", q.Session, what, q.timeoutMs()))
		}
	}
	if q.waits() {
		for {
			tail, err := p.store.GetTail(dctx, q.Session)
			if err == nil && tail.NextSeq-1 >= *q.MinSeq {
				break
			}
			select {
			case <-dctx.Done():
				gone()
				return Projection{}, nil, false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	select {
	case p.folds <- struct{}{}:
		defer func() { <-p.folds }()
	case <-dctx.Done():
		gone()
		return Projection{}, nil, false
	}
	kept := map[int64]session.Event{}
	byseq := func(seq int64) (session.Event, error) {
		if ev, ok := kept[seq]; ok {
			return ev, nil
		}
		return session.Event{}, fmt.Errorf("session %q: event seq %d is not a user, assistant or tool-result event of the log", q.Session, seq)
	}
	surf := session.NewSurface()
	var refused error
	_, err := p.store.ReadRecords(ctx, q.Session, func(_ uint64, evs []session.Event) error {
		for _, ev := range evs {
			if err := surf.Apply(q.Session, ev, byseq); err != nil {
				refused = err
				return err
			}
			if session.SurfaceEligible(ev.Type) {
				kept[ev.Seq] = owned(ev)
			}
		}
		return nil
	})
	switch {
	case refused != nil:
		r.fail(CodeStopped, fmt.Sprintf("session %q: %v", q.Session, refused))
		return Projection{}, nil, false
	case err != nil:
		r.fail(CodeInternal, fmt.Sprintf("session %q: reading the log: %v", q.Session, err))
		return Projection{}, nil, false
	}
	return fromSurface(surf), kept, true
}

// encodeReply encodes v without HTML-escaping (messages keep their bytes '<', '>', '&' as stored)
// and without the encoder's trailing newline.
func encodeReply(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// answerSurface serves SurfaceSubject: the stored projection JSON, as stored (Projection),
// including its "error" when the projection is stopped (no "409" here: this endpoint is how a
// stopped projection is inspected).
func (p *Projector) answerSurface(_ context.Context, r responder, _ QueryRequest, _ Projection, raw []byte) {
	r.respond(raw)
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
// deadline, else 5000 ms); minSeq -1 does not wait. Error replies come back as *QueryError. A
// history larger than one reply is fetched in pages (MessagesReply.Partial) and returned whole;
// only a single message larger than the server's max payload is refused ("413", naming its seq).
func QueryMessages(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (MessagesReply, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	r, err := queryMessagesPage(ctx, nc, q)
	if err != nil {
		return MessagesReply{}, err
	}
	// A history larger than one reply comes in pages: ask for the messages of the nodes not
	// covered yet until none is left.
	rest := r.Nodes
	for page, firstPage := r, true; page.Partial != nil; firstPage = false {
		k := *page.Partial
		if k < 0 || k > len(rest) || (k == 0 && !firstPage) { // a continuation must cover a node
			return MessagesReply{}, fmt.Errorf("%s: session %q: malformed reply: partial %d of %d nodes", QueryService, id, k, len(rest))
		}
		if rest = rest[k:]; len(rest) == 0 {
			break
		}
		if page, err = queryMessagesPage(ctx, nc, QueryRequest{Session: id, Nodes: rest}); err != nil {
			return MessagesReply{}, err
		}
		r.Messages = append(r.Messages, page.Messages...)
	}
	r.Partial = nil
	return r, nil
}

// queryMessagesPage sends one request to the messages endpoint.
func queryMessagesPage(ctx context.Context, nc *nats.Conn, q QueryRequest) (MessagesReply, error) {
	body, err := request(ctx, nc, MessagesSubject, q)
	if err != nil {
		return MessagesReply{}, err
	}
	var r MessagesReply
	if err := json.Unmarshal(body, &r); err != nil {
		return MessagesReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, q.Session, err)
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

// Endpoints of the projection units.
const (
	ProjectionSubject = "agentlog.query.projection" // one unit's view: ProjectionReply
	SnapshotSubject   = "agentlog.query.snapshot"   // every unit's view at one asOfSeq: SnapshotReply
)

// UnitView is one unit's part of a snapshot: its stateVersion, its asOfSeq (the snapshot's, or
// lower for a stopped unit), its view (Def.View of its state) and, for a stopped unit, its error.
type UnitView struct {
	StateVersion int              `json:"stateVersion"`
	AsOfSeq      int64            `json:"asOfSeq"`
	View         json.RawMessage  `json:"view"`
	Error        *ProjectionError `json:"error,omitempty"`
}

// SnapshotReply is the reply of the snapshot endpoint: the views of every registered unit of a
// session at one consistent asOfSeq (units stopped by an error may stand lower, with their error).
type SnapshotReply struct {
	Session string              `json:"session"`
	AsOfSeq int64               `json:"asOfSeq"`
	Units   map[string]UnitView `json:"units"`
}

// ProjectionReply is the reply of the projection endpoint: one unit's view of a session.
type ProjectionReply struct {
	Session string `json:"session"`
	Unit    string `json:"unit"`
	UnitView
}

// ErrNoProjection is returned (wrapped) by ReadSnapshot for a session with no stored projection.
var ErrNoProjection = errors.New("no projection (unknown session, or none of its events projected yet)")

// ReadSnapshot reads the stored states of every unit of reg for session id and returns their
// views at one consistent asOfSeq. The states of one checkpoint are written together but not
// atomically, so a read that sees them at different seqs is repeated; units still behind after
// that (a unit registered since, or one whose stored stateVersion differs) are folded from the
// log here, to the end of the log, and written back with a revision compare-and-swap (the
// rebuild in place of a new stateVersion). Errors: ErrNoProjection (wrapped), a log or KV failure.
func ReadSnapshot(ctx context.Context, store *ajs.Store, reg *Registry, id string) (SnapshotReply, error) {
	token, err := ajs.Token(id)
	if err != nil {
		return SnapshotReply{}, fmt.Errorf("session %q: %w", id, err)
	}
	defs := reg.list()
	var ss *sessState
	for attempt := 0; ; attempt++ {
		var consistent bool
		ss, consistent, err = loadAll(ctx, store.Projections, defs, token, id)
		if err != nil {
			return SnapshotReply{}, err
		}
		if ss.gate().rev == 0 {
			return SnapshotReply{}, fmt.Errorf("session %q: %w", id, ErrNoProjection)
		}
		if consistent {
			break
		}
		if attempt == 10 {
			if err := catchUp(ctx, store, ss); err != nil {
				return SnapshotReply{}, fmt.Errorf("session %q: %w", id, err)
			}
			_, _ = writeSessions(ctx, store.JS, []*sessState{ss}) // best effort; the owner reloads on conflict
			break
		}
		select {
		case <-ctx.Done():
			return SnapshotReply{}, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
	rep := SnapshotReply{Session: id, AsOfSeq: ss.gate().asOfSeq, Units: map[string]UnitView{}}
	for _, u := range ss.units {
		var st any = u.state
		if u.def.gate {
			st = fromSurface(u.state.(*session.Surface)).State
		}
		b, err := json.Marshal(u.def.view(st))
		if err != nil {
			return SnapshotReply{}, fmt.Errorf("session %q: unit %q: encoding its view: %w", id, u.def.Key, err)
		}
		rep.Units[u.def.Key] = UnitView{StateVersion: u.def.StateVersion, AsOfSeq: u.asOfSeq, View: b, Error: u.err}
		if u.err == nil {
			rep.AsOfSeq = max(rep.AsOfSeq, u.asOfSeq)
		}
	}
	return rep, nil
}

// loadAll reads every unit's stored state; consistent reports whether they all stand at the
// messages unit's asOfSeq (units stopped by an error excepted) with the registered stateVersion.
func loadAll(ctx context.Context, kv jetstream.KeyValue, defs []*Definition, token, id string) (*sessState, bool, error) {
	ss := &sessState{token: token, id: id}
	consistent := true
	for _, d := range defs {
		u := newUnitState(d)
		ss.units = append(ss.units, u)
		e, err := kv.Get(ctx, UnitKey(d.Key, token))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			consistent = false
			continue
		}
		if err != nil {
			return nil, false, &transientError{fmt.Errorf("session %q: loading projection %s: %w", id, UnitKey(d.Key, token), err)}
		}
		if !decodeUnit(u, e.Value(), e.Revision()) {
			consistent = false
		}
	}
	g := ss.gate()
	for _, u := range ss.units[1:] {
		if u.err == nil && u.asOfSeq != g.asOfSeq || u.err != nil && g.err == nil && u.asOfSeq > g.asOfSeq {
			consistent = false
		}
	}
	return ss, consistent, nil
}

// answerSnapshot serves SnapshotSubject (and ProjectionSubject when q.Unit is set).
func (p *Projector) answerSnapshot(ctx context.Context, r responder, q QueryRequest, _ Projection, _ []byte) {
	if q.Unit != "" && p.registry.get(q.Unit) == nil {
		r.fail(CodeNotFound, fmt.Sprintf("session %q: no projection unit %q is registered (units: %v)", q.Session, q.Unit, p.registry.Keys()))
		return
	}
	snap, err := ReadSnapshot(ctx, p.store, p.registry, q.Session)
	if errors.Is(err, ErrNoProjection) {
		r.fail(CodeNotFound, err.Error())
		return
	}
	if err != nil {
		r.fail(CodeInternal, fmt.Sprintf("session %q: reading the snapshot: %v", q.Session, err))
		return
	}
	var b []byte
	if q.Unit != "" {
		b, err = json.Marshal(ProjectionReply{Session: q.Session, Unit: q.Unit, UnitView: snap.Units[q.Unit]})
	} else {
		b, err = json.Marshal(snap)
	}
	if err != nil {
		r.fail(CodeInternal, fmt.Sprintf("session %q: encoding the reply: %v", q.Session, err))
		return
	}
	r.respond(b)
}

// QuerySnapshot asks the agentlog-query service for the views of every unit of session id at one
// consistent asOfSeq; minSeq as in QueryMessages. Stopped units come back with their error.
func QuerySnapshot(ctx context.Context, nc *nats.Conn, id string, minSeq int64) (SnapshotReply, error) {
	q := QueryRequest{Session: id}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, SnapshotSubject, q)
	if err != nil {
		return SnapshotReply{}, err
	}
	var r SnapshotReply
	if err := json.Unmarshal(body, &r); err != nil {
		return SnapshotReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return r, nil
}

// QueryProjection asks the agentlog-query service for the view of one unit of session id; minSeq
// as in QueryMessages. An unknown unit is a *QueryError "404".
func QueryProjection(ctx context.Context, nc *nats.Conn, id, unit string, minSeq int64) (ProjectionReply, error) {
	if unit == "" {
		return ProjectionReply{}, errors.New("agentlog-query: unit is empty")
	}
	q := QueryRequest{Session: id, Unit: unit}
	if minSeq >= 0 {
		q.MinSeq = &minSeq
	}
	body, err := request(ctx, nc, ProjectionSubject, q)
	if err != nil {
		return ProjectionReply{}, err
	}
	var r ProjectionReply
	if err := json.Unmarshal(body, &r); err != nil {
		return ProjectionReply{}, fmt.Errorf("%s: session %q: malformed reply: %w", QueryService, id, err)
	}
	return r, nil
}
