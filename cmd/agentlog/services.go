package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

func newDevCmd(g *globals) *cobra.Command {
	var o devstack.Options
	var metricsAddr string
	var ui uiOptions
	c := &cobra.Command{
		Use:   "dev [--data DIR] [--listen HOST:PORT] [--projectors N] [--forkers N] [--http HOST:PORT] [--metrics-addr HOST:PORT] [--ui HOST:PORT]",
		Short: "Run an embedded nats-server with a projector and a forker, for local use",
		Long: `dev runs, in one process, an embedded nats-server (JetStream, file storage in --data), the agentlog
stream and KV buckets, N projectors (--projectors) and M forkers (--forkers). It prints the server URL, then serves until SIGINT or
SIGTERM, when it stops cleanly. The data stays in --data for the next start.

Point the other commands at it with --nats URL or AGENTLOG_NATS_URL.

The server has a system account (SYS) with the user --system-user: its password, unless given with
--system-password, is generated once and kept in DIR/system-account.json. It is printed at start, for
` + "`nats --user sys --password PW server ls`" + ` and ` + "`nats ... server report jetstream`" + `. Clients without
credentials use the global account, as before. --http serves the server's monitoring endpoints
(/varz, /jsz, ...); --metrics-addr the services' /metrics, /healthz and /readyz; --ui the web inspector
(as ` + "`agentlog ui`" + `, with --ui-token, --ui-token-file, --ui-tls-cert, --ui-tls-key and --ui-allow-fork).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Projectors < 0 {
				return &usageError{fmt.Errorf("--projectors must be >= 0, got %d", o.Projectors)}
			}
			if o.Forkers < 0 {
				return &usageError{fmt.Errorf("--forkers must be >= 0, got %d", o.Forkers)}
			}
			if _, _, err := devstack.HostPort("--listen", o.Listen); err != nil {
				return &usageError{err}
			}
			if o.HTTP != "" {
				if _, _, err := devstack.HostPort("--http", o.HTTP); err != nil {
					return &usageError{err}
				}
			}
			abs, err := filepath.Abs(o.DataDir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return fmt.Errorf("--data %s: %w", abs, err)
			}
			o.DataDir = abs
			if ui.Listen != "" {
				if err := ui.check(); err != nil {
					return err
				}
				o.UI = ui.UIOptions
			}
			o.Logger = slog.New(slog.NewTextHandler(g.stderr, nil))
			o.MaxEventBytes = g.maxEventBytes
			if err := store.CheckDomain(o.Domain); err != nil {
				return &usageError{fmt.Errorf("--js-domain: %w", err)}
			}
			o.UI.Domain = o.Domain
			if o.SystemUser != "" && o.SystemPassword == "" {
				if o.SystemPassword, err = devSystemPassword(abs, o.SystemUser); err != nil {
					return err
				}
			}
			var out bytes.Buffer // printed after the first line
			ob, err := startObserver(metricsAddr, &out)
			if err != nil {
				return err
			}
			defer ob.Close()
			ob.setReady(notReady("starting the embedded nats-server"))
			s, err := devstack.Start(cmd.Context(), o)
			if err != nil {
				return err
			}
			s.Register(ob.registerer())
			ob.setReady(s.Ready)
			fmt.Fprintf(g.stdout, "agentlog dev: nats-server listening on %s (data %s, %d projector(s), %d forker(s))\n", s.URL(), o.DataDir, o.Projectors, o.Forkers)
			fmt.Fprintf(g.stdout, "  export AGENTLOG_NATS_URL=%s\n", s.URL())
			if o.SystemUser != "" {
				fmt.Fprintf(g.stdout, "  system account: nats --server %s --user %s --password %s server ls\n", s.URL(), o.SystemUser, o.SystemPassword)
			}
			if a := natsdev.MonitorAddr(s.Server()); a != "" {
				fmt.Fprintf(g.stdout, "  monitoring: http://%s/varz (and /jsz, /connz, ...)\n", a)
			}
			io.Copy(g.stdout, &out)
			if u := s.UI(); u != nil {
				printUI(g.stdout, u, ui.UIOptions)
			}
			<-cmd.Context().Done()
			fmt.Fprintln(g.stdout, "agentlog dev: shutting down")
			ob.setReady(notReady("shutting down"))
			return s.Close()
		},
	}
	c.Flags().StringVar(&o.DataDir, "data", "./agentlog-data", "JetStream storage directory (kept across restarts)")
	c.Flags().StringVar(&o.Listen, "listen", "127.0.0.1:4222", "client listen address HOST:PORT (port 0: pick a free one)")
	c.Flags().IntVar(&o.Projectors, "projectors", 1, "number of projector instances to run (0: none; attach separate \"agentlog projector\" processes)")
	c.Flags().IntVar(&o.Forkers, "forkers", 1, "number of forker instances to run (0: none; attach separate \"agentlog forker\" processes)")
	c.Flags().BoolVar(&o.SyncAlways, "sync-always", false, "fsync every write before acknowledging it (strict single-node durability; slower)")
	c.Flags().StringVar(&o.HTTP, "http", "", "serve the nats-server monitoring endpoints (/varz, /jsz, ...) on HOST:PORT (off by default)")
	c.Flags().StringVar(&o.Domain, "js-domain", "", "JetStream `DOMAIN` of the embedded server (\"\": none), for leaf nodes to reach it (deploy/leaf-node); its services use it")
	c.Flags().StringVar(&o.SystemUser, "system-user", "sys", "user of the system account (\"\": no system account)")
	c.Flags().StringVar(&o.SystemPassword, "system-password", "", "password of the system user (default: generated once, kept in DIR/"+SystemAccountFile+")")
	addMetricsFlag(c, &metricsAddr)
	c.Flags().StringVar(&ui.Listen, "ui", "", "serve the web inspector on HOST:PORT (off by default; non-loopback needs --ui-token)")
	ui.addFlags(c, "ui-allow-fork", "ui-allow-admin")
	g.addMaxEventBytesFlag(c)
	return c
}

func newProvisionCmd(g *globals) *cobra.Command {
	var cfg store.Config
	var pf policyFlags
	c := &cobra.Command{
		Use:   "provision [--partitions N] [--replicas R] [--archive-after D] [--retain-for D]",
		Short: "Create the agentlog stream and KV buckets on a NATS cluster (idempotent)",
		Long: `provision creates what is missing of the AGENTLOG stream, the AGENTLOG_ERRORS stream and the
agentlog_sessions and agentlog_projections KV buckets, and checks what exists. It refuses, naming the
setting, to run against an existing config it cannot use. The partition count is fixed at creation.
--partitions and --replicas apply to what it creates (defaults 16 and 1); run again on a provisioned
cluster without them, it keeps what exists (an R3 cluster stays R3), and with them it checks that
what exists has them.
It also creates the lifecycle's stream AGENTLOG_ARCHIVE (archived sessions), the lineage index
AGENTLOG_CHILDREN and the KV bucket agentlog_lifecycle, and stores the lifecycle policy given by
--archive-after and --retain-for (either may be off; a value not given keeps the cluster's: 24h and
off on a new cluster). It rebuilds the lineage index (AGENTLOG_CHILDREN) from the sessions'
metadata: one pass over agentlog_sessions.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Partitions < 1 || cfg.Partitions > wire.MaxPartitions {
				return &usageError{fmt.Errorf("--partitions must be 1..%d, got %d", wire.MaxPartitions, cfg.Partitions)}
			}
			if cfg.Replicas < 1 || cfg.Replicas > 5 {
				return &usageError{fmt.Errorf("--replicas must be 1..5, got %d", cfg.Replicas)}
			}
			// A setting not given is not asked for: store.Provision then applies its default to
			// what it creates and keeps what exists (0 means "not given" there).
			if !cmd.Flags().Changed("partitions") {
				cfg.Partitions = 0
			}
			if !cmd.Flags().Changed("replicas") {
				cfg.Replicas = 0
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, js, err := natsdev.ConnectDomain(g.natsURL, g.conn.jsDomain, g.natsOptions("agentlog-provision")...)
			if err != nil {
				return err
			}
			defer nc.Close()
			st, err := store.Provision(ctx, js, cfg)
			if err != nil {
				return err
			}
			p, err := pf.apply(cmd, g, st)
			if err != nil {
				return err
			}
			// The lineage index from the metadata (forks made before it existed get their links).
			if _, err := st.RebuildLineage(ctx); err != nil {
				return err
			}
			replicas := st.Stream().CachedInfo().Config.Replicas
			fmt.Fprintf(g.stdout, "agentlog provisioned on %s: streams %s (%d partitions, %d replicas), %s, %s and %s, KV buckets %s, %s, %s and %s, the projectors' %d partition consumers %s-*; lifecycle: archive-after %s, retain-for %s\n",
				g.natsURL, wire.StreamName, st.Partitions(), replicas, wire.ErrorsStream, wire.ArchiveStream, wire.ChildrenStream, wire.SessionsBucket, wire.ProjectionsBucket, wire.LifecycleBucket,
				store.ProjectorMembersBucket, st.Partitions(), store.ProjectorConsumerPrefix,
				store.FormatPolicyDuration(p.ArchiveAfter), store.FormatPolicyDuration(p.RetainFor))
			return nil
		},
	}
	c.Flags().IntVar(&cfg.Partitions, "partitions", wire.DefaultPartitions, "partition count of a new stream (fixed at creation; not given: an existing stream's is kept)")
	c.Flags().IntVar(&cfg.Replicas, "replicas", 1, "replicas of the stream and buckets it creates (3 in production; not given: existing ones keep theirs)")
	pf.add(c)
	return c
}

func newProjectorCmd(g *globals) *cobra.Command {
	var name string
	var lifecycleInterval time.Duration
	var cacheSessions int
	var flush time.Duration
	var queryCacheMiB int64
	var metricsAddr string
	c := &cobra.Command{
		Use:   "projector [--name NAME] [--metrics-addr HOST:PORT]",
		Short: "Run a projector instance against a NATS cluster until SIGINT/SIGTERM",
		Long: `projector folds session logs into the projection units (messages, transcript, title, todos, usage,
tools, turns) in the agentlog_projections KV bucket and serves the agentlog-query service.

Run several, each with its own --name: the instances divide the stream's partitions among themselves
(a lease per instance in the agentlog_projector_members KV bucket; partition p is consumed in order by
one instance through the durable consumer agentlog-projector-<p>). A killed instance's partitions
resume on the survivors within about 4 s; a new instance takes its share at once. Started before NATS is
up (or before agentlog is provisioned there), it waits and retries. Restarted under its own --name after
a crash on the same host, it takes its lease back at once; a name held by a live instance elsewhere is
waited for.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cacheSessions < 1 {
				return &usageError{fmt.Errorf("--cache-sessions must be >= 1, got %d", cacheSessions)}
			}
			if flush <= 0 {
				return &usageError{fmt.Errorf("--flush-interval must be > 0, got %s", flush)}
			}
			if queryCacheMiB < 0 || queryCacheMiB > 1<<20 {
				return &usageError{fmt.Errorf("--query-cache-mib must be 0..%d (1 TiB), got %d", 1<<20, queryCacheMiB)}
			}
			queryCache := queryCacheMiB << 20
			if queryCache == 0 {
				queryCache = -1 // keep nothing
			}
			logger, ob, nc, store, err := g.startService(cmd.Context(), metricsAddr, "agentlog-projector")
			if err != nil {
				return err
			}
			defer ob.Close()
			defer nc.Close()
			if err := waitProjectorProvisioned(cmd.Context(), store, logger); err != nil {
				return err
			}
			p, err := projector.New(store, nc, projector.Options{Name: name, Logger: logger,
				CacheSessions: cacheSessions, FlushInterval: flush, QueryCacheBytes: queryCache,
				LifecycleInterval: lifecycleInterval})
			if err != nil {
				return err
			}
			ob.register(p.Collector())
			ob.setReady(p.Ready)
			if err := p.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "agentlog projector %q running on %s (%d partitions, owns %v)\n", p.Name(), g.natsURL, store.Partitions(), p.Owned())
			<-cmd.Context().Done()
			return p.Stop()
		},
	}
	c.Flags().StringVar(&name, "name", "", "instance name, unique among the running projectors (default: host-pid)")
	c.Flags().IntVar(&cacheSessions, "cache-sessions", projector.DefaultCacheSessions, "hot session states kept in memory (the rest is read back from KV)")
	c.Flags().DurationVar(&flush, "flush-interval", projector.DefaultFlushInterval, "longest a folded record waits for its checkpoint")
	c.Flags().Int64Var(&queryCacheMiB, "query-cache-mib", projector.DefaultQueryCacheBytes>>20,
		"MiB of user, assistant and tool-result events kept so that a messages query reads only the records appended since the session's last query (0: read the whole log each time)")
	c.Flags().DurationVar(&lifecycleInterval, "lifecycle-interval", projector.DefaultLifecycleInterval,
		"how often the instance owning partition 0 applies the cluster's lifecycle policy (as agentlog lifecycle run does; it needs the right to purge; negative: never)")
	addMetricsFlag(c, &metricsAddr)
	return c
}

func newForkerCmd(g *globals) *cobra.Command {
	var metricsAddr string
	c := &cobra.Command{
		Use:   "forker [--metrics-addr HOST:PORT]",
		Short: "Run a fork service instance against a NATS cluster until SIGINT/SIGTERM",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, ob, nc, store, err := g.startService(cmd.Context(), metricsAddr, "agentlog-forker")
			if err != nil {
				return err
			}
			defer ob.Close()
			defer nc.Close()
			f, err := forker.New(store, nc, forker.Options{Logger: logger})
			if err != nil {
				return err
			}
			ob.register(f.Collector())
			ob.setReady(f.Ready)
			if err := f.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "agentlog forker running on %s\n", g.natsURL)
			<-cmd.Context().Done()
			return f.Stop()
		},
	}
	addMetricsFlag(c, &metricsAddr)
	g.addMaxEventBytesFlag(c)
	return c
}

// startService starts a service process's metrics server (not ready until connected) and its
// connection, waiting for NATS. On error nothing is left open.
func (g *globals) startService(ctx context.Context, metricsAddr, name string) (*slog.Logger, *observer, *nats.Conn, *store.Store, error) {
	logger := slog.New(slog.NewTextHandler(g.stderr, nil))
	ob, err := startObserver(metricsAddr, g.stdout)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ob.setReady(notReady("connecting to NATS at " + g.natsURL))
	nc, store, err := g.connectWait(ctx, name, logger)
	if err != nil {
		ob.Close()
		return nil, nil, nil, nil, err
	}
	return logger, ob, nc, store, nil
}

// waitProjectorProvisioned waits, as connectWait does for the stream and buckets (retryWhile),
// until the projector's partition consumers and members bucket exist (a provision in progress
// creates them after the stream). One that exists with other settings is returned at once.
func waitProjectorProvisioned(ctx context.Context, st *store.Store, logger *slog.Logger) error {
	_, err := retryWhile(ctx, logger, "the projector's provisioning",
		"agentlog: waiting for the projector's consumers and members bucket (run agentlog provision); retrying until they exist",
		func() error {
			if _, err := st.ProjectorMembers(ctx); err != nil {
				return err
			}
			for part := 0; part < st.Partitions(); part++ {
				if _, err := st.CheckProjector(ctx, part); err != nil {
					return err
				}
			}
			return nil
		},
		func(err error) bool {
			return errors.Is(err, natsjs.ErrConsumerNotFound) || errors.Is(err, natsjs.ErrBucketNotFound)
		})
	return err
}
