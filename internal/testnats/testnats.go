// Package testnats starts real NATS for tests: an embedded nats-server (natsdev.RunServer, file
// storage in the test's temp dir), a connection to it, and a provisioned agentlog store, all torn
// down when the test ends. It never mocks JetStream. (Package store's own white-box tests cannot
// import it, as it imports store; they start their server the way Server does.)
package testnats

import (
	"context"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Env is a running embedded server with a connection and a provisioned store.
type Env struct {
	URL   string // the server's client URL
	NC    *nats.Conn
	Store *store.Store
}

// Start runs an embedded server in t.TempDir(), connects to it as t.Name(), and provisions agentlog
// with cfg (zero values: the defaults). Everything is stopped at cleanup; failures end the test.
func Start(t testing.TB, cfg store.Config) *Env {
	t.Helper()
	return StartWith(t, natsdev.ServerOptions{}, cfg)
}

// StartWith is Start with server options (DataDir defaults to t.TempDir()), e.g. a small
// MaxPayload.
func StartWith(t testing.TB, opts natsdev.ServerOptions, cfg store.Config) *Env {
	t.Helper()
	url, nc, js := Server(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Provision(ctx, js, cfg)
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	return &Env{URL: url, NC: nc, Store: st}
}

// Server runs an embedded server with opts (DataDir defaults to t.TempDir()) and connects to it as
// t.Name(), provisioning nothing. Both are stopped at cleanup; failures end the test.
func Server(t testing.TB, opts natsdev.ServerOptions) (url string, nc *nats.Conn, js jetstream.JetStream) {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	srv, err := natsdev.RunServer(opts)
	if err != nil {
		t.Fatalf("natsdev.RunServer: %v", err)
	}
	nc, js, err = natsdev.Connect(srv.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		srv.Shutdown()
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return srv.ClientURL(), nc, js
}

// MarkRemoving leaves session id as an agentlog rm killed after its first step leaves it: its
// agentlog_sessions entry rewritten, same value, with wire.DeletingHeader (revision-guarded, as
// Session.Remove marks it), its records, projections and lease untouched. Failures end the test.
func MarkRemoving(t testing.TB, st *store.Store, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := wire.Token(id)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := st.JetStream().KeyValue(ctx, wire.SessionsBucket)
	if err != nil {
		t.Fatalf("mark session %q: %v", id, err)
	}
	entry, err := kv.Get(ctx, tok)
	if err != nil {
		t.Fatalf("mark session %q: %v", id, err)
	}
	mark := &nats.Msg{Subject: wire.KVSubject(wire.SessionsBucket, tok), Data: entry.Value(),
		Header: nats.Header{wire.DeletingHeader: []string{"1"}}}
	if _, err := st.JetStream().PublishMsg(ctx, mark, jetstream.WithExpectLastSequencePerSubject(entry.Revision())); err != nil {
		t.Fatalf("mark session %q: %v", id, err)
	}
}
