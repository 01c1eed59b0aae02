package projector

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
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
		_ = storetest.ProjectionsKV(e.store).Purge(ctx(t), wire.ProjectionKey(unit.Definition().Key, tok))
	}
	check("projection purged")
	// The client reads the code as ErrRemoving, which is an ErrNotFound too.
	_, err := queryMessages(ctx(t), e.nc, "hr", -1)
	if qe := queryErr(t, err, client.CodeRemoving, "hr"); !strings.Contains(qe.Error(), "is being removed") {
		t.Fatalf("client error %v", qe)
	}
}
