package natsdev_test

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// notes builds n log-only events from seq 0.
func notes(n int) []session.Event {
	out := make([]session.Event, n)
	for i := range out {
		out[i] = session.Event{Type: "test/note", Seq: int64(i), Time: json.Number("1785000000000"), Data: json.RawMessage(`{"turn":1}`)}
	}
	return out
}

func TestRunServer(t *testing.T) {
	if _, err := natsdev.RunServer(natsdev.ServerOptions{}); err == nil || !strings.Contains(err.Error(), "DataDir") {
		t.Fatalf("RunServer without DataDir: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "nested", "data")
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir, SyncAlways: true, MaxPayload: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.JetStreamEnabled() || !srv.JetStreamConfig().SyncAlways || !strings.HasPrefix(srv.JetStreamConfig().StoreDir, dir) {
		t.Fatalf("server JetStream config %+v", srv.JetStreamConfig())
	}
	if !strings.HasPrefix(srv.ClientURL(), "nats://127.0.0.1:") || srv.Name() != "agentlog-embedded" {
		t.Errorf("client URL %s name %s", srv.ClientURL(), srv.Name())
	}
	nc, js, err := natsdev.Connect(srv.ClientURL(), nats.Name("embedded-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.Opts.Name != "embedded-test" || nc.Opts.MaxReconnect != -1 {
		t.Errorf("connection options: name %q max reconnect %d, want the caller's name and the defaults", nc.Opts.Name, nc.Opts.MaxReconnect)
	}
	if nc.MaxPayload() != 512<<10 {
		t.Errorf("max payload %d", nc.MaxPayload())
	}
	s, err := store.Provision(testCtx(t), js, store.Config{})
	if err != nil || s.MaxMsgSize() != 512<<10 {
		t.Fatalf("Provision on the embedded server: %+v, %v", s, err)
	}
	// A second server on the same data dir restarts from the stored state after a shutdown.
	if _, err := storetest.Session(s, "persist").Append(testCtx(t), 0, notes(2)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()
	srv2, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir, MaxPayload: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv2.Shutdown(); srv2.WaitForShutdown() }()
	nc2, js2, err := natsdev.Connect(srv2.ClientURL(), nats.Name("embedded-test-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	s2, err := store.Open(testCtx(t), js2)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := storetest.ReadAll(testCtx(t), storetest.Session(s2, "persist")); err != nil || len(got) != 2 {
		t.Fatalf("after restart: %d events, %v", len(got), err)
	}
}

func TestConnectFailsClearly(t *testing.T) {
	_, _, err := natsdev.Connect("nats://127.0.0.1:1", nats.Name("nobody"))
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Connect to a closed port: %v", err)
	}
}

// TestRunServerRefusesSharedDataDir: two servers on one data directory would each see only their
// own writes; the second must be refused at once, and the directory is usable again after shutdown.
func TestRunServerRefusesSharedDataDir(t *testing.T) {
	dir := t.TempDir()
	a, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir}); err == nil {
		b.Shutdown()
		t.Fatal("a second embedded server on the same data directory started")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error does not say the directory is in use: %v", err)
	}
	a.Shutdown()
	a.WaitForShutdown()
	c, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir})
	if err != nil {
		t.Fatalf("restart on the same directory after shutdown: %v", err)
	}
	c.Shutdown()
	c.WaitForShutdown()
}

// TestRunServerRefusesBusyPort: a port already in use is refused at once, naming the address.
func TestRunServerRefusesBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = natsdev.RunServer(natsdev.ServerOptions{DataDir: t.TempDir(), Port: port})
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("busy port: err %v, want one naming %s", err, l.Addr())
	}
}
