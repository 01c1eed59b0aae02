package jetstream

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunEmbedded(t *testing.T) {
	if _, err := RunEmbedded(EmbeddedOptions{}); err == nil || !strings.Contains(err.Error(), "DataDir") {
		t.Fatalf("RunEmbedded without DataDir: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "nested", "data")
	srv, err := RunEmbedded(EmbeddedOptions{DataDir: dir, SyncAlways: true, MaxPayload: 512 << 10})
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
	nc, js, err := Connect(srv.ClientURL(), "embedded-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.MaxPayload() != 512<<10 {
		t.Errorf("max payload %d", nc.MaxPayload())
	}
	s, err := Provision(testCtx(t), js, Config{})
	if err != nil || s.MaxMsgSize != 512<<10 {
		t.Fatalf("Provision on the embedded server: %+v, %v", s, err)
	}
	// A second server on the same data dir restarts from the stored state after a shutdown.
	if _, err := s.Append(testCtx(t), "persist", 0, "", evs(0, 2, "p")); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()
	srv2, err := RunEmbedded(EmbeddedOptions{DataDir: dir, MaxPayload: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv2.Shutdown(); srv2.WaitForShutdown() }()
	nc2, js2, err := Connect(srv2.ClientURL(), "embedded-test-2")
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	s2, err := Open(testCtx(t), js2)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := s2.Read(testCtx(t), "persist"); err != nil || len(got) != 2 {
		t.Fatalf("after restart: %d events, %v", len(got), err)
	}
}

func TestConnectFailsClearly(t *testing.T) {
	_, _, err := Connect("nats://127.0.0.1:1", "nobody")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Connect to a closed port: %v", err)
	}
}

// TestRunEmbeddedRefusesSharedDataDir: two servers on one data directory would each see only their
// own writes; the second must be refused at once, and the directory is usable again after shutdown.
func TestRunEmbeddedRefusesSharedDataDir(t *testing.T) {
	dir := t.TempDir()
	a, err := RunEmbedded(EmbeddedOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := RunEmbedded(EmbeddedOptions{DataDir: dir}); err == nil {
		b.Shutdown()
		t.Fatal("a second embedded server on the same data directory started")
	} else if !strings.Contains(err.Error(), "in use") {
		t.Fatalf("error does not say the directory is in use: %v", err)
	}
	a.Shutdown()
	a.WaitForShutdown()
	c, err := RunEmbedded(EmbeddedOptions{DataDir: dir})
	if err != nil {
		t.Fatalf("restart on the same directory after shutdown: %v", err)
	}
	c.Shutdown()
	c.WaitForShutdown()
}

// TestRunEmbeddedRefusesBusyPort: a port already in use is refused at once, naming the address.
func TestRunEmbeddedRefusesBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = RunEmbedded(EmbeddedOptions{DataDir: t.TempDir(), Port: port})
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("busy port: err %v, want one naming %s", err, l.Addr())
	}
}
