package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/jsvalue"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// QueryServiceVersion is the version of the agentlog-query micro service (client.client.QueryService).
// 0.2.0: paged messages replies (partial, nodes). 0.3.0: external messages (a message too large for a reply).
const QueryServiceVersion = "0.3.0"

// query is a request being answered: the wire request, and when its wait for minSeq ends (set
// once, when the request arrives).
type query struct {
	client.QueryRequest
	deadline time.Time
	archived *archivedView // the session's log lives in cold storage: answered from its archive
}

// addService starts the agentlog-query micro service (queue group "q", micro's default).
func (p *Projector) addService() (*service, error) {
	svc, err := newService(p.nc, micro.Config{
		Name:        client.QueryService,
		Version:     QueryServiceVersion,
		Description: "agentlog projections: derived messages and stored surfaces of sessions",
		Metadata:    map[string]string{"instance": p.name},
	})
	if err != nil {
		return nil, fmt.Errorf("projector: starting service %s: %w", client.QueryService, err)
	}
	// Requests are handed to goroutines at once (endpoint); the subscription's own buffer only
	// has to absorb bursts while the handler parses: 256 MiB or 100,000 requests per endpoint.
	for _, e := range []struct {
		name, subject string
		allowStopped  bool
		answer        answerFunc
	}{
		{"messages", client.MessagesSubject, false, p.answerMessages},
		{"surface", client.SurfaceSubject, true, p.answerSurface},
		{"projection", client.ProjectionSubject, true, p.answerSnapshot},
		{"snapshot", client.SnapshotSubject, true, p.answerSnapshot},
	} {
		if err := svc.addEndpoint(e.name, e.subject, p.endpoint(e.name, e.allowStopped, e.answer), 100_000, 256<<20); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("projector: adding endpoint %s: %w", e.name, err)
		}
	}
	return svc, nil
}

// responder answers one request, once: a reply, or an error reply (micro's error headers).
type responder interface {
	respond(data []byte)
	fail(code client.Code, desc string)
}

// replyErrCode is the code of a reply that could not be sent: 413 when it is larger than the
// server's max payload, 500 otherwise.
func replyErrCode(err error) client.Code {
	if errors.Is(err, nats.ErrMaxPayload) || strings.Contains(err.Error(), nats.ErrMaxPayload.Error()) {
		return client.CodeTooLarge
	}
	return client.CodeInternal
}

func replyErrDesc(id string, n int, err error) string {
	return fmt.Sprintf("session %q: the reply of %d bytes could not be sent (the server's max payload bounds one reply): %v", id, n, err)
}

// replyResponder publishes the reply to the request's reply subject and counts it (meter).
type replyResponder struct {
	nc      *nats.Conn
	reply   string
	session string // named in the error of a reply that could not be sent ("" before parsing)
	meter
}

func (r replyResponder) respond(b []byte) {
	if r.reply != "" {
		if err := r.nc.Publish(r.reply, b); err != nil {
			r.fail(replyErrCode(err), replyErrDesc(r.session, len(b), err))
			return
		}
	}
	r.done(codeOK, "")
}

func (r replyResponder) fail(code client.Code, desc string) {
	r.done(code, desc)
	if r.reply != "" {
		_ = r.nc.PublishMsg(&nats.Msg{Subject: r.reply, Header: nats.Header{
			micro.ErrorHeader: []string{desc}, micro.ErrorCodeHeader: []string{string(code)}}})
	}
}

// codeOK is the code label of a successful reply.
const codeOK client.Code = "200"

// answerFunc answers a request from a projection that satisfies it (raw is the stored value).
type answerFunc func(ctx context.Context, r responder, q query, proj Projection, raw []byte)

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
func (p *Projector) endpoint(name string, allowStopped bool, answer answerFunc) func(*endpointStats, *nats.Msg) {
	return func(ep *endpointStats, req *nats.Msg) {
		ar := replyResponder{nc: p.nc, reply: req.Reply, meter: meter{m: p.metrics, ep: ep, endpoint: name, start: time.Now(),
			span: p.startQuerySpan(name, req.Header)}}
		ar.meter.session = &ar.session
		q, token, ok := parseQuery(ar, req.Data)
		if !ok {
			return
		}
		ar.session = q.Session
		q.deadline = time.Now().Add(time.Duration(q.timeoutMs()) * time.Millisecond)
		p.reqMu.Lock()
		if p.closing {
			p.reqMu.Unlock()
			ar.fail(client.CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
			return
		}
		p.reqs.Add(1)
		p.reqMu.Unlock()
		select {
		case p.work <- struct{}{}:
		default:
			p.reqs.Done()
			ar.fail(client.CodeUnavailable, fmt.Sprintf("session %q: projector %s is answering %d queries already; retry", q.Session, p.name, cap(p.work)))
			return
		}
		go func() {
			defer p.reqs.Done()
			ctx := p.runCtx
			proj, raw, st := p.readNow(ctx, ar, &q, token, allowStopped)
			// A session whose state outgrew KV is answered by folding its log, which may wait
			// for minSeq and for a fold slot: that is waiting, not answering.
			slow := st == ready && !allowStopped && proj.Error != nil && proj.Error.Rule == session.RuleStateTooLarge
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
				ar.fail(client.CodeUnavailable, fmt.Sprintf("session %q: projector %s has %d queries waiting already", q.Session, p.name, cap(p.slots)))
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
func parseQuery(r responder, data []byte) (query, string, bool) {
	var q query
	if err := json.Unmarshal(data, &q.QueryRequest); err != nil {
		// Name the session when the request names one, even if another field is wrong.
		var named struct {
			Session string `json:"session"`
		}
		where := ""
		if json.Unmarshal(data, &named) == nil && named.Session != "" {
			where = fmt.Sprintf("session %s: ", wire.QuoteID(named.Session))
		}
		r.fail(client.CodeBadRequest, fmt.Sprintf("bad request: %snot a JSON object {\"session\", \"minSeq\"?, \"timeoutMs\"?, \"unit\"?, \"nodes\"?}: %v", where, err))
		return q, "", false
	}
	// Before the decoded id: decoding has turned invalid UTF-8 and lone surrogates into U+FFFD.
	if err := wire.CheckRawIDFields(data, "session"); err != nil {
		r.fail(client.CodeBadRequest, fmt.Sprintf("bad request: %v", err))
		return q, "", false
	}
	if q.Session == "" {
		r.fail(client.CodeBadRequest, "bad request: \"session\" is required")
		return q, "", false
	}
	token, err := wire.Token(q.Session)
	if err != nil {
		r.fail(client.CodeBadRequest, fmt.Sprintf("bad request: %v", err)) // err names the id, bounded
		return q, "", false
	}
	// The protocol's integers are safe integers (JSON numbers as JavaScript reads them exactly).
	for _, f := range []struct {
		name string
		v    *int64
	}{{"minSeq", q.MinSeq}, {"timeoutMs", q.TimeoutMs}} {
		if f.v != nil && !safeInt(*f.v) {
			r.fail(client.CodeBadRequest, fmt.Sprintf("bad request: session %q: %s %d is not a safe integer (|n| ≤ 2^53 − 1)", q.Session, f.name, *f.v))
			return q, "", false
		}
	}
	for _, n := range q.Nodes {
		if !safeInt(n) {
			r.fail(client.CodeBadRequest, fmt.Sprintf("bad request: session %q: nodes: %d is not a safe integer (|n| ≤ 2^53 − 1)", q.Session, n))
			return q, "", false
		}
	}
	return q, token, true
}

// safeInt reports whether n is a safe integer: |n| ≤ 2^53 − 1 (Number.MAX_SAFE_INTEGER).
func safeInt(n int64) bool { return n >= -jsvalue.MaxSafeInteger && n <= jsvalue.MaxSafeInteger }

// timeoutMs is how long q may wait for minSeq, in ms.
func (q query) timeoutMs() int64 {
	if q.TimeoutMs != nil && *q.TimeoutMs > 0 {
		return min(*q.TimeoutMs, client.MaxTimeoutMs)
	}
	return client.DefaultTimeoutMs
}

// waits reports whether q asks to wait for a seq.
func (q query) waits() bool { return q.MinSeq != nil && *q.MinSeq >= 0 }

// readNow reads the stored projection once.
func (p *Projector) readNow(ctx context.Context, r responder, qp *query, token string, allowStopped bool) (Projection, []byte, readStatus) {
	q := *qp
	key := Key(token)
	e, err := p.store.Projections.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Archived: its projection states are in its archive (a read never restores it).
		if v, ok, aerr := p.archived(ctx, q.Session); aerr != nil {
			r.fail(client.CodeInternal, fmt.Sprintf("session %q: reading its archive: %v", q.Session, aerr))
			return Projection{}, nil, answered
		} else if ok {
			qp.archived = v
			switch proj := v.messages; {
			case proj.Error != nil && !allowStopped && proj.Error.Rule != session.RuleStateTooLarge:
				r.fail(client.CodeStopped, stoppedText(q.Session, proj.Error))
				return Projection{}, nil, answered
			case q.waits() && proj.AsOfSeq < *q.MinSeq:
				r.fail(client.CodeTimeout, fmt.Sprintf("session %q is archived at seq %d: seq %d will not come until it is written again", q.Session, proj.AsOfSeq, *q.MinSeq))
				return Projection{}, nil, answered
			}
			return v.messages, v.raw, ready
		}
		// One metadata read: a session being removed (its keys purged already, its log maybe not)
		// is not found; an unknown one (no metadata, no records) has nothing to wait for.
		_, _, known, removing, merr := sessionMetaState(ctx, p.store, q.Session)
		if removing {
			failGone(r, q.Session, errSessionRemoving)
			return Projection{}, nil, answered
		}
		if q.waits() && merr == nil && !known {
			if empty, err := logEmpty(ctx, p.store, q.Session); err == nil && empty {
				// Nothing to wait for: an unknown session gets its 404 at once, as without minSeq.
				r.fail(client.CodeNotFound, fmt.Sprintf("session %q: no projection (unknown session: no metadata and no events)", q.Session))
				return Projection{}, nil, answered
			}
		}
		if q.waits() {
			return Projection{}, nil, mustWait
		}
		r.fail(client.CodeNotFound, fmt.Sprintf("session %q: no projection (unknown session, or none of its events projected yet)", q.Session))
		return Projection{}, nil, answered
	}
	if err != nil {
		r.fail(client.CodeInternal, fmt.Sprintf("session %q: reading projection %s: %v", q.Session, key, err))
		return Projection{}, nil, answered
	}
	proj, current, err := decodeProjection(e.Value())
	raw := e.Value()
	if err == nil && current {
		if proj, raw, err = p.checkStored(ctx, q.Session, token, raw, e.Revision()); failGone(r, q.Session, err) {
			return Projection{}, nil, answered
		} else if err != nil {
			r.fail(client.CodeInternal, fmt.Sprintf("session %q: checking projection %s against the log: %v", q.Session, key, err))
			return Projection{}, nil, answered
		}
	}
	switch {
	case err != nil:
		r.fail(client.CodeInternal, fmt.Sprintf("session %q: projection %s: %v", q.Session, key, err))
		return Projection{}, nil, answered
	case !current && q.waits():
		return Projection{}, nil, mustWait
	case !current:
		r.fail(client.CodeNotFound, fmt.Sprintf("session %q: stored projection has another stateVersion; it is being rebuilt", q.Session))
		return Projection{}, nil, answered
	case proj.Error != nil && allowStopped:
		return proj, raw, ready
	case proj.Error != nil && proj.Error.Rule == session.RuleStateTooLarge:
		// Not a broken log: the state outgrew one KV value. answerMessages folds the log itself.
		return proj, raw, ready
	case proj.Error != nil:
		r.fail(client.CodeStopped, stoppedText(q.Session, proj.Error))
		return Projection{}, nil, answered
	case q.waits() && proj.AsOfSeq < *q.MinSeq:
		return Projection{}, nil, mustWait
	}
	return proj, raw, ready
}

// failGone answers "404" when err is checkStored's errSessionRemoving or errSessionGone (a
// session being removed says so: client.RemovingText) and reports whether it did.
func failGone(r responder, id string, err error) bool {
	switch {
	case errors.Is(err, errSessionRemoving):
		r.fail(client.CodeNotFound, client.RemovingText(id))
	case errors.Is(err, errSessionGone):
		r.fail(client.CodeNotFound, fmt.Sprintf("session %q: not found (removed, or never created)", id))
	default:
		return false
	}
	return true
}

func stoppedText(id string, pe *ProjectionError) string {
	return fmt.Sprintf("session %q: projection stopped at seq %d (rule %s): %s", id, pe.Seq, pe.Rule, pe.Message)
}

// waitProjection watches the projection's KV key until asOfSeq >= minSeq (or the projection
// stops), for at most timeoutMs. On failure it has already answered: "408" on timeout, "409" for a
// stopped projection (unless allowStopped), "503" when the projector stops meanwhile.
func (p *Projector) waitProjection(ctx context.Context, r responder, q query, token string, allowStopped bool) (Projection, []byte, bool) {
	key := Key(token)
	minSeq := *q.MinSeq
	timeoutMs := q.timeoutMs()
	wctx, cancel := context.WithDeadline(ctx, q.deadline)
	defer cancel()
	w, err := p.store.Projections.Watch(wctx, key)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		// The wait ended before the watch started (a wait of a few ms): a timeout, not a failure.
		r.fail(client.CodeTimeout, fmt.Sprintf("session %q: projection did not reach seq %d within %d ms", q.Session, minSeq, timeoutMs))
		return Projection{}, nil, false
	}
	if err != nil {
		r.fail(client.CodeInternal, fmt.Sprintf("session %q: watching projection %s: %v", q.Session, key, err))
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
				r.fail(client.CodeInternal, fmt.Sprintf("session %q: watch of projection %s ended", q.Session, key))
				return Projection{}, nil, false
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			proj, current, err := decodeProjection(e.Value())
			if err != nil || !current {
				continue
			}
			raw := e.Value()
			if proj.Error != nil || proj.AsOfSeq >= minSeq {
				// Never answer from a state of another log (lost records, a re-create).
				if proj, raw, err = p.checkStored(wctx, q.Session, token, raw, e.Revision()); failGone(r, q.Session, err) {
					return Projection{}, nil, false
				} else if err != nil {
					if wctx.Err() != nil {
						continue // the deadline case below answers
					}
					r.fail(client.CodeInternal, fmt.Sprintf("session %q: checking projection %s against the log: %v", q.Session, key, err))
					return Projection{}, nil, false
				}
			}
			last = &proj
			if proj.Error != nil {
				if allowStopped || proj.Error.Rule == session.RuleStateTooLarge {
					return proj, raw, true // too large: answerMessages folds the log
				}
				r.fail(client.CodeStopped, stoppedText(q.Session, proj.Error))
				return Projection{}, nil, false
			}
			if proj.AsOfSeq >= minSeq {
				return proj, raw, true
			}
		case <-wctx.Done():
			if ctx.Err() != nil {
				r.fail(client.CodeUnavailable, fmt.Sprintf("session %q: projector %s is stopping", q.Session, p.name))
				return Projection{}, nil, false
			}
			at := "no projection yet"
			if last != nil {
				at = fmt.Sprintf("asOfSeq %d", last.AsOfSeq)
			}
			r.fail(client.CodeTimeout, fmt.Sprintf("session %q: projection did not reach seq %d within %d ms (%s)", q.Session, minSeq, timeoutMs, at))
			return Projection{}, nil, false
		}
	}
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

// answerSurface serves client.SurfaceSubject: the stored projection JSON, as stored (Projection),
// including its "error" when the projection is stopped (no "409" here: this endpoint is how a
// stopped projection is inspected).
func (p *Projector) answerSurface(_ context.Context, r responder, _ query, _ Projection, raw []byte) {
	r.respond(raw)
}
