// Package obs serves a process's metrics and health over HTTP: /metrics (Prometheus), /healthz
// (the process is alive) and /readyz (ready to serve, else 503 with the reason).
package obs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry is a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ReadyFunc reports why the process is not ready (nil: ready).
type ReadyFunc func(ctx context.Context) error

// Server is a running metrics and health HTTP server.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error

	mu    sync.Mutex
	ready ReadyFunc
}

// ErrStarting is the readiness of a Server whose ReadyFunc is not set yet.
var ErrStarting = errors.New("starting")

// readyTimeout bounds one /readyz check.
const readyTimeout = 3 * time.Second

// Serve listens on addr (HOST:PORT; port 0 picks one) and serves reg. /readyz answers 503
// "starting" until SetReady.
func Serve(addr string, reg prometheus.Gatherer) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	s := &Server{ln: ln, done: make(chan error, 1)}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetReady sets the readiness check.
func (s *Server) SetReady(f ReadyFunc) {
	s.mu.Lock()
	s.ready = f
	s.mu.Unlock()
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.ready
	s.mu.Unlock()
	err := ErrStarting
	if f != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		err = f(ctx)
		cancel()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:", err)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Close shuts the server down gracefully, waiting up to 5 s for requests in flight.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// All is ready when every check is (the first failure is the reason).
func All(checks ...ReadyFunc) ReadyFunc {
	return func(ctx context.Context) error {
		for _, c := range checks {
			if err := c(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}
