package forker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// violations records the permission violations a server logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (l *violations) Errorf(format string, v ...any) {
	if m := fmt.Sprintf(format, v...); strings.Contains(m, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, m)
		l.mu.Unlock()
	}
}
func (l *violations) Noticef(string, ...any) {}
func (l *violations) Warnf(string, ...any)   {}
func (l *violations) Fatalf(string, ...any)  {}
func (l *violations) Debugf(string, ...any)  {}
func (l *violations) Tracef(string, ...any)  {}

func (l *violations) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestRemoveChildDuringForkWithForkerRights: a forker connected with the deployment's forker
// role (deploy/multi-tenant: no purge right) whose child is removed between its claim and its
// record fails the fork naming the child, leaves the child marked removed, and commits no
// permission violation; the operator's rm then clears it and the id can be forked again.
func TestRemoveChildDuringForkWithForkerRights(t *testing.T) {
	p, err := multitenant.RolePermissions(multitenant.Forker, 4)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\naccounts {\n  T {\n    jetstream: enabled\n    users: [\n      { user: forker, password: pw, permissions: %s }\n      { user: operator, password: pw }\n    ]\n  }\n}\n",
		filepath.Join(dir, "data"), p.ServerConf("      "))
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(cf)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	log := &violations{}
	srv.SetLogger(log, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
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
	if v := log.all(); len(v) > 0 {
		t.Fatalf("the forker's path made permission violations:\n%s", strings.Join(v, "\n"))
	}
	// The forker role may not purge at all: the request is never answered (the server logs the
	// violation).
	pctx, cancel := context.WithTimeout(ctx(t), 2*time.Second)
	defer cancel()
	if _, err := storetest.Session(fstore, "c").PurgeThrough(pctx, 1<<40); err == nil {
		t.Fatal("the forker role purged AGENTLOG")
	}
	if v := log.all(); len(v) != 1 || !strings.Contains(v[0], "STREAM.PURGE.AGENTLOG") {
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
