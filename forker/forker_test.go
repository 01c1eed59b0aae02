package forker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const forkParent = "../../shared/data/examples/fork-parent.jsonl"

// now is the fixed clock of the tests' forkers (Unix ms 1786000000000).
var now = time.UnixMilli(1786000000000)

type env struct {
	t     *testing.T
	nc    *nats.Conn
	store *store.Store
	f     *Forker
}

// ctx guards against a hang only; no timing is asserted.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// newEnv starts an embedded server, provisions the store and starts a forker.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, store.Config{Partitions: 4})
}

// newEnvWith is newEnv with the store provisioned with cfg.
func newEnvWith(t *testing.T, cfg store.Config) *env {
	t.Helper()
	te := testnats.Start(t, cfg)
	nc, store := te.NC, te.Store
	f, err := New(store, nc, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return &env{t: t, nc: nc, store: store, f: f}
}

// loadParent stores ../../shared/data/examples/fork-parent.jsonl as session "parent" (metadata
// and its events in records of 3) and returns its events.
func (e *env) loadParent() []session.Event {
	e.t.Helper()
	fh, err := os.Open(forkParent)
	if errors.Is(err, os.ErrNotExist) {
		e.t.Skipf("%s is absent (the shared data directory is not here)", forkParent)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer fh.Close()
	h, events, err := session.ReadJSONL(fh, "parent")
	if err != nil {
		e.t.Fatalf("ReadJSONL: %v", err)
	}
	if h == nil || h.ID != "parent" || len(events) != 8 {
		e.t.Fatalf("fork-parent.jsonl: header %+v, %d events; want parent with 8", h, len(events))
	}
	hdr := *h
	hdr.Cwd = "/work/project"
	hdr.Raw = nil // store the fields, with the cwd set above
	if err := e.store.CreateSession(ctx(e.t), hdr); err != nil {
		e.t.Fatal(err)
	}
	e.appendRecords("parent", events, 3)
	return events
}

// appendRecords writes events in records of up to n events, each with a Nats-Msg-Id.
func (e *env) appendRecords(id string, events []session.Event, n int) {
	e.t.Helper()
	var last uint64
	for i := 0; i < len(events); i += n {
		j := min(i+n, len(events))
		res, err := storetest.Session(e.store, id).Append(ctx(e.t), last, events[i:j], store.WithMsgID("src-"+id+"-"+strconv.FormatInt(events[i].Seq, 10)))
		if err != nil {
			e.t.Fatalf("Append %s: %v", id, err)
		}
		last = res.StreamSeq
	}
}

func ptr(v int64) *int64 { return &v }

// forkErr asserts err is a refusal with code and exact text: a *session.ForkError (Forker.Fork)
// or a *client.Error (through the service).
func forkErr(t *testing.T, err error, code session.Code, text string) {
	t.Helper()
	var fe *session.ForkError
	var ce *client.Error
	switch {
	case errors.As(err, &fe):
		if fe.Code != code || fe.Msg != text {
			t.Fatalf("want %s %q, got %s %q", code, text, fe.Code, fe.Msg)
		}
	case errors.As(err, &ce):
		if string(ce.Code) != string(code) || ce.Description != text {
			t.Fatalf("want %s %q, got %s %q", code, text, ce.Code, ce.Description)
		}
	default:
		t.Fatalf("want a fork refusal %s, got %T %v", code, err, err)
	}
}

// fork forks through the service with the client.
func (e *env) fork(req client.ForkRequest) (client.ForkResult, error) {
	e.t.Helper()
	c, err := client.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return c.Fork(ctx(e.t), req)
}

// child reads the child back: its header, events and derived messages.
func (e *env) child(id string) (session.Header, []session.Event, []json.RawMessage) {
	e.t.Helper()
	h, err := storetest.Header(storetest.Session(e.store, id).Info(ctx(e.t)))
	if err != nil {
		e.t.Fatalf("GetSession %q: %v", id, err)
	}
	events, _, err := storetest.ReadAll(ctx(e.t), storetest.Session(e.store, id))
	if err != nil {
		e.t.Fatalf("Read %q: %v", id, err)
	}
	s, err := session.Load(id, events)
	if err != nil {
		e.t.Fatalf("Load %q: %v", id, err)
	}
	return h, events, s.DeriveMessages()
}

func TestForkParentExample(t *testing.T) {
	e := newEnv(t)
	parent := e.loadParent()

	// Default boundary: the whole parent (8 events) plus the end-seed marker.
	res, err := e.fork(client.ForkRequest{Source: "parent", Child: "c-all"})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if res != (client.ForkResult{Child: "c-all", SeedLength: 8, ParentSession: "parent"}) {
		t.Fatalf("result %+v", res)
	}
	h, events, msgs := e.child("c-all")
	if len(events) != 9 || len(msgs) != 2 {
		t.Fatalf("child: %d events, %d messages; want 9, 2", len(events), len(msgs))
	}
	last := events[8]
	if last.Type != "session/end-seed" || last.Seq != 8 || string(last.Data) != "{}" || last.Time.String() != "1786000000000" {
		t.Fatalf("end-seed marker: %+v", last)
	}
	for i := range parent {
		a, _ := json.Marshal(parent[i])
		b, _ := json.Marshal(events[i])
		if string(a) != string(b) {
			t.Fatalf("seed event %d differs:\n%s\n%s", i, a, b)
		}
	}
	if h.ID != "c-all" || h.Version != 0 || h.ParentSession != "parent" || h.SeedLength == nil || *h.SeedLength != 8 ||
		h.CreatedAt != now.UnixMilli() || h.Cwd != "/work/project" || h.DelegationDepth != nil {
		t.Fatalf("child header %+v", h)
	}

	// Boundary 4: turn 1 only.
	res, err = e.fork(client.ForkRequest{Source: "parent", Boundary: ptr(4), Child: "c-4"})
	if err != nil {
		t.Fatalf("Fork boundary 4: %v", err)
	}
	if res.SeedLength != 5 || res.Child != "c-4" {
		t.Fatalf("result %+v", res)
	}
	h, events, msgs = e.child("c-4")
	if len(events) != 6 || len(msgs) != 1 || *h.SeedLength != 5 || events[5].Type != "session/end-seed" {
		t.Fatalf("child c-4: %d events, %d messages, seedLength %d", len(events), len(msgs), *h.SeedLength)
	}

	// Boundary 2 ends inside turn 1.
	_, err = e.fork(client.ForkRequest{Source: "parent", Boundary: ptr(2), Child: "c-2"})
	forkErr(t, err, session.CodeOpenTurn, `fork boundary 2 in session "parent" ends inside open turn 1`)
	// Past the end and negative: ForkSeed's texts.
	_, err = e.fork(client.ForkRequest{Source: "parent", Boundary: ptr(8), Child: "c-8"})
	forkErr(t, err, session.CodeInvalidBoundary, `fork boundary 8 does not exist in session "parent" (last seq: 7)`)
	_, err = e.fork(client.ForkRequest{Source: "parent", Boundary: ptr(-1), Child: "c-neg"})
	forkErr(t, err, session.CodeInvalidBoundary, `fork boundary for session "parent" must be a non-negative safe integer, got -1`)
	for _, id := range []string{"c-2", "c-8", "c-neg"} {
		if _, err := storetest.Header(storetest.Session(e.store, id).Info(ctx(t))); !errors.Is(err, store.ErrSessionNotFound) {
			t.Fatalf("refused fork left metadata for %s: %v", id, err)
		}
		if tail, err := storetest.Session(e.store, id).Tail(ctx(t)); err != nil || tail.LastStreamSeq != 0 {
			t.Fatalf("refused fork left events for %s: %+v %v", id, tail, err)
		}
	}

	// Again onto an existing child: checked first, even with a bad boundary or source.
	_, err = e.fork(client.ForkRequest{Source: "parent", Child: "c-all"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "c-all" already exists`)
	_, err = e.fork(client.ForkRequest{Source: "nobody", Boundary: ptr(99), Child: "c-4"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "c-4" already exists`)
	// A child with events but no metadata exists too.
	e.appendRecords("events-only", parent[:1], 1)
	_, err = e.fork(client.ForkRequest{Source: "parent", Child: "events-only"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "events-only" already exists`)

	// Unknown source.
	_, err = e.fork(client.ForkRequest{Source: "nobody", Child: "c-x"})
	forkErr(t, err, session.CodeSessionNotFound, `session "nobody" not found`)
}

func TestForkDefaultChildAndHeaders(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	res, err := e.fork(client.ForkRequest{Source: "parent", Boundary: ptr(4)})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	if !strings.HasPrefix(res.Child, "parent"+ChildSuffix) || len(res.Child) <= len("parent"+ChildSuffix) {
		t.Fatalf("default child id %q", res.Child)
	}
	res2, err := e.fork(client.ForkRequest{Source: "parent", Boundary: ptr(4)})
	if err != nil || res2.Child == res.Child {
		t.Fatalf("second default fork: %+v %v (first %q)", res2, err, res.Child)
	}
	// The child's record is its own: one record, none of the source's Nats-* headers
	// (Nats-Msg-Id of the source records is "src-parent-<seq>").
	sub, _ := wire.SessionSubject(res.Child, e.store.Partitions())
	msg, err := e.store.Stream().GetLastMsgForSubject(ctx(t), sub)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(wire.HeaderFirstSeq) != "0" || msg.Header.Get(wire.HeaderCount) != "6" {
		t.Fatalf("child record headers %v: want one record of 6 events from seq 0", msg.Header)
	}
	for k, vs := range msg.Header {
		for _, v := range vs {
			if strings.Contains(v, "src-parent") {
				t.Fatalf("child record copies source header %s: %s", k, v)
			}
		}
	}
	if id := msg.Header.Get(jetstream.MsgIDHeader); !strings.HasPrefix(id, "fork:") {
		t.Fatalf("child record Nats-Msg-Id %q", id)
	}

	// A long source id still gives a child id within 256 bytes, cut at a rune boundary.
	long := strings.Repeat("é", 127) + "x" // 255 bytes
	id := DefaultChildID(long)
	if len(id) > wire.MaxSessionIDBytes || !strings.Contains(id, ChildSuffix) {
		t.Fatalf("DefaultChildID: %d bytes: %q", len(id), id)
	}
	if _, err := wire.Token(id); err != nil {
		t.Fatalf("DefaultChildID gave an invalid id: %v", err)
	}
}

func TestConcurrentForksOntoOneChild(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	// A second forker instance on its own connection: the two share the queue group.
	nc2, js2, err := natsdev.Connect(e.nc.ConnectedUrl(), nats.Name("forker-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	store2, err := store.Open(ctx(t), js2)
	if err != nil {
		t.Fatal(err)
	}
	// The same clock as the first: on the real one, the first's claim would look abandoned.
	f2, err := New(store2, nc2, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := f2.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	defer f2.Stop()

	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := ptr(4)
			if i%2 == 0 {
				b = nil
			}
			_, errs[i] = e.fork(client.ForkRequest{Source: "parent", Boundary: b, Child: "twin"})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		forkErr(t, err, session.CodeSessionAlreadyExists, `session "twin" already exists`)
	}
	if ok != 1 {
		t.Fatalf("%d forks onto one child succeeded, want exactly 1", ok)
	}
	h, events, _ := e.child("twin")
	if int64(len(events)) != *h.SeedLength+1 {
		t.Fatalf("child twin: header seedLength %d but %d events: metadata and record come from different forks", *h.SeedLength, len(events))
	}
}

func TestForkRollsBackWhenTheRecordLosesTheRace(t *testing.T) {
	e := newEnv(t)
	parent := e.loadParent()
	// Events appear on the child's subject (without metadata) after the existence check: the
	// guarded record then conflicts and the fork must undo its metadata.
	e.f.beforeRecord = func(child string) {
		if _, err := storetest.Session(e.store, child).Append(context.Background(), 0, parent[:1]); err != nil {
			t.Errorf("racing Append: %v", err)
		}
	}
	_, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "raced"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "raced" already exists`)
	if _, err := storetest.Header(storetest.Session(e.store, "raced").Info(ctx(t))); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("the metadata of the failed fork was left behind: %v", err)
	}
	events, _, err := storetest.ReadAll(ctx(t), storetest.Session(e.store, "raced"))
	if err != nil || len(events) != 1 {
		t.Fatalf("the racing writer's record: %d events, %v", len(events), err)
	}
}

func TestForkRequestValidation(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	cases := []struct{ body, code, text string }{
		{`{"source":"parent","boundary":1.5,"child":"c"}`, string(session.CodeInvalidBoundary), `fork boundary for session "parent" must be a non-negative safe integer, got 1.5`},
		{`{"source":"parent","boundary":"3","child":"c"}`, string(session.CodeInvalidBoundary), `fork boundary for session "parent" must be a non-negative safe integer, got 3`},
		{`{"source":"parent","boundary":1e21,"child":"c"}`, string(session.CodeInvalidBoundary), `fork boundary for session "parent" must be a non-negative safe integer, got 1e+21`},
		{`{"source":"parent","boundary":9007199254740992,"child":"c"}`, string(session.CodeInvalidBoundary), `fork boundary for session "parent" must be a non-negative safe integer, got 9007199254740992`},
		{`{"boundary":1}`, string(client.CodeBadRequest), ""},
		{`not json`, string(client.CodeBadRequest), ""},
		{`{"source":"parent","child":"` + strings.Repeat("x", 300) + `"}`, string(client.CodeBadRequest), ""},
	}
	for _, c := range cases {
		msg, err := e.nc.RequestWithContext(ctx(t), client.ForkSubject, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		code, desc := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error")
		if code != c.code || (c.text != "" && desc != c.text) || desc == "" {
			t.Errorf("%s: got %s %q, want %s %q", c.body, code, desc, c.code, c.text)
		}
	}
	// A boundary of 4.0 is the integer 4 in JavaScript.
	msg, err := e.nc.RequestWithContext(ctx(t), client.ForkSubject, []byte(`{"source":"parent","boundary":4.0,"child":"c-4"}`))
	if err != nil {
		t.Fatal(err)
	}
	var res client.ForkResult
	if err := json.Unmarshal(msg.Data, &res); err != nil || res.SeedLength != 5 {
		t.Fatalf("boundary 4.0: %s %v %v", msg.Data, msg.Header, err)
	}
}

func TestForkOfEmptySource(t *testing.T) {
	e := newEnv(t)
	if err := e.store.CreateSession(ctx(t), session.Header{ID: "empty", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	// Metadata but no events: the reference forks an empty seed (just the end-seed marker).
	res, err := e.fork(client.ForkRequest{Source: "empty", Child: "e-child"})
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	_, events, msgs := e.child("e-child")
	if res.SeedLength != 0 || len(events) != 1 || events[0].Type != "session/end-seed" || len(msgs) != 0 {
		t.Fatalf("fork of an empty session: %+v, %d events", res, len(events))
	}
	_, err = e.fork(client.ForkRequest{Source: "empty", Boundary: ptr(0), Child: "e-0"})
	forkErr(t, err, session.CodeInvalidBoundary, `fork boundary 0 does not exist in session "empty" (last seq: none)`)
}

func TestForkOfUnreadableSource(t *testing.T) {
	e := newEnv(t)
	if err := e.store.CreateSession(ctx(t), session.Header{ID: "broken", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	// A record with valid headers and a body that is not events.
	sub, _ := wire.SessionSubject("broken", e.store.Partitions())
	h, _, err := wire.EncodeRecord("broken", []session.Event{{Type: "turn/start", Seq: 0, Time: "1", Data: json.RawMessage(`{"turn":1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.JetStream().PublishMsg(ctx(t), &nats.Msg{Subject: sub, Header: h, Data: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	_, err = e.fork(client.ForkRequest{Source: "broken", Child: "b-child"})
	if err == nil || !strings.Contains(err.Error(), `"broken"`) || !strings.Contains(err.Error(), "code "+string(client.CodeBadSource)) ||
		!strings.Contains(err.Error(), string(session.RuleRecordEvent)) {
		t.Fatalf("fork of an unreadable source: %v", err)
	}
	if !errors.Is(err, client.ErrBadSource) {
		t.Fatalf("an unreadable source is a 422, not a reference refusal: %v", err)
	}
	if _, err := storetest.Header(storetest.Session(e.store, "b-child").Info(ctx(t))); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("failed fork left metadata: %v", err)
	}
}

// TestForkResumesAnAbandonedFork: a fork that died between claiming its child (metadata) and
// writing its record leaves metadata without events. Retrying the same fork after
// AbandonedForkAge replaces that claim and completes; a younger claim, or one of another source,
// is still SESSION_ALREADY_EXISTS.
func TestForkResumesAnAbandonedFork(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	seed := int64(9)
	claim := func(child, parent string, age time.Duration) {
		h := session.Header{ID: child, CreatedAt: now.Add(-age).UnixMilli(), ParentSession: parent, SeedLength: &seed}
		if err := e.store.CreateSession(ctx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	claim("young", "parent", AbandonedForkAge/2)
	_, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "young"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "young" already exists`)

	claim("other", "someone-else", 2*AbandonedForkAge)
	_, err = e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "other"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "other" already exists`)

	claim("abandoned", "parent", AbandonedForkAge)
	res, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "abandoned"})
	if err != nil || res.Child != "abandoned" {
		t.Fatalf("resuming an abandoned fork: %+v, %v", res, err)
	}
	h, err := storetest.Header(storetest.Session(e.store, "abandoned").Info(ctx(t)))
	if err != nil || h.CreatedAt != now.UnixMilli() || h.ParentSession != "parent" {
		t.Fatalf("child metadata after the resumed fork: %+v, %v", h, err)
	}
	events, _, err := storetest.ReadAll(ctx(t), storetest.Session(e.store, "abandoned"))
	if err != nil || len(events) != res.SeedLength+1 || events[len(events)-1].Type != "session/end-seed" {
		t.Fatalf("child log: %d events, %v; want the seed and an end-seed", len(events), err)
	}
}

// TestConcurrentResumesOfAnAbandonedFork: two retries of the same abandoned fork race; one forks,
// the other gets SESSION_ALREADY_EXISTS (never an internal error), and the child is whole.
func TestConcurrentResumesOfAnAbandonedFork(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	seed := int64(9)
	for i := range 10 {
		child := fmt.Sprintf("race%d", i)
		h := session.Header{ID: child, CreatedAt: now.Add(-AbandonedForkAge).UnixMilli(), ParentSession: "parent", SeedLength: &seed}
		if err := e.store.CreateSession(ctx(t), h); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { _, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: child}); errs <- err }()
		}
		won := 0
		for range 2 {
			err := <-errs
			var fe *session.ForkError
			switch {
			case err == nil:
				won++
			case errors.As(err, &fe) && fe.Code == session.CodeSessionAlreadyExists:
			default:
				t.Fatalf("%s: %v, want success or SESSION_ALREADY_EXISTS", child, err)
			}
		}
		events, _, err := storetest.ReadAll(ctx(t), storetest.Session(e.store, child))
		if won != 1 || err != nil || len(events) == 0 || events[len(events)-1].Type != "session/end-seed" {
			t.Fatalf("%s: %d forks won, %d events, %v", child, won, len(events), err)
		}
	}
}
