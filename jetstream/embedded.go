package jetstream

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// EmbeddedOptions configure RunEmbedded. Zero values: Host 127.0.0.1, Port -1 (random), SyncAlways false.
type EmbeddedOptions struct {
	DataDir    string
	Host       string
	Port       int
	SyncAlways bool
	ServerName string

	// Logs turns on the server's own logger (to stderr). Off by default: the embedded server is quiet.
	Logs bool
	// MaxPayload is the server's max_payload in bytes (0: the server default, 1 MiB). It bounds the
	// max message size of the AGENTLOG stream.
	MaxPayload int32
}

// EmbeddedReadyTimeout is how long RunEmbedded waits for the server to accept connections.
const EmbeddedReadyTimeout = 10 * time.Second

// RunEmbedded starts a single-node nats-server with JetStream and file storage in DataDir and waits
// until it is ready. Shut it down with srv.Shutdown(); srv.WaitForShutdown().
//
// DataDir is required (it is created if missing); JetStream keeps its files under it. Port 0 and
// -1 both pick a random free port (srv.ClientURL() tells which). SyncAlways makes the file store
// fsync every write ("sync: always", strict single-node durability, design.md §5); otherwise the
// server syncs every 2 minutes, which survives a process crash but not a power loss. ServerName
// defaults to "agentlog-embedded". The server does not install signal handlers. The data directory
// is locked (flock on DataDir/agentlog.lock) until the server shuts down, so a second server on the
// same directory is refused at once, as is a port already in use. Errors name the
// data directory and the listen address.
func RunEmbedded(opts EmbeddedOptions) (*server.Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("agentlog: embedded nats-server: DataDir is required (JetStream file storage directory)")
	}
	if err := os.MkdirAll(opts.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("agentlog: embedded nats-server: data directory %s: %w", opts.DataDir, err)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = -1
	}
	if opts.ServerName == "" {
		opts.ServerName = "agentlog-embedded"
	}
	if opts.MaxPayload < 0 {
		return nil, fmt.Errorf("agentlog: embedded nats-server: max payload %d bytes, want ≥ 0", opts.MaxPayload)
	}
	lock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("agentlog: embedded nats-server: %w", err)
	}
	unlock := func() {
		if lock != nil {
			lock.Close()
		}
	}
	listen := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	if opts.Port > 0 {
		// Fail at once, with the address, rather than waiting for a server that cannot bind.
		l, err := net.Listen("tcp", listen)
		if err != nil {
			unlock()
			return nil, fmt.Errorf("agentlog: embedded nats-server: cannot listen on %s: %w", listen, err)
		}
		l.Close()
	}
	sopts := &server.Options{
		ServerName: opts.ServerName,
		Host:       opts.Host,
		Port:       opts.Port,
		JetStream:  true,
		StoreDir:   opts.DataDir,
		SyncAlways: opts.SyncAlways,
		MaxPayload: opts.MaxPayload,
		NoLog:      !opts.Logs,
		NoSigs:     true,
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("agentlog: embedded nats-server (data %s, listen %s): %w", opts.DataDir, listen, err)
	}
	if opts.Logs {
		srv.ConfigureLogger()
	}
	go srv.Start()
	go func() { srv.WaitForShutdown(); unlock() }()
	if !srv.ReadyForConnections(EmbeddedReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("agentlog: embedded nats-server (data %s, listen %s) not ready for connections within %s (see the server log with EmbeddedOptions.Logs)",
			opts.DataDir, listen, EmbeddedReadyTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("agentlog: embedded nats-server (data %s, listen %s) started without JetStream (data directory not writable? see the server log with EmbeddedOptions.Logs)",
			opts.DataDir, listen)
	}
	return srv, nil
}

// Connect dials url (one URL or several, comma separated) as client name and returns the
// connection and a JetStream handle (nats.go jetstream package). It reconnects forever (every
// 250 ms plus jitter) and buffers up to 8 MiB of publishes while reconnecting; the first connect
// fails fast (5 s dial timeout) so a wrong URL is reported at once. Close the connection when done.
func Connect(url string, name string) (*nats.Conn, natsjs.JetStream, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.Timeout(5*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(8<<20),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("agentlog: connect to NATS at %s: %w", url, err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("agentlog: JetStream on %s: %w", url, err)
	}
	return nc, js, nil
}
