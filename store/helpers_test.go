package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// testJetStream runs an embedded server with opts (DataDir defaults to t.TempDir()) and connects
// to it as t.Name(); both are stopped at cleanup. (These tests are white-box, package store, so
// they cannot use internal/testnats, which imports store; testnats.Server does the same.)
func testJetStream(t testing.TB, opts natsdev.ServerOptions) natsjs.JetStream {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	srv, err := natsdev.RunServer(opts)
	if err != nil {
		t.Fatalf("natsdev.RunServer: %v", err)
	}
	nc, js, err := natsdev.Connect(srv.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		srv.Shutdown()
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return js
}

// testStore provisions a store with cfg on a fresh embedded server.
func testStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	js := testJetStream(t, natsdev.ServerOptions{})
	s, err := Provision(testCtx(t), js, cfg)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return s
}

// testCtx is a context bounded generously: it only guards against a hang, no timing is asserted.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ev builds a log-only event with seq and a small payload.
func ev(seq int64, payload string) session.Event {
	data, _ := json.Marshal(map[string]any{"turn": 1, "note": payload})
	return session.Event{Type: "test/note", Seq: seq, Time: json.Number(strconv.FormatInt(1785000000000+seq, 10)), Data: data}
}

// evs builds events from..to-1.
func evs(from, to int64, payload string) []session.Event {
	out := make([]session.Event, 0, to-from)
	for s := from; s < to; s++ {
		out = append(out, ev(s, fmt.Sprintf("%s-%d", payload, s)))
	}
	return out
}

// mustJSON returns the compact JSON of v for comparisons.
func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := marshalCompact(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// marshalCompact encodes v as compact JSON without HTML escaping and without a trailing newline.
func marshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// sessionOf is s.Session(id) for an id the test knows valid (a bad one panics).
func sessionOf(s *Store, id string) *Session {
	ss, err := s.Session(id)
	if err != nil {
		panic(err)
	}
	return ss
}

// readAll returns every event of the session and the stream seq of its last record.
func readAll(ctx context.Context, ss *Session) ([]session.Event, uint64, error) {
	var events []session.Event
	last, err := ss.Records(ctx, Collect(&events))
	if err != nil {
		return nil, 0, err
	}
	return events, last, nil
}

// headerOf is the header of ss.Info's metadata: headerOf(ss.Info(ctx)).
func headerOf(info SessionInfo, err error) (session.Header, error) { return info.Header, err }
