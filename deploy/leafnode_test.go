package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

const (
	hubConf  = "leaf-node/hub.conf"
	leafConf = "leaf-node/leaf.conf"
)

// TestLeafNodeConfigsParse: the hub has JetStream in domain hub, a leafnode listener and the
// AGENTLOG account with its users; the leaf has no JetStream and one remote, the hub's listener,
// as the hub's user leaf.
func TestLeafNodeConfigsParse(t *testing.T) {
	h := load(t, hubConf)
	if !h.JetStream || h.JetStreamDomain != "hub" || h.StoreDir == "" || h.MaxPayload != 1<<20 || h.LeafNode.Port != 7422 {
		t.Fatalf("%s: jetstream %v domain %q store %q max_payload %d leafnode port %d", hubConf, h.JetStream, h.JetStreamDomain, h.StoreDir, h.MaxPayload, h.LeafNode.Port)
	}
	users := map[string]string{}
	for _, u := range h.Users {
		users[u.Username] = u.Account.Name
	}
	if users["agentlog"] != "AGENTLOG" || users["leaf"] != "AGENTLOG" {
		t.Fatalf("%s: users %v, want agentlog and leaf in account AGENTLOG", hubConf, users)
	}
	l := load(t, leafConf)
	if l.JetStream || len(l.LeafNode.Remotes) != 1 || l.LeafNode.ReconnectInterval != 2*time.Second || l.MaxPayload != 1<<20 {
		t.Fatalf("%s: jetstream %v, %d remotes, reconnect %s, max_payload %d", leafConf, l.JetStream, len(l.LeafNode.Remotes), l.LeafNode.ReconnectInterval, l.MaxPayload)
	}
	r := l.LeafNode.Remotes[0]
	if len(r.URLs) != 1 || r.URLs[0].Host != fmt.Sprintf("127.0.0.1:%d", h.LeafNode.Port) || r.URLs[0].User.Username() != "leaf" {
		t.Fatalf("%s: remote %v, want the hub's leafnode listener as user leaf", leafConf, r.URLs)
	}
	if pw, _ := r.URLs[0].User.Password(); pw != hubPassword(t, h, "leaf") {
		t.Fatalf("%s: the remote's password is not the hub's user leaf's", leafConf)
	}
	if l.Port == h.Port || l.ServerName == h.ServerName {
		t.Fatalf("the leaf and the hub share port %d or name %q", l.Port, l.ServerName)
	}
}

// hubPassword is the password of user in the hub's config.
func hubPassword(t *testing.T, h *server.Options, user string) string {
	t.Helper()
	for _, u := range h.Users {
		if u.Username == user {
			return u.Password
		}
	}
	t.Fatalf("%s: no user %s", hubConf, user)
	return ""
}

// TestLeafNodeRuns starts the hub and the leaf of deploy/leaf-node (on free ports, a temp dir),
// provisions agentlog at the hub and runs its projector there, and, connected to the leaf with
// the hub's domain, writes a session and reads its messages back (a JetStream write, a direct
// read and a core request to the projector, all across the leafnode link).
func TestLeafNodeRuns(t *testing.T) {
	h := load(t, hubConf)
	h.Port, h.LeafNode.Port, h.StoreDir, h.JetStreamMaxStore = -1, freePort(t), t.TempDir(), 1<<30
	hub := start(t, h)
	l := load(t, leafConf)
	l.Port = -1
	u := *l.LeafNode.Remotes[0].URLs[0]
	u.Host = fmt.Sprintf("127.0.0.1:%d", h.LeafNode.Port)
	l.LeafNode.Remotes[0].URLs = []*url.URL{&u}
	l.LeafNode.ReconnectInterval = 50 * time.Millisecond
	leaf := start(t, l)
	for deadline := time.Now().Add(30 * time.Second); leaf.NumLeafNodes() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the leaf did not connect to the hub in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hnc, hjs, err := natsdev.Connect(hub.ClientURL(), nats.UserInfo("agentlog", "agentlog-example-password"))
	if err != nil {
		t.Fatal(err)
	}
	defer hnc.Close()
	hst, err := store.Provision(ctx, hjs, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := projector.New(hst, hnc, projector.Options{Name: "hub", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	anc, ajs, err := natsdev.ConnectDomain(leaf.ClientURL(), "hub", nats.Name("edge-agent"))
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	ast, err := store.Open(ctx, ajs)
	if err != nil {
		t.Fatalf("store.Open through the leaf with --js-domain hub: %v", err)
	}
	ss, err := ast.Session("edge-s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := ast.CreateSession(ctx, session.Header{ID: "edge-s1", CreatedAt: 1785000000000}); err != nil {
		t.Fatalf("create through the leaf: %v", err)
	}
	ev := session.Event{Type: "user/message", Seq: 0, Time: "1785000000001", SurfaceOp: json.RawMessage(`"append"`),
		Data: json.RawMessage(`{"id":"m1","role":"user","content":[{"type":"text","text":"from the edge"}],"source":{"kind":"user"}}`)}
	if _, err := ss.Append(ctx, 0, []session.Event{ev}); err != nil {
		t.Fatalf("append through the leaf: %v", err)
	}
	c, err := client.New(anc, client.Domain("hub"))
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Messages(ctx, "edge-s1", client.MinSeq(0))
	if err != nil || len(reply.Messages) != 1 {
		t.Fatalf("messages through the leaf: %+v, %v", reply, err)
	}
	if _, err := c.Header(ctx, "edge-s1"); err != nil {
		t.Fatalf("header through the leaf (a direct get): %v", err)
	}
}
