package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// fakeClock drives the batching window by hand: AfterFunc timers fire only inside Advance, in the
// caller's goroutine, in deadline order.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
	fired   bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1785000000000)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.fired || t.stopped {
			return false
		}
		t.stopped = true
		return true
	}
}

// Advance moves the clock by d and runs every timer that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due, keep []*fakeTimer
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.fired = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// Active counts the timers that are neither stopped nor fired (open windows).
func (c *fakeClock) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			n++
		}
	}
	return n
}

// env is one embedded nats-server with a provisioned agentlog.
type env struct {
	url   string
	nc    *nats.Conn
	js    njs.JetStream
	store *store.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	te := testnats.Start(t, store.Config{})
	e := &env{url: te.URL, nc: te.NC, store: te.Store}
	var err error
	if e.js, err = njs.New(e.nc); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// offline returns a Publisher with no server behind it (a zero Store, so no size limit), for tests
// of a Writer's own state that never write.
func offline(t testing.TB, writerID string) *Publisher {
	t.Helper()
	p, err := New(&store.Store{}, nil, Options{WriterID: writerID})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// publisher returns a Publisher on e driven by clk (window 200 ms).
func (e *env) publisher(t *testing.T, writerID string, clk *fakeClock) *Publisher {
	t.Helper()
	p, err := New(e.store, e.nc, Options{WriterID: writerID, Now: clk.Now, RetryBudget: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.after = clk.AfterFunc
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

type record struct {
	streamSeq uint64
	header    nats.Header
	events    []session.Event
}

// records returns every stored record of session id, in order, decoded.
func (e *env) records(t *testing.T, id string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subj, err := wire.SessionSubject(id, e.store.Partitions())
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.store.Stream().Info(ctx, njs.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	n := int(info.State.Subjects[subj])
	if n == 0 {
		return nil
	}
	cons, err := e.js.OrderedConsumer(ctx, wire.StreamName, njs.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for len(out) < n {
		batch, err := cons.Fetch(n-len(out), njs.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			evs, err := e.store.DecodeRecord(ctx, msg.Headers(), msg.Data())
			if err != nil {
				t.Fatalf("record at stream seq %d does not decode: %v", md.Sequence.Stream, err)
			}
			out = append(out, record{streamSeq: md.Sequence.Stream, header: msg.Headers(), events: evs})
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// stored reads the session's events back with store.Read.
func (e *env) stored(t *testing.T, id string) []session.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, _, err := storetest.ReadAll(ctx, storetest.Session(e.store, id))
	if err != nil {
		t.Fatalf("Read(%q): %v", id, err)
	}
	return evs
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func header(id string) session.Header {
	return session.Header{Version: 0, ID: id, CreatedAt: 1785000000000}
}

// ev builds an event from a JSON line.
func ev(t *testing.T, line string) session.Event {
	t.Helper()
	var e session.Event
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("bad fixture %s: %v", line, err)
	}
	return e
}

// fixture is a valid turn with a tool call, a tool/result and a tool/result replace (oracle: ok,
// nodes [1,3,6], replaceGeneration 1).
var fixture = []string{
	`{"type":"turn/start","seq":0,"time":1785000000000,"data":{"turn":1}}`,
	`{"type":"user/message","seq":1,"time":1785000000001,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"read it"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
	`{"type":"step/start","seq":2,"time":1785000000002,"data":{"turn":1,"step":1}}`,
	`{"type":"assistant/message","seq":3,"time":1785000000003,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool-call","id":"call-1","name":"read","arguments":"{\"path\":\"x\"}"}],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append","sourceEventSeqs":[]}`,
	`{"type":"tool/call","seq":4,"time":1785000000004,"data":{"turn":1,"step":1,"callId":"call-1","name":"read","arguments":"{\"path\":\"x\"}"}}`,
	`{"type":"tool/result","seq":5,"time":1785000000005,"data":{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"call-1","content":[{"type":"text","text":"a very long result"}]}],"source":{"kind":"tool","callId":"call-1"}}},"surfaceOp":"append","sourceEventSeqs":[4]}`,
	`{"type":"tool/result","seq":6,"time":1785000000006,"data":{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"call-1","content":[{"type":"text","text":"[elided]"}]}],"source":{"kind":"tool","callId":"call-1"}}},"surfaceOp":{"op":"replace","start":5,"end":5},"sourceEventSeqs":[5]}`,
	`{"type":"step/end","seq":7,"time":1785000000007,"data":{"turn":1,"step":1}}`,
	`{"type":"turn/end","seq":8,"time":1785000000008,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
}

func fixtureEvents(t *testing.T, n int) []session.Event {
	out := make([]session.Event, n)
	for i := range n {
		out[i] = ev(t, fixture[i])
	}
	return out
}

func mustAs[T error](t *testing.T, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T) is not a %T", err, err, target)
	}
	return target
}

// recv takes the next value from ch; it fails the test (instead of hanging) when none comes within
// 30 s, which only happens when the code under test is broken.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("nothing arrived (the expected write never started)")
		panic("unreachable")
	}
}
