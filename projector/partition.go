package projector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Partitioned consumption.
const (
	// PriorityGroup is the priority group of the partition consumers (pinned-client policy).
	PriorityGroup = store.ProjectorPriorityGroup

	DefaultFlushInterval = 50 * time.Millisecond    // longest a folded record waits for its checkpoint
	DefaultCacheSessions = 10000                    // hot session states kept in memory, per instance
	partitionAckWait     = store.ProjectorAckWait   // redelivery of a dead instance's unacked records
	pullBudgetBytes      = 16 << 20                 // bytes of records all of an instance's pulls buffer at most (pullBytes)
	createdChecks        = 32                       // concurrent checks of the sessions a checkpoint created
	partitionPinnedTTL   = store.ProjectorPinnedTTL // a dead pinned client loses its pin after this
	maxUnflushed         = 2000                     // records folded before a checkpoint is forced
	flushLinger          = 500 * time.Microsecond   // a partition idle this long is checkpointed at once
	// A partition with at least catchUpBacklog records still to deliver is catching up (a start,
	// a takeover, an import): its checkpoints come every catchUpFlushInterval (or maxUnflushed
	// records), so that the records of a session folded meanwhile share one write of its states.
	catchUpBacklog       = 2000
	catchUpFlushInterval = time.Second
)

// PartitionConsumer is the durable consumer of partition p: "agentlog-projector-<p>", filter
// agentlog.session.<p>.*, explicit ack, pinned-client priority group "projector". (Not ack-all:
// a record lost in a handover must be redelivered, not acknowledged by a later record's ack.)
func PartitionConsumer(p int) string { return ConsumerName + "-" + strconv.Itoa(p) }

// worker folds one partition in stream order.
type worker struct {
	p      *Projector
	part   int
	cache  *lru
	dirty  map[string]*sessState
	folded []jetstream.Msg // records folded since the last checkpoint, to acknowledge after it
	count  int             // len(folded)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	health health

	mu       sync.Mutex // guards iter and quitting
	iter     *recordFeed
	quitting bool // stop was called: the iterator's end is the worker's
}

func (p *Projector) startWorker(ctx context.Context, part int, cacheSize int) (*worker, error) {
	wctx, cancel := context.WithCancel(p.runCtx)
	w := &worker{p: p, part: part, cache: newLRU(cacheSize), dirty: map[string]*sessState{},
		ctx: wctx, cancel: cancel, done: make(chan struct{})}
	iter, err := w.consume(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	w.iter = iter
	go w.run()
	return w, nil
}

// consume looks up the partition's durable consumer (`agentlog provision` creates it: a projector
// creates none, store.ErrProjectorNotProvisioned when it is missing) and starts pulling from it. A
// missing heartbeat is reported (2 s without one: the server, or the consumer, is gone).
func (w *worker) consume(ctx context.Context) (*recordFeed, error) {
	p, name := w.p, PartitionConsumer(w.part)
	cons, err := p.store.CheckProjector(ctx, w.part)
	if err != nil {
		return nil, err
	}
	// Bounded by bytes too: records are up to the stream's max message size (1 MiB), so 512 of
	// them could be half a GiB in flight. (Why Consume, not Messages: recordFeed.)
	iter, err := consumeFeed(p.nc, cons, jetstream.PullMaxMessagesWithBytesLimit(512, pullBytes(p.store.Partitions(), p.store.MaxMsgSize())), jetstream.PullPriorityGroup(PriorityGroup),
		jetstream.PullExpiry(2*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return nil, fmt.Errorf("consuming with %s: %w", name, err)
	}
	return iter, nil
}

// pullBytes is the bytes of records one partition's pull asks for: an even share of
// pullBudgetBytes among the stream's partitions, and room for one record of the largest size.
//
// Why a budget: what every pull of the connection asks for, the server may send before the client
// reads it; the server holds at most max_pending (64 MiB by default) for a client and closes the
// connection beyond ("Slow Consumer Detected: MaxPending ... Exceeded"), which dropped the
// projector's connection, and every publisher sharing it, under load (16 partitions pulled
// 8 MiB each, 128 MiB). With the budget the pulls of an instance owning all 16 partitions ask for
// 16 MiB; a stream of many more partitions than its max message size allows (max_pending /
// (MaxMsgSize + 64 KiB)) needs a larger max_pending or more instances (deploy/README.md).
func pullBytes(partitions int, maxMsgSize int32) int {
	floor := int(max(maxMsgSize, 1<<20)) + 64<<10 // the record and its headers
	return max(floor, pullBudgetBytes/max(partitions, 1))
}

// stopping reports whether stop was called.
func (w *worker) stopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.quitting
}

// resubscribe replaces a pull that ended without stop (the server restarted, lost the consumer,
// or cannot be reached) with a new one on the consumer created again, retrying with backoff (100
// ms to 2 s) until it succeeds or the worker stops (false).
func (w *worker) resubscribe(cause error) bool {
	w.mu.Lock()
	old := w.iter
	w.mu.Unlock()
	old.Stop()
	w.health.fail(w.p.logger, "consume", "projector: partition consumer lost", cause, "partition", w.part, "consumer", PartitionConsumer(w.part))
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
		iter, err := w.consume(ctx)
		cancel()
		if err == nil {
			w.mu.Lock()
			if w.quitting {
				w.mu.Unlock()
				iter.Stop()
				return false
			}
			w.iter = iter
			w.mu.Unlock()
			// The server may still hold a pin of the old pull: release it (the partition is ours).
			uctx, ucancel := context.WithTimeout(w.ctx, 5*time.Second)
			_ = w.p.store.Stream().UnpinConsumer(uctx, PartitionConsumer(w.part), PriorityGroup)
			ucancel()
			w.health.ok(w.p.logger, "consume", "projector: partition consumer resumed", "partition", w.part)
			return true
		}
		select {
		case <-w.ctx.Done():
			return false
		case <-time.After(b.NextBackOff()):
		}
		if w.stopping() {
			return false
		}
	}
}

// abort ends a worker that is slow to hand over (its server gone, or stopped): its reads and
// writes are cancelled, its feed stopped (what it buffered is redelivered to the next owner).
func (w *worker) abort() {
	w.cancel()
	w.mu.Lock()
	iter := w.iter
	w.mu.Unlock()
	iter.Stop()
	<-w.done
}

// handoverTimeout bounds a partition's handover (its last checkpoint) at a rebalance.
const handoverTimeout = 30 * time.Second

// stop hands the partition over: the buffered records are folded, the last checkpoint written and
// acknowledged, and the pin released so that the next owner is served at once. It gives up when
// quit ends (Stop's budget) or after handoverTimeout: the records not acknowledged are then
// redelivered to the next owner.
func (w *worker) stop(quit context.Context) {
	w.p.logger.Debug("projector: handing over partition", "partition", w.part)
	w.mu.Lock()
	w.quitting = true
	iter := w.iter
	w.mu.Unlock()
	iter.Drain()
	t := time.NewTimer(handoverTimeout)
	defer t.Stop()
	select {
	case <-w.done:
	case <-quit.Done():
		w.abort()
	case <-t.C:
		w.p.logger.Warn("projector: partition worker slow to stop; cancelling", "partition", w.part)
		w.abort()
	}
	w.cancel()
	// Release the pin even if no record came (the pin may be this worker's all the same): the
	// next owner is served at once instead of after the pinned TTL. Unpinning another client
	// only makes it pin again at its next pull.
	ctx, cancel := context.WithTimeout(quit, 5*time.Second)
	defer cancel()
	if ctx.Err() != nil {
		return // out of time: the pin ends at its TTL
	}
	if err := w.p.store.Stream().UnpinConsumer(ctx, PartitionConsumer(w.part), PriorityGroup); err != nil {
		w.p.logger.Debug("projector: unpin", "partition", w.part, "err", err)
	}
}

func (w *worker) run() {
	defer close(w.done)
	lastFlush := time.Now()
	failed := false    // the last checkpoint did not complete: retry at the interval, not when idle
	var backlog uint64 // records the consumer had still to deliver after the last one
	for {
		if w.ctx.Err() != nil {
			return // aborted: nothing can be written any more
		}
		interval := w.p.flushInterval
		if backlog >= catchUpBacklog {
			interval = max(interval, catchUpFlushInterval)
		}
		// Group commit: while records keep coming, they share one checkpoint (for at most
		// FlushInterval or maxUnflushed records); once none has come for flushLinger, the
		// checkpoint is written at once, so that a lone writer's read-your-writes query does not
		// wait out the interval. A checkpoint that failed is retried every FlushInterval.
		wait, idle := time.Second, false
		if w.count > 0 {
			wait = max(interval-time.Since(lastFlush), time.Millisecond)
			if !failed {
				wait = min(flushLinger, wait)
			}
		}
		w.mu.Lock()
		iter := w.iter
		w.mu.Unlock()
		msg, err := iter.next(wait)
		switch {
		case err == nil:
			w.health.ok(w.p.logger, "fetch", "projector: fetching records again", "partition", w.part)
			span := w.p.startFoldSpan(msg, w.part)
			w.handle(msg)
			span.End()
			if meta, merr := msg.Metadata(); merr == nil {
				backlog = meta.NumPending
			}
		case errors.Is(err, nats.ErrTimeout):
			idle = true
		case errors.Is(err, nats.ErrConnectionClosed) || (errors.Is(err, jetstream.ErrMsgIteratorClosed) && w.stopping()):
			w.p.logger.Debug("projector: partition worker done", "partition", w.part, "err", err)
			w.flush()
			return
		case errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
			errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
			errors.Is(err, jetstream.ErrBadRequest):
			if !w.resubscribe(err) {
				w.flush()
				return
			}
		default:
			w.health.fail(w.p.logger, "fetch", "projector: fetching records", err, "partition", w.part)
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		due := time.Since(lastFlush) >= interval
		if w.count > 0 && (due || (!failed && (idle || w.count >= maxUnflushed))) {
			w.flush()
			lastFlush, failed = time.Now(), w.count > 0
		}
	}
}

// retry runs op until it succeeds or fails with a non-transient error, backing off up to 2 s;
// false when the worker is stopped meanwhile.
func (w *worker) retry(what string, op func() error) bool {
	delay := 100 * time.Millisecond
	for {
		err := op()
		if err == nil {
			w.health.ok(w.p.logger, "transient", "projector: recovered from a transient failure", "partition", w.part, "what", what)
			return true
		}
		w.health.fail(w.p.logger, "transient", "projector: transient failure", err, "partition", w.part, "what", what)
		select {
		case <-w.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// handle folds one record into its session's state (loaded from the cache, else from KV).
func (w *worker) handle(msg jetstream.Msg) {
	p := w.p
	_, token, id, err := wire.ParseSubject(msg.Subject(), p.store.Partitions())
	if err != nil {
		p.logger.Error("projector: record on a subject that names no session; skipped", "subject", msg.Subject(), "err", err)
		w.folded, w.count = append(w.folded, msg), w.count+1
		return
	}
	h := msg.Headers()
	// Offloaded events are read from AGENTLOG_BLOBS: a blob that is missing or differs is the log's
	// fault (a *session.Error, rule record-blob); failing to reach the bucket is transient.
	// One scan per event: the rules and the units read what it located (session.Scanned).
	events, decodeErr := p.store.ScanRecord(w.ctx, h, msg.Data())
	if se := (*session.Error)(nil); decodeErr != nil && !errors.As(decodeErr, &se) {
		if !w.retry("decode "+id, func() error {
			events, decodeErr = p.store.ScanRecord(w.ctx, h, msg.Data())
			if decodeErr != nil && !errors.As(decodeErr, &se) {
				return decodeErr
			}
			return nil
		}) {
			return
		}
	}
	if decodeErr == nil && h.Get(wire.HeaderSession) != token {
		decodeErr = session.NewError(id, events[0].Seq, 0, session.RuleRecordSession,
			fmt.Sprintf("record header %s is %q, not the token %q of its subject %s", wire.HeaderSession, h.Get(wire.HeaderSession), token, msg.Subject()))
	}
	var streamSeq, delivered uint64
	if meta, merr := msg.Metadata(); merr == nil {
		streamSeq, delivered = meta.Sequence.Stream, meta.NumDelivered
	}
	ss, refolded, ok := w.state(token, id)
	if !ok {
		return
	}
	if !ss.gone && decodeErr == nil && !refolded {
		if ss, ok = w.checkRecord(ss, id, streamSeq, delivered, events[0].Seq, events[len(events)-1].Seq); !ok {
			return
		}
	}
	if ss.gone {
		// Removed, or being removed (agentlog rm): a record still delivered folds into nothing,
		// and no state of the session is kept.
		w.foldIntoGone(ss, msg)
		return
	}
	wasStopped := ss.stopped()
	if decodeErr != nil {
		if !wasStopped {
			from, _ := ss.minActive()
			seq, rule := from+1, session.RuleRecordDecode
			why := fmt.Sprintf("session %q: record does not decode: %v", id, decodeErr)
			var se *session.Error
			if errors.As(decodeErr, &se) {
				if se.Seq >= 0 {
					seq = se.Seq
				}
				if se.Rule != "" {
					rule = se.Rule
				}
				if se.Session == id { // it names the session already: say it once
					why = session.NewError(id, se.Seq, se.Line, se.Rule, "record does not decode: "+se.Reason).Error()
				}
			}
			ss.stopAll(seq, rule, why)
		}
	} else if !w.retry("fold "+id, func() error { return foldEvents(w.ctx, p.store, ss, events, streamSeq) }) {
		return
	}
	if !wasStopped && ss.stopped() {
		g := ss.gate()
		p.logger.Error("projector: session log breaks a rule; its projection is stopped",
			"session", id, "seq", g.err.Seq, "rule", g.err.Rule, "message", g.err.Message, "asOfSeq", g.asOfSeq)
		p.metrics.stop(g.def.Key, g.err)
	}
	for _, u := range ss.units[1:] {
		if u.err != nil && !u.logged && !ss.stopped() {
			u.logged = true
			p.logger.Error("projector: unit stopped for a session", "session", id, "unit", u.def.Key, "seq", u.err.Seq, "rule", u.err.Rule, "message", u.err.Message)
			p.metrics.stop(u.def.Key, u.err)
		}
	}
	if ss.dirty {
		w.dirty[token] = ss
	}
	w.cache.put(ss)
	w.folded, w.count = append(w.folded, msg), w.count+1
	p.applied.Add(int64(len(events)))
	p.metrics.folded()
}

// state returns session token's state: the dirty or cached one, else the one stored in KV (or a
// new one) checked against the log and the session's incarnation; refolded when that check folded
// it again from the log. ok is false when the worker stopped meanwhile.
func (w *worker) state(token, id string) (ss *sessState, refolded, ok bool) {
	p := w.p
	ss = w.dirty[token]
	if ss == nil {
		ss = w.cache.get(token)
	}
	p.metrics.cache("state", ss != nil)
	if ss != nil {
		return ss, false, true
	}
	ok = w.retry("load "+id, func() error {
		loaded, err := loadSession(w.ctx, p.store, p.defs, token, id)
		if err != nil {
			return err
		}
		fresh, cause, desc, err := verify(w.ctx, p.store, p.defs, loaded)
		if err != nil {
			return err
		}
		if cause != "" {
			p.noteRefold("load", id, cause, desc, fresh)
		}
		ss, refolded = fresh, cause != ""
		return nil
	})
	return ss, refolded, ok
}

// checkRecord checks that the record delivered (stream seq streamSeq, delivered times, seqs
// first..last) continues ss, and returns the state to fold it into: ss, or a fresh fold of the log
// when the record shows that ss is not the log's (marked gone when the session was removed). ok is
// false when the worker stopped meanwhile.
func (w *worker) checkRecord(ss *sessState, id string, streamSeq, delivered uint64, first, last int64) (_ *sessState, ok bool) {
	p := w.p
	desc := ss.recordMismatch(streamSeq, first, last)
	if desc == "" && delivered == 1 && streamSeq != 0 && streamSeq <= ss.streamSeq && ss.checkedSeq != ss.streamSeq {
		// A record new to the consumer at or below the last record folded: the consumer was
		// created again (a redelivery), or the stream lost records and handed their seqs to
		// new ones. The last record folded tells which (checked once per position).
		if !w.retry("check "+id, func() error {
			var err error
			desc, err = foldedRecordMismatch(w.ctx, p.store, ss)
			return err
		}) {
			return ss, false
		}
		if desc == "" {
			ss.checkedSeq = ss.streamSeq
		}
	}
	if desc == "" {
		return ss, true
	}
	ok = w.retry("refold "+id, func() error {
		h, inc, known, err := sessionMeta(w.ctx, p.store, id)
		if err != nil {
			return err
		}
		if !known {
			inc = ss.incarnation
		}
		cause := causeIdentity
		if known && inc != ss.incarnation {
			cause = causeRecreated
		}
		fresh, err := refold(w.ctx, p.store, p.defs, ss, h, inc, cause, desc)
		if err != nil {
			return err
		}
		if !known && fresh.streamSeq == 0 {
			if fresh.gone, err = sessionGone(w.ctx, p.store, id); err != nil || fresh.gone {
				ss = fresh
				return err
			}
		}
		p.noteRefold("delivery", id, cause, desc, fresh)
		ss = fresh
		return nil
	})
	return ss, ok
}

// foldIntoGone takes msg, a record of the removed session ss, as folded into nothing (it is acked
// at the next checkpoint) once ss is dropped.
func (w *worker) foldIntoGone(ss *sessState, msg jetstream.Msg) {
	if w.dropGone(ss) {
		w.folded, w.count = append(w.folded, msg), w.count+1
	}
}

// dropGone forgets session ss, which has neither metadata nor records (removed, or being
// removed), and removes whatever states of it are stored (a KV delete of each key); false when the worker stopped meanwhile.
func (w *worker) dropGone(ss *sessState) bool {
	delete(w.dirty, ss.token)
	w.cache.remove(ss.token)
	return w.retry("purge "+ss.id, func() error {
		sh, err := w.p.store.Session(ss.id)
		if err != nil {
			return err
		}
		keys, err := sh.DeleteProjections(w.ctx)
		if err == nil && len(keys) > 0 {
			w.p.logger.Info("projector: session removed; its projection states purged", "session", ss.id, "keys", keys)
		}
		return err
	})
}

// flush writes the dirty session states (compare-and-swap; a conflict reloads the session and
// folds the log again) and then acknowledges every record folded since the last checkpoint.
func (w *worker) flush() {
	p := w.p
	if len(w.dirty) > 0 {
		sessions := make([]*sessState, 0, len(w.dirty))
		var created []*sessState // sessions whose messages key this checkpoint creates
		for _, ss := range w.dirty {
			sessions = append(sessions, ss)
			if ss.gate().rev == 0 {
				created = append(created, ss)
			}
		}
		for attempt := 0; len(sessions) > 0; attempt++ {
			start := time.Now()
			conflicts, err := writeSessions(w.ctx, p.store.JetStream(), sessions)
			p.metrics.checkpoint(start, err)
			if err != nil {
				if w.ctx.Err() == nil {
					w.health.fail(p.logger, "checkpoint", "projector: checkpoint failed", err, "partition", w.part)
				}
				return
			}
			w.health.ok(p.logger, "checkpoint", "projector: checkpoints written again", "partition", w.part)
			if attempt >= casRetries {
				p.logger.Warn("projector: sessions keep changing under this projector; retrying later", "partition", w.part, "sessions", len(conflicts))
				return
			}
			sessions = sessions[:0]
			for _, ss := range conflicts {
				var fresh *sessState
				if !w.retry("reload "+ss.id, func() error {
					var err error
					fresh, err = resolveConflict(w.ctx, p.store, p.defs, ss)
					return err
				}) {
					return
				}
				if fresh.gone {
					if !w.dropGone(fresh) {
						return
					}
					continue
				}
				w.dirty[ss.token] = fresh
				w.cache.put(fresh)
				sessions = append(sessions, fresh)
			}
		}
		// A session's first checkpoint may land after agentlog rm swept its keys (it was loaded
		// before the removal began): the keys it created are purged again.
		// The checks run concurrently (a checkpoint of a partition catching up creates thousands).
		gone := make([]bool, len(created))
		if !w.retry("check new sessions", func() error {
			return forEachConcurrently(len(created), createdChecks, func(i int) error {
				var err error
				gone[i], err = sessionGone(w.ctx, p.store, created[i].id)
				return err
			})
		}) {
			return
		}
		for i, ss := range created {
			if gone[i] && !w.dropGone(ss) {
				return
			}
		}
		for tok, ss := range w.dirty {
			if !ss.dirty {
				delete(w.dirty, tok)
			}
		}
		if len(w.dirty) > 0 {
			return
		}
	}
	var ackErr error
	for _, m := range w.folded {
		if err := m.Ack(); err != nil && ackErr == nil {
			ackErr = err
		}
	}
	if ackErr != nil {
		w.health.fail(p.logger, "ack", "projector: acks failed; the records will be redelivered and skipped", ackErr, "partition", w.part)
	} else {
		w.health.ok(p.logger, "ack", "projector: acks delivered again", "partition", w.part)
	}
	w.folded, w.count = w.folded[:0], 0
	w.cache.trim()
}

// forEachConcurrently runs fn(0..n-1), at most limit at once, and returns the first error.
func forEachConcurrently(n, limit int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, limit)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
