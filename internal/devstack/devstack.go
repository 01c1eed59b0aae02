package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure an in-process stack: an embedded nats-server plus the agentlog services.
type Options struct {
	DataDir    string // JetStream file storage directory
	Listen     string // host:port for the server; port 0 picks a free one ("": 127.0.0.1:0)
	Projectors int    // projector instances to run (0: none)
	Forkers    int    // forker instances to run (0: none)
	SyncAlways bool   // fsync every write
	Logger     *slog.Logger
	// MaxEventBytes caps one event's JSON line in the forkers' writes (0: the default).
	MaxEventBytes int64

	HTTP                       string // host:port of the server's monitoring endpoints ("": none)
	SystemUser, SystemPassword string // the system account's user ("": none)

	// Name is the server's name and the stack connection's (default "agentlog-dev").
	Name string
	// Config provisions the stream and buckets (zero: the defaults).
	Config store.Config
	// Domain is the embedded server's JetStream domain ("": none); the stack's services use it.
	Domain string
	// UI serves the web inspector on the stack's connection when UI.Listen is set.
	UI UIOptions
}

// Stack is a running embedded server with its services. Close stops everything in reverse order and
// leaves the data directory intact.
type Stack struct {
	srv        *server.Server
	nc         *nats.Conn
	store      *store.Store
	projectors []*projector.Projector
	forkers    []*forker.Forker
	url        string
	ui         *UI
}

// Start starts the embedded server, provisions the stream and buckets (idempotently), and
// starts the requested services and the inspector. On error everything already started is
// stopped. The inspector serves until Close (or until ctx ends).
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	host, port, err := HostPort("--listen", o.Listen)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Name == "" {
		o.Name = "agentlog-dev"
	}
	sopts := natsdev.ServerOptions{DataDir: o.DataDir, Host: host, Port: port, SyncAlways: o.SyncAlways, ServerName: o.Name,
		SystemUser: o.SystemUser, SystemPassword: o.SystemPassword, Logger: o.Logger, JetStreamDomain: o.Domain}
	if o.HTTP != "" {
		if sopts.HTTPHost, sopts.HTTPPort, err = HostPort("--http", o.HTTP); err != nil {
			return nil, err
		}
	}
	srv, err := natsdev.RunServer(sopts)
	if err != nil {
		return nil, err // natsdev names the server, its data directory and address
	}
	s := &Stack{srv: srv, url: srv.ClientURL()}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	nc, js, err := natsdev.ConnectDomain(s.url, o.Domain, nats.Name(o.Name))
	if err != nil {
		return nil, err
	}
	s.nc = nc
	warnLostStream(ctx, js, o.Logger)
	if s.store, err = store.Provision(ctx, js, o.Config); err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}
	s.store = s.store.WithMaxEventBytes(o.MaxEventBytes)
	for i := 0; i < o.Projectors; i++ {
		p, err := projector.New(s.store, nc, projector.Options{Name: fmt.Sprintf("dev-projector-%d", i+1), Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("projector %d: %w", i+1, err)
		}
		if err := p.Start(ctx); err != nil {
			return nil, fmt.Errorf("start projector %d: %w", i+1, err)
		}
		s.projectors = append(s.projectors, p)
	}
	for i := 0; i < o.Forkers; i++ {
		f, err := forker.New(s.store, nc, forker.Options{Logger: o.Logger})
		if err != nil {
			return nil, fmt.Errorf("forker %d: %w", i+1, err)
		}
		if err := f.Start(ctx); err != nil {
			return nil, fmt.Errorf("start forker %d: %w", i+1, err)
		}
		s.forkers = append(s.forkers, f)
	}
	if o.UI.Listen != "" {
		if s.ui, err = StartUI(ctx, nc, o.UI, o.Logger); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// warnLostStream logs an error when the AGENTLOG stream is missing while agentlog_sessions holds
// sessions: the server discarded the stream (a corrupt metafile, a lost directory; its own warning
// is logged before), so the sessions' records are gone, and Provision creates the stream again,
// empty. Readers then report each session's loss (client.ErrDataLoss).
func warnLostStream(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) {
	if _, err := js.Stream(ctx, wire.StreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	kv, err := js.KeyValue(ctx, wire.SessionsBucket)
	if err != nil {
		return
	}
	st, err := kv.Status(ctx)
	if err != nil || st.Values() == 0 {
		return
	}
	logger.Error("agentlog dev: the server has no stream "+wire.StreamName+" but "+wire.SessionsBucket+" names sessions: their records are lost (see the server's warnings above); the stream is created again, empty",
		"stream", wire.StreamName, "bucket", wire.SessionsBucket, "entries", st.Values())
}

// HostPort parses a HOST:PORT flag value for nats-server: port 0 becomes -1 (pick a free one).
// Errors name flag.
func HostPort(flag, v string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(v)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: want HOST:PORT: %w", flag, v, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s %q: port must be 0..65535", flag, v)
	}
	if port == 0 {
		port = -1 // nats-server's "pick a random port"
	}
	return host, port, nil
}

// Register registers the services' metrics with r (nil: none); several forkers are labelled
// forker="<n>".
func (s *Stack) Register(r prometheus.Registerer) {
	if r == nil {
		return
	}
	for _, p := range s.projectors {
		r.MustRegister(p.Collector())
	}
	for i, f := range s.forkers {
		fr := r
		if len(s.forkers) > 1 {
			fr = prometheus.WrapRegistererWith(prometheus.Labels{"forker": strconv.Itoa(i + 1)}, r)
		}
		fr.MustRegister(f.Collector())
	}
}

// Ready reports why the stack cannot serve: the server, the connection, a service.
func (s *Stack) Ready(ctx context.Context) error {
	if !s.srv.Running() {
		return errors.New("nats-server not running")
	}
	if st := s.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("not connected to the embedded nats-server (%s)", st)
	}
	for _, p := range s.projectors {
		if err := p.Ready(ctx); err != nil {
			return fmt.Errorf("projector %s: %w", p.Name(), err)
		}
	}
	for i, f := range s.forkers {
		if err := f.Ready(ctx); err != nil {
			return fmt.Errorf("forker %d: %w", i+1, err)
		}
	}
	return nil
}

// Close stops the inspector and the services, closes the connection and shuts the server down,
// waiting for it.
func (s *Stack) Close() error {
	// The inspector and the services stop together: each is bounded (its shutdown timeout,
	// projector.StopTimeout, forker.StopTimeout), so dev stops within 2 s of SIGTERM however
	// many it runs.
	errs := make([]error, 1+len(s.forkers)+len(s.projectors))
	var wg sync.WaitGroup
	if s.ui != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errs[0] = s.ui.Close() }()
	}
	for i, f := range s.forkers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[1+i] = f.Stop() }()
	}
	for i, p := range s.projectors {
		wg.Add(1)
		go func() { defer wg.Done(); errs[1+len(s.forkers)+i] = p.Stop() }()
	}
	wg.Wait()
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	return errors.Join(errs...)
}
