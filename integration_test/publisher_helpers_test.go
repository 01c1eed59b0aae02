package integration_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// faultProxy is a TCP proxy between NATS clients and a server that can delay, drop and cut the
// traffic (fault injection for the publisher tests; no library for it is on the module proxy).
//
//   - SetDelay: every chunk, in either direction, waits this long before it is forwarded;
//   - SetDrop(up, down): bytes client→server (up) or server→client (down) are read and thrown
//     away while set; the connections stay open (a partition, or lost acks);
//   - Cut: closes every open connection at once (clients reconnect through the proxy).
type faultProxy struct {
	ln      net.Listener
	target  string
	delay   atomic.Int64 // ns
	upOff   atomic.Bool
	downOff atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// URL is the nats:// URL clients dial to go through the proxy.
func (p *faultProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }
func (p *faultProxy) SetDrop(up, down bool)    { p.upOff.Store(up); p.downOff.Store(down) }

// Cut closes every connection open now.
func (p *faultProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *faultProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *faultProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		srv, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(srv) {
			client.Close()
			srv.Close()
			continue
		}
		p.wg.Add(2)
		go p.pump(srv, client, &p.upOff)
		go p.pump(client, srv, &p.downOff)
	}
}

// pump copies src to dst chunk by chunk, applying the delay and the drop flag; when either side
// ends, both are closed.
func (p *faultProxy) pump(dst, src net.Conn, drop *atomic.Bool) {
	defer p.wg.Done()
	defer p.untrack(dst)
	defer p.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d) // the latency the fault injects: a sleep is the point
			}
			if !drop.Load() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				_ = err // a cut connection: both sides are closed below
			}
			return
		}
	}
}

// ownServer is an embedded nats-server of a test, on a fixed port and data dir so that it can be
// restarted in place.
type ownServer struct {
	t    *testing.T
	dir  string
	port int
	srv  *server.Server
}

func startOwnServer(t *testing.T) *ownServer {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &ownServer{t: t, dir: t.TempDir(), port: port}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *ownServer) start() {
	s.t.Helper()
	// natsdev.RunServer may release the data directory's lock (and the port) a moment after
	// WaitForShutdown returns: retry a restart for a while.
	checkfor.Check(s.t, 10*time.Second, 10*time.Millisecond, func() error {
		srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: s.dir, Port: s.port, ServerName: "agentlog-it-own"})
		s.srv = srv
		return err
	})
}

func (s *ownServer) stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// restart shuts the server down (a clean shutdown, mid-write for whoever is writing) and starts
// it again on the same port and data directory.
func (s *ownServer) restart() {
	s.stop()
	s.start()
}

func (s *ownServer) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// newPublisher is publisher.New on st and nc; an error ends the test.
func newPublisher(t *testing.T, st *store.Store, nc *nats.Conn, opts publisher.Options) *publisher.Publisher {
	t.Helper()
	p, err := publisher.New(st, nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connectStore dials url (reconnecting forever, as natsdev.Connect does) and provisions (cfg) or
// attaches to agentlog there.
func connectStore(t *testing.T, url string, cfg *store.Config) (*nats.Conn, *store.Store) {
	t.Helper()
	nc, js, err := natsdev.Connect(url, nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st *store.Store
	if cfg != nil {
		st, err = store.Provision(ctx, js, *cfg)
	} else {
		st, err = store.Open(ctx, js)
	}
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

// checkLog reads session id back (store.Read checks that every record decodes and continues the
// previous one: no gap, no repeat) and checks the write contract against what was sent and
// acknowledged:
//   - the log is a prefix of sent (so nothing is written twice, out of order or interleaved);
//   - it holds at least the first acked events (everything whose Append and Flush returned).
//
// It returns the stored events.
func checkLog(t *testing.T, st *store.Store, id string, sent []session.Event, acked int) []session.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
	if err != nil && !(errors.Is(err, store.ErrSessionNotFound) && acked == 0) {
		t.Fatalf("session %q: read back: %v", id, err)
	}
	if len(got) < acked {
		t.Fatalf("session %q: %d events stored, but %d were acknowledged durable (Append and Flush returned)", id, len(got), acked)
	}
	if len(got) > len(sent) {
		t.Fatalf("session %q: %d events stored, only %d were sent: something was written twice", id, len(got), len(sent))
	}
	for i := range got {
		if got[i].Seq != int64(i) {
			t.Fatalf("session %q: stored event %d has seq %d", id, i, got[i].Seq)
		}
		if err := sessiontest.SameEvent(got[i], sent[i]); err != nil {
			t.Fatalf("session %q: stored event %d is not the one sent: %v", id, i, err)
		}
	}
	return got
}

// chunkEvents is n events of one open turn: turn/start, step/start, then assistant/chunk events
// carrying tag and their seq (so every writer's events differ).
func chunkEvents(tag string, from, n int) []session.Event {
	out := make([]session.Event, 0, n)
	for seq := from; seq < from+n; seq++ {
		ev := session.Event{Seq: int64(seq), Time: "1785000000000"}
		switch seq {
		case 0:
			ev.Type, ev.Data = "turn/start", []byte(`{"turn":1}`)
		case 1:
			ev.Type, ev.Data = "step/start", []byte(`{"turn":1,"step":1}`)
		default:
			ev.Type = "assistant/chunk"
			ev.Data = []byte(fmt.Sprintf(`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"%s %d"}}`, tag, seq))
		}
		out = append(out, ev)
	}
	return out
}
