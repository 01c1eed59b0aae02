package devstack

import (
	"context"
	"log/slog"

	"github.com/agentlog/agentlog/internal/inspector"
	"github.com/nats-io/nats.go"
)

// UIOptions configure the web inspector StartUI serves.
type UIOptions struct {
	// Listen is the HTTP address HOST:PORT (port 0: a free one). One that is not loopback needs
	// Token (inspector.CheckAddr).
	Listen string
	// Token, when set, is required on every request (inspector.Options.Token).
	Token string
	// TLSCert and TLSKey, both or neither, are PEM files: the inspector then serves HTTPS.
	TLSCert, TLSKey string
	// AllowFork enables "fork from here"; without it the inspector is read-only.
	AllowFork bool
	// AllowAdmin enables the operator actions (inspector.Options.AllowAdmin).
	AllowAdmin bool
	// Domain is the JetStream domain of the agentlog ("": the account's own; inspector.Options.Domain).
	Domain string
}

// UI is a running inspector. Close stops it.
type UI struct {
	url  string
	stop context.CancelFunc
	done chan struct{}
	err  error
}

// StartUI serves the inspector over nc (a connection to a provisioned agentlog) on o.Listen until
// ctx ends or Close. Errors: the address (not loopback without a token, in use), the TLS files,
// the inspector's start. logger nil is slog.Default().
func StartUI(ctx context.Context, nc *nats.Conn, o UIOptions, logger *slog.Logger) (*UI, error) {
	if logger == nil {
		logger = slog.Default()
	}
	ln, err := inspector.Listen(o.Listen, o.Token, o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, err
	}
	srv, err := inspector.New(nc, inspector.Options{Token: o.Token, AllowFork: o.AllowFork, AllowAdmin: o.AllowAdmin, Logger: logger, Domain: o.Domain})
	if err != nil {
		ln.Close()
		return nil, err
	}
	if o.Token != "" && len(o.Token) < 16 {
		logger.Warn("agentlog ui: the token is short; use at least 16 random characters (openssl rand -hex 16)")
	}
	uctx, stop := context.WithCancel(ctx)
	u := &UI{url: inspector.URL(ln, o.Token), stop: stop, done: make(chan struct{})}
	go func() {
		defer close(u.done)
		u.err = srv.Serve(uctx, ln)
	}()
	return u, nil
}

// URL is the address to open: http(s)://HOST:PORT/, with ?token= when a token is set.
func (u *UI) URL() string { return u.url }

// Wait blocks until the inspector has stopped (its ctx ended, or Close) and returns why it
// stopped: nil after a clean shutdown.
func (u *UI) Wait() error {
	<-u.done
	return u.err
}

// Close stops the inspector (live streams end at once, other requests get 1.5 s) and waits for it.
func (u *UI) Close() error {
	u.stop()
	return u.Wait()
}
