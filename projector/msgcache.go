package projector

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/nats-io/nats.go/jetstream"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// DefaultQueryCacheBytes bounds the events the query service keeps to answer messages queries.
const DefaultQueryCacheBytes = 64 << 20

// nodeCache keeps, for the sessions queried last, their surface-eligible events (user/message,
// assistant/message, tool/result: the only events a surface node can be, and all that
// DeriveMessages reads) and the position in the log they were read to. A messages query then
// reads only the records appended since the previous query of the session (store.AfterStreamSeq),
// not the whole log: an agent that queries after every append pays for its new events, not for
// its history again. Streamed chunks and other events are never kept. The cache is bounded by
// the bytes of the events it holds, counted with an estimate of their heap overhead (least
// recently queried sessions go first); a session whose events alone exceed the bound is read whole
// for each query, as without the cache, and does not push the others out.
type nodeCache struct {
	max   int64
	m     *metrics
	epoch func() uint64 // the connection's reconnects: a log read before one is checked again (nil: 0)
	reads chan struct{} // bounds the log reads in flight (their bytes share the connection)

	mu   sync.Mutex
	size int64
	lru  *list.List // of *nodeLog, most recently used first
	byID map[string]*nodeLog
}

// nodeLog is what the cache holds of one session's log.
type nodeLog struct {
	id     string
	token  string                  // the session's subject token
	mu     sync.Mutex              // one reader of this session at a time
	events map[int64]session.Event // surface-eligible events by seq (owned copies)
	at     map[int64]uint64        // the stream seq of each one's record
	last   uint64                  // stream seq of the last record read (0: none)
	lastAt time.Time               // the server's timestamp of that record: its identity with last
	next   int64                   // event seq the next record must start at
	inc    string                  // incarnation of the log read ("": unknown)
	// The log was found to hold what l read, up to last, at checked, under connection epoch epoch
	// (records read, or the last one checked). Within verifyTTL of it and in the same epoch, l
	// vouches for a state of its incarnation at or below last without a read.
	checked time.Time
	epoch   uint64
	size    int64         // bytes held (the events' raw fields); guarded by nodeCache.mu
	elem    *list.Element // nil once evicted; guarded by nodeCache.mu
}

func newNodeCache(maxBytes int64) *nodeCache {
	return &nodeCache{max: maxBytes, lru: list.New(), byID: map[string]*nodeLog{}, reads: make(chan struct{}, maxLogReads)}
}

// maxLogReads bounds the log reads of a query service in flight: each holds up to a record (or a
// pull of two) on the connection, which the server limits (max_pending) and the partitions'
// pulls share.
const maxLogReads = 16

// readBatchRecords is how many records one batched direct get of a log read brings (store's
// readBatch), for agentlog_query_store_requests_total.
const readBatchRecords = 256

// verifyTTL is how long a log read (or check) vouches for what it read: a state of the same
// incarnation at or below it is answered without reading the log again. A log can lose records
// only when its server loses data (a restart without fsync): a reconnect, or at most verifyTTL,
// ends the trust.
const verifyTTL = 5 * time.Second

// checkEpoch empties l when what it holds was read before the connection's last reconnect: the
// server may have lost records since, and written others with the same event seqs (and even the
// same stream seqs) in their place.
func (c *nodeCache) checkEpoch(l *nodeLog) {
	if e := c.curEpoch(); l.epoch != e {
		if l.last != 0 || len(l.events) > 0 {
			c.reset(l)
		}
		l.epoch = e
	}
}

func (c *nodeCache) curEpoch() uint64 {
	if c.epoch == nil {
		return 0
	}
	return c.epoch()
}

// fresh reports whether l vouches for the log up to l.last now.
func (c *nodeCache) fresh(l *nodeLog) bool {
	return l.last != 0 && l.epoch == c.curEpoch() && time.Since(l.checked) < verifyTTL
}

// verify reports whether session id's log holds the state at pos: the record at stream seq
// pos.StreamSeq is the session's and ends at asOfSeq. It reads that record (a direct get by its
// seq: what a messages answer often reads anyway, whose surface events it keeps), every time: a
// log can lose records without any sign to this service (a purge outside agentlog), and a state
// of a log that lost them must not be answered. false: not shown (the caller checks against the
// tail); an error is transient.
func (c *nodeCache) verify(ctx context.Context, st *store.Store, id string, pos LogPosition, asOfSeq int64) (bool, error) {
	if pos.Incarnation == "" || pos.StreamSeq == 0 {
		return false, nil
	}
	l := c.entry(id)
	l.mu.Lock()
	defer l.mu.Unlock()
	c.checkEpoch(l)
	if l.inc != "" && l.inc != pos.Incarnation {
		c.reset(l)
	}
	last, found, added, err := c.fetch(ctx, st, l, pos.StreamSeq)
	c.account(l, added)
	if err != nil || !found || last != asOfSeq {
		return false, err
	}
	return true, nil
}

// fetch reads the record of l's session at stream seq seq (a direct get of that seq, blobs
// read) and keeps its surface events; it returns the record's last event seq, found false when
// the stream holds no record of the session there, and the bytes it added (for the caller to
// account once its reads end). A record that does not decode is not
// found (the caller's fallback reports it).
func (c *nodeCache) fetch(ctx context.Context, st *store.Store, l *nodeLog, seq uint64) (last int64, found bool, added int64, err error) {
	select {
	case c.reads <- struct{}{}:
		defer func() { <-c.reads }()
	case <-ctx.Done():
		return 0, false, 0, ctx.Err()
	}
	c.m.storeRequest(reqRecord, 1)
	m, err := st.Stream().GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, false, 0, nil
	case err != nil:
		return 0, false, 0, fmt.Errorf("reading the log: stream seq %d: %w", seq, err)
	case !strings.HasSuffix(m.Subject, "."+l.token) || !strings.HasPrefix(m.Subject, wire.SubjectPrefix+"."):
		return 0, false, 0, nil
	}
	evs, err := st.DecodeRecord(ctx, m.Header, m.Data)
	if err != nil {
		var se *session.Error
		if errors.As(err, &se) {
			return 0, false, 0, nil
		}
		return 0, false, 0, fmt.Errorf("reading the log: stream seq %d: %w", seq, err)
	}
	for _, ev := range evs {
		if _, ok := l.events[ev.Seq]; ok || !session.SurfaceEligible(ev.Type) {
			continue
		}
		own := owned(ev)
		l.events[ev.Seq], l.at[ev.Seq] = own, seq
		added += int64(len(own.Data)+len(own.SurfaceOp)+len(own.SourceEventSeqs)+len(own.Time)) + eventOverhead
	}
	return evs[len(evs)-1].Seq, true, added, nil
}

// advance is verify on l, locked: it brings l to pos.StreamSeq.
func (c *nodeCache) advance(ctx context.Context, st *store.Store, l *nodeLog, pos LogPosition, asOfSeq int64) (bool, error) {
	if pos.Incarnation == "" || pos.StreamSeq == 0 {
		return false, nil
	}
	if l.last != 0 && l.inc != pos.Incarnation {
		c.reset(l) // another incarnation's log (or one read without a position)
	}
	if l.last != 0 && !c.fresh(l) {
		err := c.checkLast(ctx, st, l)
		if errors.Is(err, store.ErrLogChanged) {
			c.reset(l)
		} else if err != nil {
			return false, err
		} else {
			l.checked, l.epoch = time.Now(), c.curEpoch()
		}
	}
	if l.last >= pos.StreamSeq {
		return l.last > 0, nil
	}
	epoch := c.curEpoch()
	lastSeq, err := c.readTo(ctx, st, l, pos.StreamSeq)
	var se *session.Error
	if errors.Is(err, store.ErrLogChanged) || (errors.As(err, &se) && se.Rule == session.RuleRecordContinue) {
		c.reset(l)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l.inc, l.checked, l.epoch = pos.Incarnation, time.Now(), epoch
	return lastSeq == asOfSeq, nil
}

// readTo reads the records of l's session after l.last up to stream seq upTo into l (one log read
// slot held), and returns the last event seq of the record at upTo.
func (c *nodeCache) readTo(ctx context.Context, st *store.Store, l *nodeLog, upTo uint64) (int64, error) {
	select {
	case c.reads <- struct{}{}:
		defer func() { <-c.reads }()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	sh, err := st.Session(l.id)
	if err != nil {
		return 0, err
	}
	var added int64
	read := 0
	var opts []store.ReadOpt
	if l.last != 0 {
		opts = append(opts, store.AfterStreamSeq(l.last, l.next))
	}
	_, err = sh.Records(ctx, func(r store.Record) error {
		streamSeq, at, evs := r.StreamSeq, r.Stored, r.Events
		read++
		for _, ev := range evs {
			if !session.SurfaceEligible(ev.Type) {
				continue
			}
			own := owned(ev)
			l.events[ev.Seq], l.at[ev.Seq] = own, streamSeq
			added += int64(len(own.Data)+len(own.SurfaceOp)+len(own.SourceEventSeqs)+len(own.Time)) + eventOverhead
		}
		l.last, l.next, l.lastAt = streamSeq, evs[len(evs)-1].Seq+1, at
		return nil
	}, append(opts, store.UpTo(upTo))...)
	c.m.storeRequest(reqRecord, read/readBatchRecords+1)
	if added > 0 {
		c.account(l, added)
	}
	if err != nil {
		return 0, fmt.Errorf("reading the log: %w", err)
	}
	return l.next - 1, nil
}

// Approximate heap cost, in bytes, of an entry (map, list element, id) and of a kept event beyond
// its raw fields (its map slot and Event header, allocation rounding): what the bound counts.
const (
	entryOverhead = 512
	eventOverhead = 192
)

// entry returns the session's entry, created empty if needed, as the most recently used.
func (c *nodeCache) entry(id string) *nodeLog {
	c.mu.Lock()
	if l := c.byID[id]; l != nil {
		c.lru.MoveToFront(l.elem)
		c.mu.Unlock()
		return l
	}
	tok, _ := wire.Token(id)
	l := &nodeLog{id: id, token: tok, events: map[int64]session.Event{}, at: map[int64]uint64{}}
	l.elem = c.lru.PushFront(l)
	c.byID[id] = l
	c.mu.Unlock()
	c.account(l, entryOverhead)
	return l
}

// account adds delta bytes held by l and evicts entries over the bound: l alone when it alone is
// over it (one oversized session must not empty the cache), else the least recently used.
func (c *nodeCache) account(l *nodeLog, delta int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l.size += delta
	if l.elem == nil { // evicted: its bytes no longer count
		return
	}
	c.size += delta
	if l.size > c.max {
		c.evict(l)
		return
	}
	for c.size > c.max && c.lru.Len() > 0 {
		c.evict(c.lru.Back().Value.(*nodeLog))
	}
}

// evict removes l from the cache; c.mu is held.
func (c *nodeCache) evict(l *nodeLog) {
	c.lru.Remove(l.elem)
	l.elem = nil
	delete(c.byID, l.id)
	c.size -= l.size
}

// events returns the session's events at the given seqs (surface nodes), with the stream seq of
// each one's record, reading the records
// appended since the previous call. When what it holds is not this log's prefix any more (the
// log was purged and rewritten), or when recheck is set (the nodes are the projection's, so they
// must all be there) and a node is missing, it reads the whole log again, once. Nodes named by a
// client (recheck false) that are missing are left out of the result, without a re-read.
//
// pos is the log position of the projection being answered (checked against the current log by
// the caller; nil: unknown). When the cache has read this incarnation's log up to that position
// or beyond, the record it read last is still there (checkLast: one get) and it holds every
// node, it answers without reading the log: no record the projection folded is missing from it.
func (c *nodeCache) events(ctx context.Context, st *store.Store, id string, nodes []int64, recs []uint64, recheck bool, pos *LogPosition) (map[int64]session.Event, map[int64]uint64, error) {
	var l *nodeLog
	if c.max <= 0 {
		tok, _ := wire.Token(id)
		l = &nodeLog{id: id, token: tok, events: map[int64]session.Event{}, at: map[int64]uint64{}} // keep nothing: a private, uncached read
	} else {
		l = c.entry(id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c.checkEpoch(l)
	if len(recs) == len(nodes) {
		for i, seq := range nodes {
			if at, ok := l.at[seq]; ok && at != recs[i] {
				delete(l.events, seq) // the state names another record for it now: read that one
				delete(l.at, seq)
			}
		}
	}
	c.m.cache("query", l.last != 0 || len(l.events) > 0)
	hold := func() (map[int64]session.Event, map[int64]uint64, error) {
		// A copy of the index: the caller derives while other queries may update l.
		out, at := make(map[int64]session.Event, len(nodes)), make(map[int64]uint64, len(nodes))
		for _, seq := range nodes {
			if ev, ok := l.events[seq]; ok {
				out[seq], at[seq] = ev, l.at[seq]
			}
		}
		return out, at, nil
	}
	missing := func() bool {
		return slices.ContainsFunc(nodes, func(seq int64) bool { _, ok := l.events[seq]; return !ok })
	}
	if pos != nil && pos.Incarnation != "" {
		if l.inc != "" && l.inc != pos.Incarnation {
			c.reset(l) // what l holds is another incarnation's
		}
		if (l.inc == pos.Incarnation || l.last == 0 && len(recs) == len(nodes)) && !missing() {
			l.inc = pos.Incarnation
			// Every node is held, read from this incarnation's log since the last reconnect; the
			// caller checked the projection against the log.
			return hold()
		}
	}
	if len(recs) == len(nodes) && missing() && (pos == nil || l.inc == "" || l.inc == pos.Incarnation) {
		// The state names the record of each node: get the records of the nodes not held (a
		// direct get by stream seq each), not the log between.
		want := map[uint64]bool{}
		for i, seq := range nodes {
			if _, ok := l.events[seq]; !ok && recs[i] != 0 {
				want[recs[i]] = true
			}
		}
		var added int64
		for _, r := range slices.Sorted(maps.Keys(want)) {
			_, _, n, err := c.fetch(ctx, st, l, r)
			added += n
			if err != nil {
				c.account(l, added)
				return nil, nil, err
			}
		}
		c.account(l, added) // once: a session larger than the bound is evicted alone
		if pos != nil && l.inc == "" && l.last == 0 && pos.Incarnation != "" {
			l.inc = pos.Incarnation
		}
		if !missing() {
			return hold()
		}
	}
	if pos != nil && pos.Incarnation != "" && l.last < pos.StreamSeq {
		// Read to the projection's position (no tail read): what verify does, when it has not.
		if _, err := c.advance(ctx, st, l, *pos, -1); err != nil {
			return nil, nil, err
		}
		if l.inc == pos.Incarnation && l.last >= pos.StreamSeq && !missing() {
			return hold()
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.update(ctx, st, l)
		var se *session.Error
		if err != nil && attempt == 0 && (errors.Is(err, store.ErrLogChanged) || (errors.As(err, &se) && se.Rule == session.RuleRecordContinue)) {
			c.reset(l)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		l.inc = ""
		if pos != nil && l.last >= pos.StreamSeq {
			l.inc = pos.Incarnation // read to the projection's position of this incarnation's log
		}
		l.checked, l.epoch = time.Now(), c.curEpoch()
		if !missing() || !recheck || attempt > 0 || l.last == 0 {
			return hold()
		}
		c.reset(l)
	}
}

// update reads the records of l's session after l.last into l. Each record read moves l.last and
// l.next, so that after a failure the next update goes on from the last record taken. The bytes
// added are accounted once the read ends: a session that turns out larger than the bound is then
// evicted alone, without pushing the others out while it was being read.
func (c *nodeCache) update(ctx context.Context, st *store.Store, l *nodeLog) error {
	if err := c.checkLast(ctx, st, l); err != nil {
		return err
	}
	before := l.last
	var added int64
	read := 0
	defer func() {
		c.m.storeRequest(reqTail, 1)                         // Records reads the tail first
		c.m.storeRequest(reqRecord, read/readBatchRecords+1) // batched direct gets
	}()
	sh, err := st.Session(l.id)
	if err != nil {
		return err
	}
	_, err = sh.Records(ctx, func(r store.Record) error {
		streamSeq, evs := r.StreamSeq, r.Events
		read++
		for _, ev := range evs {
			if !session.SurfaceEligible(ev.Type) {
				continue
			}
			own := owned(ev)
			l.events[ev.Seq], l.at[ev.Seq] = own, streamSeq
			added += int64(len(own.Data)+len(own.SurfaceOp)+len(own.SourceEventSeqs)+len(own.Time)) + eventOverhead
		}
		l.last, l.next = streamSeq, evs[len(evs)-1].Seq+1
		return nil
	}, store.AfterStreamSeq(l.last, l.next))
	if added > 0 {
		c.account(l, added)
	}
	if err == nil && l.last != before {
		var m *jetstream.RawStreamMsg
		c.m.storeRequest(reqRecord, 1)
		if m, err = st.Stream().GetMsg(ctx, l.last); err == nil {
			l.lastAt = m.Time
		}
	}
	if err != nil {
		return fmt.Errorf("reading the log: %w", err)
	}
	return nil
}

// checkLast checks that the record l read last is still the one read (same stream seq, same
// server timestamp): after lost records or a purge the stream may hand its seq to another record.
// Records are never removed from the middle of a log, so then everything l holds is of the
// current log. A wrapped store.ErrLogChanged when it is not.
func (c *nodeCache) checkLast(ctx context.Context, st *store.Store, l *nodeLog) error {
	if l.last == 0 {
		return nil
	}
	c.m.storeRequest(reqRecord, 1)
	m, err := st.Stream().GetMsg(ctx, l.last)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("%w: session %q: stream seq %d read before is gone", store.ErrLogChanged, l.id, l.last)
	case err != nil:
		return fmt.Errorf("reading the log: %w", err)
	case !m.Time.Equal(l.lastAt) || !strings.HasSuffix(m.Subject, "."+l.token):
		return fmt.Errorf("%w: session %q: stream seq %d is not the record read before", store.ErrLogChanged, l.id, l.last)
	}
	return nil
}

// drop forgets what the cache holds of session id.
func (c *nodeCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.byID[id]; l != nil {
		c.evict(l)
	}
}

// reset empties l, so that the next update reads the whole log.
func (c *nodeCache) reset(l *nodeLog) {
	c.mu.Lock()
	freed := max(l.size-entryOverhead, 0) // the entry itself stays
	c.mu.Unlock()
	l.events, l.at, l.last, l.next, l.lastAt, l.inc, l.checked = map[int64]session.Event{}, map[int64]uint64{}, 0, 0, time.Time{}, "", time.Time{}
	c.account(l, -freed)
}

// owned returns ev with its raw fields copied, so that keeping it does not keep the record it was
// decoded from (with its streamed chunks) alive.
func owned(ev session.Event) session.Event {
	ev.Data, ev.SurfaceOp, ev.SourceEventSeqs = bytes.Clone(ev.Data), bytes.Clone(ev.SurfaceOp), bytes.Clone(ev.SourceEventSeqs)
	return ev
}
