package publisher

import (
	"errors"
	"strings"
	"testing"
	"time"

	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// TestRemoveRacingFirstRecordAsAgent: TestRemoveRacingFirstRecord with the deployment's agent role
// (deploy/multi-tenant: no purge right). The record cannot be purged again: the session is left
// marked removed (no read serves the record), the error says so, and the operator's rm clears it.
func TestRemoveRacingFirstRecordAsAgent(t *testing.T) {
	srv, log, err := multitenant.RoleServer(t.TempDir(), wire.DefaultPartitions, multitenant.Agent, multitenant.Operator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	dial := func(user string) (*nats.Conn, njs.JetStream) {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := njs.New(nc)
		return nc, js
	}
	ctx := ctxT(t)
	opNC, opJS := dial("operator")
	opStore, err := store.Provision(ctx, opJS, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{url: srv.ClientURL(), nc: opNC, js: opJS, store: opStore}
	anc, ajs := dial("agent")
	astore, err := store.Open(ctx, ajs)
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	pub, err := New(astore, anc, Options{WriterID: "w1", Now: clk.Now, RetryBudget: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pub.after = clk.AfterFunc
	pub.beforeWrite = func(id string, first int64) {
		if first == 0 {
			if _, err := storetest.Session(opStore, id).Remove(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	w, err := pub.Create(ctx, header("rm-race"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(fixtureEvents(t, 1)[0]); err != nil {
		t.Fatal(err)
	}
	err = w.Flush(ctx)
	if !errors.Is(err, ErrSessionDeleted) || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "left marked removed") {
		t.Fatalf("first write raced by rm, as the agent: %v, want ErrConflict and ErrSessionDeleted, the record left marked removed", err)
	}
	if _, err := storetest.Session(opStore, "rm-race").Info(ctx); !errors.Is(err, store.ErrSessionDeleted) {
		t.Fatalf("metadata: %v, want marked removed", err)
	}
	if recs := e.records(t, "rm-race"); len(recs) != 1 {
		t.Fatalf("%d records, want the one left", len(recs))
	}
	if v := log.Since(0); len(v) != 1 || !strings.Contains(v[0], "STREAM.PURGE.AGENTLOG") {
		t.Fatalf("violations: %q, want the purge probe's", v)
	}
	if rm, err := storetest.Session(opStore, "rm-race").Remove(ctx); err != nil || rm.Records != 1 || !rm.Metadata {
		t.Fatalf("operator's rm: %+v, %v", rm, err)
	}
}
