package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

func TestRebuildCmd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Projectors: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := func(seq int64, typ, data string) session.Event {
		return session.Event{Type: typ, Seq: seq, Time: "1785000000000", Data: json.RawMessage(data)}
	}
	if _, err := storetest.Session(s.Store(), "r1").Append(ctx, 0, []session.Event{
		ev(0, "turn/start", `{"turn":1}`),
		ev(1, "session/title", `{"title":"hello","messageSeqs":[],"source":{"kind":"fallback"}}`),
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Store().CreateSession(ctx, session.Header{ID: "r1", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	qc, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qc.Messages(ctx, "r1", client.MinSeq(1)); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	g := &globals{natsURL: s.URL(), timeout: 30 * time.Second, stdout: &out, stderr: &errOut}
	c := newRebuildCmd(g)
	c.SetArgs([]string{"title", "--session", "r1"})
	if err := c.ExecuteContext(ctx); err != nil {
		t.Fatalf("rebuild: %v (%s)", err, errOut.String())
	}
	if !strings.Contains(out.String(), "rebuilt title: 1 session(s)") {
		t.Fatalf("output %q", out.String())
	}
	r, err := qc.Projection(ctx, "r1", "title")
	if err != nil || !strings.Contains(string(r.View), `"hello"`) {
		t.Fatalf("title after rebuild: %+v %v", r, err)
	}
	c = newRebuildCmd(g)
	c.SetArgs([]string{"nope"})
	c.SilenceErrors, c.SilenceUsage = true, true
	var ue *usageError
	if err := c.ExecuteContext(ctx); !errors.As(err, &ue) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown unit: %v", err)
	}
}
