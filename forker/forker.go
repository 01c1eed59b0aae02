package forker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/trace"
)

// The fork micro service's version and endpoint name (its name and subject are
// client.ForkService and client.ForkSubject).
const (
	ServiceVersion = "0.2.0"
	Endpoint       = "fork"
	ThenEndpoint   = "fork-then" // a fork with then-events, on client.ForkThenSubject (since 0.2.0)
)

// Options configure a Forker. Logger defaults to slog.Default(); Now (the clock that stamps the
// end-seed marker and the child's createdAt, in Unix ms) defaults to time.Now.
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time
	// TracerProvider makes the span of each fork ("agentlog.fork", a child of the trace context
	// in the request's headers); the child's record carries it, so its fold joins the trace.
	// Default otel.GetTracerProvider() (no-op unless the SDK is set up).
	TracerProvider trace.TracerProvider
}

// Forker serves the agentlog-fork micro service (the reference's SessionStore.fork): the checks in
// the reference's order, then the child's metadata (a KV create, the claim on the id), then its
// record guarded with expected sequence 0. Why in that order, and how an incomplete fork is
// resumed: ARCHITECTURE.md, "A fork".
type Forker struct {
	store  *store.Store
	nc     *nats.Conn
	logger *slog.Logger
	now    func() time.Time

	metrics *metrics
	tracer  trace.Tracer

	mu      sync.Mutex
	started bool
	stopped bool
	svc     micro.Service
	reqs    sync.WaitGroup
	closing bool
	// quit ends when Stop gives up waiting for the fork in flight: the fork is cancelled.
	quit       context.Context
	quitCancel context.CancelFunc
	status     chan nats.Status // connection status changes (watchConn)
	watched    sync.WaitGroup

	// test hook: runs between the KV create and the record (nil in production).
	beforeRecord func(child string)
	// seedRecordStored, when set (tests), is called after each record of a held seed but the last
	// is stored (stored: records so far); an error cuts the fork there.
	seedRecordStored func(child string, stored int) error
	// test hook: runs after the source log was read (nil in production).
	afterSourceRead func(source string)
}

// New returns a Forker over a provisioned store, serving on nc. It returns an error for a nil
// store or connection.
func New(sto *store.Store, nc *nats.Conn, opts Options) (*Forker, error) {
	if sto == nil || nc == nil {
		return nil, errors.New("forker: New needs a store and a connection")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	quit, quitCancel := context.WithCancel(context.Background())
	return &Forker{store: sto, nc: nc, logger: logger.With("component", "forker"), now: now, metrics: newMetrics(),
		tracer: tracing.Tracer(opts.TracerProvider), quit: quit, quitCancel: quitCancel}, nil
}

// StopTimeout bounds Stop, so that a service stops within 2 s of SIGTERM even when the server is
// gone or stopped. A fork cancelled between its metadata and its record is an incomplete fork,
// which a new fork of the same source onto the same child resumes (ARCHITECTURE.md, "A fork").
const StopTimeout = 1500 * time.Millisecond

// Start starts the agentlog-fork micro service (endpoint "fork" on Subject, queue group "q") and
// returns once it is subscribed. ctx is not retained.
func (f *Forker) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started {
		return errors.New("forker: already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	svc, err := micro.AddService(f.nc, micro.Config{
		Name:        client.ForkService,
		Version:     ServiceVersion,
		Description: "agentlog fork: starts a new session from a prefix of another",
	})
	if err != nil {
		return fmt.Errorf("forker: starting service %s: %w", client.ForkService, err)
	}
	if err := svc.AddEndpoint(Endpoint, micro.HandlerFunc(f.serve), micro.WithEndpointSubject(client.ForkSubject)); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("forker: adding endpoint %s: %w", Endpoint, err)
	}
	// Requests with then-events (edit-then-fork) come on their own subject, so that a forker
	// that predates them is never asked to fork without them (the client gets no responders).
	if err := svc.AddEndpoint(ThenEndpoint, micro.HandlerFunc(f.serve), micro.WithEndpointSubject(client.ForkThenSubject)); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("forker: adding endpoint %s: %w", ThenEndpoint, err)
	}
	f.svc, f.started = svc, true
	f.status = f.nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED, nats.CLOSED)
	f.watched.Add(1)
	go f.watchConn(f.status)
	f.logger.Info("forker started", "service", client.ForkService, "subject", client.ForkSubject)
	return nil
}

// watchConn logs the connection's changes of state once each: lost (warn), reconnected (info).
// nats.go re-subscribes the service on reconnect; the forker owns no server state.
func (f *Forker) watchConn(ch chan nats.Status) {
	defer f.watched.Done()
	var lost time.Time
	for st := range ch {
		switch {
		case st == nats.RECONNECTING && lost.IsZero():
			lost = time.Now()
			f.logger.Warn("forker: connection to NATS lost; forks resume when it is back (logged once until then)")
		case st == nats.CONNECTED && !lost.IsZero():
			f.logger.Info("forker: reconnected to NATS; serving forks again", "url", f.nc.ConnectedUrlRedacted(),
				"after", time.Since(lost).Round(time.Millisecond))
			lost = time.Time{}
		case st == nats.CLOSED:
			return
		}
	}
}

// Stop drains the service's subscription and waits for the fork in flight to finish: it cancels
// the fork after two thirds of StopTimeout (its requester gets no answer then) and returns within
// StopTimeout whatever the server's state. Requests that arrive while it stops are answered "503".
// Stop is idempotent.
func (f *Forker) Stop() error {
	f.mu.Lock()
	if !f.started || f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	f.mu.Unlock()
	err := f.svc.Stop()
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.reqs.Wait(); close(done) }()
	grace := time.NewTimer(StopTimeout * 2 / 3)
	select {
	case <-done:
	case <-grace.C:
		f.logger.Warn("forker: the fork in flight did not finish in time; cancelling it", "timeout", StopTimeout)
		f.quitCancel()
		last := time.NewTimer(StopTimeout / 3)
		select {
		case <-done:
		case <-last.C:
			// A write that does not see its ctx (an atomic batch's flow-control ack waits out
			// its own timeout): the fork ends on its own, or with the process.
			f.logger.Warn("forker: stopped with a fork still in flight; it ends on its own (an incomplete fork is resumed by the next fork onto the child)")
		}
		last.Stop()
	}
	grace.Stop()
	f.quitCancel()
	f.nc.RemoveStatusListener(f.status)
	f.watched.Wait()
	f.logger.Info("forker stopped")
	if err != nil {
		return fmt.Errorf("forker: stopping service %s: %w", client.ForkService, err)
	}
	return nil
}

// serve answers one fork request. It runs synchronously in the endpoint's subscription (micro
// keeps per-endpoint stats from the handler's own answer), so one instance forks one request at
// a time; more instances share the load through the queue group.
func (f *Forker) serve(req micro.Request) {
	start := time.Now()
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		_ = req.Error(string(client.CodeUnavailable), "forker is stopping", nil)
		f.metrics.answered(start, client.CodeUnavailable)
		return
	}
	f.reqs.Add(1)
	f.mu.Unlock()
	defer f.reqs.Done()
	ctx, cancel := context.WithTimeout(f.quit, forkTimeout)
	defer cancel()
	ctx, span := f.startForkSpan(ctx, nats.Header(req.Headers()))
	res, err := f.handle(ctx, req.Data())
	if err != nil {
		code, desc := wireError(err)
		if code == client.CodeInternal {
			f.logger.Error("fork failed", "err", err)
		}
		_ = req.Error(string(code), desc, errorBody(err))
		f.metrics.answered(start, code)
		endForkSpan(span, res, code, desc)
		return
	}
	_ = req.RespondJSON(res)
	f.metrics.answered(start, "200")
	endForkSpan(span, res, "200", "")
}

// forkTimeout bounds one fork (reads, KV create, record write) in the service.
const forkTimeout = 30 * time.Second

// handle performs one fork.
func (f *Forker) handle(ctx context.Context, data []byte) (client.ForkResult, error) {
	req, err := parseRequest(data)
	if err != nil {
		return client.ForkResult{}, err
	}
	return f.Fork(ctx, req)
}
