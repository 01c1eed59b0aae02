package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// ConsumerName is the durable pull consumer the projector reads the AGENTLOG stream with
// (filter "agentlog.session.>", explicit ack, DeliverAll).
const ConsumerName = "agentlog-projector"

// casRetries bounds the reload-and-retry loop on a KV revision conflict for one record; after
// that the record is negatively acknowledged and redelivered.
const casRetries = 16

// nakDelay is how long a record waits before redelivery after a transient failure (KV or log
// read unavailable).
const nakDelay = time.Second

// Options configure a Projector. Name is the instance name (default "<hostname>-<pid>"), used in
// logs and in the query service's metadata. Logger defaults to slog.Default().
type Options struct {
	Name   string
	Logger *slog.Logger
}

// Projector folds every session of the AGENTLOG stream into its "messages" projection (the
// session's surface, replaceGeneration, transcript and open turn) in the agentlog_projections KV
// bucket, and serves the agentlog-query micro service.
//
// Folding is idempotent by (session, seq): events at or below the stored asOfSeq are skipped, a
// record that starts after asOfSeq+1 makes the projector re-read the session from the log, and
// every write is a revision compare-and-swap, so a redelivered record is never applied twice.
// A session whose log breaks a rule stops only its own projection (Projection.Error).
type Projector struct {
	store  *ajs.Store
	nc     *nats.Conn
	name   string
	logger *slog.Logger

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	iter    jetstream.MessagesContext
	svc     micro.Service
	loop    sync.WaitGroup // the consume loop
	reqs    sync.WaitGroup // in-flight query handlers
	reqMu   sync.Mutex     // guards closing and reqs.Add
	closing bool
	runCtx  context.Context
	slots   chan struct{} // bounds concurrent query handlers
	waiting atomic.Int64  // queries waiting for minSeq (observed by tests)
}

// New returns a Projector over a provisioned store; nc is the connection the query service is
// served on (usually the one the store's JetStream context uses).
func New(store *ajs.Store, nc *nats.Conn, opts Options) *Projector {
	name := opts.Name
	if name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "projector"
		}
		name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Projector{
		store:  store,
		nc:     nc,
		name:   name,
		logger: logger.With("component", "projector", "instance", name),
		slots:  make(chan struct{}, 64),
	}
}

// Start creates (or updates) the durable consumer agentlog-projector, starts folding records in
// stream order, and starts the agentlog-query micro service. It returns once both are running.
// ctx bounds only the start-up; the projector runs until Stop.
func (p *Projector) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("projector: already started")
	}
	if p.store == nil || p.nc == nil {
		return errors.New("projector: New needs a store and a connection")
	}
	cons, err := p.store.JS.CreateOrUpdateConsumer(ctx, ajs.StreamName, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "agentlog projector: folds session records into agentlog_projections",
		FilterSubject: ajs.SubjectPrefix + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("projector: creating consumer %s on stream %s: %w", ConsumerName, ajs.StreamName, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("projector: consuming with %s: %w", ConsumerName, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.runCtx = runCtx
	svc, err := p.addService()
	if err != nil {
		iter.Stop()
		cancel()
		return err
	}
	p.iter, p.svc, p.cancel = iter, svc, cancel
	p.started = true
	p.loop.Add(1)
	go p.consume(runCtx, iter)
	p.logger.Info("projector started", "consumer", ConsumerName, "service", QueryService)
	return nil
}

// Stop is graceful: it stops consuming (the record being folded is finished and acknowledged;
// buffered, unacknowledged records are redelivered to the next instance), then stops the query
// service (its subscriptions are drained) and waits for in-flight queries; queries still waiting
// for minSeq are answered "503". Stop is idempotent.
func (p *Projector) Stop() error {
	p.mu.Lock()
	if !p.started || p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()

	p.iter.Stop()
	p.loop.Wait()
	err := p.svc.Stop()
	p.reqMu.Lock()
	p.closing = true // handler callbacks still draining answer "503" from here on
	p.reqMu.Unlock()
	p.cancel()
	p.reqs.Wait()
	p.logger.Info("projector stopped")
	if err != nil {
		return fmt.Errorf("projector: stopping the query service: %w", err)
	}
	return nil
}

// consume folds records one at a time, in delivery (stream) order.
func (p *Projector) consume(ctx context.Context, iter jetstream.MessagesContext) {
	defer p.loop.Done()
	for {
		msg, err := iter.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, nats.ErrConnectionClosed) {
				return
			}
			p.logger.Warn("projector: fetching records", "err", err)
			select { // do not spin on a persistent error
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		p.handle(ctx, msg)
	}
}

// handle folds one record and settles it: ack when applied, skipped or recorded as a session
// error; nak (redelivery after nakDelay) on a transient failure; term for a subject that names
// no session.
func (p *Projector) handle(ctx context.Context, msg jetstream.Msg) {
	err := p.process(ctx, msg.Subject(), msg.Headers(), msg.Data(), func() { _ = msg.InProgress() })
	var bad *badSubjectError
	switch {
	case err == nil:
		if aerr := msg.Ack(); aerr != nil {
			p.logger.Warn("projector: ack failed; the record will be redelivered and skipped", "subject", msg.Subject(), "err", aerr)
		}
	case errors.As(err, &bad):
		p.logger.Error("projector: record on a subject that names no session; terminated", "subject", msg.Subject(), "err", err)
		_ = msg.TermWithReason(err.Error())
	default:
		p.logger.Warn("projector: transient failure; record will be redelivered", "subject", msg.Subject(), "err", err)
		_ = msg.NakWithDelay(nakDelay)
	}
}

// badSubjectError is a record whose subject does not map back to a session id.
type badSubjectError struct{ msg string }

func (e *badSubjectError) Error() string { return e.msg }

// transientError marks a failure to read the log or the KV bucket: the record is retried.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// sessionOf maps a record subject agentlog.session.<partition>.<token> to (token, id).
func sessionOf(subject string, partitions int) (string, string, error) {
	_, token, id, err := ajs.ParseSubject(subject, partitions)
	if err != nil {
		return "", "", &badSubjectError{err.Error()}
	}
	return token, id, nil
}

// process folds one record into its session's projection. A nil return means the record is done
// with (applied, skipped, or its session error stored); a non-nil error is transient, or a
// *badSubjectError.
func (p *Projector) process(ctx context.Context, subject string, h nats.Header, body []byte, progress func()) error {
	token, id, err := sessionOf(subject, p.store.Partitions)
	if err != nil {
		return err
	}
	key := Key(token)
	events, decodeErr := ajs.DecodeRecord(h, body)

	for attempt := 0; attempt < casRetries; attempt++ {
		cur, rev, err := p.load(ctx, key)
		if err != nil {
			return &transientError{fmt.Errorf("session %q: loading projection %s: %w", id, key, err)}
		}
		if cur.Error != nil {
			p.logger.Debug("projector: record of a stopped session ignored", "session", id, "subject", subject)
			return nil
		}
		next, changed, err := p.fold(ctx, id, cur, events, decodeErr, progress)
		if err != nil {
			return err
		}
		if !changed {
			return nil
		}
		err = p.write(ctx, key, rev, next)
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // someone else wrote the projection: reload and fold again
		}
		if err != nil {
			return &transientError{fmt.Errorf("session %q: writing projection %s: %w", id, key, err)}
		}
		if next.Error != nil {
			p.logger.Error("projector: session log breaks a rule; its projection is stopped",
				"session", id, "seq", next.Error.Seq, "rule", next.Error.Rule, "message", next.Error.Message, "asOfSeq", next.AsOfSeq)
		}
		return nil
	}
	return &transientError{fmt.Errorf("session %q: projection %s kept changing under this projector (%d revision conflicts)", id, key, casRetries)}
}

// load reads the stored projection: (newProjection(), 0) when the key is absent; a value of
// another stateVersion loads as a fresh projection with its revision, so that it is rebuilt.
func (p *Projector) load(ctx context.Context, key string) (Projection, uint64, error) {
	e, err := p.store.Projections.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return newProjection(), 0, nil
	}
	if err != nil {
		return Projection{}, 0, err
	}
	proj, _, err := decodeProjection(e.Value())
	if err != nil {
		// An unreadable stored value is rebuilt from the log, like a stale stateVersion.
		p.logger.Warn("projector: stored projection unreadable; rebuilding from the log", "key", key, "err", err)
		return newProjection(), e.Revision(), nil
	}
	return proj, e.Revision(), nil
}

// write stores proj with a revision compare-and-swap: a KV create when rev is 0, else an update.
func (p *Projector) write(ctx context.Context, key string, rev uint64, proj Projection) error {
	b, err := json.Marshal(proj)
	if err != nil {
		return err
	}
	if rev == 0 {
		_, err = p.store.Projections.Create(ctx, key, b)
	} else {
		_, err = p.store.Projections.Update(ctx, key, b, rev)
	}
	return err
}

// fold applies the record's events above cur.AsOfSeq. It returns the new projection and whether
// it differs from cur. A rule broken by the log yields a projection with Error set (not an error).
func (p *Projector) fold(ctx context.Context, id string, cur Projection, events []session.Event, decodeErr error, progress func()) (Projection, bool, error) {
	if decodeErr != nil {
		seq, rule := cur.AsOfSeq+1, "record-decode"
		var se *session.Error
		if errors.As(decodeErr, &se) {
			if se.Seq >= 0 {
				seq = se.Seq
			}
			if se.Rule != "" {
				rule = se.Rule
			}
		}
		next := cur
		next.Error = &ProjectionError{Seq: seq, Rule: rule, Message: fmt.Sprintf("session %q: record does not decode: %v", id, decodeErr)}
		return next, true, nil
	}
	// Skip what is already applied (idempotent by seq).
	todo := events[:0:0]
	for _, ev := range events {
		if ev.Seq > cur.AsOfSeq {
			todo = append(todo, ev)
		}
	}
	if len(todo) == 0 {
		return cur, false, nil
	}
	lk := &logLookup{ctx: ctx, store: p.store, id: id, batch: todo}
	if todo[0].Seq > cur.AsOfSeq+1 {
		// A gap: an earlier record was not folded (yet). Re-read the session from the log and
		// fold everything after asOfSeq from it.
		progress()
		if err := lk.loadLog(); err != nil {
			var te *transientError
			if errors.As(err, &te) {
				return Projection{}, false, err
			}
			next := cur
			next.Error = &ProjectionError{Seq: cur.AsOfSeq + 1, Rule: "log-read", Message: err.Error()}
			return next, true, nil
		}
		todo = todo[:0]
		for _, ev := range lk.log {
			if ev.Seq > cur.AsOfSeq {
				todo = append(todo, ev)
			}
		}
		lk.batch = todo
		p.logger.Debug("projector: gap; folded from the log", "session", id, "asOfSeq", cur.AsOfSeq, "events", len(todo))
	}
	s := cur.surface()
	for _, ev := range todo {
		if err := s.Apply(id, ev, lk.lookup); err != nil {
			if lk.transient != nil {
				// The lookup could not read the log (Apply reports that as rule "lookup"):
				// retry the record rather than stop the session.
				return Projection{}, false, lk.transient
			}
			next := fromSurface(s)
			next.Error = sessionError(id, ev.Seq, err)
			return next, true, nil
		}
	}
	return fromSurface(s), true, nil
}

// sessionError turns a refusal from Surface.Apply into the stored error.
func sessionError(id string, seq int64, err error) *ProjectionError {
	var se *session.Error
	if errors.As(err, &se) {
		s := se.Seq
		if s < 0 {
			s = seq
		}
		rule := se.Rule
		if rule == "" {
			rule = "apply"
		}
		return &ProjectionError{Seq: s, Rule: rule, Message: se.Error()}
	}
	return &ProjectionError{Seq: seq, Rule: "apply", Message: fmt.Sprintf("session %q: event seq %d: %v", id, seq, err)}
}

// logLookup is the session.Lookup of one fold: the events being folded first, then the session
// read from the log, lazily and at most once.
type logLookup struct {
	ctx    context.Context
	store  *ajs.Store
	id     string
	batch  []session.Event
	log    []session.Event
	loaded bool
	// transient is set when reading the log failed for a reason other than a bad log.
	transient *transientError
}

func (l *logLookup) loadLog() error {
	if l.loaded {
		return nil
	}
	events, _, err := l.store.Read(l.ctx, l.id)
	if err != nil {
		var se *session.Error
		if errors.As(err, &se) {
			return err // the log itself is bad: a session error, not a transient one
		}
		l.transient = &transientError{fmt.Errorf("session %q: reading the log: %w", l.id, err)}
		return l.transient
	}
	l.log, l.loaded = events, true
	return nil
}

func (l *logLookup) lookup(seq int64) (session.Event, error) {
	for _, ev := range l.batch {
		if ev.Seq == seq {
			return ev, nil
		}
	}
	if err := l.loadLog(); err != nil {
		return session.Event{}, err
	}
	if seq >= 0 && seq < int64(len(l.log)) && l.log[seq].Seq == seq {
		return l.log[seq], nil
	}
	for _, ev := range l.log {
		if ev.Seq == seq {
			return ev, nil
		}
	}
	return session.Event{}, fmt.Errorf("session %q: event seq %d is not in the log", l.id, seq)
}
