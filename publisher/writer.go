package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"go.opentelemetry.io/otel/trace"
)

// Writer appends the events of one session; it is safe for concurrent use. Append validates at
// once and admits the event into the current window (Options.Window, fixed, not extended by later
// events); each ended window becomes one guarded record, at most one in flight. Flush is the
// durability checkpoint. A failed write keeps its events pending and is reported once on Errors;
// a guard conflict fences the Writer. The flow and why: ARCHITECTURE.md, "An append".
type Writer struct {
	p           *Publisher
	ss          *store.Session // the session's handle in the store
	id          string
	token       string
	incarnation string // the session's incarnation ("" for legacy metadata), part of each Nats-Msg-Id

	errs    chan error
	dropped atomic.Uint64
	ctx     context.Context // lives until Close; bounds background writes
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the write goroutine in flight

	sanitized atomic.Uint64 // strings repaired by Append (SanitizedStrings)

	mu            sync.Mutex
	surface       *session.Surface // fold state including every admitted event
	nextSeq       int64            // seq of the next admitted event
	durableNext   int64            // every event with seq < durableNext is durable
	lastStreamSeq uint64           // stream seq of the session's last record: the next guard
	lastMsgID     string           // Nats-Msg-Id of that record ("" when there is none)
	lastFirstSeq  int64            // first seq of that record
	validGen      uint64           // connGen when the tail was last known to be lastStreamSeq (staleGen: check it at the next write)
	lease         store.Lease      // this writer's lease value
	leaseRev      uint64           // revision of its lease in agentlog_writers; 0 when not held
	releasing     chan struct{}    // closed when the lease release a fence started is done (nil: none)
	renewFailing  time.Time        // when lease renewals started failing (zero: they succeed)
	renewedAt     time.Time        // when the lease was last taken or renewed
	invalidations uint64           // times validGen was set to staleGen (invalidateLocked)
	writeFailing  time.Time        // when writes started failing (zero: the last one succeeded)
	pending       []session.Event  // admitted, not in flight, in seq order
	due           int              // pending[:due] belong to ended windows and wait for a write
	pinned        int              // >0: pending[:pinned] is a record that may be stored already (its write got no answer); it is retried as exactly that record
	inflight      []session.Event  // the record being written (nil when none)
	backlog       int64            // bytes (eventBytes) of pending plus inflight events
	stopTimer     func() bool      // stops the open window's timer; nil when no window is open
	windowGen     uint64           // identifies the open window (a stale timer fire is ignored)
	failGen       uint64           // bumped on every failed write
	lastErr       error            // the latest write failure
	fenced        error            // the conflict that fenced this writer, nil otherwise
	closing       bool             // Close began: Append/Emit refused
	closed        bool             // Close finished
	changed       chan struct{}    // closed and replaced on every state change

	// the span of the last Flush/Close caller: the parent of the next write's span (guarded by mu)
	traceParent trace.SpanContext
}

func newWriter(p *Publisher, ss *store.Session, incarnation string, surface *session.Surface, a acked) *Writer {
	ctx, cancel := context.WithCancel(context.Background())
	next := surface.AsOfSeq + 1
	return &Writer{
		p: p, ss: ss, id: ss.ID(), token: ss.Token(), incarnation: incarnation,
		errs:   make(chan error, errorsBuffer),
		ctx:    ctx,
		cancel: cancel,

		surface:       surface,
		nextSeq:       next,
		durableNext:   next,
		lastStreamSeq: a.streamSeq,
		lastMsgID:     a.msgID,
		lastFirstSeq:  a.firstSeq,
		changed:       make(chan struct{}),
	}
}

// Incarnation returns the session's incarnation ("" for a session created before incarnations).
func (w *Writer) Incarnation() string { return w.incarnation }

// ID returns the session id.
func (w *Writer) ID() string { return w.id }

// NextSeq returns the seq the next appended event must carry (the number of admitted events).
func (w *Writer) NextSeq() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextSeq
}

// DurableSeq returns the number of events known durable: every event with seq below it is stored.
func (w *Writer) DurableSeq() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.durableNext
}

// Errors delivers each write failure once, as a *WriteError. The channel is buffered (64); when it
// is full the oldest report is dropped (counted by DroppedErrors) so the writer never blocks.
// It is never closed.
func (w *Writer) Errors() <-chan error { return w.errs }

// DroppedErrors is the number of reports dropped from a full Errors channel.
func (w *Writer) DroppedErrors() uint64 { return w.dropped.Load() }

// EmitOptions are the optional envelope fields of Writer.Emit (raw JSON, kept byte for byte).
type EmitOptions struct {
	SurfaceOp       json.RawMessage
	SourceEventSeqs json.RawMessage
	Ignorable       bool
}

// Emit builds the next event — seq NextSeq(), time Options.Now() in Unix ms — and appends it.
// It returns the event as admitted, or the Append error.
func (w *Writer) Emit(typ string, data json.RawMessage, opt EmitOptions) (session.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return session.Event{}, err
	}
	ev := session.Event{
		Type:            typ,
		Seq:             w.nextSeq,
		Time:            json.Number(strconv.FormatInt(w.p.opts.Now().UnixMilli(), 10)),
		Data:            data,
		SurfaceOp:       opt.SurfaceOp,
		SourceEventSeqs: opt.SourceEventSeqs,
		Ignorable:       opt.Ignorable,
	}
	ev, err := w.appendLocked(ev)
	if err != nil {
		return session.Event{}, err
	}
	return ev, nil
}

// Append validates ev synchronously as the next event of the session (ev.Seq must equal NextSeq();
// the reference's rules via session.Surface.Apply) and admits it into the batching window. Text a
// model API would refuse is repaired first: ill-formed UTF-8 and unpaired surrogate escapes in
// ev.Data become U+FFFD (counted by SanitizedStrings; see Options.KeepLoneSurrogates). It does
// not wait for durability (use Flush). A refused event never enters the window; the error is a
// *session.Error naming the session, the seq and the rule. After Close it returns ErrClosed, after
// a guard conflict ErrFenced. The event's raw JSON fields are copied, so the caller may reuse them.
func (w *Writer) Append(ev session.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	_, err := w.appendLocked(ev)
	return err
}

func (w *Writer) usableLocked() error {
	if w.fenced != nil {
		return w.fencedErrLocked()
	}
	if w.closing || w.closed {
		return fmt.Errorf("publisher: session %q: %w", w.id, ErrClosed)
	}
	return nil
}

func (w *Writer) fencedErrLocked() error {
	return fencedError(w.fenced)
}

func (w *Writer) appendLocked(ev session.Event) (session.Event, error) {
	if ev.Seq != w.nextSeq {
		return ev, session.NewError(w.id, ev.Seq, 0, session.RuleSeqContiguous,
			fmt.Sprintf("event seq %d is not the next seq %d", ev.Seq, w.nextSeq))
	}
	if err := checkEnvelope(w.id, ev); err != nil {
		return ev, err
	}
	ev, repaired := w.sanitizeLocked(ev)
	if err := w.ss.CheckEventSize(ev); err != nil {
		return ev, err // it could never be written: refuse it now rather than block the session
	}
	size := eventBytes(ev)
	if limit := w.p.opts.MaxPendingBytes; limit > 0 && w.backlog > 0 && w.backlog+size > limit {
		return ev, &BacklogError{Session: w.id, Seq: ev.Seq, Pending: int64(len(w.pending) + len(w.inflight)),
			PendingBytes: w.backlog, EventBytes: size, Limit: limit, LastErr: w.lastErr}
	}
	ev = cloneEvent(ev)
	if err := w.surface.Apply(w.id, ev, w.lookupLocked); err != nil {
		return ev, err
	}
	w.pending = append(w.pending, ev)
	w.backlog += size
	w.nextSeq++
	w.countSanitizedLocked(repaired)
	if w.stopTimer == nil {
		// The first pending event of a window opens it. After a failed write this is the fresh
		// window that also carries the failed events (they are pending again, ahead of this one).
		w.openWindowLocked()
	}
	// No broadcast: only write outcomes (durable, failed, fenced, closed) wake Flush.
	return ev, nil
}

// eventBytes is the size an event counts for in Options.MaxPendingBytes: its JSON fields plus a
// fixed 64 bytes for the envelope.
func eventBytes(ev session.Event) int64 {
	return int64(64 + len(ev.Type) + len(ev.Time) + len(ev.Data) + len(ev.SurfaceOp) + len(ev.SourceEventSeqs))
}

// checkEnvelope refuses what would not even encode as an event line. The reference's full rules
// are session.Surface.Apply's, which also check that data is (lossless) JSON.
func checkEnvelope(id string, ev session.Event) error {
	bad := func(rule session.Rule, msg string) error {
		return session.NewError(id, ev.Seq, 0, rule, msg)
	}
	if ev.Type == "" {
		return bad(session.RuleEnvelopeType, "event type is empty")
	}
	if _, err := strconv.ParseFloat(string(ev.Time), 64); err != nil || !json.Valid([]byte(ev.Time)) {
		return bad(session.RuleEnvelopeTime, fmt.Sprintf("time %q is not a JSON number of Unix ms", string(ev.Time)))
	}
	if len(ev.Data) == 0 {
		return bad(session.RuleEnvelopeData, "data is absent")
	}
	if len(ev.SurfaceOp) > 0 && !json.Valid(ev.SurfaceOp) {
		return bad(session.RuleEnvelopeSurfaceOp, "surfaceOp is not valid JSON")
	}
	if len(ev.SourceEventSeqs) > 0 && !json.Valid(ev.SourceEventSeqs) {
		return bad(session.RuleEnvelopeSourceEventSeqs, "sourceEventSeqs is not valid JSON")
	}
	return nil
}

// cloneEvent copies the raw JSON fields of ev into one new allocation (nil stays nil).
func cloneEvent(ev session.Event) session.Event {
	buf := make([]byte, 0, len(ev.Data)+len(ev.SurfaceOp)+len(ev.SourceEventSeqs))
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		buf = append(buf, b...)
		return buf[len(buf)-len(b) : len(buf) : len(buf)]
	}
	ev.Data = take(ev.Data)
	ev.SurfaceOp = take(ev.SurfaceOp)
	ev.SourceEventSeqs = take(ev.SourceEventSeqs)
	return ev
}

// lookupLocked finds an earlier event for a tool/result replace: in flight or pending first, else
// in the stored log (store.Session.Records, stopping at the target's record; the target is durable
// then). Called with w.mu held.
func (w *Writer) lookupLocked(seq int64) (session.Event, error) {
	for _, evs := range [][]session.Event{w.inflight, w.pending} {
		if len(evs) > 0 && seq >= evs[0].Seq && seq <= evs[len(evs)-1].Seq {
			return evs[seq-evs[0].Seq], nil
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, lookupTimeout)
	defer cancel()
	var found *session.Event
	_, err := w.ss.Records(ctx, func(r store.Record) error {
		evs := r.Events
		if last := evs[len(evs)-1].Seq; seq >= evs[0].Seq && seq <= last {
			x := evs[seq-evs[0].Seq]
			found = &x
			return errFound
		}
		return nil
	})
	if found != nil {
		return *found, nil
	}
	if err != nil {
		return session.Event{}, fmt.Errorf("publisher: look up seq %d: %w", seq, err)
	}
	return session.Event{}, fmt.Errorf("publisher: session %q: look up seq %d: not in the stored log", w.id, seq)
}

// errFound stops Records once lookupLocked has its event.
var errFound = errors.New("found")

func (w *Writer) openWindowLocked() {
	w.windowGen++
	gen := w.windowGen
	w.stopTimer = w.p.after(w.p.opts.Window, func() { w.windowEnded(gen) })
}

func (w *Writer) closeWindowLocked() {
	if w.stopTimer != nil {
		w.stopTimer()
		w.stopTimer = nil
	}
	w.windowGen++
}

// windowEnded runs when the window gen ends: its events become due and are written as soon as no
// other write is in flight.
func (w *Writer) windowEnded(gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.windowGen || w.stopTimer == nil {
		return // stale: the window was closed by Flush, a failure or Close
	}
	w.stopTimer = nil
	w.windowGen++
	w.due = len(w.pending)
	w.kickLocked()
}

// kickLocked starts the write of the due events if none is in flight.
func (w *Writer) kickLocked() {
	if w.inflight != nil || w.due == 0 || w.fenced != nil || w.closed {
		return
	}
	n := w.due
	if w.pinned > 0 {
		// A write that got no answer may have stored pending[:pinned] under its Nats-Msg-Id:
		// retry exactly that record (it dedupes or is found at the tail), then the rest.
		n = w.pinned
	}
	batch := w.pending[:n:n]
	w.pending = append([]session.Event(nil), w.pending[n:]...)
	w.due = max(w.due-n, 0)
	w.inflight = batch
	a := acked{streamSeq: w.lastStreamSeq, msgID: w.lastMsgID, firstSeq: w.lastFirstSeq, nextSeq: w.durableNext}
	parent := w.traceParent
	w.traceParent = trace.SpanContext{}
	gen := w.validGen
	if w.renewGapLocked() {
		gen = staleGen // the lease may have lapsed meanwhile (a paused process): prove the tail first
	}
	w.wg.Add(1)
	go w.write(batch, a, gen, w.invalidations, parent)
}

// write writes batch as one record (validGen: the connGen its tail was proved at; invalidations:
// w.invalidations when it started); its span (see Publisher.checkedWrite) is a child of parent
// when that is valid (the span of the Flush or Close that asked for it).
func (w *Writer) write(batch []session.Event, a acked, validGen, invalidations uint64, parent trace.SpanContext) {
	defer w.wg.Done()
	wctx := w.ctx
	if parent.IsValid() {
		wctx = trace.ContextWithSpanContext(wctx, parent)
	}
	start := time.Now()
	first, last := batch[0].Seq, batch[len(batch)-1].Seq
	var err error
	if a.streamSeq == 0 {
		// The first record (guard 0) is the one write the guard cannot fence after a removal.
		err = w.p.checkCurrent(w.ctx, w.ss, w.incarnation)
	}
	if h := w.p.beforeWrite; h != nil {
		h(w.id, first)
	}
	msgID := w.p.msgID(w.token, w.incarnation, first)
	var streamSeq uint64
	var maybeStored bool
	gen := validGen
	if err == nil {
		streamSeq, maybeStored, gen, err = w.p.checkedWrite(wctx, w.ss, a, validGen, msgID, batch)
		if err == nil && a.streamSeq == 0 {
			err = w.p.undoIfDeleted(w.ctx, w.ss, w.incarnation, streamSeq)
		} else if isFencing(err) {
			err = w.p.deletedUnder(w.ctx, w.ss, w.incarnation, err)
		}
	}

	w.mu.Lock()
	w.inflight = nil
	if err == nil {
		var size int64
		for i := range batch {
			size += eventBytes(batch[i])
		}
		w.backlog -= size
		w.p.metrics.wrote(start, len(batch), size-64*int64(len(batch)))
		w.lastStreamSeq, w.lastMsgID, w.lastFirstSeq = streamSeq, msgID, first
		w.durableNext = last + 1
		if w.invalidations == invalidations { // else invalidated meanwhile (renewLease): check again next time
			w.validGen = gen
		}
		w.pinned = 0
		if !w.writeFailing.IsZero() {
			w.p.log.Info("agentlog publisher: writing again", "session", w.id, "firstSeq", first,
				"after", time.Since(w.writeFailing).Round(time.Millisecond))
			w.writeFailing = time.Time{}
		}
		w.broadcastLocked()
		w.kickLocked()
		w.mu.Unlock()
		return
	}
	we := &WriteError{Session: w.id, FirstSeq: first, LastSeq: last, Err: err}
	w.p.metrics.failed(err)
	if isFencing(err) {
		we.Fenced = true
		w.p.log.Error("agentlog publisher: writer fenced", "session", w.id,
			"firstSeq", first, "lastSeq", last, "lostEvents", w.nextSeq-first, "error", err)
		w.fenceLocked(we)
		w.mu.Unlock()
		w.p.publishReport(w.token, we)
		return
	}
	// Put the events back ahead of newer pending ones, in order, and pause automatic retry:
	// nothing is due and no window is open, so nothing is written until a new event opens a
	// fresh window or Flush/Close retries at once.
	w.pending = append(batch[:len(batch):len(batch)], w.pending...)
	w.due = 0
	if maybeStored {
		w.pinned = len(batch)
	} // else: unchanged (a pinned record stays pinned until it is written)
	w.closeWindowLocked()
	if w.writeFailing.IsZero() { // each failure goes to Errors; the log says it once
		w.writeFailing = time.Now()
		w.p.log.Warn("agentlog publisher: write failed; events stay pending (logged once until a write succeeds)", "session", w.id,
			"firstSeq", first, "lastSeq", last, "error", err)
	}
	w.failGen++
	w.lastErr = we
	w.reportLocked(we)
	w.broadcastLocked()
	w.mu.Unlock()
	w.p.publishReport(w.token, we)
}

func isConflict(err error) bool {
	return err != nil && errors.Is(err, ErrConflict)
}

// isFencing reports whether a write failure stops the Writer: a guard conflict or lost
// acknowledged events.
func isFencing(err error) bool {
	return err != nil && (errors.Is(err, ErrConflict) || errors.Is(err, ErrAckedLost) || errors.Is(err, ErrFenced))
}

// fenceLocked stops the Writer for good with we: pending events are dropped, we is reported on
// Errors, and the lease is released (if it is still this writer's).
func (w *Writer) fenceLocked(we *WriteError) {
	w.fenced = we
	w.p.metrics.fenced.Inc()
	w.closeWindowLocked()
	w.pending, w.due, w.backlog = nil, 0, 0
	w.failGen++
	w.lastErr = we
	w.reportLocked(we)
	w.broadcastLocked()
	if rev := w.leaseRev; rev != 0 {
		w.leaseRev = 0
		done := make(chan struct{})
		w.releasing = done
		go func() { defer close(done); w.p.releaseLease(w.ss, rev) }()
	}
}

// takeLeaseLocked returns the lease revision and forgets it (no more renewals), and the release
// a fence started, if any, to wait for.
func (w *Writer) takeLeaseLocked() (uint64, chan struct{}) {
	rev := w.leaseRev
	w.leaseRev = 0
	return rev, w.releasing
}

// releaseLeaseOf releases rev (0: none) and waits for the release a fence started (nil: none),
// so that the lease is gone when Close or Abort returns.
func (w *Writer) releaseLeaseOf(rev uint64, releasing chan struct{}) {
	w.p.releaseLease(w.ss, rev)
	if releasing != nil {
		<-releasing
	}
}

// reportLocked delivers we on Errors without ever blocking: drop-oldest when full.
func (w *Writer) reportLocked(we *WriteError) {
	for {
		select {
		case w.errs <- we:
			return
		default:
		}
		select {
		case <-w.errs:
			n := w.dropped.Add(1)
			w.p.log.Warn("agentlog publisher: Errors channel full, dropped the oldest report", "session", w.id, "dropped", n)
		default:
		}
	}
}

func (w *Writer) broadcastLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// Flush skips the batching wait: it writes everything pending now (retrying at once after an
// earlier failure) and returns once every event admitted before the call is durable. It returns
// the *WriteError of a write that fails meanwhile (the events stay pending), an error wrapping
// ErrConflict when the writer gets fenced meanwhile, ErrFenced when it already was, or ctx.Err().
func (w *Writer) Flush(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fenced != nil {
		return w.fencedErrLocked()
	}
	target := w.nextSeq
	if w.durableNext >= target {
		return nil
	}
	w.closeWindowLocked()
	w.due = len(w.pending)
	startFail := w.failGen
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		w.traceParent = sc
	}
	w.kickLocked()
	for {
		switch {
		case w.durableNext >= target:
			return nil
		case w.fenced != nil:
			return w.fenced
		case w.failGen != startFail:
			return w.lastErr
		}
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
			w.mu.Lock()
		case <-ctx.Done():
			w.mu.Lock()
			return fmt.Errorf("publisher: session %q: flush up to seq %d: %w", w.id, target-1, ctx.Err())
		}
	}
}

// Close flushes (see Flush) and then stops the Writer: later Append/Emit return ErrClosed. If the
// flush fails, Close returns its error and the events stay pending; calling Close again retries.
// A fenced writer is released and Close returns ErrFenced.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closing = true
	fenced := w.fenced != nil
	w.mu.Unlock()

	var err error
	if fenced {
		w.mu.Lock()
		err = w.fencedErrLocked()
		w.mu.Unlock()
	} else if err = w.Flush(ctx); err != nil && !isConflict(err) {
		return err
	}
	w.mu.Lock()
	w.closed = true
	w.closeWindowLocked()
	w.broadcastLocked()
	rev, releasing := w.takeLeaseLocked()
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	w.releaseLeaseOf(rev, releasing)
	w.p.release(w.id, w)
	return err
}

// Abort stops the Writer without flushing: the events not yet written are dropped (never
// written), a write in flight is cancelled and waited for, and later calls return ErrClosed. It
// returns whether the log's content is uncertain: true when a write got no answer (its record may
// have been stored after all, so the caller must read the log, from the stream leader, before it
// concludes anything). Use it to abandon a batch, such as a failed import; Close is the normal end.
func (w *Writer) Abort() (uncertain bool) {
	w.mu.Lock()
	if w.closed {
		uncertain = w.pinned > 0
		w.mu.Unlock()
		return uncertain
	}
	w.closing = true
	w.mu.Unlock()
	w.cancel() // ends the write in flight (its context is w.ctx) and any retry
	w.wg.Wait()
	w.mu.Lock()
	uncertain = w.pinned > 0
	w.closed = true
	w.pending, w.due, w.backlog = nil, 0, 0
	w.closeWindowLocked()
	w.broadcastLocked()
	rev, releasing := w.takeLeaseLocked()
	w.mu.Unlock()
	w.releaseLeaseOf(rev, releasing)
	w.p.release(w.id, w)
	return uncertain
}
