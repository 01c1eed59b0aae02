package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func ev(seq int64, typ, data string, appendOp bool) session.Event {
	e := session.Event{Type: typ, Seq: seq, Time: json.Number(fmt.Sprint(1785000000000 + seq)), Data: json.RawMessage(data)}
	if appendOp {
		e.SurfaceOp = json.RawMessage(`"append"`)
	}
	return e
}

// events is a closed turn (seqs 0..3) and an open one (4..5).
func events() []session.Event {
	return []session.Event{
		ev(0, "turn/start", `{"turn":1}`, false),
		ev(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`, true),
		ev(2, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"p","model":"m"}}}`, true),
		ev(3, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, false),
		ev(4, "turn/start", `{"turn":2}`, false),
		ev(5, "user/message", `{"id":"m2","role":"user","content":[{"type":"text","text":"bye"}],"source":{"kind":"user"}}`, true),
	}
}

// stack starts an embedded server with a projector and a forker, and stores session "s".
func stack(t *testing.T) *nats.Conn {
	t.Helper()
	te := testnats.Start(t, store.Config{Partitions: 2})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := projector.New(te.Store, te.NC, projector.Options{Name: "p1", Logger: quiet})
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
	if err := te.Store.CreateSession(ctx(t), session.Header{ID: "s", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(te.Store, "s").Append(ctx(t), 0, events()); err != nil {
		t.Fatal(err)
	}
	return te.NC
}

func TestQueries(t *testing.T) {
	c, err := client.New(stack(t), client.Timeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Messages(ctx(t), "s", client.MinSeq(5))
	if err != nil || m.AsOfSeq != 5 || len(m.Messages) != 3 || m.Partial != nil {
		t.Fatalf("Messages: %+v %v", m, err)
	}
	sp, err := c.Surface(ctx(t), "s")
	if err != nil || sp.AsOfSeq != 5 || sp.State.OpenTurn == nil || *sp.State.OpenTurn != 2 || sp.Error != nil {
		t.Fatalf("Surface: %+v %v", sp, err)
	}
	snap, err := c.Snapshot(ctx(t), "s")
	if err != nil || snap.AsOfSeq != 5 || snap.Units["messages"].View == nil {
		t.Fatalf("Snapshot: %+v %v", snap, err)
	}
	pr, err := c.Projection(ctx(t), "s", "turns")
	if err != nil || pr.Unit != "turns" || pr.AsOfSeq != 5 {
		t.Fatalf("Projection: %+v %v", pr, err)
	}

	_, err = c.Projection(ctx(t), "s", "nope")
	wantErr(t, err, client.ErrNotFound, `"nope"`)
	_, err = c.Messages(ctx(t), "nobody")
	wantErr(t, err, client.ErrNotFound, `"nobody"`)
	_, err = c.Messages(ctx(t), "s", client.MinSeq(99), client.Timeout(300*time.Millisecond))
	wantErr(t, err, client.ErrTimeout, `"s"`)
	_, err = c.Messages(ctx(t), strings.Repeat("x", 300))
	wantErr(t, err, client.ErrBadRequest, "")
}

func TestFork(t *testing.T) {
	c, err := client.New(stack(t))
	if err != nil {
		t.Fatal(err)
	}
	at := int64(3)
	res, err := c.Fork(ctx(t), client.ForkRequest{Source: "s", Boundary: &at, Child: "c"})
	if err != nil || res != (client.ForkResult{Child: "c", SeedLength: 4, ParentSession: "s"}) {
		t.Fatalf("Fork: %+v %v", res, err)
	}
	_, err = c.Fork(ctx(t), client.ForkRequest{Source: "s", Boundary: &at, Child: "c"})
	wantErr(t, err, client.ErrExists, `session "c" already exists`)
	_, err = c.Fork(ctx(t), client.ForkRequest{Source: "nobody", Child: "c2"})
	wantErr(t, err, client.ErrNotFound, `session "nobody" not found`)
	in := int64(4)
	_, err = c.Fork(ctx(t), client.ForkRequest{Source: "s", Boundary: &in, Child: "c3"})
	wantErr(t, err, client.ErrOpenTurn, `fork boundary 4 in session "s" ends inside open turn 2`)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != client.CodeOpenTurn || ce.Session != "s" || ce.Service != client.ForkService {
		t.Fatalf("fields: %+v", ce)
	}
	past := int64(9)
	_, err = c.Fork(ctx(t), client.ForkRequest{Source: "s", Boundary: &past, Child: "c4"})
	wantErr(t, err, client.ErrInvalidBoundary, `fork boundary 9 does not exist`)
}

func TestOptionsAndNoResponders(t *testing.T) {
	if _, err := client.New(nil); err == nil {
		t.Fatal("New(nil): no error")
	}
	te := testnats.Start(t, store.Config{Partitions: 1})
	if _, err := client.New(te.NC, client.MinSeq(1)); err == nil {
		t.Fatal("New with MinSeq: no error")
	}
	if _, err := client.New(te.NC, client.Timeout(0)); err == nil {
		t.Fatal("New with Timeout(0): no error")
	}
	c, err := client.New(te.NC)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Messages(ctx(t), "s", client.MinSeq(-1))
	wantErr(t, err, client.ErrBadRequest, "MinSeq(-1)")
	_, err = c.Messages(ctx(t), "")
	wantErr(t, err, client.ErrBadRequest, "empty")
	_, err = c.Projection(ctx(t), "s", "")
	wantErr(t, err, client.ErrBadRequest, "unit is empty")
	_, err = c.Fork(ctx(t), client.ForkRequest{Source: "s"}, client.MinSeq(1))
	wantErr(t, err, client.ErrBadRequest, "MinSeq")
	// No projector, no forker.
	_, err = c.Messages(ctx(t), "s")
	wantErr(t, err, client.ErrUnavailable, "is a projector running?")
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("want nats.ErrNoResponders in %v", err)
	}
	_, err = c.Fork(ctx(t), client.ForkRequest{Source: "s"})
	wantErr(t, err, client.ErrUnavailable, "is a forker running?")
}

func TestErrorIsAndRendering(t *testing.T) {
	e := &client.Error{Service: client.ForkService, Code: client.CodeSessionNotFound, Session: "x", Description: `session "x" not found`}
	if !errors.Is(e, client.ErrNotFound) || errors.Is(e, client.ErrExists) || errors.Is(e, errors.New("404")) {
		t.Fatal("Is")
	}
	if got, want := e.Error(), `agentlog-fork: session "x" not found (code SESSION_NOT_FOUND)`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("calling: %w", &client.Error{Code: client.CodeTimeout, Err: context.DeadlineExceeded, Description: "session \"x\""})
	if !errors.Is(wrapped, client.ErrTimeout) || !errors.Is(wrapped, context.DeadlineExceeded) {
		t.Fatal("Is through wrapping and Unwrap")
	}
}

// TestErrRemoving: a session being removed is CodeRemoving, which ErrRemoving and ErrNotFound
// match; the 404 of a query service before 0.4.0, which said so in its text only, matches
// ErrRemoving too; a plain not-found does not.
func TestErrRemoving(t *testing.T) {
	for _, c := range []struct {
		name         string
		e            *client.Error
		removing, nf bool
	}{
		{"410", &client.Error{Service: client.QueryService, Code: client.CodeRemoving, Session: "s", Description: client.RemovingText("s")}, true, true},
		{"404 of an old service", &client.Error{Service: client.QueryService, Code: client.CodeNotFound, Session: "s",
			Description: `session "s" is being removed (an earlier agentlog rm stopped part-way): run agentlog rm s to finish`}, true, true},
		{"404", &client.Error{Code: client.CodeNotFound, Session: "s", Description: `session "s" not found`}, false, true},
		{"SESSION_NOT_FOUND", &client.Error{Code: client.CodeSessionNotFound, Session: "s", Description: `session "s" not found`}, false, true},
		{"500", &client.Error{Code: client.CodeInternal, Description: client.RemovingText("s")}, false, false},
	} {
		if got := errors.Is(c.e, client.ErrRemoving); got != c.removing {
			t.Errorf("%s: Is(ErrRemoving) = %v", c.name, got)
		}
		if got := errors.Is(c.e, client.ErrNotFound); got != c.nf {
			t.Errorf("%s: Is(ErrNotFound) = %v", c.name, got)
		}
	}
	if strings.Contains(client.RemovingText("s"), "agentlog") {
		t.Errorf("RemovingText carries a CLI command: %q", client.RemovingText("s"))
	}
}

// TestForkErrorNamesTheChildLeft: a fork error reply whose body names a child (a fork that may
// have left part of it) gives Error.Child; one without a body does not.
func TestForkErrorNamesTheChildLeft(t *testing.T) {
	te := testnats.Start(t, store.Config{Partitions: 1})
	sub, err := te.NC.Subscribe(client.ForkSubject, func(m *nats.Msg) {
		var req client.ForkRequest
		_ = json.Unmarshal(m.Data, &req)
		reply := &nats.Msg{Header: nats.Header{"Nats-Service-Error-Code": []string{"500"}, "Nats-Service-Error": []string{"it failed"}}}
		if req.Child != "" {
			reply.Data = []byte(`{"child":"` + req.Child + `"}`)
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c, err := client.New(te.NC)
	if err != nil {
		t.Fatal(err)
	}
	for _, child := range []string{"c1", ""} {
		_, err := c.Fork(ctx(t), client.ForkRequest{Source: "s", Child: child})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != client.CodeInternal || ce.Child != child || ce.Session != "s" {
			t.Errorf("fork onto %q: %#v, want a 500 with Child %q", child, err, child)
		}
	}
}

func wantErr(t *testing.T, err, target error, text string) {
	t.Helper()
	if !errors.Is(err, target) || !strings.Contains(err.Error(), text) {
		t.Fatalf("want %v containing %q, got %v", target, text, err)
	}
}
