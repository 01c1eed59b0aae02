package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Partitioned consumption (design.md §4).
const (
	// MembersBucket is the KV bucket of live projector instances: key = instance name (as a
	// subject token), value {name, pid, startedAt}. Entries expire MemberTTL after the instance's
	// last heartbeat, which is how a killed instance leaves.
	MembersBucket = "agentlog_projector_members"
	// PriorityGroup is the priority group of the partition consumers (pinned-client policy).
	PriorityGroup = "projector"

	DefaultMemberTTL     = 3 * time.Second       // member lease (KV entry max age)
	DefaultFlushInterval = 50 * time.Millisecond // longest a folded record waits for its checkpoint
	DefaultCacheSessions = 10000                 // hot session states kept in memory, per instance
	partitionAckWait     = 4 * time.Second       // redelivery of a dead instance's unacked records
	partitionPinnedTTL   = 4 * time.Second       // a dead pinned client loses its pin after this
	maxUnflushed         = 2000                  // records folded before a checkpoint is forced
)

// PartitionConsumer is the durable consumer of partition p: "agentlog-projector-<p>", filter
// agentlog.session.<p>.*, ack all, pinned-client priority group "projector".
func PartitionConsumer(p int) string { return ConsumerName + "-" + strconv.Itoa(p) }

// Assign returns the partitions that member owns among members (instance names): the members are
// sorted and partition p goes to the (p mod len(members))-th. Nil when member is not listed.
func Assign(members []string, member string, partitions int) []int {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	idx := slices.Index(ms, member)
	if idx < 0 {
		return nil
	}
	var out []int
	for p := 0; p < partitions; p++ {
		if p%len(ms) == idx {
			out = append(out, p)
		}
	}
	return out
}

// memberValue is the value of an instance's key in MembersBucket.
type memberValue struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartedAt int64  `json:"startedAt"` // Unix ms
}

// openMembers creates (or opens) the members bucket; its max age is the member TTL.
func openMembers(ctx context.Context, js jetstream.JetStream, ttl time.Duration) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      MembersBucket,
		Description: "agentlog projector instances (leases; partitions are divided among the live ones)",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.MemoryStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, MembersBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("projector: members bucket %s: %w", MembersBucket, err)
	}
	return kv, nil
}

// membership keeps this instance's lease and the assignment of partitions up to date.
func (p *Projector) membership(ctx context.Context) {
	defer p.loop.Done()
	t := time.NewTicker(p.memberTTL / 3)
	defer t.Stop()
	for {
		p.rebalance(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rebalance renews the lease, lists the live members and starts and stops partition workers.
func (p *Projector) rebalance(ctx context.Context) {
	v, _ := json.Marshal(memberValue{Name: p.name, PID: os.Getpid(), StartedAt: p.startedAt.UnixMilli()})
	if _, err := p.members.Put(ctx, p.memberKey, v); err != nil {
		if ctx.Err() == nil {
			p.logger.Warn("projector: renewing the member lease", "bucket", MembersBucket, "err", err)
		}
		return
	}
	keys, err := p.members.ListKeys(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Warn("projector: listing members", "bucket", MembersBucket, "err", err)
		}
		return
	}
	var members []string
	for k := range keys.Keys() {
		members = append(members, k)
	}
	if !slices.Contains(members, p.memberKey) {
		members = append(members, p.memberKey)
	}
	mine := Assign(members, p.memberKey, p.store.Partitions)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.wstopped {
		return
	}
	for part, w := range p.workers {
		if !slices.Contains(mine, part) {
			w.stop()
			delete(p.workers, part)
		}
	}
	var started []int
	for _, part := range mine {
		if _, ok := p.workers[part]; ok {
			continue
		}
		w, err := p.startWorker(ctx, part, max(p.cacheSessions/max(len(mine), 1), 16))
		if err != nil {
			if ctx.Err() == nil {
				p.logger.Warn("projector: starting partition", "partition", part, "err", err)
			}
			continue
		}
		p.workers[part] = w
		started = append(started, part)
	}
	if len(started) > 0 || !slices.Equal(p.lastMembers, members) {
		slices.Sort(members)
		p.logger.Info("projector: partitions assigned", "members", members, "owned", mine, "started", started)
		p.lastMembers = members
	}
}

// Owned returns the partitions this instance consumes now, sorted.
func (p *Projector) Owned() []int {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	var out []int
	for part := range p.workers {
		out = append(out, part)
	}
	slices.Sort(out)
	return out
}

// worker folds one partition in stream order.
type worker struct {
	p      *Projector
	part   int
	iter   jetstream.MessagesContext
	cache  *lru
	dirty  map[string]*sessState
	last   jetstream.Msg // the last record folded and not acknowledged yet
	count  int           // records folded since the last checkpoint
	pinned bool          // a record was delivered to this worker
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *Projector) startWorker(ctx context.Context, part int, cacheSize int) (*worker, error) {
	name := PartitionConsumer(part)
	cons, err := p.store.JS.CreateOrUpdateConsumer(ctx, ajs.StreamName, jetstream.ConsumerConfig{
		Durable:        name,
		Description:    fmt.Sprintf("agentlog projector: partition %d of %d", part, p.store.Partitions),
		FilterSubject:  ajs.PartitionSubject(part),
		AckPolicy:      jetstream.AckAllPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckWait:        partitionAckWait,
		MaxAckPending:  4 * maxUnflushed,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{PriorityGroup},
		PinnedTTL:      partitionPinnedTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("creating consumer %s on stream %s: %w", name, ajs.StreamName, err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(512), jetstream.PullPriorityGroup(PriorityGroup),
		jetstream.PullExpiry(2*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return nil, fmt.Errorf("consuming with %s: %w", name, err)
	}
	wctx, cancel := context.WithCancel(p.runCtx)
	w := &worker{p: p, part: part, iter: iter, cache: newLRU(cacheSize), dirty: map[string]*sessState{},
		ctx: wctx, cancel: cancel, done: make(chan struct{})}
	go w.run()
	return w, nil
}

// stop hands the partition over: the buffered records are folded, the last checkpoint written and
// acknowledged, and the pin released so that the next owner is served at once.
func (w *worker) stop() {
	w.iter.Drain()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		w.p.logger.Warn("projector: partition worker slow to stop; cancelling", "partition", w.part)
		w.cancel()
		<-w.done
	}
	w.cancel()
	if w.pinned {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := w.p.store.Stream.UnpinConsumer(ctx, PartitionConsumer(w.part), PriorityGroup)
		cancel()
		if err != nil {
			w.p.logger.Debug("projector: unpin", "partition", w.part, "err", err)
		}
	}
}

func (w *worker) run() {
	defer close(w.done)
	lastFlush := time.Now()
	for {
		wait := time.Second
		if w.count > 0 {
			wait = max(w.p.flushInterval-time.Since(lastFlush), time.Millisecond)
		}
		msg, err := w.iter.Next(jetstream.NextMaxWait(wait))
		switch {
		case err == nil:
			w.pinned = true
			w.handle(msg)
		case errors.Is(err, nats.ErrTimeout):
		case errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, nats.ErrConnectionClosed):
			w.flush()
			return
		default:
			w.p.logger.Warn("projector: fetching records", "partition", w.part, "err", err)
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		if w.count > 0 && (w.count >= maxUnflushed || time.Since(lastFlush) >= w.p.flushInterval) {
			w.flush()
			lastFlush = time.Now()
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
			return true
		}
		w.p.logger.Warn("projector: transient failure; retrying", "partition", w.part, "what", what, "err", err)
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
	_, token, id, err := ajs.ParseSubject(msg.Subject(), p.store.Partitions)
	if err != nil {
		p.logger.Error("projector: record on a subject that names no session; skipped", "subject", msg.Subject(), "err", err)
		w.last, w.count = msg, w.count+1
		return
	}
	h := msg.Headers()
	events, decodeErr := ajs.DecodeRecord(h, msg.Data())
	if decodeErr == nil && h.Get(ajs.HeaderSession) != token {
		decodeErr = &session.Error{Session: id, Seq: events[0].Seq, Rule: ajs.RuleRecordSession,
			Msg: fmt.Sprintf("session %q seq %d: record header %s is %q, not the token %q of its subject %s (rule %s)",
				id, events[0].Seq, ajs.HeaderSession, h.Get(ajs.HeaderSession), token, msg.Subject(), ajs.RuleRecordSession)}
	}
	ss := w.dirty[token]
	if ss == nil {
		ss = w.cache.get(token)
	}
	if ss == nil {
		ok := w.retry("load "+id, func() error {
			var err error
			ss, err = loadSession(w.ctx, p.store.Projections, p.defs, token, id)
			return err
		})
		if !ok {
			return
		}
	}
	wasStopped := ss.stopped()
	if decodeErr != nil {
		if !wasStopped {
			from, _ := ss.minActive()
			seq, rule := from+1, "record-decode"
			var se *session.Error
			if errors.As(decodeErr, &se) {
				if se.Seq >= 0 {
					seq = se.Seq
				}
				if se.Rule != "" {
					rule = se.Rule
				}
			}
			ss.stopAll(seq, rule, fmt.Sprintf("session %q: record does not decode: %v", id, decodeErr))
		}
	} else if !w.retry("fold "+id, func() error { return foldEvents(w.ctx, p.store, ss, events) }) {
		return
	}
	if !wasStopped && ss.stopped() {
		g := ss.gate()
		p.logger.Error("projector: session log breaks a rule; its projection is stopped",
			"session", id, "seq", g.err.Seq, "rule", g.err.Rule, "message", g.err.Message, "asOfSeq", g.asOfSeq)
	}
	for _, u := range ss.units[1:] {
		if u.err != nil && !u.logged && !ss.stopped() {
			u.logged = true
			p.logger.Error("projector: unit stopped for a session", "session", id, "unit", u.def.Key, "seq", u.err.Seq, "rule", u.err.Rule, "message", u.err.Message)
		}
	}
	if ss.dirty {
		w.dirty[token] = ss
	}
	w.cache.put(ss)
	w.last, w.count = msg, w.count+1
	p.applied.Add(int64(len(events)))
}

// flush writes the dirty session states (compare-and-swap; a conflict reloads the session and
// folds the log again) and then acknowledges every record folded so far (ack all).
func (w *worker) flush() {
	p := w.p
	if len(w.dirty) > 0 {
		sessions := make([]*sessState, 0, len(w.dirty))
		for _, ss := range w.dirty {
			sessions = append(sessions, ss)
		}
		for attempt := 0; len(sessions) > 0; attempt++ {
			conflicts, err := writeSessions(w.ctx, p.store.JS, sessions)
			if err != nil {
				if w.ctx.Err() == nil {
					p.logger.Warn("projector: checkpoint failed; retrying", "partition", w.part, "err", err)
				}
				return
			}
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
				w.dirty[ss.token] = fresh
				w.cache.put(fresh)
				sessions = append(sessions, fresh)
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
	if w.last != nil {
		if err := w.last.Ack(); err != nil {
			p.logger.Warn("projector: ack failed; the records will be redelivered and skipped", "partition", w.part, "err", err)
		}
		w.last, w.count = nil, 0
	}
	w.cache.trim()
}
