package store

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestAPIPrefix: the prefix of the Store's own API requests and KV puts follows the context's
// domain or prefix, as nats.go's do; a domain that is not one token is refused.
func TestAPIPrefix(t *testing.T) {
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	plain, _ := NewJetStream(nc, "")
	hub, _ := NewJetStream(nc, "hub")
	pfx, _ := natsjs.NewWithAPIPrefix(nc, "$JS.other.API")
	for _, c := range []struct {
		js         natsjs.JetStream
		api, kvPut string
	}{
		{plain, "$JS.API.", "$KV.agentlog_sessions.s1"},
		{hub, "$JS.hub.API.", "$JS.hub.API.$KV.agentlog_sessions.s1"},
		{pfx, "$JS.other.API.", "$JS.other.API.$KV.agentlog_sessions.s1"},
	} {
		if got := APIPrefix(c.js); got != c.api {
			t.Errorf("APIPrefix: %q, want %q", got, c.api)
		}
		if got := KVPutSubject(c.js, wire.SessionsBucket, "s1"); got != c.kvPut {
			t.Errorf("KVPutSubject: %q, want %q", got, c.kvPut)
		}
		o, err := orbitJS(c.js)
		if err != nil || APIPrefix(o) != c.api || o.Options().APIPrefix == "" && c.api != natsjs.DefaultAPIPrefix {
			t.Errorf("orbitJS of %q: prefix %q (APIPrefix %q), %v", c.api, APIPrefix(o), o.Options().APIPrefix, err)
		}
	}
	for _, bad := range []string{"a.b", "a b", "*", ">", "x\n"} {
		if _, err := NewJetStream(nc, bad); err == nil || CheckDomain(bad) == nil {
			t.Errorf("domain %q accepted", bad)
		}
	}
}

// TestStoreThroughLeafDomain opens the Store through a leaf node without JetStream, with the
// hub's domain, and runs every request the Store builds by hand: the KV creates and puts (metadata,
// lease), the batched direct gets (LastMsgs, TailsOf), the leader gets (Info, TailFromLeader) and the
// purges (Remove). Through the leaf only the domain's subjects reach a JetStream.
func TestStoreThroughLeafDomain(t *testing.T) {
	ctx := testCtx(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leafPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	hub, err := server.NewServer(&server.Options{ServerName: "hub", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, JetStreamDomain: "hub", StoreDir: t.TempDir(), LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	if err != nil {
		t.Fatal(err)
	}
	hub.Start()
	defer func() { hub.Shutdown(); hub.WaitForShutdown() }()
	u, _ := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
	leaf, err := server.NewServer(&server.Options{ServerName: "leaf", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		LeafNode: server.LeafNodeOpts{ReconnectInterval: 50 * time.Millisecond, Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}})
	if err != nil {
		t.Fatal(err)
	}
	leaf.Start()
	defer func() { leaf.Shutdown(); leaf.WaitForShutdown() }()
	if !hub.ReadyForConnections(10*time.Second) || !leaf.ReadyForConnections(10*time.Second) {
		t.Fatal("servers not ready")
	}
	for deadline := time.Now().Add(30 * time.Second); leaf.NumLeafNodes() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the leaf did not connect to the hub")
		}
	}
	hnc, hjs, err := natsdev.Connect(hub.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	if _, err := Provision(ctx, hjs, Config{}); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(leaf.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := NewJetStream(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatalf("Open through the leaf: %v", err)
	}
	if s.Domain() != "hub" {
		t.Fatalf("Domain %q", s.Domain())
	}
	if err := s.CreateSession(ctx, session.Header{ID: "d1", CreatedAt: 1785000000000}); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	ss := sessionOf(s, "d1")
	if _, err := ss.AcquireLease(ctx, Lease{Session: "d1", Writer: "w", Host: "h", PID: 1}, 10*time.Second, false); err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if _, err := ss.Append(ctx, 0, evs(0, 5, "edge")); err != nil {
		t.Fatalf("Append: %v", err)
	}
	if info, err := ss.Info(ctx); err != nil || info.Header.ID != "d1" {
		t.Fatalf("Info: %+v, %v", info, err)
	}
	if tl, err := ss.TailFromLeader(ctx); err != nil || tl.NextSeq != 5 {
		t.Fatalf("TailFromLeader: %+v, %v", tl, err)
	}
	if msgs, err := s.LastMsgs(ctx, wire.StreamName, []string{ss.Subject()}); err != nil || len(msgs) != 1 {
		t.Fatalf("LastMsgs: %d, %v", len(msgs), err)
	}
	n := 0
	if err := s.TailsOf(ctx, []string{ss.Token()}, func(nats.Header, time.Time) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("TailsOf: %d, %v", n, err)
	}
	if got, _, err := readAll(ctx, ss); err != nil || len(got) != 5 {
		t.Fatalf("read: %d, %v", len(got), err)
	}
	rm, err := ss.Remove(ctx)
	if err != nil || rm.Records != 1 {
		t.Fatalf("Remove: %+v, %v", rm, err)
	}
	if _, err := ss.Info(ctx); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("Info after Remove: %v", err)
	}
}
