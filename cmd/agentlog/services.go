package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agentlog/agentlog/forker"
	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/projector"
	"github.com/spf13/cobra"
)

func newDevCmd(g *globals) *cobra.Command {
	var o stackOptions
	c := &cobra.Command{
		Use:   "dev [--data DIR] [--listen HOST:PORT] [--projectors N]",
		Short: "Run an embedded nats-server with a projector and a forker, for local use",
		Long: `dev runs, in one process, an embedded nats-server (JetStream, file storage in --data), the agentlog
stream and KV buckets, N projectors and a forker. It prints the server URL, then serves until SIGINT or
SIGTERM, when it stops cleanly. The data stays in --data for the next start.

Point the other commands at it with --nats URL or AGENTLOG_NATS_URL.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Projectors < 0 {
				return &usageError{fmt.Errorf("--projectors must be >= 0, got %d", o.Projectors)}
			}
			abs, err := filepath.Abs(o.DataDir)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return fmt.Errorf("--data %s: %w", abs, err)
			}
			o.DataDir = abs
			o.Forker = true
			o.Logger = slog.New(slog.NewTextHandler(g.stderr, nil))
			s, err := startStack(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "agentlog dev: nats-server listening on %s (data %s, %d projector(s), forker on)\n", s.url, o.DataDir, o.Projectors)
			fmt.Fprintf(g.stdout, "  export AGENTLOG_NATS_URL=%s\n", s.url)
			<-cmd.Context().Done()
			fmt.Fprintln(g.stdout, "agentlog dev: shutting down")
			return s.Close()
		},
	}
	c.Flags().StringVar(&o.DataDir, "data", "./agentlog-data", "JetStream storage directory (kept across restarts)")
	c.Flags().StringVar(&o.Listen, "listen", "127.0.0.1:4222", "client listen address HOST:PORT (port 0: pick a free one)")
	c.Flags().IntVar(&o.Projectors, "projectors", 1, "number of projector instances to run (0: none, attach `agentlog projector` processes)")
	c.Flags().BoolVar(&o.SyncAlways, "sync-always", false, "fsync every write before acknowledging it (strict single-node durability; slower)")
	return c
}

func newProvisionCmd(g *globals) *cobra.Command {
	var cfg ajs.Config
	c := &cobra.Command{
		Use:   "provision [--partitions N] [--replicas R]",
		Short: "Create the agentlog stream and KV buckets on a NATS cluster (idempotent)",
		Long: `provision creates what is missing of the AGENTLOG stream, the AGENTLOG_ERRORS stream and the
agentlog_sessions and agentlog_projections KV buckets, and checks what exists. It refuses, naming the
setting, to run against an existing config it cannot use. The partition count is fixed at creation.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, js, err := ajs.Connect(g.natsURL, "agentlog-provision")
			if err != nil {
				return fmt.Errorf("connect to NATS at %s: %w", g.natsURL, err)
			}
			defer nc.Close()
			store, err := ajs.Provision(ctx, js, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "agentlog provisioned on %s: stream %s (%d partitions), KV %s, %s\n",
				g.natsURL, ajs.StreamName, store.Partitions, ajs.SessionsBucket, ajs.ProjectionsBucket)
			return nil
		},
	}
	c.Flags().IntVar(&cfg.Partitions, "partitions", ajs.DefaultPartitions, "partition count of a new stream (fixed at creation)")
	c.Flags().IntVar(&cfg.Replicas, "replicas", 1, "replicas of the stream and buckets (3 in production)")
	return c
}

func newProjectorCmd(g *globals) *cobra.Command {
	var name string
	c := &cobra.Command{
		Use:   "projector [--name NAME]",
		Short: "Run a projector instance against a NATS cluster until SIGINT/SIGTERM",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, store, err := g.connect(cmd.Context(), "agentlog-projector")
			if err != nil {
				return err
			}
			defer nc.Close()
			p := projector.New(store, nc, projector.Options{Name: name, Logger: slog.New(slog.NewTextHandler(g.stderr, nil))})
			if err := p.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "agentlog projector %q running on %s\n", name, g.natsURL)
			<-cmd.Context().Done()
			return p.Stop()
		},
	}
	c.Flags().StringVar(&name, "name", "", "instance name (default: host-pid)")
	return c
}

func newForkerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "forker",
		Short: "Run a fork service instance against a NATS cluster until SIGINT/SIGTERM",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, store, err := g.connect(cmd.Context(), "agentlog-forker")
			if err != nil {
				return err
			}
			defer nc.Close()
			f := forker.New(store, nc, forker.Options{Logger: slog.New(slog.NewTextHandler(g.stderr, nil))})
			if err := f.Start(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "agentlog forker running on %s\n", g.natsURL)
			<-cmd.Context().Done()
			return f.Stop()
		},
	}
}
