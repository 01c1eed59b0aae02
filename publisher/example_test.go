package publisher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// An agent's session: create it, append events (validated at once, batched in a 200 ms window),
// Flush to wait until they are durable, and Close. Here on an embedded server; against a cluster,
// connect with nats.Connect and attach with store.Open.
func Example() {
	dir, err := os.MkdirTemp("", "agentlog-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir})
	if err != nil {
		panic(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, js, err := natsdev.Connect(srv.ClientURL(), nats.Name("example"))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Provision(ctx, js, store.Config{})
	if err != nil {
		panic(err)
	}

	p, err := publisher.New(st, nc, publisher.Options{})
	if err != nil {
		panic(err) // unusable Options, such as a WriterID with a space
	}
	w, err := p.Create(ctx, session.Header{ID: "example-1", CreatedAt: 1785000000000})
	if err != nil {
		panic(err)
	}
	for _, ev := range []session.Event{
		{Type: "turn/start", Seq: 0, Time: "1785000000001", Data: json.RawMessage(`{"turn":1}`)},
		{Type: "user/message", Seq: 1, Time: "1785000000002", SurfaceOp: json.RawMessage(`"append"`),
			Data: json.RawMessage(`{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`)},
	} {
		if err := w.Append(ev); err != nil {
			panic(err) // a *session.Error: the event breaks a rule and was not admitted
		}
	}
	if err := w.Flush(ctx); err != nil {
		panic(err)
	}
	fmt.Println("durable events:", w.DurableSeq())
	if err := p.Close(ctx); err != nil {
		panic(err)
	}
	events, _, err := storetest.ReadAll(ctx, storetest.Session(st, "example-1"))
	if err != nil {
		panic(err)
	}
	fmt.Println("stored:", events[0].Type, events[1].Type)
	// Output:
	// durable events: 2
	// stored: turn/start user/message
}

func TestNewRefusesBadOptions(t *testing.T) {
	st := &store.Store{} // New only checks options; nothing is written here
	bad := []struct {
		name  string
		store *store.Store
		opts  publisher.Options
		want  string
	}{
		{"nil store", nil, publisher.Options{}, "nil *jetstream.Store"},
		{"space in WriterID", st, publisher.Options{WriterID: "a b"}, "whitespace"},
		{"control in WriterID", st, publisher.Options{WriterID: "a\x00b"}, "control"},
		{"long WriterID", st, publisher.Options{WriterID: strings.Repeat("w", publisher.MaxWriterIDBytes+1)}, "at most 64"},
		{"negative Window", st, publisher.Options{Window: -time.Second}, "Window"},
		{"negative AttemptTimeout", st, publisher.Options{AttemptTimeout: -1}, "AttemptTimeout"},
		{"negative RetryBudget", st, publisher.Options{RetryBudget: -1}, "RetryBudget"},
		{"negative MaxConcurrentWrites", st, publisher.Options{MaxConcurrentWrites: -1}, "MaxConcurrentWrites"},
	}
	for _, c := range bad {
		p, err := publisher.New(c.store, nil, c.opts)
		if err == nil || p != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, %v; want an error naming %q", c.name, p, err, c.want)
		}
	}
	for _, opts := range []publisher.Options{
		{},
		{WriterID: strings.Repeat("w", publisher.MaxWriterIDBytes)},
		{MaxPendingBytes: -1}, // no limit
	} {
		p, err := publisher.New(st, nil, opts)
		if err != nil || p == nil {
			t.Errorf("New(%+v) = %v, %v; want a Publisher", opts, p, err)
		}
	}
	if p, err := publisher.New(st, nil, publisher.Options{}); err != nil || p.WriterID() == "" {
		t.Errorf("default WriterID: %v; want a nuid", err)
	}
}
