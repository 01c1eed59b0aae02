package projector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// env is one embedded nats-server with a provisioned store and a connection.
type env struct {
	t     *testing.T
	url   string
	nc    *nats.Conn
	store *store.Store
	tails map[string]uint64 // session id -> stream seq of its last record written by the test
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvP(t, 4) }

// newEnvP is newEnv with a stream of the given partition count.
func newEnvP(t *testing.T, partitions int) *env {
	t.Helper()
	te := testnats.Start(t, store.Config{Partitions: partitions})
	return &env{t: t, url: te.URL, nc: te.NC, store: te.Store, tails: map[string]uint64{}}
}

// ctx guards against a hang only; no timing is asserted.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return c
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startProjector starts a projector on its own connection; it is stopped at cleanup.
func (e *env) startProjector(name string) *Projector {
	e.t.Helper()
	return e.startProjectorOpts(name, Options{})
}

// startProjectorOpts is startProjector with options (Name is set here, and Logger when nil).
func (e *env) startProjectorOpts(name string, opts Options) *Projector {
	e.t.Helper()
	nc, js, err := natsdev.Connect(e.url, nats.Name(name))
	if err != nil {
		e.t.Fatalf("Connect: %v", err)
	}
	st, err := store.Open(ctx(e.t), js)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	logger := quietLogger()
	if os.Getenv("AGENTLOG_DEBUG_PINS") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	opts.Name = name
	if opts.Logger == nil {
		opts.Logger = logger
	}
	p := mustNew(e.t, st, nc, opts)
	if err := p.Start(ctx(e.t)); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	e.t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			e.t.Errorf("Stop: %v", err)
		}
		nc.Close()
	})
	return p
}

// create registers a session's metadata.
func (e *env) create(id string) {
	e.t.Helper()
	if err := e.store.CreateSession(ctx(e.t), session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
		e.t.Fatalf("CreateSession %q: %v", id, err)
	}
}

// appendRecord writes events as one record guarded by the session's last record.
func (e *env) appendRecord(id string, events []session.Event) {
	e.t.Helper()
	res, err := storetest.Session(e.store, id).Append(ctx(e.t), e.tails[id], events)
	if err != nil {
		e.t.Fatalf("Append %q seqs %d..: %v", id, events[0].Seq, err)
	}
	e.tails[id] = res.StreamSeq
}

// appendChunked writes events in records of 1, 2, 3, ... max events, cycling.
func (e *env) appendChunked(id string, events []session.Event, max int) {
	e.t.Helper()
	n := 1
	for len(events) > 0 {
		k := min(n, len(events))
		e.appendRecord(id, events[:k])
		events = events[k:]
		n = n%max + 1
	}
}

// stored reads the stored projection and its revision.
func (e *env) stored(id string) (Projection, uint64) {
	e.t.Helper()
	tok, err := wire.Token(id)
	if err != nil {
		e.t.Fatal(err)
	}
	ent, err := storetest.ProjectionsKV(e.store).Get(ctx(e.t), wire.ProjectionKey(UnitMessages, tok))
	if err != nil {
		e.t.Fatalf("projection of %q: %v", id, err)
	}
	var p Projection
	if err := json.Unmarshal(ent.Value(), &p); err != nil {
		e.t.Fatalf("projection of %q: %v", id, err)
	}
	return p, ent.Revision()
}

// waitStored blocks until the stored projection of id satisfies ok (watching the KV key).
func (e *env) waitStored(id string, ok func(Projection) bool) Projection {
	e.t.Helper()
	tok, _ := wire.Token(id)
	w, err := storetest.ProjectionsKV(e.store).Watch(ctx(e.t), wire.ProjectionKey(UnitMessages, tok))
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case ent := <-w.Updates():
			if ent == nil || ent.Operation() != jetstream.KeyValuePut {
				continue
			}
			var p Projection
			if err := json.Unmarshal(ent.Value(), &p); err != nil {
				e.t.Fatal(err)
			}
			if ok(p) {
				return p
			}
		case <-ctx(e.t).Done():
			e.t.Fatalf("projection of %q never reached the expected state", id)
		}
	}
}

// ev builds an event from its JSON parts; op is "" (none), "append" or a replace object.
func ev(seq int64, typ, data, op, sources string) session.Event {
	e := session.Event{Type: typ, Seq: seq, Time: json.Number(strconv.FormatInt(1785000000000+seq, 10)), Data: json.RawMessage(data)}
	switch {
	case op == "append":
		e.SurfaceOp = json.RawMessage(`"append"`)
	case op != "":
		e.SurfaceOp = json.RawMessage(op)
	}
	if sources != "" {
		e.SourceEventSeqs = json.RawMessage(sources)
	}
	return e
}

func userMsg(seq int64, id, text string) session.Event {
	return ev(seq, "user/message", fmt.Sprintf(`{"id":%q,"role":"user","content":[{"type":"text","text":%q}],"source":{"kind":"user"}}`, id, text), "append", "")
}

func toolResult(seq int64, text, op, sources string) session.Event {
	return ev(seq, "tool/result", fmt.Sprintf(`{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":%q}]}],"source":{"kind":"tool","callId":"c1"}}}`, text), op, sources)
}

// toolSession is an 11-event log with a tool/result replace and an open turn. The reference
// (oracle.mjs) gives: nodes [2,3,7,10], replaceGeneration 1, transcript [2,3,5,10], openTurn 2,
// 4 messages, the third with the replaced result "[elided]".
func toolSession() []session.Event {
	return []session.Event{
		ev(0, "turn/start", `{"turn":1}`, "", ""),
		ev(1, "step/start", `{"turn":1,"step":1}`, "", ""),
		userMsg(2, "m1", "list files"),
		ev(3, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"}}}`, "append", ""),
		ev(4, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`, "", ""),
		toolResult(5, "a b c", "append", ""),
		ev(6, "step/end", `{"turn":1,"step":1}`, "", ""),
		toolResult(7, "[elided]", `{"op":"replace","start":5,"end":5}`, "[5]"),
		ev(8, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, "", ""),
		ev(9, "turn/start", `{"turn":2}`, "", ""),
		userMsg(10, "m2", "thanks"),
	}
}

func int64s(a []int64) string { b, _ := json.Marshal(a); return string(b) }

// lowerStateLimit makes checkpoints treat a stored value over n bytes as too large to store, for
// the rest of the test.
func lowerStateLimit(t *testing.T, n int64) {
	old := maxStateBytes
	maxStateBytes = func(jetstream.JetStream) int64 { return n }
	t.Cleanup(func() { maxStateBytes = old })
}

// mustNew is New for a test: Options it refuses fail the test.
func mustNew(t testing.TB, st *store.Store, nc *nats.Conn, opts Options) *Projector {
	t.Helper()
	p, err := New(st, nc, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}
