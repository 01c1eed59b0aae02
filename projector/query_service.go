package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"
)

// QueryServiceVersion is the version of the agentlog-query micro service (client.QueryService).
// 0.2.0: paged messages replies (partial, nodes). 0.3.0: external messages (a message too large for a reply).
// 0.4.0: a session being removed is answered 410 (client.CodeRemoving), not 404.
// 0.5.0: a session whose log lost acknowledged records is answered 424 (client.CodeDataLoss) by
// messages, unless allowDataLoss.
const QueryServiceVersion = "0.5.0"

// queryService is the agentlog-query micro service of one projector instance. It answers from the
// stored projections, checked against the session's log (a state of another log is refolded), and
// never folds into them: the partition workers do. Its handlers return a reply or an error, and
// reply sends either (wireError gives an error its code).
type queryService struct {
	store    *store.Store
	nc       *nats.Conn
	name     string // the instance's: in the service's metadata and the 503 texts
	registry *Registry
	metrics  *metrics
	tracer   trace.Tracer
	refolded func(where, id, cause, desc string, fresh *sessState) // Projector.noteRefold

	defs   []*Definition   // the registry's units, the messages unit first, set by start
	ctx    context.Context // from start to stop: every answer and wait ends with it
	cancel context.CancelFunc
	svc    *service

	reqs     sync.WaitGroup // handlers in flight, including those waiting for minSeq
	reqMu    sync.Mutex     // guards closing and reqs.Add
	closing  bool
	queued   atomic.Int64  // queries admitted and not yet answered (queued, waiting or answering)
	work     chan struct{} // bounds the queries being answered; the others queue for it
	folds    chan struct{} // bounds the messages queries folding a whole log (state too large)
	nodes    *nodeCache    // surface-eligible events of the sessions queried last
	feed     *changeFeed   // tells the queries waiting for minSeq that their state changed
	feedDone <-chan struct{}

	// completeMu guards completeSeen: the sessions (token and incarnation) whose metadata was
	// read complete (no wire.IncompleteHeader pending): checked once per instance, not per query.
	completeMu   sync.Mutex
	completeSeen map[string]struct{}
	waiting      atomic.Int64 // test hook: the queries waiting for minSeq (in waitProjection or foldLog)

	archivedViews archivedCache // the archived sessions queried last
}

// Admission of queries. At most maxAnswering are answered at once; the others queue for a slot
// (in arrival order) until their deadline (the request's timeoutMs, or the default), and one
// still queued then is answered "503" at once: its caller has given up or is about to, so the
// service does not spend itself on it (it sheds load by deadline, not by a fixed count). Beyond
// maxQueued queries admitted (queued, waiting for minSeq or being answered), a query is answered
// "503" on arrival: what bounds the memory the service holds for them.
const (
	maxAnswering = 64
	maxQueued    = 10_000
)

// newQueryService returns the query service of an instance, not started; cacheBytes bounds its
// node cache (0: keep nothing).
func newQueryService(st *store.Store, nc *nats.Conn, name string, reg *Registry, m *metrics, tracer trace.Tracer, cacheBytes int64) *queryService {
	s := &queryService{store: st, nc: nc, name: name, registry: reg, metrics: m, tracer: tracer,
		work:  make(chan struct{}, maxAnswering),
		folds: make(chan struct{}, 2),
		nodes: newNodeCache(cacheBytes),
		feed:  newChangeFeed(st),
	}
	s.nodes.m = m
	s.nodes.epoch = func() uint64 { return nc.Stats().Reconnects }
	return s
}

// handler answers a request from a projection that satisfies it (raw is the stored value): the
// reply's body, or an error for wireError.
type handler func(ctx context.Context, q query, proj Projection, raw []byte) ([]byte, error)

// start starts the micro service (queue group "q", micro's default); defs are the units (the
// messages unit first) and parent bounds the answers.
func (s *queryService) start(parent context.Context, defs []*Definition) error {
	s.defs = defs
	s.ctx, s.cancel = context.WithCancel(parent)
	done, err := s.feed.start(s.ctx)
	if err != nil {
		s.cancel()
		return fmt.Errorf("projector: watching the messages states (for minSeq queries): %w", err)
	}
	s.feedDone = done
	svc, err := newService(s.nc, micro.Config{
		Name:        client.QueryService,
		Version:     QueryServiceVersion,
		Description: "agentlog projections: derived messages and stored surfaces of sessions",
		Metadata:    map[string]string{"instance": s.name},
	})
	if err != nil {
		s.cancel()
		return fmt.Errorf("projector: starting service %s: %w", client.QueryService, err)
	}
	// Requests are handed to goroutines at once (endpoint); the subscription's own buffer only
	// has to absorb bursts while the handler parses: 256 MiB or 100,000 requests per endpoint.
	for _, e := range []struct {
		name, subject string
		allowStopped  bool
		answer        handler
	}{
		{"messages", client.MessagesSubject, false, s.answerMessages},
		{"surface", client.SurfaceSubject, true, s.answerSurface},
		{"projection", client.ProjectionSubject, true, s.answerSnapshot},
		{"snapshot", client.SnapshotSubject, true, s.answerSnapshot},
	} {
		if err := svc.addEndpoint(e.name, e.subject, s.endpoint(e.name, e.allowStopped, e.answer), 100_000, 256<<20); err != nil {
			_ = svc.Stop()
			s.cancel()
			return fmt.Errorf("projector: adding endpoint %s: %w", e.name, err)
		}
	}
	s.svc = svc
	return nil
}

// stop drains the endpoints' subscriptions, answers "503" to the requests still arriving, ends
// the waits (also "503") and waits for every handler to finish.
func (s *queryService) stop() error {
	err := s.svc.Stop()
	s.reqMu.Lock()
	s.closing = true // handler callbacks still draining answer "503" from here on
	s.reqMu.Unlock()
	s.cancel()
	s.reqs.Wait()
	<-s.feedDone
	if err != nil {
		return fmt.Errorf("projector: stopping the query service: %w", err)
	}
	return nil
}

// query is a request being answered: the wire request, and when its wait for minSeq ends (set
// once, when the request arrives).
type query struct {
	client.QueryRequest
	deadline time.Time
	archived *archivedView // the session's log lives in cold storage: answered from its archive
}

// timeoutMs is how long q may wait for minSeq, in ms.
func (q query) timeoutMs() int64 {
	if q.TimeoutMs != nil && *q.TimeoutMs > 0 {
		return min(*q.TimeoutMs, client.MaxTimeoutMs)
	}
	return client.DefaultTimeoutMs
}

// waits reports whether q asks to wait for a seq.
func (q query) waits() bool { return q.MinSeq != nil && *q.MinSeq >= 0 }

// endpoint builds a subscription's handler. It only parses the request and hands it to a
// goroutine, which queues for an answering slot (admission: maxAnswering, maxQueued). The
// subscription is thus never held up by a slow answer (a large history, a KV read) and does not
// fall behind and drop requests (a slow consumer), and a burst of large queries cannot starve
// small ones for long.
func (s *queryService) endpoint(name string, allowStopped bool, h handler) func(*endpointStats, *nats.Msg) {
	return func(ep *endpointStats, req *nats.Msg) {
		r := &replier{nc: s.nc, reply: req.Reply, meter: meter{m: s.metrics, ep: ep, endpoint: name, start: time.Now(),
			span: s.startSpan(name, req.Header)}}
		r.meter.session = &r.session
		q, token, err := parseQuery(req.Data)
		if err != nil {
			r.send(nil, err)
			return
		}
		r.session = q.Session
		q.deadline = time.Now().Add(time.Duration(q.timeoutMs()) * time.Millisecond)
		s.reqMu.Lock()
		if s.closing {
			s.reqMu.Unlock()
			r.send(nil, s.stopping(q))
			return
		}
		s.reqs.Add(1)
		s.reqMu.Unlock()
		if n := s.queued.Add(1); n > maxQueued {
			s.queued.Add(-1)
			s.reqs.Done()
			r.send(nil, replyErr(client.CodeUnavailable, "session %q: projector %s holds %d queries already; retry", q.Session, s.name, maxQueued))
			return
		}
		go func() {
			defer s.reqs.Done()
			defer s.queued.Add(-1)
			r.send(s.answer(q, token, allowStopped, h))
		}()
	}
}

// acquire takes an answering slot for q, queueing for one until q's deadline; a query still
// queued then is answered "503" (shed), one queued when the service stops "503" too.
func (s *queryService) acquire(q query) error {
	select {
	case s.work <- struct{}{}:
		return nil
	default:
	}
	queuedAt := time.Now()
	t := time.NewTimer(time.Until(q.deadline))
	defer t.Stop()
	select {
	case s.work <- struct{}{}:
		return nil
	case <-t.C:
		return replyErr(client.CodeUnavailable, "session %q: projector %s is busy: the query waited %d ms for one of its %d answering slots, to its deadline (timeoutMs %d); retry",
			q.Session, s.name, time.Since(queuedAt).Milliseconds(), maxAnswering, q.timeoutMs())
	case <-s.ctx.Done():
		return s.stopping(q)
	}
}

func (s *queryService) release() { <-s.work }

// answer answers q with h, holding an answering slot. A query that must wait (for minSeq, or a
// messages query of a session whose state outgrew KV, which folds the log and waits for a fold
// slot) gives the slot back while it waits.
func (s *queryService) answer(q query, token string, allowStopped bool, h handler) ([]byte, error) {
	ctx := s.ctx
	var w *feedWaiter
	if q.waits() {
		// Registered before the first read: any change after it is a notice.
		w = s.feed.add(token)
		defer s.feed.remove(w)
	}
	if err := s.acquire(q); err != nil {
		return nil, err
	}
	proj, raw, wait, err := s.readNow(ctx, &q, token, allowStopped)
	slow := err == nil && !wait && !allowStopped && tooLarge(proj)
	if err != nil || !wait && !slow {
		defer s.release()
		if err != nil {
			return nil, err
		}
		if err := checkLost(q, proj, allowStopped); err != nil {
			return nil, err
		}
		return h(ctx, q, proj, raw)
	}
	s.release()
	if wait {
		var behind *Projection
		if proj.StateVersion != 0 {
			behind = &proj
		}
		if proj, raw, err = s.waitProjection(ctx, q, token, allowStopped, w, behind); err != nil {
			return nil, err
		}
		if !(!allowStopped && tooLarge(proj)) {
			if err := s.acquire(q); err != nil {
				return nil, err
			}
			defer s.release()
		}
	}
	if err := checkLost(q, proj, allowStopped); err != nil {
		return nil, err
	}
	return h(ctx, q, proj, raw)
}

// checkLost refuses a messages query of a session whose log lost acknowledged records, naming
// them ("424", client.CodeDataLoss), unless the query allows it. The endpoints that answer stored
// states as they are (allowStopped: surface, projection, snapshot) answer them, "lost" included.
func checkLost(q query, proj Projection, allowStopped bool) error {
	if allowStopped || q.AllowDataLoss || proj.Log == nil || proj.Log.Lost == nil {
		return nil
	}
	return dataLossErr(q.Session, proj.Log.Lost)
}

// stopping is the "503" of a query that arrives or waits while the service stops.
func (s *queryService) stopping(q query) error {
	return replyErr(client.CodeUnavailable, "session %q: projector %s is stopping", q.Session, s.name)
}

// tooLarge reports whether proj stopped because its state outgrew one KV value: not a broken log;
// answerMessages folds the log itself.
func tooLarge(proj Projection) bool {
	return proj.Error != nil && proj.Error.Rule == session.RuleStateTooLarge
}

// readNow reads the stored projection once: the projection and its stored value when it
// satisfies q, wait when q must wait for minSeq, or the error to answer.
func (s *queryService) readNow(ctx context.Context, qp *query, token string, allowStopped bool) (proj Projection, raw []byte, wait bool, err error) {
	q := *qp
	sh, err := s.store.Session(q.Session)
	if err != nil {
		return Projection{}, nil, false, replyErr(client.CodeBadRequest, "bad request: %v", err)
	}
	key := wire.ProjectionKey(UnitMessages, token)
	// fromArchive answers from the session's archive when its log lives in cold storage (a read
	// never restores it); ok is false for a session that is not archived.
	fromArchive := func() (Projection, []byte, bool, error, bool) {
		v, ok, aerr := s.archived(ctx, sh)
		if aerr != nil {
			return Projection{}, nil, false, fmt.Errorf("session %q: reading its archive: %w", q.Session, aerr), true
		}
		if !ok {
			return Projection{}, nil, false, nil, false
		}
		qp.archived = v
		switch p := v.messages; {
		case p.Error != nil && !allowStopped && !tooLarge(p):
			return Projection{}, nil, false, stoppedErr(q.Session, p.Error), true
		case q.waits() && p.AsOfSeq < *q.MinSeq:
			return Projection{}, nil, false, replyErr(client.CodeTimeout, "session %q is archived at seq %d: seq %d will not come until it is written again", q.Session, p.AsOfSeq, *q.MinSeq), true
		}
		return v.messages, v.raw, false, nil, true
	}
	e, err := sh.ProjectionEntry(ctx, UnitMessages)
	s.metrics.storeRequest(reqProjection, 1)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if proj, raw, wait, err, ok := fromArchive(); ok {
			return proj, raw, wait, err
		}
		// One metadata read: a session being removed (its keys purged already, its log maybe not)
		// is not found; an unknown one (no metadata, no records) has nothing to wait for.
		_, _, known, removing, merr := sessionMetaState(ctx, s.store, q.Session)
		s.metrics.storeRequest(reqMetadata, 1)
		if removing {
			return Projection{}, nil, false, errSessionRemoving
		}
		if q.waits() && merr == nil && !known {
			s.metrics.storeRequest(reqTail, 1)
			if empty, err := logEmpty(ctx, s.store, q.Session); err == nil && empty {
				// Nothing to wait for: an unknown session gets its 404 at once, as without minSeq.
				return Projection{}, nil, false, replyErr(client.CodeNotFound, "session %q: no projection (unknown session: no metadata and no events)", q.Session)
			}
		}
		if q.waits() {
			return Projection{}, nil, true, nil
		}
		return Projection{}, nil, false, replyErr(client.CodeNotFound, "session %q: no projection (unknown session, or none of its events projected yet)", q.Session)
	}
	if err != nil {
		return Projection{}, nil, false, fmt.Errorf("session %q: reading projection %s: %w", q.Session, key, err)
	}
	proj, current, err := decodeProjection(e.Value())
	raw = e.Value()
	if err == nil && current {
		// A fork child whose seed is still being written is folded, and not served.
		if err := s.checkComplete(ctx, sh, token, proj); err != nil {
			return Projection{}, nil, false, err
		}
	}
	if err == nil && current && proj.Error == nil && q.waits() && proj.AsOfSeq < *q.MinSeq {
		return proj, nil, true, nil // checked once it is there (waitProjection); proj says how far it got
	}
	if err == nil && current {
		if proj, raw, err = s.checkStored(ctx, q.Session, token, raw, e.Revision()); err != nil {
			return Projection{}, nil, false, checkedErr(q.Session, key, err)
		}
		if proj.Log != nil && proj.Log.Lost != nil {
			// The records the state names are gone from the hot stream: archived under it (an
			// archive that stopped before it purged the projection keys)? Then its archive answers.
			if proj, raw, wait, err, ok := fromArchive(); ok {
				return proj, raw, wait, err
			}
		}
	}
	switch {
	case err != nil:
		return Projection{}, nil, false, fmt.Errorf("session %q: projection %s: %w", q.Session, key, err)
	case !current && q.waits():
		return Projection{}, nil, true, nil
	case !current:
		return Projection{}, nil, false, replyErr(client.CodeNotFound, "session %q: stored projection has another stateVersion; it is being rebuilt", q.Session)
	case proj.Error != nil && (allowStopped || tooLarge(proj)):
		return proj, raw, false, nil
	case proj.Error != nil:
		return Projection{}, nil, false, stoppedErr(q.Session, proj.Error)
	case q.waits() && proj.AsOfSeq < *q.MinSeq:
		return Projection{}, nil, true, nil
	}
	return proj, raw, false, nil
}

// maxCompleteSeen bounds queryService.completeSeen: past it, the set starts again.
const maxCompleteSeen = 1 << 16

// checkComplete refuses, as not found (client.IncompleteText), to answer from proj for a fork child
// whose seed is still being written (store.ErrSessionIncomplete). A session is checked once per
// instance and incarnation (one metadata read). Other metadata errors are transient.
func (s *queryService) checkComplete(ctx context.Context, sh *store.Session, token string, proj Projection) error {
	key := token
	if proj.Log != nil {
		key += "/" + proj.Log.Incarnation
	}
	s.completeMu.Lock()
	_, ok := s.completeSeen[key]
	s.completeMu.Unlock()
	if ok {
		return nil
	}
	_, err := sh.Info(ctx)
	s.metrics.storeRequest(reqMetadata, 1)
	switch {
	case errors.Is(err, store.ErrSessionIncomplete):
		return replyErr(client.CodeNotFound, "%s", client.IncompleteText(sh.ID()))
	case errors.Is(err, store.ErrSessionNotFound):
		return nil // removed or being removed: checkStored says so
	case err != nil:
		return fmt.Errorf("session %q: reading its metadata: %w", sh.ID(), err)
	}
	s.completeMu.Lock()
	if s.completeSeen == nil || len(s.completeSeen) >= maxCompleteSeen {
		s.completeSeen = map[string]struct{}{}
	}
	s.completeSeen[key] = struct{}{}
	s.completeMu.Unlock()
	return nil
}

// checkedErr is the error of checkStored for the projection at key: a session removed or being
// removed as it is (wireError answers it), another failure a 500 naming the key.
func checkedErr(id, key string, err error) error {
	if errors.Is(err, errSessionRemoving) || errors.Is(err, errSessionGone) {
		return err
	}
	return fmt.Errorf("session %q: checking projection %s against the log: %w", id, key, err)
}

// stoppedErr is the "409" of a projection stopped by a bad log.
func stoppedErr(id string, pe *ProjectionError) error {
	return replyErr(client.CodeStopped, "session %q: projection stopped at seq %d (rule %s): %s", id, pe.Seq, pe.Rule, pe.Message)
}

// waitProjection waits until the projection's asOfSeq >= minSeq (or the projection stops), for
// at most timeoutMs: it reads the KV key again at each notice of the service's change feed to w,
// registered before the read that found it behind (last: what that read found, nil: no value),
// and every feedRecheck without one. Errors: "408" on timeout, "409" for a stopped projection
// (unless allowStopped), "503" when the service stops meanwhile.
func (s *queryService) waitProjection(ctx context.Context, q query, token string, allowStopped bool, w *feedWaiter, last *Projection) (Projection, []byte, error) {
	key := wire.ProjectionKey(UnitMessages, token)
	minSeq := *q.MinSeq
	timeoutMs := q.timeoutMs()
	sh, err := s.store.Session(q.Session)
	if err != nil {
		return Projection{}, nil, replyErr(client.CodeBadRequest, "bad request: %v", err)
	}
	wctx, cancel := context.WithDeadline(ctx, q.deadline)
	defer cancel()
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	tick := time.NewTicker(feedRecheck)
	defer tick.Stop()
	for first := true; ; first = false {
		if first {
			// The caller has just read the key: wait for a change first.
			if err := s.waitNotice(ctx, wctx, w, tick, q, minSeq, timeoutMs, last); err != nil {
				return Projection{}, nil, err
			}
		}
		e, err := sh.ProjectionEntry(wctx, UnitMessages)
		s.metrics.storeRequest(reqProjection, 1)
		if err == nil {
			proj, current, derr := decodeProjection(e.Value())
			if derr == nil && current {
				raw := e.Value()
				ok := true
				if proj.Error != nil || proj.AsOfSeq >= minSeq {
					// Never answer from a state of another log (lost records, a re-create).
					if proj, raw, err = s.checkStored(wctx, q.Session, token, raw, e.Revision()); err != nil {
						if wctx.Err() == nil || errors.Is(err, errSessionRemoving) || errors.Is(err, errSessionGone) {
							return Projection{}, nil, checkedErr(q.Session, key, err)
						}
						ok = false // the deadline case below answers
					}
				}
				if ok {
					last = &proj
					if proj.Error != nil {
						if allowStopped || tooLarge(proj) {
							return proj, raw, nil // too large: answerMessages folds the log
						}
						return Projection{}, nil, stoppedErr(q.Session, proj.Error)
					}
					if proj.AsOfSeq >= minSeq {
						return proj, raw, nil
					}
				}
			}
		}
		// Not yet (no value, another stateVersion, behind, or a read that failed: read again).
		if err := s.waitNotice(ctx, wctx, w, tick, q, minSeq, timeoutMs, last); err != nil {
			return Projection{}, nil, err
		}
	}
}

// waitNotice waits for a notice to w, the recheck tick or the end of the wait (its error: "503"
// when the service stops, "408" at the deadline, naming last's asOfSeq).
func (s *queryService) waitNotice(ctx, wctx context.Context, w *feedWaiter, tick *time.Ticker, q query, minSeq, timeoutMs int64, last *Projection) error {
	select {
	case <-w.c:
		return nil
	case <-tick.C:
		return nil
	case <-wctx.Done():
		if ctx.Err() != nil {
			return s.stopping(q)
		}
		at := "no projection yet"
		if last != nil {
			at = fmt.Sprintf("asOfSeq %d", last.AsOfSeq)
		}
		return replyErr(client.CodeTimeout, "session %q: projection did not reach seq %d within %d ms (%s)", q.Session, minSeq, timeoutMs, at)
	}
}

// answerSurface serves client.SurfaceSubject: the stored projection JSON, as stored (Projection),
// including its "error" when the projection is stopped (no "409" here: this endpoint is how a
// stopped projection is inspected).
func (s *queryService) answerSurface(_ context.Context, _ query, _ Projection, raw []byte) ([]byte, error) {
	return raw, nil
}

// replier sends the one reply of a request, a success or an error (micro's error headers), and
// counts it (meter).
type replier struct {
	nc      *nats.Conn
	reply   string
	session string // named in the error of a reply that could not be sent ("" before parsing)
	meter
}

// send replies b, or err's code and description (wireError). It is where every reply of the
// service is sent; a reply that cannot be sent (larger than the server's max payload) is answered
// with an error reply instead.
func (r *replier) send(b []byte, err error) {
	if err == nil && r.reply != "" {
		if perr := r.nc.Publish(r.reply, b); perr != nil {
			err = &queryError{code: publishErrCode(perr),
				desc: fmt.Sprintf("session %q: the reply of %d bytes could not be sent (the server's max payload bounds one reply): %v", r.session, len(b), perr)}
		}
	}
	if err == nil {
		r.done(codeOK, "")
		return
	}
	code, desc := wireError(r.session, err)
	r.done(code, desc)
	if r.reply != "" {
		h := nats.Header{micro.ErrorHeader: []string{desc}, micro.ErrorCodeHeader: []string{string(code)}}
		var qe *queryError
		if errors.As(err, &qe) && qe.lost != nil {
			if b, err := json.Marshal(qe.lost); err == nil {
				h.Set(client.DataLossHeader, string(b))
			}
		}
		_ = r.nc.PublishMsg(&nats.Msg{Subject: r.reply, Header: h})
	}
}

// publishErrCode is the code of a reply that could not be sent: 413 when it is larger than the
// server's max payload, 500 otherwise.
func publishErrCode(err error) client.Code {
	if errors.Is(err, nats.ErrMaxPayload) || strings.Contains(err.Error(), nats.ErrMaxPayload.Error()) {
		return client.CodeTooLarge
	}
	return client.CodeInternal
}

// codeOK is the code label of a successful reply.
const codeOK client.Code = "200"
