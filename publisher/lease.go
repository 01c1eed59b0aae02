package publisher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentlog/agentlog/internal/process"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	njs "github.com/nats-io/nats.go/jetstream"
)

// acked is what a Writer knows to be durable: the stream seq of the session's last record (the
// next guard; 0 for none), that record's Nats-Msg-Id and first seq ("" and 0 when there is none),
// and the next seq (every seq below it is durable).
type acked struct {
	streamSeq uint64
	msgID     string
	firstSeq  int64
	nextSeq   int64
}

// staleGen is a validGen that no connGen equals: the tail is checked at the next write.
const staleGen = ^uint64(0)

// connGen is the connection's reconnect count: a Writer re-reads the tail before its next write
// whenever it changed since the tail was last checked (a server restart or a dropped connection
// may have lost acknowledged records, or given their stream seqs to other records).
func (p *Publisher) connGen() uint64 {
	if p.store.JetStream() == nil || p.store.JetStream().Conn() == nil {
		return 0
	}
	return p.store.JetStream().Conn().Stats().Reconnects
}

// checkTail compares the session's tail, read from the stream leader, with what the writer had
// acknowledged (a). nil: the tail is a's record, so a record starting at a.nextSeq guarded with
// a.streamSeq continues the log. An *AckedLostError when acknowledged events are gone; an error
// wrapping ErrConflict when another writer appended after them. A tail that has our guard but does
// not end at a.nextSeq is never written after (agentlog never writes a seq gap).
// Its errors leave naming the session to the caller.
func (p *Publisher) checkTail(ctx context.Context, ss *store.Session, a acked, t store.Tail) error {
	id := ss.ID()
	if t.LastStreamSeq == a.streamSeq && t.NextSeq == a.nextSeq && (a.msgID == "" || t.LastMsgID == a.msgID) {
		return nil
	}
	lost := func(from int64, detail string, args ...any) error {
		return &AckedLostError{Session: id, FromSeq: min(from, t.NextSeq), ToSeq: a.nextSeq - 1, Detail: fmt.Sprintf(detail, args...)}
	}
	if a.streamSeq == 0 {
		if t.NextSeq < a.nextSeq { // cannot be: nothing acknowledged means a.nextSeq 0
			return lost(t.NextSeq, "the log ends before seq %d", t.NextSeq)
		}
		// Nothing acknowledged yet (a new session): another writer wrote first.
		return fmt.Errorf("%w: expected an empty log, the tail is stream seq %d (Nats-Msg-Id %q, next seq %d)", ErrConflict, t.LastStreamSeq, t.LastMsgID, t.NextSeq)
	}
	if t.LastStreamSeq == 0 {
		// The hot subject is empty: archived since (its log whole in cold storage)? Then nothing
		// acknowledged is lost, but this writer's guard is gone: it is fenced, and an Open of
		// the session restores it.
		if loc, err := ss.Locate(ctx); err == nil && loc.State == store.StateArchived && loc.NextSeq() >= a.nextSeq {
			return fmt.Errorf("%w: %w: its log (seqs 0..%d) moved to cold storage under this writer; open the session again, which restores it",
				ErrConflict, ErrArchived, loc.NextSeq()-1)
		}
	}
	from := a.firstSeq // the first seq of our last record: it is gone when its stream seq no longer holds it
	if a.msgID == "" {
		from = a.nextSeq - 1
	}
	if t.LastStreamSeq == a.streamSeq {
		return lost(from, "stream seq %d, where the writer's last record was, now holds another record (Nats-Msg-Id %q, next seq %d)", a.streamSeq, t.LastMsgID, t.NextSeq)
	}
	// The tail is another record: is the one at our guard still ours?
	rec, found, err := ss.RecordFromLeader(ctx, a.streamSeq)
	if err != nil {
		return fmt.Errorf("%w: tail at stream seq %d (Nats-Msg-Id %q, next seq %d); checking stream seq %d then: %v",
			ErrConflict, t.LastStreamSeq, t.LastMsgID, t.NextSeq, a.streamSeq, err)
	}
	if !found || rec.NextSeq != a.nextSeq || (a.msgID != "" && rec.LastMsgID != a.msgID) {
		return lost(from, "stream seq %d no longer holds the writer's last record; the log ends at seq %d, stream seq %d",
			a.streamSeq, t.NextSeq-1, t.LastStreamSeq)
	}
	if t.NextSeq < a.nextSeq { // cannot be: our record is there, and the log only grows after it
		return lost(t.NextSeq, "the log ends before seq %d, at stream seq %d", t.NextSeq, t.LastStreamSeq)
	}
	return fmt.Errorf("%w: guard %d, tail record at stream seq %d (Nats-Msg-Id %q, next seq %d)", ErrConflict, a.streamSeq, t.LastStreamSeq, t.LastMsgID, t.NextSeq)
}

// acquireLease takes the writer lease of ss (takeover: overwriting a live one). A lease left by a
// process of this host that has ended (a writer killed, then restarted at once) is taken over at
// once, guarded by its revision (internal/process tells); a live lease of another writer is a
// *LiveError.
func (p *Publisher) acquireLease(ctx context.Context, ss *store.Session, takeover bool) (store.Lease, uint64, error) {
	id := ss.ID()
	l := p.lease
	l.Since = time.Now().UnixMilli()
	for try := 0; ; try++ {
		rev, err := ss.AcquireLease(ctx, l, p.opts.LeaseTTL, takeover)
		var held *store.LeaseHeldError
		if errors.As(err, &held) {
			h := held.Holder
			if try < 3 && h.Host != "" && h.Host == l.Host && process.Gone(h.PID, time.UnixMilli(h.Since)) {
				rev, err := p.reclaimLease(ctx, ss, l, h)
				if err == nil {
					return l, rev, nil
				}
				if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNoLease) {
					continue // changed meanwhile: look again
				}
				return l, 0, err
			}
			return l, 0, &LiveError{Session: id, Writer: h.Writer, Host: h.Host, PID: h.PID, Since: h.Since}
		}
		if err != nil {
			return l, 0, err
		}
		if takeover {
			p.log.Info("agentlog publisher: took the session's writer lease over", "session", id)
		}
		return l, rev, nil
	}
}

// reclaimLease replaces the lease of dead, a writer process of this host that has ended, by l,
// guarded by the revision it is read at: a wrapped store.ErrLeaseLost (or ErrNoLease) when the
// lease changed meanwhile.
func (p *Publisher) reclaimLease(ctx context.Context, ss *store.Session, l, dead store.Lease) (uint64, error) {
	id := ss.ID()
	cur, hrev, err := ss.Lease(ctx)
	if err != nil {
		return 0, err
	}
	if cur.Writer != dead.Writer || cur.Host != dead.Host || cur.PID != dead.PID || cur.Since != dead.Since {
		return 0, fmt.Errorf("%w: the lease of session %q changed while it was reclaimed", store.ErrLeaseLost, id)
	}
	rev, err := ss.RenewLease(ctx, hrev, l, p.opts.LeaseTTL)
	if err != nil {
		return 0, err
	}
	p.log.Info("agentlog publisher: took over the writer lease of a process of this host that has ended", "session", id,
		"writer", dead.Writer, "pid", dead.PID, "since", time.UnixMilli(dead.Since).UTC().Format(time.RFC3339))
	return rev, nil
}

// releaseLease deletes the lease of ss if it is still at rev (bounded by 5 s; failures are logged:
// the lease then ends at its TTL).
func (p *Publisher) releaseLease(ss *store.Session, rev uint64) {
	if rev == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ss.ReleaseLease(ctx, rev); err != nil {
		p.log.Warn("agentlog publisher: cannot release the writer lease; it ends at its TTL", "session", ss.ID(), "error", err)
	}
}

// renewLoop renews the leases of the open writers every LeaseTTL/4 until stop is closed.
func (p *Publisher) renewLoop(stop chan struct{}) {
	t := time.NewTicker(p.opts.LeaseTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		ws := make([]*Writer, 0, len(p.writers))
		for _, w := range p.writers {
			if w != nil {
				ws = append(ws, w)
			}
		}
		p.mu.Unlock()
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		for _, w := range ws {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				w.renewLease()
			}()
		}
		wg.Wait()
	}
}

// renewLease renews the Writer's lease. When the lease was taken over, the Writer is fenced; when
// it expired (or was lost with its bucket, which is then created again) and nobody took it, it is
// taken again. A failure is logged once until a renewal succeeds.
func (w *Writer) renewLease() {
	w.mu.Lock()
	rev, l := w.leaseRev, w.lease
	stopped := w.closed || w.fenced != nil || rev == 0
	w.mu.Unlock()
	if stopped {
		return
	}
	ttl := w.p.opts.LeaseTTL
	ctx, cancel := context.WithTimeout(w.ctx, ttl/4)
	defer cancel()
	next, err := w.ss.RenewLease(ctx, rev, l, ttl)
	if err != nil && ctx.Err() != nil {
		// The renewal used up its time (a server unreachable, a missing bucket): give the
		// checks below a time of their own.
		cancel()
		ctx, cancel = context.WithTimeout(w.ctx, ttl/4)
		defer cancel()
	}
	retaken := false
	if err != nil && !errors.Is(err, store.ErrLeaseLost) && w.p.writersRecreated(ctx) {
		// The bucket was gone with the server's state: take the lease as if it had expired.
		err = fmt.Errorf("%w: bucket %s was missing", store.ErrLeaseLost, wire.WritersBucket)
	}
	if errors.Is(err, store.ErrLeaseLost) {
		holder, hrev, gerr := w.ss.Lease(ctx)
		switch {
		case errors.Is(gerr, store.ErrNoLease):
			next, err = w.ss.AcquireLease(ctx, l, ttl, false) // expired: take it again
			var held *store.LeaseHeldError
			if errors.As(err, &held) {
				w.leaseLost(held.Holder)
				return
			}
			retaken = err == nil
		case gerr == nil && holder.Writer == l.Writer && holder.Host == l.Host && holder.PID == l.PID && holder.Since == l.Since:
			// Our own lease at another revision: the server came back with older state, which
			// may have lost records too. Renew it there, and check the tail before the next write.
			next, err = w.ss.RenewLease(ctx, hrev, l, ttl)
			w.mu.Lock()
			w.invalidateLocked()
			w.mu.Unlock()
		case gerr == nil:
			w.leaseLost(holder) // another writer's lease now
			return
		default:
			err = gerr
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && w.leaseRev != rev {
		// Fenced or closed meanwhile, which released (or gave up) rev: release this one too.
		go w.p.releaseLease(w.ss, next)
		return
	}
	if err != nil {
		// The server may be restarting, or its state changing under us (with the lease, the
		// tail): the next write proves the tail first.
		w.invalidateLocked()
		if w.renewFailing.IsZero() {
			w.renewFailing = time.Now()
			w.p.log.Warn("agentlog publisher: cannot renew the writer lease; retrying (logged once until it is renewed)", "session", w.id, "error", err)
		}
		return
	}
	if retaken {
		// A write may have been fenced by another writer meanwhile: check the tail first.
		w.invalidateLocked()
	}
	switch {
	case !w.renewFailing.IsZero():
		w.p.log.Info("agentlog publisher: writer lease renewed again", "session", w.id, "retaken", retaken,
			"after", time.Since(w.renewFailing).Round(time.Millisecond))
		w.renewFailing = time.Time{}
	case retaken:
		w.p.log.Info("agentlog publisher: writer lease had expired, nobody took it; taken again", "session", w.id)
	}
	w.leaseRev = next
	w.renewedAt = time.Now()
}

// invalidateLocked makes the next write prove the session's tail from the stream leader first
// (a server restart or a lapse of the lease may have lost records, or let another writer in).
func (w *Writer) invalidateLocked() {
	w.validGen = staleGen
	w.invalidations++
}

// renewGapLocked reports whether the lease has gone unrenewed for more than half its TTL (two
// renewal periods): the process was paused, or renewals hang. Another writer may have taken the
// session meanwhile, so the tail is proved before the next write.
func (w *Writer) renewGapLocked() bool {
	return w.leaseRev != 0 && !w.renewedAt.IsZero() && time.Since(w.renewedAt) > w.p.opts.LeaseTTL/2
}

// writersRecreated checks, after a failed renewal, whether agentlog_writers is missing (lost with
// the server's state) and creates it again; it reports whether it did. Connected only, and at most
// once per renewal period for all the Publisher's writers.
func (p *Publisher) writersRecreated(ctx context.Context) bool {
	if nc := p.store.JetStream().Conn(); nc == nil || !nc.IsConnected() {
		return false
	}
	p.ensureMu.Lock()
	defer p.ensureMu.Unlock()
	if time.Since(p.ensuredAt) < p.opts.LeaseTTL/4 {
		return p.recreated
	}
	p.ensuredAt = time.Now()
	_, err := p.store.JetStream().KeyValue(ctx, wire.WritersBucket)
	p.recreated = false
	if errors.Is(err, njs.ErrBucketNotFound) {
		if err := p.store.EnsureWritersBucket(ctx); err == nil {
			p.recreated = true
			p.log.Info("agentlog publisher: created the missing writer lease bucket again", "bucket", wire.WritersBucket)
		}
	}
	return p.recreated
}

// leaseLost fences the Writer after another writer took its lease over.
func (w *Writer) leaseLost(holder store.Lease) {
	w.mu.Lock()
	if w.fenced != nil || w.closed {
		w.mu.Unlock()
		return
	}
	we := &WriteError{Session: w.id, FirstSeq: w.durableNext, LastSeq: w.nextSeq - 1, Fenced: true,
		Err: fmt.Errorf("session %q: %w: writer %q (host %s, pid %d) took the session over", w.id, store.ErrLeaseLost, holder.Writer, holder.Host, holder.PID)}
	w.fenceLocked(we)
	w.mu.Unlock()
	w.p.log.Error("agentlog publisher: writer fenced: another writer holds the session's lease", "session", w.id,
		"holder", holder.Writer, "host", holder.Host, "pid", holder.PID)
	w.p.publishReport(w.token, we)
}
