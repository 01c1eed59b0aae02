// Package inspector is agentlog's web inspector: an HTTP server that shows sessions, read through
// the client package (listing, status, events, derived messages, projection snapshots, lineage)
// and, with AllowFork, forks them through the fork service.
//
// With AllowAdmin it also rebuilds a session's projection unit (projector.Rebuild), an operator
// action.
//
// Pages are server-rendered html/template (every session byte is escaped), with embedded CSS and
// a small embedded script for live updates (Server-Sent Events fed by a follow of the session's
// subject and a core subscription on the agentlog_sessions keys: no consumer). Everything static works
// without JavaScript. New returns a Server; Handler is its http.Handler; Serve runs it on a
// listener from Listen, which refuses a non-loopback address without a token.
package inspector

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Token, when set, is required on every request: "Authorization: Bearer TOKEN", or the cookie
	// a GET with ?token=TOKEN sets. Listen requires one for an address that is not loopback.
	Token string
	// AllowFork enables "fork from here" (POST, same-origin and CSRF-token checked). Without it
	// the inspector is read-only.
	AllowFork bool
	// AllowAdmin enables the operator actions (POST, checked as a fork is): rebuilding one
	// session's projection unit from its log (projector.Rebuild). It needs the rights to read the
	// session's records and write agentlog_projections.
	AllowAdmin bool
	// QueryTimeout bounds each query of a page (default 5 s).
	QueryTimeout time.Duration
	Logger       *slog.Logger
	// Domain is the JetStream domain of the agentlog it reads ("": the account's own), for an
	// inspector connected to a leaf node (client.Domain).
	Domain string
}

// Server serves the inspector. Close stops its watches and live streams.
type Server struct {
	c    *client.Client
	nc   *nats.Conn
	o    Options
	log  *slog.Logger
	tmpl *template.Template
	csrf string
	ctx  context.Context
	stop context.CancelFunc
	hub  *hub
	mux  http.Handler
	// rendered keeps what session pages were rendered from, for their live streams.
	rendered *renderedLogs
	close    sync.Once

	store *store.Store        // with AllowAdmin
	reg   *projector.Registry // with AllowAdmin: the built-in units
}

// New returns a Server reading through nc (a connection to a provisioned agentlog). It subscribes
// to the agentlog_sessions keys for the live sessions list. Errors: a template or the subscription.
func New(nc *nats.Conn, o Options) (*Server, error) {
	c, err := client.New(nc, client.Domain(o.Domain))
	if err != nil {
		return nil, err
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("inspector: templates: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Server{c: c, nc: nc, o: o, log: o.Logger, tmpl: tmpl, csrf: hex.EncodeToString(b), ctx: ctx, stop: stop, rendered: newRenderedLogs()}
	if s.hub, err = startHub(ctx, nc, o.Domain, o.Logger); err != nil {
		stop()
		return nil, err
	}
	if o.AllowAdmin {
		if err := s.openAdmin(ctx, nc); err != nil {
			stop()
			return nil, err
		}
	}
	s.mux = s.routes()
	return s, nil
}

// Close ends the live streams and the sessions watch.
func (s *Server) Close() { s.close.Do(s.stop) }

// Handler is the inspector's http.Handler: token check, security headers, then the routes.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET /{$}", s.handleList)
	mux.HandleFunc("GET /live", s.handleListLive)
	mux.HandleFunc("GET /sessions/{id}", s.handleSession)
	mux.HandleFunc("GET /sessions/{id}/live", s.handleSessionLive)
	mux.HandleFunc("GET /sessions/{id}/events.jsonl", s.handleRaw)
	mux.HandleFunc("GET /sessions/{id}/events/{seq}", s.handleEvent)
	mux.HandleFunc("GET /sessions/{id}/chunks", s.handleChunks)
	mux.HandleFunc("GET /sessions/{id}/messages.json", s.handleMessagesJSON)
	mux.HandleFunc("POST /sessions/{id}/fork", s.handleFork)
	mux.HandleFunc("POST /sessions/{id}/restore", s.handleRestore)
	mux.HandleFunc("GET /sessions/{id}/forked", s.handleForked)
	mux.HandleFunc("POST /sessions/{id}/rebuild", s.handleRebuild)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.errorPage(w, r, http.StatusNotFound, "Not found", fmt.Sprintf("There is no page at %s.", r.URL.Path))
	})
	return s.guard(mux)
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// CheckAddr checks a listen address (HOST:PORT) for the inspector: one that is not loopback (an
// empty host, 0.0.0.0, a LAN address or a name other than localhost) needs a token.
func CheckAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: want HOST:PORT: %w", addr, err)
	}
	if !isLoopback(host) && token == "" {
		return fmt.Errorf("listen address %q is not loopback: give --ui-token or --ui-token-file, which every request must then carry", addr)
	}
	return nil
}

// Listen opens addr for the inspector after CheckAddr. With certFile and keyFile it serves HTTPS.
func Listen(addr, token, certFile, keyFile string) (net.Listener, error) {
	if err := CheckAddr(addr, token); err != nil {
		return nil, err
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a TLS certificate needs its key, and a key its certificate")
	}
	var tlsConf *tls.Config
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("inspector: TLS certificate %s, key %s: %w", certFile, keyFile, err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("inspector: %w", err)
	}
	if tlsConf != nil {
		return &tlsListener{tls.NewListener(ln, tlsConf)}, nil
	}
	return ln, nil
}

// tlsListener marks a listener that serves TLS (for URL).
type tlsListener struct{ net.Listener }

// Serve serves the inspector on ln until ctx ends, then shuts down (live streams end at once,
// other requests get 1.5 s) and closes the Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		s.Close()
		return err
	case <-ctx.Done():
	}
	s.Close() // ends the live streams, whose requests would hold Shutdown up
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = hs.Close() // a request still running (a client not reading): cut it
	}
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// shutdownTimeout is how long Serve waits for the requests in flight once ctx ended (their reads
// of NATS are cancelled by then), so that the process stops within 2 s of SIGTERM.
const shutdownTimeout = 1500 * time.Millisecond

// URL is the address to open for ln: http://HOST:PORT/ (with ?token= when token is set).
func URL(ln net.Listener, token string) string {
	addr := ln.Addr().String()
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "::" || host == "0.0.0.0") {
		addr = net.JoinHostPort("localhost", port)
	}
	scheme := "http://"
	if _, ok := ln.(*tlsListener); ok {
		scheme = "https://"
	}
	u := scheme + addr + "/"
	if token != "" {
		u += "?token=" + token
	}
	return u
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
