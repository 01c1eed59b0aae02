package forker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestRemoveChildDuringForkWithForkerRights: a forker connected with the deployment's forker
// role (deploy/multi-tenant: no purge right) whose child is removed between its claim and its
// record fails the fork naming the child, leaves the child marked removed, and commits no
// permission violation; the operator's rm then clears it and the id can be forked again.
func TestRemoveChildDuringForkWithForkerRights(t *testing.T) {
	srv, log, err := multitenant.RoleServer(t.TempDir(), 4, multitenant.Forker, multitenant.Operator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	dial := func(user string) (*nats.Conn, natsjs.JetStream) {
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := natsjs.New(nc)
		return nc, js
	}
	opNC, opJS := dial("operator")
	opStore, err := store.Provision(ctx(t), opJS, store.Config{Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	fnc, fjs := dial("forker")
	fstore, err := store.Open(ctx(t), fjs)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(fstore, fnc, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: opNC, store: opStore, f: f}
	e.loadParent()
	f.beforeRecord = func(child string) {
		if _, err := storetest.Session(opStore, child).Remove(context.Background()); err != nil {
			t.Errorf("rm: %v", err)
		}
	}
	_, err = f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "c"})
	var cl *childLeftError
	if err == nil || !errors.Is(err, store.ErrSessionDeleted) || !errors.As(err, &cl) || !strings.Contains(err.Error(), "left marked removed") {
		t.Fatalf("fork onto a child removed meanwhile, as the forker role: %v", err)
	}
	if _, err := storetest.Header(storetest.Session(opStore, "c").Info(ctx(t))); !errors.Is(err, store.ErrSessionDeleted) {
		t.Fatalf("child metadata: %v, want marked removed", err)
	}
	if v := log.Since(0); len(v) > 0 {
		t.Fatalf("the forker's path made permission violations:\n%s", strings.Join(v, "\n"))
	}
	// The forker role may not purge at all: the request is never answered (the server logs the
	// violation).
	pctx, cancel := context.WithTimeout(ctx(t), 2*time.Second)
	defer cancel()
	if _, err := storetest.Session(fstore, "c").PurgeThrough(pctx, 1<<40); err == nil {
		t.Fatal("the forker role purged AGENTLOG")
	}
	if v := log.Since(0); len(v) != 1 || !strings.Contains(v[0], "STREAM.PURGE.AGENTLOG") {
		t.Fatalf("violations after the forker's purge: %q", v)
	}
	if rm, err := storetest.Session(opStore, "c").Remove(ctx(t)); err != nil || rm.Records == 0 || !rm.Metadata {
		t.Fatalf("operator's rm of the left child: %+v, %v", rm, err)
	}
	f.beforeRecord = nil
	if _, err := f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "c"}); err != nil {
		t.Fatal(err)
	}
}
