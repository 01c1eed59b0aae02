// Package testserver starts an embedded nats-server for tests (natsdev.RunServer, file storage in
// the test's temp dir) and a connection to it, both stopped when the test ends. It imports no
// agentlog package but natsdev, so the jetstream package's own tests can use it; internal/testnats
// adds a provisioned store on top.
package testserver

import (
	"testing"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start runs an embedded server with opts (DataDir defaults to t.TempDir()) and connects to it as
// t.Name(). Both are stopped at cleanup; failures end the test.
func Start(t testing.TB, opts natsdev.ServerOptions) (url string, nc *nats.Conn, js jetstream.JetStream) {
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
