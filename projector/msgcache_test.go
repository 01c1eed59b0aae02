package projector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// wantMessages derives the messages of nodes from the whole log, as the query service did before
// it kept anything.
func (e *env) wantMessages(id string, nodes []int64) []json.RawMessage {
	e.t.Helper()
	events, _, err := storetest.ReadAll(ctx(e.t), storetest.Session(e.store, id))
	if err != nil {
		e.t.Fatal(err)
	}
	msgs, err := session.DeriveMessages(nodes, func(seq int64) (session.Event, error) { return events[seq], nil })
	if err != nil {
		e.t.Fatal(err)
	}
	return msgs
}

func sameMessages(a, b []json.RawMessage) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestMessagesQueryReadsOnlyNewRecords queries a growing session after each record: every reply
// equals the messages derived from the whole log, and the query service keeps only
// surface-eligible events, read from the records the state names for them.
func TestMessagesQueryReadsOnlyNewRecords(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("grow")
	events := toolSession()
	for i := 0; i < len(events); i += 2 {
		e.appendRecord("grow", events[i:min(i+2, len(events))])
		last := events[min(i+2, len(events))-1].Seq
		r, err := queryMessages(ctx(t), e.nc, "grow", last)
		if err != nil {
			t.Fatalf("after seq %d: %v", last, err)
		}
		if want := e.wantMessages("grow", r.Nodes); !sameMessages(r.Messages, want) {
			t.Fatalf("after seq %d: messages %s, want %s", last, r.Messages, want)
		}
	}
	l := p.query.nodes.byID["grow"]
	if l == nil {
		t.Fatal("the session is not kept")
	}
	// The state names each node's record (nodeRecords): only those records were read.
	for seq, at := range l.at {
		rec, found, err := storetest.Session(e.store, "grow").RecordFromLeader(ctx(t), at)
		if err != nil || !found || rec.LastEvents[0].Seq > seq || rec.NextSeq <= seq {
			t.Errorf("event seq %d kept from stream seq %d, which does not hold it (%v)", seq, at, err)
		}
	}
	for seq, ev := range l.events {
		if !session.SurfaceEligible(ev.Type) {
			t.Errorf("kept seq %d of type %s", seq, ev.Type)
		}
	}
	if len(l.events) != 5 { // seqs 2, 3, 5, 7 and 10: the user, assistant and tool/result events
		t.Errorf("kept %d events, want 5", len(l.events))
	}
}

// TestMessagesQueryRecoversFromAStalePosition corrupts the kept position (as a purged and
// rewritten log would look): the query service notices, reads the whole log again and answers
// right.
func TestMessagesQueryRecoversFromAStalePosition(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("s")
	events := toolSession()
	e.appendRecord("s", events[0:6])
	e.appendRecord("s", events[6:11])
	r, err := queryMessages(ctx(t), e.nc, "s", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := e.wantMessages("s", r.Nodes)
	for name, corrupt := range map[string]func(l *nodeLog){
		"position past the log's end": func(l *nodeLog) { l.last += 1000 },
		"wrong next seq":              func(l *nodeLog) { l.last, l.next = 1, 3 },
		"missing node":                func(l *nodeLog) { delete(l.events, 10) },
	} {
		l := p.query.nodes.entry("s")
		l.mu.Lock()
		corrupt(l)
		l.mu.Unlock()
		got, err := queryMessages(ctx(t), e.nc, "s", 10)
		if err != nil || !sameMessages(got.Messages, want) {
			t.Fatalf("%s: %s, %v; want %s", name, got.Messages, err, want)
		}
	}
}

// TestMessagesQueryCacheBound keeps the kept events under QueryCacheBytes: the least recently
// queried sessions go first, and answers stay right with a bound too small for any session.
func TestMessagesQueryCacheBound(t *testing.T) {
	for _, bound := range []int64{-1, 3000} {
		t.Run(fmt.Sprint(bound), func(t *testing.T) {
			e := newEnv(t)
			p := e.startProjectorOpts("p1", Options{QueryCacheBytes: bound})
			for i := range 5 {
				id := fmt.Sprintf("s%d", i)
				e.create(id)
				e.appendRecord(id, toolSession())
				r, err := queryMessages(ctx(t), e.nc, id, 10)
				if err != nil {
					t.Fatal(err)
				}
				if want := e.wantMessages(id, r.Nodes); !sameMessages(r.Messages, want) {
					t.Fatalf("%s: messages differ", id)
				}
				p.query.nodes.mu.Lock()
				size, n := p.query.nodes.size, p.query.nodes.lru.Len()
				p.query.nodes.mu.Unlock()
				if size > max(bound, 0) || (bound < 0 && n != 0) {
					t.Fatalf("after %s: %d bytes kept in %d sessions, bound %d", id, size, n, bound)
				}
			}
		})
	}
}

// BenchmarkMessagesQueryLongSession is an agent's read-your-writes loop on a long session (10,000
// streamed chunks, then one user message per iteration, each followed by a messages query with
// minSeq): with the query cache each query reads the new record, without it (the baseline, as
// before the cache) the whole log. It reports ns per append+query of both, in the same run, and
// their ratio.
func BenchmarkMessagesQueryLongSession(b *testing.B) {
	te := testnats.Start(b, store.Config{Partitions: 4})
	bctx := context.Background()
	chunk := func(seq int64) session.Event {
		return ev(seq, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"`+strings.Repeat("x", 400)+`"}}`, "", "")
	}
	const chunks = 10000
	runs := 0
	run := func(b *testing.B, cacheBytes int64) float64 {
		runs++
		id := fmt.Sprintf("long-%d", runs)
		if err := te.Store.CreateSession(bctx, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
			b.Fatal(err)
		}
		var tail uint64
		seq := int64(0)
		appendEvs := func(evs []session.Event) {
			r, err := storetest.Session(te.Store, id).Append(bctx, tail, evs)
			if err != nil {
				b.Fatal(err)
			}
			tail, seq = r.StreamSeq, seq+int64(len(evs))
		}
		appendEvs([]session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""), ev(1, "step/start", `{"turn":1,"step":1}`, "", "")})
		for seq < chunks {
			var evs []session.Event
			for range 100 {
				evs = append(evs, chunk(seq+int64(len(evs))))
			}
			appendEvs(evs)
		}
		nc, js, err := natsdev.Connect(te.URL, nats.Name("bench-"+id))
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		st, err := store.Open(bctx, js)
		if err != nil {
			b.Fatal(err)
		}
		p := mustNew(b, st, nc, Options{Name: id, Logger: quietLogger(), QueryCacheBytes: cacheBytes})
		if err := p.Start(bctx); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = p.Stop() }()
		start := time.Now()
		n := 0
		for ; n < b.N; n++ {
			appendEvs([]session.Event{userMsg(seq, fmt.Sprint("m", seq), "hi")})
			if _, err := queryMessages(bctx, te.NC, id, seq-1); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(n)
	}
	var cached, whole float64
	b.Run("cache", func(b *testing.B) { cached = run(b, DefaultQueryCacheBytes) })
	b.Run("whole-log", func(b *testing.B) { whole = run(b, -1) })
	if cached > 0 && whole > 0 {
		b.Logf("append+query on a %d-chunk session: %.0f ns with the query cache, %.0f ns reading the whole log: ratio %.1f", chunks, cached, whole, whole/cached)
	}
}

// TestOversizedSessionDoesNotEmptyTheCache queries a session whose events alone exceed the bound:
// it is read whole (not kept), and the sessions already kept stay.
func TestOversizedSessionDoesNotEmptyTheCache(t *testing.T) {
	e := newEnv(t)
	p := e.startProjectorOpts("p1", Options{QueryCacheBytes: 20000})
	for i := range 3 {
		id := fmt.Sprintf("small%d", i)
		e.create(id)
		e.appendRecord(id, toolSession())
		if _, err := queryMessages(ctx(t), e.nc, id, 10); err != nil {
			t.Fatal(err)
		}
	}
	e.create("big")
	evs := []session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""), ev(1, "step/start", `{"turn":1,"step":1}`, "", "")}
	for s := int64(2); s < 40; s++ {
		evs = append(evs, userMsg(s, fmt.Sprint("m", s), strings.Repeat("x", 1000)))
	}
	e.appendChunked("big", evs, 3)
	r, err := queryMessages(ctx(t), e.nc, "big", 39)
	if err != nil {
		t.Fatal(err)
	}
	if want := e.wantMessages("big", r.Nodes); !sameMessages(r.Messages, want) {
		t.Fatal("big session: messages differ")
	}
	p.query.nodes.mu.Lock()
	defer p.query.nodes.mu.Unlock()
	if p.query.nodes.byID["big"] != nil || p.query.nodes.lru.Len() != 3 || p.query.nodes.size > p.query.nodes.max {
		t.Errorf("after the oversized session: %d sessions, %d bytes kept (bound %d); want the 3 small ones", p.query.nodes.lru.Len(), p.query.nodes.size, p.query.nodes.max)
	}
}

// TestKeepNothingKeepsNoEntries checks QueryCacheBytes < 0: no entry at all, not even for
// sessions with nothing to keep yet.
func TestKeepNothingKeepsNoEntries(t *testing.T) {
	e := newEnv(t)
	p := e.startProjectorOpts("p1", Options{QueryCacheBytes: -1})
	for i := range 5 {
		id := fmt.Sprintf("z%d", i)
		e.create(id)
		e.appendRecord(id, []session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""), ev(1, "step/start", `{"turn":1,"step":1}`, "", "")})
		if _, err := queryMessages(ctx(t), e.nc, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	p.query.nodes.mu.Lock()
	defer p.query.nodes.mu.Unlock()
	if n := len(p.query.nodes.byID); n != 0 || p.query.nodes.size != 0 {
		t.Errorf("keeping nothing, the cache holds %d entries, %d bytes", n, p.query.nodes.size)
	}
}
