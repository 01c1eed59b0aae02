package natsdev

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerOptions configure RunServer. Zero values: Host 127.0.0.1, Port -1 (random), SyncAlways
// false, ServerName "agentlog-embedded". DataDir is required.
type ServerOptions struct {
	DataDir    string
	Host       string
	Port       int
	SyncAlways bool
	ServerName string

	// Logs turns on the server's own logger (to stderr). Off by default: the embedded server is quiet.
	Logs bool
	// Logger, when set (and Logs is not), receives the server's warnings and errors (Warn, Error;
	// its notices at Debug): what it reports about data it lost or discarded at a restart (a
	// truncated or corrupt block, a stream whose metafile does not check), and any failure.
	Logger *slog.Logger
	// MaxPayload is the server's max_payload in bytes (0: the server default, 1 MiB). It bounds the
	// max message size of the AGENTLOG stream.
	MaxPayload int32

	// HTTPHost and HTTPPort serve the monitoring endpoints (/varz, /jsz, ...): port 0 none, -1
	// random (see MonitorAddr). HTTPHost defaults to Host.
	HTTPHost string
	HTTPPort int
	// SystemUser and SystemPassword, when both set, add the system account SYS with this user, for
	// `nats server ls` and the like. Clients without credentials stay on the global account.
	SystemUser, SystemPassword string
	// JetStreamDomain is the server's JetStream domain ("": none): clients of a leaf node of this
	// server reach its JetStream at $JS.<domain>.API.> (deploy/leaf-node).
	JetStreamDomain string
}

// SystemAccount is the name of the system account RunServer adds with ServerOptions.SystemUser.
const SystemAccount = "SYS"

// noAuthUser is the global account's user of clients without credentials, when a system user is set.
const noAuthUser = "agentlog"

// MonitorAddr returns the HOST:PORT of srv's monitoring endpoints ("" when off).
func MonitorAddr(srv *server.Server) string {
	if a := srv.MonitorAddr(); a != nil {
		return a.String()
	}
	return ""
}

// ReadyTimeout is how long RunServer waits for the server to accept connections.
const ReadyTimeout = 10 * time.Second

// RunServer starts a single-node nats-server with JetStream and file storage in opts.DataDir
// (created if missing) and waits until it is ready; stop it with Shutdown then WaitForShutdown.
//
// Port 0 and -1 pick a free port (see ClientURL). SyncAlways fsyncs every write; otherwise the
// store syncs every 2 minutes, which survives a process crash but not a power loss. The server
// installs no signal handlers. DataDir is locked (DataDirLockFile) until shutdown, so a second
// server on it is refused at once, as is a busy port; errors name the directory and address.
func RunServer(opts ServerOptions) (*server.Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("embedded nats-server: DataDir is required (JetStream file storage directory)")
	}
	if err := os.MkdirAll(opts.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats-server: data directory %s: %w", opts.DataDir, err)
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
		return nil, fmt.Errorf("embedded nats-server: max payload %d bytes, want ≥ 0", opts.MaxPayload)
	}
	lock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
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
			return nil, fmt.Errorf("embedded nats-server: cannot listen on %s: %w", listen, err)
		}
		l.Close()
	}
	sopts := &server.Options{
		ServerName:      opts.ServerName,
		Host:            opts.Host,
		Port:            opts.Port,
		JetStream:       true,
		StoreDir:        opts.DataDir,
		JetStreamDomain: opts.JetStreamDomain,
		SyncAlways:      opts.SyncAlways,
		MaxPayload:      opts.MaxPayload,
		NoLog:           !opts.Logs && opts.Logger == nil,
		NoSigs:          true,
		HTTPPort:        opts.HTTPPort,
		HTTPHost:        opts.HTTPHost,
	}
	if sopts.HTTPPort != 0 && sopts.HTTPHost == "" {
		sopts.HTTPHost = opts.Host
	}
	if (opts.SystemUser == "") != (opts.SystemPassword == "") {
		unlock()
		return nil, errors.New("embedded nats-server: a system user needs both a name and a password")
	}
	if opts.SystemUser != "" {
		if opts.SystemUser == noAuthUser {
			unlock()
			return nil, fmt.Errorf("embedded nats-server: system user %q is the name of the global account's user", noAuthUser)
		}
		sys := server.NewAccount(SystemAccount)
		sopts.Accounts = []*server.Account{sys}
		sopts.SystemAccount = SystemAccount
		sopts.Users = []*server.User{
			{Username: opts.SystemUser, Password: opts.SystemPassword, Account: sys},
			{Username: noAuthUser}, // the global account
		}
		sopts.NoAuthUser = noAuthUser
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("embedded nats-server (data %s, listen %s): %w", opts.DataDir, listen, err)
	}
	switch {
	case opts.Logs:
		srv.ConfigureLogger()
	case opts.Logger != nil:
		srv.SetLoggerV2(serverLogger{opts.Logger}, false, false, false)
	}
	go srv.Start()
	go func() { srv.WaitForShutdown(); unlock() }()
	if !srv.ReadyForConnections(ReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server (data %s, listen %s) not ready for connections within %s (see the server log with ServerOptions.Logs)",
			opts.DataDir, listen, ReadyTimeout)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server (data %s, listen %s) started without JetStream (data directory not writable? see the server log with ServerOptions.Logs)",
			opts.DataDir, listen)
	}
	return srv, nil
}
