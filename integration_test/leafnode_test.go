package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// hubDomain is the JetStream domain of the hub in the leaf-node tests (deploy/leaf-node).
const hubDomain = "hub"

// linkProxy is a TCP proxy on a fixed loopback port in front of a server's leafnode listener,
// whose link can be cut for real: Down closes its listener and every connection through it (the
// leaf's reconnects are refused, as with a network outage), Up listens on the same port again.
type linkProxy struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{t: t, addr: fmt.Sprintf("127.0.0.1:%d", port), target: target, conns: map[net.Conn]struct{}{}}
	p.Up()
	t.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

// Up listens again (a port just released may take a moment to be free: retried).
func (p *linkProxy) Up() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for try := 0; try < 500; try++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go p.serve(ln)
}

// Down closes the listener and every connection through the proxy.
func (p *linkProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *linkProxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln { // cut while dialing
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

func (p *linkProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

// startHubServer starts the hub: JetStream in domain hubDomain, a leafnode listener (returned
// as HOST:PORT), on the global account (so a leaf's remote without credentials is bound to it).
func startHubServer(t *testing.T) (*server.Server, string) {
	t.Helper()
	leafPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "hub", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, JetStreamDomain: hubDomain, StoreDir: t.TempDir(),
		// NoAdvertise: the leaf must not learn the listener behind the proxy and reconnect there.
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort, NoAdvertise: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(natsdev.ReadyTimeout) {
		t.Fatal("hub not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, fmt.Sprintf("127.0.0.1:%d", leafPort)
}

// startLeafServer starts a leaf node without JetStream whose one remote is remote (the hub's
// leafnode listener, here through a linkProxy), retried every 50 ms while it is cut.
func startLeafServer(t *testing.T, remote string) *server.Server {
	t.Helper()
	u, err := url.Parse("nats-leaf://" + remote)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "edge", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		LeafNode: server.LeafNodeOpts{ReconnectInterval: 50 * time.Millisecond, Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(natsdev.ReadyTimeout) {
		t.Fatal("leaf not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// sameMessages fails unless the messages served for id through c (after seq last is applied)
// equal a fresh fold of events, the session's log as the hub's stream holds it.
func sameMessages(t *testing.T, ctx context.Context, c *client.Client, id string, events []session.Event) {
	t.Helper()
	s, err := session.Load(id, events)
	if err != nil {
		t.Fatalf("session %q: a fresh fold of its log: %v", id, err)
	}
	want, _ := json.Marshal(s.DeriveMessages())
	reply, err := c.Messages(ctx, id, client.MinSeq(int64(len(events)-1)))
	if err != nil {
		t.Fatalf("session %q: messages through the leaf: %v", id, err)
	}
	got, _ := json.Marshal(reply.Messages)
	if !sessiontest.JSONEqual(t, got, want) {
		t.Fatalf("session %q: messages served through the leaf:\n%s\nwant (a fresh fold of the log):\n%s", id, got, want)
	}
}

// hubLog reads session id from the hub's stream directly (no domain): its events, and checks
// each record is stored once (one Nats-Msg-Id each) and the events' seqs are 0..n-1, each once.
func hubLog(t *testing.T, ctx context.Context, st *store.Store, id string) (events []session.Event, records int) {
	t.Helper()
	ss := storetest.Session(st, id)
	events, _, err := storetest.ReadAll(ctx, ss)
	if err != nil {
		t.Fatalf("session %q: read from the hub: %v", id, err)
	}
	msgs, err := st.MsgsFrom(ctx, wire.StreamName, 1, 10000, ss.Subject())
	if err != nil {
		t.Fatal(err)
	}
	ids, seqs := map[string]bool{}, map[int64]int{}
	for _, m := range msgs {
		mid := m.Header.Get(nats.MsgIdHdr)
		if ids[mid] {
			t.Fatalf("session %q: record %s stored twice (stream seq %d)", id, mid, m.Sequence)
		}
		ids[mid] = true
		evs, err := st.DecodeRecord(ctx, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			seqs[e.Seq]++
		}
	}
	for i := range events {
		if events[i].Seq != int64(i) || seqs[int64(i)] != 1 {
			t.Fatalf("session %q: event seq %d stored %d times (event %d has seq %d)", id, i, seqs[int64(i)], i, events[i].Seq)
		}
	}
	if len(seqs) != len(events) {
		t.Fatalf("session %q: the records hold %d seqs, the log reads %d events", id, len(seqs), len(events))
	}
	return events, len(msgs)
}

// edgeRig is a hub (domain hubDomain, provisioned, a projector and a forker connected to it
// directly) and a leaf node without JetStream linked to it through link, and an agent connection
// to the leaf with the hub's domain.
type edgeRig struct {
	hub, leaf *server.Server
	link      *linkProxy
	hst       *store.Store // the hub's, no domain
	anc       *nats.Conn   // the agent's, to the leaf
	ajs       natsjs.JetStream
	ast       *store.Store // the agent's, through the leaf with the domain
}

func (r *edgeRig) linked() bool { return r.leaf.NumLeafNodes() == 1 && r.hub.NumLeafNodes() == 1 }

func (r *edgeRig) unlinked() bool { return r.leaf.NumLeafNodes() == 0 && r.hub.NumLeafNodes() == 0 }

func startEdgeRig(t *testing.T, ctx context.Context) *edgeRig {
	t.Helper()
	r := &edgeRig{}
	var hubLeafAddr string
	r.hub, hubLeafAddr = startHubServer(t)
	r.link = newLinkProxy(t, hubLeafAddr)
	r.leaf = startLeafServer(t, r.link.addr)
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf node connected to the hub", r.linked))

	hnc, hst := connectStore(t, r.hub.ClientURL(), &store.Config{})
	r.hst = hst
	proj, err := projector.New(hst, hnc, projector.Options{Name: "hub-projector", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := proj.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proj.Stop() })
	fk, err := forker.New(hst, hnc, forker.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fk.Stop() })

	r.anc, r.ajs, err = natsdev.ConnectDomain(r.leaf.ClientURL(), hubDomain, nats.Name("edge-agent"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.anc.Close)
	if r.ast, err = store.Open(ctx, r.ajs); err != nil {
		t.Fatalf("store.Open through the leaf with domain %q: %v", hubDomain, err)
	}
	return r
}

// TestLeafNodeAgentAtTheEdge runs a hub (JetStream domain "hub", the projector and the forker)
// and a leaf node without JetStream linked to it through a proxy; an agent connected to the leaf
// writes, reads and forks with --js-domain hub (library, CLI and the TypeScript backend). Then the
// leaf's link is cut: the agent's writes fail as unavailable and stay pending in its publisher;
// the link is restored and every event lands exactly once on the hub's stream, and the served
// messages equal a fresh fold of the log.
func TestLeafNodeAgentAtTheEdge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := startEdgeRig(t, ctx)
	leaf, link, hst, anc, ajs, ast := r.leaf, r.link, r.hst, r.anc, r.ajs, r.ast
	linked := r.linked

	// Without the domain the agent's JetStream requests find no JetStream: the leaf has none.
	if nc, js, err := natsdev.Connect(leaf.ClientURL()); err != nil {
		t.Fatal(err)
	} else {
		octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := store.Open(octx, js)
		ocancel()
		nc.Close()
		if err == nil {
			t.Fatal("store.Open through the leaf without the hub's domain succeeded: the leaf has no JetStream")
		}
	}
	if ast.Domain() != hubDomain || store.APIPrefix(ajs) != "$JS.hub.API." {
		t.Fatalf("the agent's store: domain %q, API prefix %q", ast.Domain(), store.APIPrefix(ajs))
	}
	p := newPublisher(t, ast, anc, publisher.Options{
		Window: 10 * time.Millisecond, WriterID: "edge", Logger: quietLogger(),
		AttemptTimeout: 500 * time.Millisecond, RetryBudget: time.Second,
	})
	c, err := client.New(anc, client.Domain(hubDomain))
	if err != nil {
		t.Fatal(err)
	}
	const id = "edge-agent-1"
	sent := sessiontest.AgentTurns(160) // 4 turns of 40 events
	w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatalf("create through the leaf: %v", err)
	}
	appendAll := func(evs []session.Event) {
		t.Helper()
		for _, e := range evs {
			if err := w.Append(e); err != nil {
				t.Fatalf("append seq %d: %v", e.Seq, err)
			}
		}
	}

	// 1. Linked: write, read (library, CLI) and fork through the leaf.
	appendAll(sent[:80])
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush through the leaf: %v", err)
	}
	stored, _ := hubLog(t, ctx, hst, id)
	if len(stored) != 80 {
		t.Fatalf("%d events on the hub after the first flush, want 80", len(stored))
	}
	sameMessages(t, ctx, c, id, stored)
	var listed []string
	if _, err := c.Sessions(ctx, client.SessionsQuery{}, func(s client.SessionInfo) error { listed = append(listed, s.ID); return nil }); err != nil || len(listed) != 1 || listed[0] != id {
		t.Fatalf("sessions through the leaf: %v, %v", listed, err)
	}
	cli := func(args ...string) string {
		t.Helper()
		return mustAt(t, leaf.ClientURL(), nil, append([]string{"--js-domain", hubDomain}, args...)...)
	}
	if got := strings.Count(cli("events", id), `"seq":`); got != 80 {
		t.Fatalf("agentlog --js-domain hub events %s through the leaf: %d lines, want 80", id, got)
	}
	if r := runAt(t, leaf.ClientURL(), nil, "--timeout", "3s", "events", id); r.code == 0 {
		t.Fatalf("agentlog events through the leaf without --js-domain succeeded: %s", r.stdout)
	}
	bs := session.ForkBoundaries(stored)
	if len(bs) == 0 {
		t.Fatal("no fork boundary in the first 80 events")
	}
	at := bs[len(bs)-1].Seq
	fr, err := c.Fork(ctx, client.ForkRequest{Source: id, Boundary: &at, Child: id + "-child"})
	if err != nil {
		t.Fatalf("fork through the leaf: %v", err)
	}
	child, _ := hubLog(t, ctx, hst, fr.Child)
	if fr.SeedLength == 0 || len(child) < fr.SeedLength {
		t.Fatalf("fork: seed length %d, the child's log %d events", fr.SeedLength, len(child))
	}
	sameMessages(t, ctx, c, fr.Child, child)
	var cliFork struct {
		Child string `json:"child"`
	}
	if err := json.Unmarshal([]byte(cli("fork", id, "--at", fmt.Sprint(at), "--child", id+"-cli", "--json")), &cliFork); err != nil || cliFork.Child != id+"-cli" {
		t.Fatalf("agentlog --js-domain hub fork through the leaf: %+v, %v", cliFork, err)
	}

	typescriptThroughLeaf(t, leaf.ClientURL(), cli)

	// An event larger than a record: its blob goes to the hub's Object Store through the leaf.
	lw, err := p.Create(ctx, session.Header{ID: "edge-large", CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("edge ", 300_000) // 1.5 MB, over the 1 MiB record
	if err := lw.Append(session.Event{Type: "user/message", Seq: 0, Time: "1785000000001", SurfaceOp: json.RawMessage(`"append"`),
		Data: json.RawMessage(`{"id":"big","role":"user","content":[{"type":"text","text":"` + big + `"}],"source":{"kind":"user"}}`)}); err != nil {
		t.Fatal(err)
	}
	if err := lw.Close(ctx); err != nil {
		t.Fatalf("a large event through the leaf: %v", err)
	}
	large, _ := hubLog(t, ctx, hst, "edge-large")
	if len(large) != 1 || !strings.Contains(string(large[0].Data), big) {
		t.Fatalf("the large event on the hub: %d events", len(large))
	}
	sameMessages(t, ctx, c, "edge-large", large)

	// 2. The link is cut: writes fail as unavailable, their events stay pending.
	link.Down()
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf's link is down on both sides", r.unlinked))
	appendAll(sent[80:120])
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	err = w.Flush(fctx)
	fcancel()
	if err == nil {
		t.Fatal("flush with the leaf's link cut succeeded")
	}
	if !errors.Is(err, publisher.ErrUnavailable) {
		t.Fatalf("flush with the leaf's link cut: %v (want publisher.ErrUnavailable)", err)
	}
	t.Logf("flush during the outage: %v", err)
	var we *publisher.WriteError
	if !errors.As(err, &we) || we.Session != id || we.Fenced || we.LastSeq >= 120 || we.FirstSeq < 80 {
		t.Fatalf("flush during the outage: %#v, want a *WriteError of %q for seqs in 80..119, not fenced", we, id)
	}
	if d := w.DurableSeq(); d != 80 {
		t.Fatalf("%d events durable during the outage, want 80", d)
	}
	appendAll(sent[120:140]) // still admitted: the publisher keeps them
	if _, err := c.Messages(ctx, id); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("messages through the cut leaf: %v (want client.ErrUnavailable)", err)
	}

	// 3. The link is back: the kept events land, exactly once; writing goes on.
	link.Up()
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf reconnected to the hub", linked))
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush after the link came back: %v", err)
	}
	appendAll(sent[140:])
	if err := w.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	stored, records := hubLog(t, ctx, hst, id)
	if len(stored) != len(sent) {
		t.Fatalf("%d events on the hub's stream, %d were written", len(stored), len(sent))
	}
	for i := range stored {
		if err := sessiontest.SameEvent(stored[i], sent[i]); err != nil {
			t.Fatalf("stored event %d is not the one written: %v", i, err)
		}
	}
	info, err := hst.Stream().Info(ctx, natsjs.WithSubjectFilter(storetest.Session(hst, id).Subject()))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[storetest.Session(hst, id).Subject()]; n != uint64(records) {
		t.Fatalf("the hub's stream holds %d records of %q, %d read", n, id, records)
	}
	t.Logf("%d events in %d records on the hub's stream, each once", len(stored), records)
	sameMessages(t, ctx, c, id, stored)
	if got := strings.Count(cli("events", id), `"seq":`); got != len(sent) {
		t.Fatalf("agentlog --js-domain hub events %s: %d lines, want %d", id, got, len(sent))
	}
}

// typescriptThroughLeaf writes and reads a session with the TypeScript backend connected to the
// leaf at url, its domain from AGENTLOG_JS_DOMAIN (test/tenant-check.mjs: create, append, read
// back), and checks the CLI through the leaf serves it. Without a built backend (npm ci) it only
// says so, unless CI=true.
func typescriptThroughLeaf(t *testing.T, url string, cli func(args ...string) string) {
	t.Helper()
	pkg, _ := filepath.Abs("../typescript/dsh-persistence")
	if _, err := os.Stat(filepath.Join(pkg, "lib/index.js")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the TypeScript backend is not built (npm ci in %s): %v", pkg, err)
		}
		t.Logf("not checking the TypeScript backend through the leaf: run npm ci in %s (%v)", pkg, err)
		return
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTLOG_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	// The domain from the environment, then from the plugin config.
	for i, domain := range []string{"AGENTLOG_JS_DOMAIN=" + hubDomain, "TS_DOMAIN=" + hubDomain} {
		id := fmt.Sprintf("edge-ts-%d", i)
		cmd := exec.Command(filepath.Join(pkg, "node_modules/.bin/node"), "test/tenant-check.mjs")
		cmd.Dir = pkg
		cmd.Env = append(env, "NATS_URL="+url, "TS_FROM_ENV=1", domain, "TS_SESSION="+id, "TS_TEXT=written at the edge by the TypeScript backend")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "ok") {
			t.Fatalf("the TypeScript backend through the leaf (%s): %v\n%s", domain, err, out)
		}
		if out := cli("messages", id); !strings.Contains(out, "written at the edge by the TypeScript backend") {
			t.Fatalf("messages of the TypeScript backend's session %s through the leaf: %s", id, out)
		}
	}
}

// TestLeafNodeLinkCutMidWrite cuts the leaf's link while several sessions are being written
// through it (records in flight, acks lost with the link), twice, and restores it: every event
// each writer sent lands exactly once on the hub's stream, in order, and the messages served
// through the leaf equal a fresh fold of each log.
func TestLeafNodeLinkCutMidWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := startEdgeRig(t, ctx)
	p := newPublisher(t, r.ast, r.anc, publisher.Options{
		Window: 5 * time.Millisecond, WriterID: "edge-midwrite", Logger: quietLogger(),
		AttemptTimeout: 300 * time.Millisecond, RetryBudget: 600 * time.Millisecond,
	})
	const sessions = 3
	fws := make([]*faultWriter, sessions)
	for i := range fws {
		id := fmt.Sprintf("edge-midwrite-%d", i)
		w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
		if err != nil {
			t.Fatal(err)
		}
		fws[i] = &faultWriter{w: w, sent: sessiontest.AgentTurns(400)}
	}
	var progress atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i, fw := range fws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fw.run(ctx, rand.New(rand.NewPCG(uint64(i), 24)), &progress); err != nil {
				errs <- fmt.Errorf("session %q: %w", fw.w.ID(), err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	finished := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	cuts := 0
	for ; cuts < 2 && !finished(); cuts++ {
		at := progress.Load() + 4 // a few Flushes into the writing
		checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the writers flushed a few times", func() bool { return progress.Load() >= at || finished() }))
		r.link.Down()
		checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf's link is down on both sides", r.unlinked))
		at = progress.Load() + 3 // flushes tried during the outage (each fails after the budget)
		checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the writers tried to flush during the outage", func() bool { return progress.Load() >= at || finished() }))
		r.link.Up()
		checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf reconnected to the hub", r.linked))
	}
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fails := 0
	for _, fw := range fws {
		fails += fw.fails
		fw.drain(t, ctx)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(r.anc, client.Domain(hubDomain))
	if err != nil {
		t.Fatal(err)
	}
	total, records := 0, 0
	for _, fw := range fws {
		checkLog(t, r.hst, fw.w.ID(), fw.sent, len(fw.sent))
		stored, n := hubLog(t, ctx, r.hst, fw.w.ID())
		if len(stored) != len(fw.sent) {
			t.Fatalf("session %q: %d events on the hub's stream, %d written", fw.w.ID(), len(stored), len(fw.sent))
		}
		sameMessages(t, ctx, c, fw.w.ID(), stored)
		total, records = total+len(stored), records+n
	}
	t.Logf("%d link cuts; %d Flush calls failed during them; %d events in %d records on the hub's stream, each once", cuts, fails, total, records)
	if fails == 0 {
		t.Fatal("no Flush failed while the link was cut: the test did not cut anything")
	}
}

// TestLeafNodeServicesAtTheEdge runs the projector and the forker themselves behind the leaf
// (their Store opened through it with the hub's domain), as `agentlog projector --js-domain hub`
// does: the agent's session is folded and served, and forked, with every service request and
// every JetStream call of the services crossing the leafnode link.
func TestLeafNodeServicesAtTheEdge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hub, hubLeafAddr := startHubServer(t)
	link := newLinkProxy(t, hubLeafAddr)
	leaf := startLeafServer(t, link.addr)
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf node connected to the hub", func() bool { return leaf.NumLeafNodes() == 1 && hub.NumLeafNodes() == 1 }))
	_, hst := connectStore(t, hub.ClientURL(), &store.Config{})

	snc, sjs, err := natsdev.ConnectDomain(leaf.ClientURL(), hubDomain, nats.Name("edge-services"))
	if err != nil {
		t.Fatal(err)
	}
	defer snc.Close()
	sst, err := store.Open(ctx, sjs)
	if err != nil {
		t.Fatal(err)
	}
	proj, err := projector.New(sst, snc, projector.Options{Name: "edge-projector", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := proj.Start(ctx); err != nil {
		t.Fatalf("projector through the leaf: %v", err)
	}
	defer proj.Stop()
	fk, err := forker.New(sst, snc, forker.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fk.Start(ctx); err != nil {
		t.Fatalf("forker through the leaf: %v", err)
	}
	defer fk.Stop()

	anc, ajs, err := natsdev.ConnectDomain(leaf.ClientURL(), hubDomain, nats.Name("edge-agent"))
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	ast, err := store.Open(ctx, ajs)
	if err != nil {
		t.Fatal(err)
	}
	p := newPublisher(t, ast, anc, publisher.Options{Window: 10 * time.Millisecond, WriterID: "edge-svc", Logger: quietLogger()})
	const id = "edge-svc-1"
	w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	sent := sessiontest.AgentTurns(120)
	for _, e := range sent {
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(anc, client.Domain(hubDomain))
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := hubLog(t, ctx, hst, id)
	sameMessages(t, ctx, c, id, stored)
	bs := session.ForkBoundaries(stored)
	at := bs[len(bs)-1].Seq
	fr, err := c.Fork(ctx, client.ForkRequest{Source: id, Boundary: &at, Child: id + "-child"})
	if err != nil {
		t.Fatalf("fork by the forker behind the leaf: %v", err)
	}
	child, _ := hubLog(t, ctx, hst, fr.Child)
	sameMessages(t, ctx, c, fr.Child, child)
}

// TestLeafNodeOutageLongerThanLease keeps the leaf's link down until the writer's lease has
// expired at the hub (TTL 1 s): after the link is back the writer takes its lease again, proves
// the tail and writes what it kept, exactly once; it is not fenced.
func TestLeafNodeOutageLongerThanLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := startEdgeRig(t, ctx)
	p := newPublisher(t, r.ast, r.anc, publisher.Options{
		Window: 10 * time.Millisecond, WriterID: "edge-lease", Logger: quietLogger(), LeaseTTL: time.Second,
		AttemptTimeout: 300 * time.Millisecond, RetryBudget: 600 * time.Millisecond,
	})
	const id = "edge-lease-1"
	w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	sent := sessiontest.AgentTurns(120)
	half := len(sent) / 2
	for _, e := range sent[:half] {
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	leases := storetest.WritersKV(r.hst)
	tok := storetest.Session(r.hst, id).Token()
	if _, err := leases.Get(ctx, tok); err != nil {
		t.Fatalf("the writer's lease at the hub: %v", err)
	}
	r.link.Down()
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf's link is down on both sides", r.unlinked))
	for _, e := range sent[half:] {
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the writer's lease expired at the hub", func() bool {
		_, err := leases.Get(ctx, tok)
		return errors.Is(err, natsjs.ErrKeyNotFound)
	}))
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	err = w.Flush(fctx)
	fcancel()
	if !errors.Is(err, publisher.ErrUnavailable) {
		t.Fatalf("flush with the link down: %v, want publisher.ErrUnavailable", err)
	}
	r.link.Up()
	checkfor.Check(t, time.Minute, 10*time.Millisecond, checkfor.Holds("the leaf reconnected to the hub", r.linked))
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush after the link came back (the lease had expired): %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLog(t, r.hst, id, sent, len(sent))
	stored, records := hubLog(t, ctx, r.hst, id)
	if len(stored) != len(sent) {
		t.Fatalf("%d events on the hub's stream, %d written", len(stored), len(sent))
	}
	c, err := client.New(r.anc, client.Domain(hubDomain))
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, ctx, c, id, stored)
	t.Logf("%d events in %d records after an outage longer than the lease", len(stored), records)
}
