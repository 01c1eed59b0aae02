package projector

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/micro"
)

// TestRemovingSessionIsCode410: every endpoint answers a query of a session being removed (an rm
// stopped part-way) with client.CodeRemoving, whose text names the session and carries no CLI
// hint: while its projection is still stored (checked against the log), once it is purged (the
// metadata read), and when the query waits for a seq.
func TestRemovingSessionIsCode410(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("hr")
	e.appendRecord("hr", toolSession()[:3])
	if _, err := queryMessages(ctx(t), e.nc, "hr", 2); err != nil {
		t.Fatal(err)
	}
	testnats.MarkRemoving(t, e.store, "hr")
	minSeq := int64(2)
	check := func(stage string) {
		t.Helper()
		for _, subject := range []string{client.MessagesSubject, client.SurfaceSubject, client.ProjectionSubject, client.SnapshotSubject} {
			for _, q := range []client.QueryRequest{{Session: "hr", Unit: "messages"}, {Session: "hr", Unit: "messages", MinSeq: &minSeq}} {
				data, _ := json.Marshal(q)
				msg, err := e.nc.RequestWithContext(ctx(t), subject, data)
				if err != nil {
					t.Fatal(err)
				}
				code, desc := msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader)
				if code != string(client.CodeRemoving) || desc != client.RemovingText("hr") || strings.Contains(desc, "agentlog rm") {
					t.Errorf("%s: %s (minSeq %v): code %q %q; want %s %q", stage, subject, q.MinSeq != nil, code, desc, client.CodeRemoving, client.RemovingText("hr"))
				}
			}
		}
	}
	check("projection stored")
	tok, _ := wire.Token("hr")
	for _, unit := range Builtins() {
		if err := storetest.ProjectionsKV(e.store).Delete(ctx(t), wire.ProjectionKey(unit.Definition().Key, tok)); err != nil {
			t.Fatal(err)
		}
	}
	check("projection deleted")
	// The client reads the code as ErrRemoving, which is an ErrNotFound too.
	_, err := queryMessages(ctx(t), e.nc, "hr", -1)
	if qe := queryErr(t, err, client.CodeRemoving, "hr"); !strings.Contains(qe.Error(), "is being removed") {
		t.Fatalf("client error %v", qe)
	}
}

// TestIncompleteForkChildNotServed: a fork child whose entry is marked incomplete
// (wire.IncompleteHeader) is folded as its records come, but no endpoint answers for it (a 404
// "being created") until its log holds the marked count; then it is answered as any session.
func TestIncompleteForkChildNotServed(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	evs := toolSession()
	seed := int64(len(evs))
	h := session.Header{ID: "ic", CreatedAt: 1785000000000, ParentSession: "src", SeedLength: &seed}
	if err := e.store.CreateSession(ctx(t), h, store.WithIncomplete(int64(len(evs)))); err != nil {
		t.Fatal(err)
	}
	e.appendRecord("ic", evs[:3])
	// Folded: its messages state is stored (a condition, not a sleep).
	tok, _ := wire.Token("ic")
	for {
		if _, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitMessages, tok)); err == nil {
			break
		} else if ctx(t).Err() != nil {
			t.Fatal(err)
		}
		runtime.Gosched()
	}
	for _, subject := range []string{client.MessagesSubject, client.SurfaceSubject, client.ProjectionSubject, client.SnapshotSubject} {
		data, _ := json.Marshal(client.QueryRequest{Session: "ic", Unit: "messages"})
		msg, err := e.nc.RequestWithContext(ctx(t), subject, data)
		if err != nil {
			t.Fatal(err)
		}
		code, desc := msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader)
		if code != string(client.CodeNotFound) || desc != client.IncompleteText("ic") {
			t.Errorf("%s of the incomplete child: code %q %q; want %s %q", subject, code, desc, client.CodeNotFound, client.IncompleteText("ic"))
		}
	}
	e.appendRecord("ic", evs[3:])
	if _, err := queryMessages(ctx(t), e.nc, "ic", seed-1); err != nil {
		t.Fatalf("the child once complete: %v", err)
	}
}
