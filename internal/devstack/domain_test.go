package devstack_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// TestStartWithDomain: a stack whose server's JetStream is in a domain (agentlog dev --js-domain)
// uses it itself, and a client with that domain opens its agentlog; one with another does not.
func TestStartWithDomain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Projectors: 1, Logger: quiet, Domain: "hub"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if d := s.Store().Domain(); d != "hub" {
		t.Fatalf("the stack's store: domain %q, want hub", d)
	}
	if err := s.Store().CreateSession(ctx, session.Header{ID: "d1", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	nc, js, err := natsdev.ConnectDomain(s.URL(), "hub")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := store.Open(ctx, js); err != nil {
		t.Fatalf("open with domain hub: %v", err)
	}
	c, err := client.New(nc, client.Domain("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Header(ctx, "d1"); err == nil {
		t.Fatal("a client with domain elsewhere read the stack's session")
	}
}
