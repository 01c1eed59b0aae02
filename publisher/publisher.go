package publisher

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"
)

// DefaultWindow is the batching window used when Options.Window is zero: 200 ms, the reference's
// writeBatchMaxDelayMs (vectors.json "batching-window").
const DefaultWindow = 200 * time.Millisecond

// Defaults of the Options that bound one write and the memory of a Writer.
const (
	// DefaultAttemptTimeout bounds one try of a record write (one publish and its ack), counted
	// from when the record is sent (after it got one of the MaxConcurrentWrites slots).
	DefaultAttemptTimeout = 10 * time.Second
	// DefaultRetryBudget bounds the retries of transient errors inside one background write.
	DefaultRetryBudget = 30 * time.Second
	// DefaultMaxConcurrentWrites is the number of records one Publisher has in flight at once,
	// over all its sessions.
	DefaultMaxConcurrentWrites = 64
	// DefaultMaxPendingBytes is the most event bytes one Writer holds not yet durable.
	DefaultMaxPendingBytes = 16 << 20
	// lookupTimeout bounds the store.Read that a tool/result replace falls back to.
	lookupTimeout = 30 * time.Second
	// errorsBuffer is the capacity of each Writer.Errors channel.
	errorsBuffer = 64
	// DefaultLeaseTTL is the TTL of a writer's lease in agentlog_writers: a writer that stops
	// renewing it (every TTL/4) is taken for dead after this long.
	DefaultLeaseTTL = 10 * time.Second
)

// MaxWriterIDBytes is the longest Options.WriterID, in bytes: the room jetstream.CheckEventSize
// keeps for it in a record's Nats-Msg-Id header.
const MaxWriterIDBytes = 64

// Options configure a Publisher. Zero values take the defaults noted per field; New refuses a
// negative Window, AttemptTimeout, RetryBudget or MaxConcurrentWrites.
type Options struct {
	Window time.Duration // fixed batching window; default 200 ms
	// WriterID prefixes this publisher's Nats-Msg-Id values: at most MaxWriterIDBytes bytes, no
	// whitespace or control characters. Default a nuid.
	WriterID string
	Now      func() time.Time // clock for event times; default time.Now
	Logger   *slog.Logger     // default slog.Default()

	// AttemptTimeout bounds one try of a record write: the publish and its ack (plus a second per
	// 4 MiB of event data, for the blobs of large events). A try that times
	// out (a lost ack, a server restarting) is retried with the same Nats-Msg-Id, so it is
	// deduplicated or found at the tail and never stored twice. Default 10 s.
	AttemptTimeout time.Duration
	// RetryBudget bounds the retries of transient errors (no responders, 503, timeouts, 10158,
	// 429, a connection lost or down, for the record and the blobs of its large events alike)
	// inside one write, with exponential backoff from 50 ms to 2 s; a retry first proves the
	// session's tail from the stream leader (ARCHITECTURE.md, "Writer leases"). A write still failing
	// then is reported and its events stay pending (automatic retry pauses until the next new
	// event or Flush/Close). Flush/Close-driven writes are also bounded by their ctx. Default 30 s.
	RetryBudget time.Duration
	// MaxConcurrentWrites bounds the records this Publisher has in flight at once, over all its
	// sessions (each session has at most one). It keeps a burst of large records from queueing
	// behind each other in the server until their tries time out. Default 64.
	MaxConcurrentWrites int
	// MaxPendingBytes bounds the events a Writer holds not yet durable (pending plus in flight),
	// in bytes of their JSON fields (type, time, data, surfaceOp, sourceEventSeqs). An Append that
	// would exceed it is refused with ErrBacklog and not admitted; one event is always admitted
	// into an empty backlog. It caps the memory of a session whose store keeps failing.
	// Default 16 MiB; negative means no limit.
	MaxPendingBytes int64
	// TracerProvider makes the span of each record write ("agentlog.append"), whose W3C trace
	// context (traceparent, tracestate) travels in the record's headers, so that the projector's
	// fold of the record joins the writer's trace. A write asked for by Flush or Close is a child
	// of the span in their ctx. Default otel.GetTracerProvider() (no-op unless the program set
	// up the OpenTelemetry SDK).
	TracerProvider trace.TracerProvider
	// LeaseTTL is the TTL of each Writer's lease on its session (KV agentlog_writers), renewed
	// every LeaseTTL/4 and deleted at Close/Abort. Open and Create refuse a session whose lease
	// is live (ErrSessionLive). At least 1 s; default DefaultLeaseTTL (10 s).
	LeaseTTL time.Duration
	// KeepLoneSurrogates keeps \uD800–\uDFFF escapes that are not half of a pair in event data, as
	// the reference does (for importing a log faithfully). By default Append replaces them by
	// U+FFFD, since model APIs refuse such strings (session/DEPARTURES.md). Ill-formed UTF-8 is
	// replaced either way, as the reference's reading of a log replaces it.
	KeepLoneSurrogates bool
	// MaxEventBytes caps one event's encoded JSON line, in bytes: Append refuses a larger event at
	// once with a *session.Error (rule event-too-large) that also matches
	// store.ErrEventTooLarge. An event too large for one record (the stream's max message
	// size) is stored as a blob of the write-once stream AGENTLOG_BLOBS and its record references it.
	// Default store.DefaultMaxEventBytes (64 MiB).
	MaxEventBytes int64
}

// afterFunc runs f once d has elapsed and returns a stop function (like time.AfterFunc(d,f).Stop).
type afterFunc func(d time.Duration, f func()) (stop func() bool)

func realAfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Publisher creates and opens sessions for writing on one provisioned agentlog (a store.Store).
// It owns one Writer per open session. It is safe for concurrent use.
type Publisher struct {
	store *store.Store
	nc    *nats.Conn
	opts  Options
	log   *slog.Logger

	// test hook: starts the batching window's timer (realAfterFunc); tests drive it by hand.
	after afterFunc
	// test hook: run by the write goroutine before each record is written (nil: none).
	beforeWrite func(id string, firstSeq int64)

	slots     chan struct{} // one token per record in flight (Options.MaxConcurrentWrites)
	tracer    trace.Tracer
	metrics   *metrics
	sanitized atomic.Uint64 // strings repaired by Append, over all Writers (SanitizedStrings)

	lease     store.Lease   // this publisher's lease value (Since set per writer)
	leaseStop chan struct{} // closed by Close: ends the renewal loop

	status   chan nats.Status // connection status changes (watchConn); nil without a connection
	reconnMu sync.Mutex
	reconn   chan struct{} // closed and replaced at each reconnect

	ensureMu  sync.Mutex // writersRecreated
	ensuredAt time.Time
	recreated bool

	mu        sync.Mutex
	writers   map[string]*Writer
	closed    bool
	leaseLoop bool // the renewal loop runs
}

// New returns a Publisher writing to store. nc carries the agent/error reports to
// agentlog.errors.<token> (nil: no reports; the Errors channels still work). It returns an error
// for a nil store or unusable Options (see Options).
func New(sto *store.Store, nc *nats.Conn, opts Options) (*Publisher, error) {
	if err := checkOptions(sto, opts); err != nil {
		return nil, err
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.WriterID == "" {
		opts.WriterID = nuid.Next()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.AttemptTimeout = cmp.Or(opts.AttemptTimeout, DefaultAttemptTimeout)
	opts.RetryBudget = cmp.Or(opts.RetryBudget, DefaultRetryBudget)
	opts.MaxConcurrentWrites = cmp.Or(opts.MaxConcurrentWrites, DefaultMaxConcurrentWrites)
	opts.MaxPendingBytes = cmp.Or(opts.MaxPendingBytes, DefaultMaxPendingBytes)
	opts.LeaseTTL = cmp.Or(opts.LeaseTTL, DefaultLeaseTTL)
	if opts.MaxEventBytes != 0 && opts.MaxEventBytes != sto.MaxEventBytes() {
		sto = sto.WithMaxEventBytes(opts.MaxEventBytes) // this publisher's copy carries its cap
	}
	p := &Publisher{
		store:     sto,
		nc:        nc,
		opts:      opts,
		log:       opts.Logger,
		after:     realAfterFunc,
		slots:     make(chan struct{}, opts.MaxConcurrentWrites),
		lease:     store.NewLease(opts.WriterID),
		leaseStop: make(chan struct{}),
		writers:   map[string]*Writer{},
		reconn:    make(chan struct{}),
	}
	if sto.JetStream() != nil && sto.JetStream().Conn() != nil {
		p.status = sto.JetStream().Conn().StatusChanged(nats.CONNECTED, nats.CLOSED)
		go p.watchConn(p.status)
	}
	p.metrics = newMetrics(p)
	p.tracer = tracing.Tracer(opts.TracerProvider)
	return p, nil
}

// watchConn signals each reconnect (reconnected): a write attempt sent before it gets no answer,
// so it is retried at once instead of waiting out its AttemptTimeout.
func (p *Publisher) watchConn(ch chan nats.Status) {
	for st := range ch {
		if st == nats.CLOSED {
			return
		}
		p.reconnMu.Lock()
		close(p.reconn)
		p.reconn = make(chan struct{})
		p.reconnMu.Unlock()
	}
}

// reconnected is closed at the next reconnect.
func (p *Publisher) reconnected() <-chan struct{} {
	p.reconnMu.Lock()
	defer p.reconnMu.Unlock()
	return p.reconn
}

// errReconnected cancels a write attempt sent before a reconnect.
var errReconnected = errors.New("the connection reconnected during the attempt")

// checkOptions refuses what New cannot use: a nil store, a WriterID that does not fit in a
// Nats-Msg-Id, negative durations and counts.
func checkOptions(sto *store.Store, opts Options) error {
	if sto == nil {
		return errors.New("publisher: nil *jetstream.Store")
	}
	if strings.IndexFunc(opts.WriterID, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("publisher: Options.WriterID %q must not contain whitespace or control characters (it goes into the Nats-Msg-Id header)", opts.WriterID)
	}
	if len(opts.WriterID) > MaxWriterIDBytes {
		return fmt.Errorf("publisher: Options.WriterID is %d bytes, at most %d allowed (it goes into the Nats-Msg-Id header)", len(opts.WriterID), MaxWriterIDBytes)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Window", opts.Window}, {"AttemptTimeout", opts.AttemptTimeout}, {"RetryBudget", opts.RetryBudget}} {
		if d.v < 0 {
			return fmt.Errorf("publisher: Options.%s is %s, want > 0 (or 0 for the default)", d.name, d.v)
		}
	}
	if opts.LeaseTTL != 0 && opts.LeaseTTL < store.MinLeaseTTL {
		return fmt.Errorf("publisher: Options.LeaseTTL is %s, want at least %s (or 0 for the default)", opts.LeaseTTL, store.MinLeaseTTL)
	}
	if opts.MaxConcurrentWrites < 0 {
		return fmt.Errorf("publisher: Options.MaxConcurrentWrites is %d, want > 0 (or 0 for the default)", opts.MaxConcurrentWrites)
	}
	if opts.MaxEventBytes < 0 {
		return fmt.Errorf("publisher: Options.MaxEventBytes is %d, want > 0 (or 0 for the default %d)", opts.MaxEventBytes, store.DefaultMaxEventBytes)
	}
	return nil
}

// WriterID returns the id that prefixes this publisher's Nats-Msg-Id values.
func (p *Publisher) WriterID() string { return p.opts.WriterID }

// Create registers a new session's metadata (a KV create in agentlog_sessions, with a fresh
// incarnation) and returns its Writer, positioned at seq 0 with guard 0 (no record yet), holding
// the session's writer lease. It writes NO event: a session that is created but never written
// leaves nothing in the log.
// An id that already exists gives an error wrapping ErrSessionExists (and store.ErrSessionExists);
// a live lease on an id without metadata (a racing Create or Open) is a *LiveError.
func (p *Publisher) Create(ctx context.Context, h session.Header) (*Writer, error) {
	ss, err := p.store.Session(h.ID)
	if err != nil {
		return nil, fmt.Errorf("publisher: create: %w", err)
	}
	if err := p.reserve(h.ID); err != nil {
		return nil, err
	}
	gen := p.connGen()
	lease, rev, err := p.acquireLease(ctx, ss, false)
	if err != nil {
		p.release(h.ID, nil)
		if errors.Is(err, ErrSessionLive) {
			if _, gerr := ss.Info(ctx); gerr == nil {
				return nil, fmt.Errorf("publisher: create session %q: %w", h.ID, ErrSessionExists)
			}
			return nil, err // a *LiveError, naming the session
		}
		return nil, fmt.Errorf("publisher: create: %w", err)
	}
	inc := wire.NewIncarnation()
	if err := p.store.CreateSession(ctx, h, store.WithIncarnation(inc)); err != nil {
		p.releaseLease(ss, rev)
		p.release(h.ID, nil)
		if errors.Is(err, store.ErrSessionExists) {
			return nil, fmt.Errorf("publisher: create session %q: %w", h.ID, ErrSessionExists)
		}
		return nil, fmt.Errorf("publisher: create: %w", err)
	}
	w := newWriter(p, ss, inc, session.NewSurface(), acked{})
	w.lease, w.leaseRev, w.validGen, w.renewedAt = lease, rev, gen, time.Now()
	if err := p.install(w); err != nil {
		return nil, err
	}
	return w, nil
}

// OpenOption is an option of Publisher.Open. An option that refuses its input (or a nil one)
// makes Open fail, before it does anything, with an error wrapping ErrInvalidOption.
type OpenOption func(*openOptions) error

type openOptions struct{ takeover bool }

// Takeover makes Open take the session over from a live writer: its lease is overwritten, and the
// old writer is fenced (ErrFenced) at its next write or lease renewal. Crash repair then runs as
// if it had died.
func Takeover() OpenOption {
	return func(o *openOptions) error {
		o.takeover = true
		return nil
	}
}

// Open resumes a stored session for writing (the reference's resume): it takes the session's
// writer lease (a live writer's is a *LiveError unless Takeover()), reads and validates the log (a
// log that breaks a rule is its *session.Error), then writes the crash-repair closers when the
// last turn is open and a session/end-seed unless the log ends with one, as ONE guarded record,
// durable before Open returns (a *WriteError if not). An archived session is first brought back
// to the hot stream (store.Session.Restore: atomic, idempotent; the lease keeps a second
// Open out meanwhile). An id with neither metadata nor events is a wrapped
// store.ErrSessionNotFound.
func (p *Publisher) Open(ctx context.Context, id string, opts ...OpenOption) (*Writer, error) {
	ss, err := p.store.Session(id)
	if err != nil {
		return nil, fmt.Errorf("publisher: open: %w", err)
	}
	var o openOptions
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("publisher: open session %q: option %d is nil: %w", id, i+1, ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("publisher: open session %q: %w: %w", id, ErrInvalidOption, err)
		}
	}
	if err := p.reserve(id); err != nil {
		return nil, err
	}
	gen := p.connGen()
	lease, rev, err := p.acquireLease(ctx, ss, o.takeover)
	if err != nil {
		p.release(id, nil)
		if errors.Is(err, ErrSessionLive) {
			return nil, err // a *LiveError, naming the session
		}
		return nil, fmt.Errorf("publisher: open: %w", err)
	}
	w, err := p.open(ctx, ss, gen)
	for try := 0; err != nil && try < archiveRaceTries && errors.Is(err, store.ErrConflict); try++ {
		// An archive of the session committed between the read and the first write (its
		// lifecycle pass does not see this lease before it reads): the log is whole in the
		// archive, so open it again, which restores it.
		if loc, lerr := ss.Locate(ctx); lerr != nil || loc.State != store.StateArchived {
			break
		}
		w, err = p.open(ctx, ss, gen)
	}
	if err != nil {
		p.releaseLease(ss, rev)
		p.release(id, nil)
		return nil, err
	}
	w.lease, w.leaseRev, w.validGen, w.renewedAt = lease, rev, gen, time.Now()
	if err := p.install(w); err != nil {
		return nil, err
	}
	return w, nil
}

// archiveRaceTries bounds the Opens again after an archive raced one.
const archiveRaceTries = 3

// openError wraps err from opening session id: err names the session already (the store's errors
// and a *session.Error do).
func openError(what string, err error) error {
	return fmt.Errorf("publisher: open: %s: %w", what, err)
}

// open reads and repairs the session (see Open); gen is the connGen before the log was read.
func (p *Publisher) open(ctx context.Context, ss *store.Session, gen uint64) (*Writer, error) {
	id, token := ss.ID(), ss.Token()
	info, err := ss.Info(ctx)
	if err != nil && !errors.Is(err, store.ErrSessionNotFound) {
		return nil, openError("read metadata", err)
	}
	hasMeta := err == nil
	var events []session.Event
	lastStreamSeq, err := ss.Records(ctx, store.Collect(&events))
	if errors.Is(err, store.ErrSessionNotFound) {
		events, lastStreamSeq, err = nil, 0, nil // no records yet; the metadata decides below
	}
	if err != nil {
		return nil, openError("read log", err)
	}
	if lastStreamSeq == 0 && len(events) > 0 {
		// Archived: its log lives in cold storage. Bring it back to the hot stream first (a
		// restore is atomic and idempotent; this Open holds the lease), then read it from there.
		if _, err := ss.Restore(ctx); err != nil {
			return nil, openError("restore the archived session", err)
		}
		events = events[:0]
		if lastStreamSeq, err = ss.Records(ctx, store.Collect(&events)); err != nil {
			return nil, openError("read log", err)
		}
	}
	if len(events) == 0 && !hasMeta {
		return nil, fmt.Errorf("publisher: open session %q: no metadata and no events: %w", id, store.ErrSessionNotFound)
	}
	sess, err := session.Load(id, events)
	if err != nil {
		return nil, openError("stored log refused", err)
	}
	events = nil // the Writer keeps only the Surface

	// Closers first, then the marker, so the closers' seqs equal the oracle's repair.
	tail := sess.Repair()
	for _, ev := range tail {
		if err := sess.Append(ev); err != nil {
			return nil, openError("crash-repair closer refused", err)
		}
	}
	all := sess.Events()
	if len(all) == 0 || all[len(all)-1].Type != "session/end-seed" {
		marker := session.EndSeed(sess.NextSeq(), p.opts.Now().UnixMilli())
		if err := sess.Append(marker); err != nil {
			return nil, openError("end-seed marker refused", err)
		}
		tail = append(tail, marker)
	}
	surface := sess.Surface()
	a := acked{streamSeq: lastStreamSeq, nextSeq: surface.AsOfSeq + 1}
	if len(tail) > 0 {
		msgID := p.msgID(token, info.Incarnation, tail[0].Seq)
		res, _, err := p.writeRecord(ctx, ss, acked{streamSeq: lastStreamSeq, nextSeq: tail[0].Seq}, gen, msgID, tail)
		if err == nil && lastStreamSeq == 0 {
			err = p.undoIfDeleted(ctx, ss, info.Incarnation, res)
		}
		if err != nil {
			we := &WriteError{Session: id, FirstSeq: tail[0].Seq, LastSeq: tail[len(tail)-1].Seq, Err: err}
			p.publishReport(token, we)
			return nil, we
		}
		a = acked{streamSeq: res, msgID: msgID, firstSeq: tail[0].Seq, nextSeq: surface.AsOfSeq + 1}
	} else if lastStreamSeq > 0 {
		// Nothing to write: learn the last record's Nats-Msg-Id, so that a later check of the
		// tail can tell it from another record at the same stream seq.
		t, err := p.tailFromLeader(ctx, ss)
		if err != nil {
			return nil, openError("read the tail", err)
		}
		if t.LastStreamSeq != lastStreamSeq || t.NextSeq != a.nextSeq {
			return nil, fmt.Errorf("publisher: open session %q: the log changed while it was opened (tail at stream seq %d, next seq %d; read %d, %d): %w",
				id, t.LastStreamSeq, t.NextSeq, lastStreamSeq, a.nextSeq, ErrConflict)
		}
		a.msgID, a.firstSeq = t.LastMsgID, t.LastEvents[0].Seq
	}
	return newWriter(p, ss, info.Incarnation, &surface, a), nil
}

// Close flushes and closes every open Writer, then refuses further Create/Open with ErrClosed.
// It returns the joined errors of the writers that could not be flushed (their events stay pending;
// calling Close again retries them).
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	ws := make([]*Writer, 0, len(p.writers))
	for _, w := range p.writers {
		if w != nil {
			ws = append(ws, w)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, w := range ws {
		if err := w.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	p.mu.Lock()
	if len(errs) == 0 && p.leaseLoop {
		close(p.leaseStop)
		p.leaseLoop = false
	}
	if len(errs) == 0 && p.status != nil {
		p.store.JetStream().Conn().RemoveStatusListener(p.status)
		p.status = nil
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// reserve claims id for a writer being created/opened (nil placeholder in the map).
func (p *Publisher) reserve(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("publisher: session %q: %w", id, ErrClosed)
	}
	if _, ok := p.writers[id]; ok {
		return fmt.Errorf("publisher: session %q: %w", id, ErrAlreadyOpen)
	}
	p.writers[id] = nil
	return nil
}

// install turns the reservation of w.id into w; when Close ran meanwhile, w is stopped (it has
// nothing pending yet) and ErrClosed returned.
func (p *Publisher) install(w *Writer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		delete(p.writers, w.id)
		w.mu.Lock()
		w.closing, w.closed = true, true
		w.mu.Unlock()
		w.cancel()
		go p.releaseLease(w.ss, w.leaseRev)
		return fmt.Errorf("publisher: session %q: %w", w.id, ErrClosed)
	}
	p.writers[w.id] = w
	if !p.leaseLoop {
		p.leaseLoop = true
		go p.renewLoop(p.leaseStop)
	}
	return nil
}

// release forgets id if it is still held by w (nil: the reservation).
func (p *Publisher) release(id string, w *Writer) {
	p.mu.Lock()
	if cur, ok := p.writers[id]; ok && cur == w {
		delete(p.writers, id)
	}
	p.mu.Unlock()
}

// msgID is the Nats-Msg-Id of the record starting at firstSeq:
// <WriterID>.<token>.<incarnation>.<firstSeq>, or <WriterID>.<token>.<firstSeq> for a legacy
// session without incarnation. A retry of the same record reuses it (so the server dedupes it);
// another writer, or another incarnation of the session, never collides.
func (p *Publisher) msgID(token, incarnation string, firstSeq int64) string {
	if incarnation == "" {
		return fmt.Sprintf("%s.%s.%d", p.opts.WriterID, token, firstSeq)
	}
	return fmt.Sprintf("%s.%s.%s.%d", p.opts.WriterID, token, incarnation, firstSeq)
}

// writeRecord writes events as one record guarded with a.streamSeq (the stream seq of the
// session's previous record, 0 for none; a is what the writer knows durable) and returns the
// stream seq of the record (checkedWrite, for a write that does not keep what it proved). validGen
// is the connGen when the guard was read.
func (p *Publisher) writeRecord(ctx context.Context, ss *store.Session, a acked, validGen uint64, msgID string, events []session.Event) (uint64, bool, error) {
	seq, maybeStored, _, err := p.checkedWrite(ctx, ss, a, validGen, msgID, events)
	return seq, maybeStored, err
}

// checkedWrite writes events as one record after a (a.streamSeq is the guard) and returns its
// stream seq, in an "agentlog.append" span. validGen is the connGen when the writer last proved
// its tail (staleGen: not proved, or a lease renewal gap since); it returns the connGen the record
// was proved against. Transient errors are retried with exponential backoff bounded by ctx and
// the retry budget. A guard conflict is resolved by reading the tail: if its Nats-Msg-Id is ours,
// the record was stored after a lost ack and the write succeeded; acknowledged events that are
// gone give an *AckedLostError (checkTail); otherwise the error wraps ErrConflict.
//
// On failure, maybeStored reports whether the record may have been stored all the same: some try
// was sent and got no answer (a timeout, a lost connection). Such a record must be retried as
// exactly the same record — same events, same Nats-Msg-Id — so that the retry dedupes or finds
// it at the tail.
//
// A guard alone cannot fence a writer whose acknowledged records the server lost: the subject
// re-grown by another writer may reach the very stream seq the writer guards with. So a record is
// sent only after the writer proved its tail from the stream leader (checkTail: the tail is still
// its last record) whenever that proof may be stale: at the first try after a reconnect or a
// lease renewal gap, and before every retry (a try that failed may mean a server restarting,
// which the connection does not see when another server of a cluster holds the stream). A try is
// never sent while the connection is down: nats.go would buffer it and send it, with the guard
// of before, the moment the connection is back, before any proof. And a record acknowledged
// across a reconnect is checked after the fact: the record it is guarded on must be the writer's
// own (provePrev), else its acknowledged events are reported lost (ErrAckedLost), never as
// written.
func (p *Publisher) checkedWrite(ctx context.Context, ss *store.Session, a acked, validGen uint64, msgID string, events []session.Event) (uint64, bool, uint64, error) {
	ctx, span := p.startAppendSpan(ctx, ss.ID(), msgID, events)
	w := &recordWrite{p: p, ss: ss, id: ss.ID(), a: a, msgID: msgID, events: events, provedGen: validGen, opts: tracing.RecordOpts(ctx, msgID)}
	seq, maybeStored, err := w.run(ctx)
	endAppendSpan(span, seq, err)
	return seq, maybeStored, w.provedGen, err
}

// errNotConnected is a try not sent because the connection is down.
var errNotConnected = errors.New("not connected to NATS (the record is sent once the connection is back and the session's tail is proved)")

// recordWrite is one record's write: its tries, and what they proved.
type recordWrite struct {
	p      *Publisher
	ss     *store.Session
	id     string // ss.ID()
	a      acked  // what the writer knows durable; a.streamSeq is the guard
	msgID  string
	events []session.Event
	opts   []store.AppendOpt

	provedGen   uint64 // connGen when the tail was last proved to be a's record (staleGen: not proved)
	tries       int
	lastErr     error
	maybeStored bool // some try was sent and got no answer (see checkedWrite)
}

// run makes the tries of the write, with exponential backoff (50 ms to 2 s) bounded by ctx and
// the retry budget. Errors name the session.
func (w *recordWrite) run(ctx context.Context) (uint64, bool, error) {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(w.p.opts.RetryBudget),
	)
	seq, err := backoff.RetryWithData(func() (uint64, error) { return w.try(ctx) }, backoff.WithContext(b, ctx))
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) && err != w.lastErr {
		err = ctxError(w.id, err, w.lastErr) // the store's errors name the session; ctx's do not
	}
	maybeStored := w.maybeStored
	if isFencing(err) {
		maybeStored = false // fenced: the events are dropped
	}
	return seq, maybeStored, err
}

// retry is a transient failure of one try: it is kept as the last error and retried.
func (w *recordWrite) retry(err error) (uint64, error) {
	w.lastErr = err
	w.p.log.Debug("agentlog publisher: transient write error, retrying", "session", w.id, "msgID", w.msgID, "error", err)
	return 0, err
}

// try is one try of the write (a backoff.RetryWithData operation).
func (w *recordWrite) try(ctx context.Context) (uint64, error) {
	p, id, last := w.p, w.id, w.events[len(w.events)-1].Seq
	w.tries++
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, backoff.Permanent(ctx.Err())
	}
	defer func() { <-p.slots }()
	if !p.connected() {
		return w.retry(errNotConnected)
	}
	gen := p.connGen()
	if w.tries > 1 || gen != w.provedGen {
		seq, done, err := w.prove(ctx, gen)
		if done || err != nil {
			return seq, err
		}
	}

	cctx, ccancel := context.WithCancelCause(ctx)
	reconn := p.reconnected()
	go func() {
		select {
		case <-reconn:
			ccancel(errReconnected)
		case <-cctx.Done():
		}
	}()
	actx, cancel := context.WithTimeout(cctx, p.attemptTimeout(w.events))
	res, err := w.ss.Append(actx, w.a.streamSeq, w.events, w.opts...)
	reconnectedDuring := errors.Is(context.Cause(cctx), errReconnected)
	cancel()
	ccancel(nil)
	if err != nil && reconnectedDuring && ctx.Err() == nil {
		// Sent before the reconnect: its answer is lost. Retry it (same id), after a proof.
		w.maybeStored = true
		return w.retry(fmt.Errorf("%w: %v", errReconnected, err))
	}
	if err == nil {
		if res.Duplicate && res.StreamSeq <= w.a.streamSeq {
			// The server deduplicated against a record older than our guard: not ours.
			return 0, backoff.Permanent(fmt.Errorf("%w: session %q: Nats-Msg-Id %q matched stream seq %d, at or before the guard %d",
				ErrConflict, id, w.msgID, res.StreamSeq, w.a.streamSeq))
		}
		if res.Duplicate {
			// An earlier try was stored. Make sure it is this very record (same events) and
			// the session's tail, and that it continues our log, before counting it durable.
			tail, terr := p.tailFromLeader(ctx, w.ss)
			if terr != nil {
				w.maybeStored = true
				err := fmt.Errorf("deduplicated as stream seq %d, then reading the tail: %w", res.StreamSeq, terr)
				if transient(terr) && ctx.Err() == nil {
					return w.retry(err)
				}
				w.lastErr = err
				return 0, backoff.Permanent(err)
			}
			if tail.LastStreamSeq != res.StreamSeq || tail.NextSeq != last+1 {
				return 0, backoff.Permanent(fmt.Errorf("session %q: Nats-Msg-Id %q was deduplicated as stream seq %d, but the tail record is stream seq %d ending before seq %d, not this record of seqs %d..%d",
					id, w.msgID, res.StreamSeq, tail.LastStreamSeq, tail.NextSeq, w.events[0].Seq, last))
			}
			return w.provePrev(ctx, res.StreamSeq, gen)
		}
		if after := p.connGen(); after != gen || reconnectedDuring {
			// Acknowledged across a reconnect: the record may have waited in nats.go's reconnect
			// buffer, sent with our guard before anything was proved.
			return w.provePrev(ctx, res.StreamSeq, after)
		}
		return res.StreamSeq, nil
	}
	w.lastErr = err
	if unanswered(err) {
		w.maybeStored = true
	}
	if errors.Is(err, store.ErrConflict) {
		tail, terr := p.tailFromLeader(ctx, w.ss)
		if terr != nil {
			w.lastErr = fmt.Errorf("%w (then reading the tail: %v)", err, terr)
			if transient(terr) && ctx.Err() == nil {
				return 0, w.lastErr
			}
			return 0, backoff.Permanent(w.lastErr)
		}
		if ownTail(tail, w.msgID, last) {
			return w.provePrev(ctx, tail.LastStreamSeq, gen)
		}
		cerr := p.checkTail(ctx, w.ss, w.a, tail)
		if cerr == nil {
			cerr = fmt.Errorf("%w: guard %d, tail record at stream seq %d (Nats-Msg-Id %q, next seq %d)",
				ErrConflict, w.a.streamSeq, tail.LastStreamSeq, tail.LastMsgID, tail.NextSeq)
		}
		return 0, backoff.Permanent(fmt.Errorf("%w: %v", cerr, err))
	}
	if transient(err) && ctx.Err() == nil {
		return w.retry(err)
	}
	return 0, backoff.Permanent(err)
}

// prove reads the tail from the stream leader before a try is sent (at connGen gen). done: an
// earlier try, whose answer was lost, is stored and continues our log (seq is its stream seq).
// Otherwise the tail must still be a's record (checkTail), or the write is fenced: a permanent
// error, an *AckedLostError or ErrConflict. A tail that cannot be read is a transient error.
func (w *recordWrite) prove(ctx context.Context, gen uint64) (seq uint64, done bool, err error) {
	t, terr := w.p.tailFromLeader(ctx, w.ss)
	if terr != nil {
		err = fmt.Errorf("proving the session's tail before writing: %w", terr)
		if transient(terr) && ctx.Err() == nil {
			_, err = w.retry(err)
			return 0, false, err
		}
		w.lastErr = err
		return 0, false, backoff.Permanent(err)
	}
	if ownTail(t, w.msgID, w.events[len(w.events)-1].Seq) {
		seq, err := w.provePrev(ctx, t.LastStreamSeq, gen)
		return seq, true, err
	}
	if cerr := w.p.checkTail(ctx, w.ss, w.a, t); cerr != nil {
		return 0, false, backoff.Permanent(fmt.Errorf("session %q: %w", w.id, cerr)) // checkTail leaves naming it to its caller
	}
	w.provedGen = gen
	return 0, false, nil
}

// provePrev checks that our record, stored at stream seq seq, continues our log: the record at
// the guard (a.streamSeq) is still a's last record (nothing to check for a first record, guard 0).
// It returns seq, or a permanent *AckedLostError: the record was guarded on another writer's
// record at that stream seq, written after the server lost ours. A read that fails is retried.
func (w *recordWrite) provePrev(ctx context.Context, seq, gen uint64) (uint64, error) {
	a := w.a
	if a.streamSeq == 0 {
		w.provedGen = gen
		return seq, nil
	}
	rec, found, err := w.ss.RecordFromLeader(ctx, a.streamSeq)
	if err != nil && !isSessionErr(err) {
		w.maybeStored = true
		err = fmt.Errorf("stored as stream seq %d, then reading the record it is guarded on: %w", seq, err)
		if transient(err) && ctx.Err() == nil {
			return w.retry(err)
		}
		w.lastErr = err
		return 0, backoff.Permanent(err)
	}
	if err == nil && found && rec.NextSeq == a.nextSeq && (a.msgID == "" || rec.LastMsgID == a.msgID) {
		w.provedGen = gen
		return seq, nil
	}
	from := a.firstSeq
	if a.msgID == "" {
		from = a.nextSeq - 1
	}
	return 0, backoff.Permanent(&AckedLostError{Session: w.id, FromSeq: from, ToSeq: a.nextSeq - 1,
		Detail: fmt.Sprintf("stream seq %d, where the writer's last record was, holds another record; the record written now (stream seq %d) follows it", a.streamSeq, seq)})
}

// isSessionErr reports whether err is (or wraps) a *session.Error: a record that does not decode.
func isSessionErr(err error) bool {
	var se *session.Error
	return errors.As(err, &se)
}

// connected reports whether the store's connection is up (true without one).
func (p *Publisher) connected() bool {
	if p.store.JetStream() == nil || p.store.JetStream().Conn() == nil {
		return true
	}
	return p.store.JetStream().Conn().IsConnected()
}

// minUploadRate is the slowest upload an attempt is given time for, bytes/s: a record whose events
// are offloaded as blobs (tens of MiB) gets AttemptTimeout plus its bytes at this rate.
const minUploadRate = 4 << 20

// attemptTimeout bounds one try of writing events: AttemptTimeout, plus time to upload the events'
// data at minUploadRate when they add up to more than a second of it (large events).
func (p *Publisher) attemptTimeout(events []session.Event) time.Duration {
	n := 0
	for i := range events {
		n += len(events[i].Data)
	}
	if n < minUploadRate {
		return p.opts.AttemptTimeout
	}
	return p.opts.AttemptTimeout + time.Duration(n/minUploadRate)*time.Second
}

// unanswered reports whether a failed store.Append may have stored the record all the same: the
// request was (or may have been) sent and no answer came back. An answer from the server (a
// JetStream API error, including the guard's 10071), no responders, and refusals before sending
// (a *session.Error, ErrEventTooLarge) all mean nothing was stored.
func unanswered(err error) bool {
	var apiErr *njs.APIError
	var se *session.Error
	switch {
	case errors.As(err, &apiErr), errors.As(err, &se),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, store.ErrEventTooLarge),
		errors.Is(err, store.ErrConflict):
		return false
	}
	return true
}

// ownTail reports whether the tail record is the one this writer meant to write: its Nats-Msg-Id
// is msgID (or msgID plus a split-part suffix) and it ends at lastSeq.
func ownTail(t store.Tail, msgID string, lastSeq int64) bool {
	if t.NextSeq != lastSeq+1 {
		return false
	}
	if t.LastMsgID == msgID {
		return true
	}
	if strings.HasPrefix(t.LastMsgID, msgID) {
		c := t.LastMsgID[len(msgID)]
		return c < '0' || c > '9'
	}
	return false
}

// ErrorReport is the agent/error report published to agentlog.errors.<token> when a write fails.
// Time is Unix ms. FirstSeq..LastSeq is the seq range of the failed record. Fenced is true when the
// writer stopped writing the session. Lost, when set, is the acknowledged seq range [from, to] that
// the stored log no longer holds (ErrAckedLost).
// It is a report only: a failure is never written as a session event.
type ErrorReport struct {
	Type     string    `json:"type"` // always "agent/error"
	Session  string    `json:"session"`
	FirstSeq int64     `json:"firstSeq"`
	LastSeq  int64     `json:"lastSeq"`
	Error    string    `json:"error"`
	Time     int64     `json:"time"`
	WriterID string    `json:"writerId"`
	Fenced   bool      `json:"fenced,omitempty"`
	Lost     *[2]int64 `json:"lost,omitempty"`
}

func (p *Publisher) publishReport(token string, we *WriteError) {
	if p.nc == nil {
		return
	}
	rep := ErrorReport{
		Type: "agent/error", Session: we.Session, FirstSeq: we.FirstSeq, LastSeq: we.LastSeq,
		Error: we.Err.Error(), Time: p.opts.Now().UnixMilli(), WriterID: p.opts.WriterID, Fenced: we.Fenced,
	}
	var lost *AckedLostError
	if errors.As(we.Err, &lost) {
		rep.Lost = &[2]int64{lost.FromSeq, lost.ToSeq}
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return
	}
	if err := p.nc.Publish(wire.ErrorsPrefix+"."+token, body); err != nil {
		p.log.Warn("agentlog publisher: cannot publish agent/error report", "session", we.Session, "error", err)
	}
}

// tailFromLeader reads the session's tail through the stream leader, bounded by AttemptTimeout
// like a write attempt (ctx, the writer's, has no deadline of its own).
func (p *Publisher) tailFromLeader(ctx context.Context, ss *store.Session) (store.Tail, error) {
	tctx, cancel := context.WithTimeout(ctx, p.opts.AttemptTimeout)
	defer cancel()
	return ss.TailFromLeader(tctx)
}
