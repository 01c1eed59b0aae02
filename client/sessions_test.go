package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// opsStack is stack with an extra unit "boom" that stops at every tool/call, and sessions
// "a" (6 events), "ab" (6 events, one tool call), "abc" (no events) and "a/child" (a fork of "a").
func opsStack(t *testing.T) (*testnats.Env, *client.Client) {
	t.Helper()
	te := testnats.Start(t, store.Config{Partitions: 2})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	boom := projector.Def[int]{Key: "boom", StateVersion: 1, Reads: []string{"tool/call"},
		Init:  func() int { return 0 },
		Apply: func(int, session.Event) (int, error) { return 0, errors.New("boom") }}
	reg, err := projector.NewRegistry(boom)
	if err != nil {
		t.Fatal(err)
	}
	p, err := projector.New(te.Store, te.NC, projector.Options{Name: "p1", Logger: quiet, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	f, err := forker.New(te.Store, te.NC, forker.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop(); _ = p.Stop() })
	for _, id := range []string{"a", "ab", "abc"} {
		if err := te.Store.CreateSession(ctx(t), session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := storetest.Session(te.Store, "a").Append(ctx(t), 0, events()); err != nil {
		t.Fatal(err)
	}
	evs := events()[:4]
	evs = append(evs, ev(4, "turn/start", `{"turn":2}`, false),
		ev(5, "tool/call", `{"turn":2,"step":1,"callId":"t1","name":"x","input":{}}`, false))
	if _, err := storetest.Session(te.Store, "ab").Append(ctx(t), 0, evs); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(te.NC, client.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	at := int64(3)
	if _, err := c.Fork(ctx(t), client.ForkRequest{Source: "a", Boundary: &at, Child: "a/child"}); err != nil {
		t.Fatal(err)
	}
	return te, c
}

func list(t *testing.T, c *client.Client, q client.SessionsQuery) ([]client.SessionInfo, string) {
	t.Helper()
	var out []client.SessionInfo
	next, err := c.Sessions(ctx(t), q, func(s client.SessionInfo) error { out = append(out, s); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out, next
}

func ids(ss []client.SessionInfo) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

func TestSessionsListing(t *testing.T) {
	_, c := opsStack(t)
	all, next := list(t, c, client.SessionsQuery{})
	if want := []string{"a", "a/child", "ab", "abc"}; !slices.Equal(ids(all), want) || next != "" {
		t.Fatalf("all: %v next %q, want %v", ids(all), next, want)
	}
	a, child, abc := all[0], all[1], all[3]
	if a.LastSeq != 5 || a.Events != 6 || a.CreatedAt != 1785000000000 || !slices.Equal(a.Children, []string{"a/child"}) || a.ParentSession != "" {
		t.Fatalf("a: %+v", a)
	}
	// The child: seed 0..3 plus the end-seed marker.
	if child.ParentSession != "a" || child.SeedLength == nil || *child.SeedLength != 4 || child.LastSeq != 4 || len(child.Children) != 0 {
		t.Fatalf("a/child: %+v", child)
	}
	if abc.LastSeq != -1 || abc.Events != 0 {
		t.Fatalf("abc: %+v", abc)
	}
	// Pages.
	p1, next := list(t, c, client.SessionsQuery{Limit: 2})
	if !slices.Equal(ids(p1), []string{"a", "a/child"}) || next != "a/child" {
		t.Fatalf("page 1: %v next %q", ids(p1), next)
	}
	p2, next := list(t, c, client.SessionsQuery{Limit: 2, After: next})
	if !slices.Equal(ids(p2), []string{"ab", "abc"}) || next != "" {
		t.Fatalf("page 2: %v next %q", ids(p2), next)
	}
	pre, _ := list(t, c, client.SessionsQuery{Prefix: "ab"})
	if !slices.Equal(ids(pre), []string{"ab", "abc"}) {
		t.Fatalf("prefix ab: %v", ids(pre))
	}
	if _, err := c.Sessions(ctx(t), client.SessionsQuery{Limit: -1}, nil); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("limit -1: %v", err)
	}
}

func TestResolve(t *testing.T) {
	_, c := opsStack(t)
	for in, want := range map[string]string{"a": "a", "ab": "ab", "a/": "a/child", "abc": "abc"} {
		if got, err := c.Resolve(ctx(t), in); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	var ae *client.AmbiguousError
	if _, err := c.Resolve(ctx(t), "a/x"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Resolve(a/x): %v", err)
	}
	if _, err := c.Resolve(ctx(t), " "); !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("Resolve(blank): %v", err)
	}
	// "ab" exists, so only a prefix that is not an id is ambiguous.
	te2 := testnats.Start(t, store.Config{Partitions: 1})
	for _, id := range []string{"x1", "x2"} {
		if err := te2.Store.CreateSession(ctx(t), session.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	c2, _ := client.New(te2.NC)
	if _, err := c2.Resolve(ctx(t), "x"); !errors.As(err, &ae) || !slices.Equal(ae.Candidates, []string{"x1", "x2"}) {
		t.Errorf("Resolve(x): %v", err)
	}
}

func TestStatus(t *testing.T) {
	_, c := opsStack(t)
	if _, err := c.Messages(ctx(t), "ab", client.MinSeq(5)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Status(ctx(t), "ab")
	if err != nil {
		t.Fatal(err)
	}
	if s.LastSeq != 5 || s.OpenTurn == nil || *s.OpenTurn != 2 || s.ParentSession != nil || len(s.Children) != 0 {
		t.Fatalf("ab: %+v", s)
	}
	var boom *client.UnitStatus
	for i, u := range s.Units {
		if u.Unit == "boom" {
			boom = &s.Units[i]
		} else if u.AsOfSeq != 5 || u.Lag != 0 || u.Error != nil {
			t.Errorf("unit %+v", u)
		}
	}
	if boom == nil || boom.Error == nil || boom.Lag != 1 || len(s.Stopped) != 1 || s.Stopped[0].Unit != "boom" || s.Stopped[0].Seq != 5 || s.Stopped[0].Session != "ab" || s.Stopped[0].Rule == "" {
		t.Fatalf("boom %+v, stopped %+v", boom, s.Stopped)
	}
	a, err := c.Status(ctx(t), "a")
	if err != nil || !slices.Equal(a.Children, []string{"a/child"}) {
		t.Fatalf("a: %+v %v", a, err)
	}
	ch, err := c.Status(ctx(t), "a/child")
	if err != nil || ch.ParentSession == nil || *ch.ParentSession != "a" || ch.SeedLength == nil || *ch.SeedLength != 4 {
		t.Fatalf("a/child: %+v %v", ch, err)
	}
	if _, err := c.Status(ctx(t), "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("nobody: %v", err)
	}
}

func TestEventsFollowAndWatch(t *testing.T) {
	te, c := opsStack(t)
	var got []session.Event
	if err := c.Events(ctx(t), "a", client.EventsQuery{Tail: 2}, func(e session.Event) error { got = append(got, e); return nil }); err != nil || len(got) != 2 || got[0].Seq != 4 {
		t.Fatalf("tail 2: %v %v", got, err)
	}
	got = nil
	if err := c.Events(ctx(t), "a", client.EventsQuery{FromSeq: 3, Tail: 10}, func(e session.Event) error { got = append(got, e); return nil }); err != nil || len(got) != 3 || got[0].Seq != 3 {
		t.Fatalf("from 3: %v %v", got, err)
	}

	fctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	evc := make(chan session.Event, 100)
	hist := make(chan client.MessagesReply, 100)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs <- c.Events(fctx, "a", client.EventsQuery{FromSeq: 5, Follow: true}, func(e session.Event) error { evc <- e; return nil })
	}()
	go func() {
		defer wg.Done()
		errs <- c.WatchMessages(fctx, "a", func(r client.MessagesReply) error { hist <- r; return nil })
	}()
	recv := func(what string, ch <-chan session.Event) session.Event {
		select {
		case e := <-ch:
			return e
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s", what)
		}
		return session.Event{}
	}
	if e := recv("stored event", evc); e.Seq != 5 {
		t.Fatalf("first followed event %d", e.Seq)
	}
	if r := <-hist; r.AsOfSeq != 5 || len(r.Messages) != 3 {
		t.Fatalf("first history %+v", r)
	}
	more := []session.Event{
		ev(6, "assistant/message", `{"turn":2,"step":1,"message":{"id":"a2","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}}}`, true),
		ev(7, "turn/end", `{"turn":2,"reason":{"kind":"completed"}}`, false),
	}
	tail, err := storetest.Session(te.Store, "a").Tail(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(te.Store, "a").Append(ctx(t), tail.LastStreamSeq, more); err != nil {
		t.Fatal(err)
	}
	if e := recv("appended event", evc); e.Seq != 6 {
		t.Fatalf("followed %d", e.Seq)
	}
	if e := recv("appended event", evc); e.Seq != 7 {
		t.Fatalf("followed %d", e.Seq)
	}
	for {
		select {
		case r := <-hist:
			if r.AsOfSeq < 6 {
				t.Fatalf("history went back: %+v", r)
			}
			if r.AsOfSeq == 7 {
				if len(r.Messages) != 4 {
					t.Fatalf("last history %+v", r)
				}
				cancel()
				wg.Wait()
				for range 2 {
					if err := <-errs; !errors.Is(err, context.Canceled) {
						t.Fatalf("after cancel: %v", err)
					}
				}
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no history at seq 7")
		}
	}
}

// TestEventsResumeAfter: a read reports the position after each record (Reached); a read with
// After reads only the records stored after it, and one whose position the log no longer holds
// (purged and written again) is ErrLogChanged.
func TestEventsResumeAfter(t *testing.T) {
	te, c := opsStack(t)
	var pos client.Position
	var first []session.Event
	if err := c.Events(ctx(t), "a", client.EventsQuery{Reached: func(p client.Position) { pos = p }}, func(e session.Event) error { first = append(first, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if pos.StreamSeq == 0 || pos.NextSeq != int64(len(first)) {
		t.Fatalf("reached %+v after %d events", pos, len(first))
	}
	var none []session.Event
	if err := c.Events(ctx(t), "a", client.EventsQuery{After: pos}, func(e session.Event) error { none = append(none, e); return nil }); err != nil || len(none) != 0 {
		t.Fatalf("after the last record: %d events, %v", len(none), err)
	}
	more := []session.Event{ev(int64(len(first)), "turn/start", `{"turn":9}`, false)}
	res, err := storetest.Session(te.Store, "a").Append(ctx(t), pos.StreamSeq, more)
	if err != nil {
		t.Fatal(err)
	}
	var got []session.Event
	var after client.Position
	if err := c.Events(ctx(t), "a", client.EventsQuery{After: pos, Reached: func(p client.Position) { after = p }}, func(e session.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Seq != int64(len(first)) || after.StreamSeq != res.StreamSeq || after.NextSeq != int64(len(first))+1 {
		t.Fatalf("resumed: %v, reached %+v (appended at stream seq %d)", got, after, res.StreamSeq)
	}
	if err := c.Events(ctx(t), "a", client.EventsQuery{After: client.Position{StreamSeq: 1}}, func(session.Event) error { return nil }); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("a position without its next seq: %v", err)
	}
	if err := c.Events(ctx(t), "a", client.EventsQuery{After: client.Position{StreamSeq: after.StreamSeq + 1000, NextSeq: 99}}, func(session.Event) error { return nil }); !errors.Is(err, client.ErrLogChanged) {
		t.Fatalf("a position past the log: %v", err)
	}
}

// TestStatusAfterRestore: a messages state folded before the session was archived names the
// stream seq of a record the archive purged; after a restore (the records written again at
// higher stream seqs) and an append, Status reports no data loss although no projector refolded
// yet (none runs here).
func TestStatusAfterRestore(t *testing.T) {
	te := testnats.Start(t, store.Config{Partitions: 2})
	if err := te.Store.CreateSession(ctx(t), session.Header{ID: "r", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	ss := storetest.Session(te.Store, "r")
	r, err := ss.Append(ctx(t), 0, events())
	if err != nil {
		t.Fatal(err)
	}
	info, err := ss.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := jetstream.New(te.NC)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := kv.KeyValue(ctx(t), wire.ProjectionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	last := events()[len(events())-1].Seq
	state, _ := json.Marshal(map[string]any{"stateVersion": 1, "asOfSeq": last,
		"log": client.LogPosition{Incarnation: info.Incarnation, StreamSeq: r.StreamSeq}, "state": map[string]any{}})
	key := wire.ProjectionKey(projector.UnitMessages, ss.Token())
	if _, err := ss.Archive(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The state a projector folded before the archive, put back as it would have been.
	if _, err := proj.Put(ctx(t), key, state); err != nil {
		t.Fatal(err)
	}
	res, err := ss.Restore(ctx(t))
	if err != nil || !res.Restored {
		t.Fatalf("restore: %+v %v", res, err)
	}
	if _, err := ss.Append(ctx(t), res.StreamSeq, []session.Event{ev(last+1, "turn/start", `{"turn":9}`, false)}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(te.NC, client.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Status(ctx(t), "r")
	if err != nil || s.DataLoss != nil || s.LastSeq != last+1 {
		t.Fatalf("status after restore and append: %+v %v", s, err)
	}
}
