package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

// TestStartServeClose starts a stack with a projector, a forker and the inspector: it is ready,
// folds and forks, serves the inspector, and Close stops all of it (the inspector's port refuses,
// the data directory can be started again).
func TestStartServeClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := devstack.Options{DataDir: dir, Projectors: 1, Forkers: 1, Logger: quiet, UI: devstack.UIOptions{Listen: "127.0.0.1:0"}}
	s, err := devstack.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if len(s.Projectors()) != 1 || len(s.Forkers()) != 1 || !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") {
		t.Fatalf("stack: %d projectors, %d forkers, URL %q", len(s.Projectors()), len(s.Forkers()), s.URL())
	}
	checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error { return s.Ready(ctx) })
	if err := s.Store().CreateSession(ctx, session.Header{ID: "d1", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	evs := []session.Event{
		{Type: "turn/start", Seq: 0, Time: "1785000000000", Data: []byte(`{"turn":1}`)},
		{Type: "turn/end", Seq: 1, Time: "1785000000001", Data: []byte(`{"turn":1,"reason":{"kind":"completed"}}`)},
	}
	if _, err := storetest.Session(s.Store(), "d1").Append(ctx, 0, evs); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages(ctx, "d1", client.MinSeq(1)); err != nil {
		t.Fatalf("the stack's projector: %v", err)
	}
	if _, err := c.Fork(ctx, client.ForkRequest{Source: "d1", Child: "d1-child"}); err != nil {
		t.Fatalf("the stack's forker: %v", err)
	}
	if s.UI() == nil {
		t.Fatal("no inspector, though Options.UI.Listen was set")
	}
	health := strings.TrimSuffix(s.UI().URL(), "/") + "/healthz"
	resp, err := http.Get(health)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", health, resp.StatusCode)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if resp, err := http.Get(health); err == nil {
		resp.Body.Close()
		t.Fatalf("the inspector still answers after Close: %d", resp.StatusCode)
	}
	// The data directory is unlocked and kept: a new stack on it sees the session.
	o.UI = devstack.UIOptions{}
	s2, err := devstack.Start(ctx, o)
	if err != nil {
		t.Fatalf("restart on the same data directory: %v", err)
	}
	defer s2.Close()
	if _, err := storetest.Session(s2.Store(), "d1-child").Info(ctx); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

// TestStartRefusesBadInput: a bad address is refused before anything starts, naming the flag,
// and a failed start leaves nothing running (the same data directory starts at once after).
func TestStartRefusesBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		o    devstack.Options
		want string
	}{
		{devstack.Options{DataDir: dir, Listen: "nope", Logger: quiet}, `--listen "nope": want HOST:PORT`},
		{devstack.Options{DataDir: dir, Listen: "127.0.0.1:70000", Logger: quiet}, `--listen "127.0.0.1:70000": port must be 0..65535`},
		{devstack.Options{DataDir: dir, HTTP: "127.0.0.1", Logger: quiet}, `--http "127.0.0.1": want HOST:PORT`},
		// The server starts, the inspector does not: everything is stopped again.
		{devstack.Options{DataDir: dir, Projectors: 1, Logger: quiet, UI: devstack.UIOptions{Listen: "0.0.0.0:0"}}, "--ui-token"},
	} {
		s, err := devstack.Start(ctx, c.o)
		if err == nil {
			s.Close()
			t.Fatalf("%+v: started", c.o)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	s, err := devstack.Start(ctx, devstack.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatalf("after the failed starts: %v", err)
	}
	s.Close()
}
