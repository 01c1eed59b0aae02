package projector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// ConsumerName is the prefix of the projector's durable consumers: partition p is consumed
// by "agentlog-projector-<p>" (PartitionConsumer).
const ConsumerName = store.ProjectorConsumerPrefix

// casRetries bounds the reload-and-retry loop on KV revision conflicts of one checkpoint.
const casRetries = 16

// Options configure a Projector. Zero values take defaults; New refuses a negative duration or
// CacheSessions, a Name that is not a valid session id (it keys the member lease) and a Registry
// without the messages unit first.
type Options struct {
	// Name is the instance name (default "<hostname>-<pid>"): its member key, and in logs and
	// in the query service's metadata. Two live instances must not share a name.
	Name   string
	Logger *slog.Logger // default slog.Default()
	// Registry holds the projection units to maintain (default: NewRegistry(), the built-ins).
	Registry *Registry
	// CacheSessions bounds the hot session states kept in memory (all partitions together;
	// default 10000). Evicted sessions are read back from the KV bucket.
	CacheSessions int
	// FlushInterval is the longest a folded record waits for its checkpoint (default 50 ms).
	FlushInterval time.Duration
	// QueryCacheBytes bounds the events the query service keeps to answer messages queries
	// without reading whole logs again (default DefaultQueryCacheBytes, 64 MiB; negative: keep
	// nothing, read the whole log for every query).
	QueryCacheBytes int64
	// MemberTTL is the member lease: an instance that stops renewing it (killed) loses its
	// partitions after this (default 3 s; renewed every MemberTTL/4, partitions rebalanced every
	// MemberTTL/3).
	MemberTTL time.Duration
	// TracerProvider makes the spans of folds ("agentlog.fold", one per record, a child of the
	// writer's append span carried in the record's headers) and of queries ("agentlog.query
	// <endpoint>"). Default otel.GetTracerProvider() (no-op unless the SDK is set up).
	TracerProvider trace.TracerProvider
	// LifecycleInterval is how often the instance that owns partition 0 runs a lifecycle pass
	// (the cluster's policy: archive idle sessions, retention; store.Store.LifecyclePass).
	// Default DefaultLifecycleInterval (10 min); negative: never. Credentials without the right
	// to purge skip it, saying so once.
	LifecycleInterval time.Duration
}

// StopTimeout bounds the handover of Projector.Stop, so that a service stops within 2 s of SIGTERM
// even when the server is gone or stopped.
const StopTimeout = 1500 * time.Millisecond

// Projector folds the sessions of the AGENTLOG stream into their units' states in the
// agentlog_projections KV bucket and serves the agentlog-query micro service; instances divide the
// partitions by lease. Folding is idempotent by (session, seq). How: ARCHITECTURE.md, "A fold".
type Projector struct {
	store    *store.Store
	nc       *nats.Conn
	name     string
	logger   *slog.Logger
	registry *Registry
	defs     []*Definition // registry.list(), taken at Start
	metrics  *metrics
	tracer   trace.Tracer

	mu      sync.Mutex // guards started and stopped
	started bool
	stopped bool
	runCtx  context.Context    // from Start to Stop
	cancel  context.CancelFunc // ends runCtx
	// quit ends when Stop has used up StopTimeout (or returned): every wait of a handover
	// (a partition's last checkpoint, the unpin, the lease delete) ends with it.
	quit       context.Context
	quitCancel context.CancelFunc

	memberState
	foldState
	query *queryService

	lifecycleInterval   time.Duration
	lifecycleSkipLogged bool // the pass was skipped for want of the right to purge (logged once)
	lcm                 *lifecycleMetrics
}

// foldState is the folding of the partitions this instance owns.
type foldState struct {
	cacheSessions int
	flushInterval time.Duration
	applied       atomic.Int64 // events folded (all partitions)
	refolds       atomic.Int64 // states found not to match their log, and refolded

	wmu      sync.Mutex
	workers  map[int]*worker
	wstopped bool
	owned    atomic.Pointer[[]int] // the partitions consumed now (sorted), read without wmu
}

// New returns a Projector over a provisioned store; nc is the connection the query service is
// served on (usually the one the store's JetStream context uses). It returns an error for a nil
// store or connection, or Options it refuses (see Options).
func New(st *store.Store, nc *nats.Conn, opts Options) (*Projector, error) {
	if st == nil || nc == nil {
		return nil, errors.New("projector: New needs a store and a connection")
	}
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = defaultName()
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	reg := opts.Registry
	if reg == nil {
		reg, _ = NewRegistry() // the built-ins always register
	}
	p := &Projector{
		store:       st,
		nc:          nc,
		name:        name,
		logger:      logger.With("component", "projector", "instance", name),
		registry:    reg,
		memberState: memberState{memberKey: memberKeyOf(name), memberTTL: cmp.Or(opts.MemberTTL, DefaultMemberTTL)},
		foldState: foldState{cacheSessions: cmp.Or(opts.CacheSessions, DefaultCacheSessions),
			flushInterval: cmp.Or(opts.FlushInterval, DefaultFlushInterval), workers: map[int]*worker{}},
	}
	p.tracer = tracing.Tracer(opts.TracerProvider)
	p.metrics = newMetrics(p)
	p.lifecycleInterval = cmp.Or(opts.LifecycleInterval, DefaultLifecycleInterval)
	p.lcm = newLifecycleMetrics(prometheus.Labels{"projector": p.name})
	cacheBytes := opts.QueryCacheBytes
	switch {
	case cacheBytes == 0:
		cacheBytes = DefaultQueryCacheBytes
	case cacheBytes < 0:
		cacheBytes = 0 // keep nothing
	}
	p.query = newQueryService(st, nc, name, reg, p.metrics, p.tracer, cacheBytes)
	p.query.refolded = p.noteRefold
	return p, nil
}

// checkOptions refuses the Options New cannot use.
func checkOptions(o Options) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"FlushInterval", o.FlushInterval}, {"MemberTTL", o.MemberTTL}} {
		if d.v < 0 {
			return fmt.Errorf("projector: Options.%s %s is negative", d.name, d.v)
		}
	}
	switch {
	case o.CacheSessions < 0:
		return fmt.Errorf("projector: Options.CacheSessions %d is negative", o.CacheSessions)
	}
	if o.Name != "" {
		if _, err := wire.Token(o.Name); err != nil {
			return fmt.Errorf("projector: the instance name (Options.Name) cannot key its member lease: %w", err)
		}
	}
	if o.Registry != nil {
		if defs := o.Registry.list(); len(defs) == 0 || !defs[0].gate {
			return errors.New("projector: Options.Registry must hold the messages unit first (use NewRegistry)")
		}
	}
	return nil
}

// Name returns the instance name.
func (p *Projector) Name() string { return p.name }

// Applied returns the number of events this instance has folded (all partitions, all units).
func (p *Projector) Applied() int64 { return p.applied.Load() }

// Start checks that the partition consumers and MembersBucket exist (store.ErrProjectorNotProvisioned
// when not: run `agentlog provision`), joins the projector group (a lease in MembersBucket), starts the partition workers this
// instance is assigned, and starts the agentlog-query micro service. It returns once both are
// running. ctx bounds only the start-up; the projector runs until Stop.
func (p *Projector) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("projector: already started")
	}
	p.defs = p.registry.list()
	// `agentlog provision` creates the partition consumers; a projector creates none.
	for part := range p.store.Partitions() {
		if _, err := p.store.CheckProjector(ctx, part); err != nil {
			return fmt.Errorf("projector %q: %w", p.name, err)
		}
	}
	if err := p.join(ctx); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.runCtx, p.cancel = runCtx, cancel
	p.quit, p.quitCancel = context.WithCancel(context.Background())
	if err := p.query.start(runCtx, p.defs); err != nil {
		cancel()
		return err
	}
	p.started = true
	p.renew(ctx)
	p.rebalance(ctx)
	mctx, mcancel := context.WithCancel(runCtx)
	p.mcancel = mcancel
	p.loop.Add(2)
	go p.membership(mctx)
	go p.heartbeat(mctx)
	if p.lifecycleInterval > 0 {
		p.loop.Add(1)
		go p.every(mctx, p.lifecycleInterval, p.lifecycle)
	}
	p.logger.Info("projector started", "units", p.registry.Keys(), "partitions", p.store.Partitions(), "owned", p.Owned(), "service", client.QueryService)
	return nil
}

// Stop is graceful: it leaves the group (deletes its lease, so the survivors take over its
// partitions at their next rebalance), hands over every partition (buffered records are folded,
// checkpointed and acknowledged, the pin is released), then stops the query service (its
// subscriptions are drained) and waits for in-flight queries; queries still waiting for minSeq
// are answered "503". It returns within about StopTimeout whatever the server's state: what is
// not done by then (a server gone or stopped) is left to the lease's TTL and the consumers'
// redelivery (records not acknowledged are folded again by the next owner, idempotently). Stop is
// idempotent.
func (p *Projector) Stop() error {
	p.mu.Lock()
	if !p.started || p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()

	budget := time.AfterFunc(StopTimeout, p.quitCancel)
	defer budget.Stop()
	defer p.quitCancel()
	p.mcancel()
	p.loop.Wait()
	p.wmu.Lock()
	p.wstopped = true
	workers := p.workers
	p.workers = map[int]*worker{}
	p.owned.Store(nil)
	p.wmu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = p.members.Delete(p.quit, p.memberKey) // else the lease ends at its TTL
	}()
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.stop(p.quit) }()
	}
	wg.Wait()

	err := p.query.stop()
	p.cancel()
	p.logger.Info("projector stopped")
	return err
}

// transientError marks a failure to read the log or the KV bucket: the record is retried.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

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
			rule = session.RuleApply
		}
		return &ProjectionError{Seq: s, Rule: rule, Message: se.Error()}
	}
	return &ProjectionError{Seq: seq, Rule: session.RuleApply, Message: fmt.Sprintf("session %q: event seq %d: %v", id, seq, err)}
}

// logLookup is the session.Lookup of one fold: the events being folded first, then the session
// read from the log, lazily and at most once.
type logLookup struct {
	ctx     context.Context
	store   *store.Store
	id      string
	batch   []session.Scanned
	batchAt uint64 // the stream seq of the record batch is (0: unknown)
	log     []session.Scanned
	logAt   []uint64 // the stream seq of each event's record in log (nil: unknown)
	loaded  bool
	// lastStreamSeq is the stream seq of the log's last record, once loaded from the store.
	lastStreamSeq uint64
	// transient is set when reading the log failed for a reason other than a bad log.
	transient *transientError
}

func (l *logLookup) loadLog() error {
	if l.loaded {
		return nil
	}
	if l.store == nil { // Fold: the events given are the whole log
		l.log, l.loaded = l.batch, true
		return nil
	}
	var events []session.Event
	var at []uint64
	sh, err := l.store.Session(l.id)
	var last uint64
	if err == nil {
		last, err = sh.Records(l.ctx, func(r store.Record) error {
			events = append(events, r.Events...)
			for range r.Events {
				at = append(at, r.StreamSeq)
			}
			return nil
		})
	}
	if err != nil {
		var se *session.Error
		if errors.As(err, &se) {
			return err // the log itself is bad: a session error, not a transient one
		}
		l.transient = &transientError{fmt.Errorf("reading the log: %w", err)} // err names the session
		return l.transient
	}
	l.log, l.logAt, l.loaded, l.lastStreamSeq = scanAll(events), at, true, last
	return nil
}

// recordAt returns the stream seq of the record of each event of events, which are l's batch or
// its log (0: unknown).
func (l *logLookup) recordAt(events []session.Scanned) func(i int) uint64 {
	if l != nil && len(events) > 0 && len(l.log) == len(events) && &l.log[0] == &events[0] && len(l.logAt) == len(events) {
		return func(i int) uint64 { return l.logAt[i] }
	}
	var at uint64
	if l != nil && len(events) > 0 && len(l.batch) == len(events) && &l.batch[0] == &events[0] {
		at = l.batchAt
	}
	return func(int) uint64 { return at }
}

// scanAll wraps events in the shared form (each is scanned when first read).
func scanAll(events []session.Event) []session.Scanned {
	out := make([]session.Scanned, len(events))
	for i, ev := range events {
		out[i] = session.Scan(ev)
	}
	return out
}

func (l *logLookup) lookup(seq int64) (session.Event, error) {
	for i := range l.batch {
		if l.batch[i].Seq == seq {
			return l.batch[i].Event, nil
		}
	}
	if err := l.loadLog(); err != nil {
		return session.Event{}, err
	}
	if seq >= 0 && seq < int64(len(l.log)) && l.log[seq].Seq == seq {
		return l.log[seq].Event, nil
	}
	for i := range l.log {
		if l.log[i].Seq == seq {
			return l.log[i].Event, nil
		}
	}
	return session.Event{}, fmt.Errorf("session %q: event seq %d is not in the log", l.id, seq)
}
