package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentlog/agentlog/internal/bench"
	"github.com/agentlog/agentlog/publisher"
	"github.com/spf13/cobra"
)

// The bench commands: their flags and usage checks. What they measure and print is package
// internal/bench.

func newBenchCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure agentlog against raw JetStream on an embedded server",
		Args:  exactArgs(0, "a subcommand (append, project, turn, memory, fork, scale or lifecycle)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &usageError{fmt.Errorf("%s needs a subcommand (append, project, turn, memory, fork, scale or lifecycle)", cmd.CommandPath())}
		},
	}
	c.AddCommand(newBenchAppendCmd(g), newBenchProjectCmd(g), newBenchTurnCmd(g), newBenchMemoryCmd(g), newBenchForkCmd(g),
		newBenchScaleCmd(g), newBenchScaleServerCmd(g), newBenchLifecycleCmd(g))
	return c
}

func newBenchAppendCmd(g *globals) *cobra.Command {
	o := bench.AppendOptions{}
	c := &cobra.Command{
		Use:   "append [--sessions N] [--events M] [--size BYTES] [--json]",
		Short: "Publisher throughput against raw async JetStream publishing, in one run",
		Long: `append starts an embedded nats-server (file storage in a temporary directory, or --data) and
measures, in the same run and on the same server:

  (b) baseline: raw nats.go async publishing (jetstream.PublishMsgAsync) of the same events, one
      message per event, no guard, N sessions concurrently, each waiting for all its acks at the end,
      into a stream configured like AGENTLOG (file storage, S2);
  (a) agentlog: the publisher writing M events to each of N sessions concurrently (Append each
      event, then Flush), batched by the window into guarded records.

Events are assistant/chunk events padded to --size bytes of JSON inside one closed turn. Sessions
are created (KV metadata) before the timed phase; create_ms reports that separately. The rate is
N*M events over the wall time from the first Append to the last Flush (the last ack for (b)).
flush_p50_ms/flush_p99_ms are the latencies of the final Flush of each session.

Both the server and the clients run in this process and share its CPUs.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Sessions < 1 || o.Events < 1 || o.Size < 1 {
				return &usageError{fmt.Errorf("--sessions, --events and --size must be >= 1 (got %d, %d, %d)", o.Sessions, o.Events, o.Size)}
			}
			if o.Rounds < 1 {
				return &usageError{fmt.Errorf("--rounds must be >= 1, got %d", o.Rounds)}
			}
			if o.Window <= 0 {
				return &usageError{fmt.Errorf("--window must be > 0, got %s", o.Window)}
			}
			if o.Skip != "" && o.Skip != "baseline" && o.Skip != "publisher" {
				return &usageError{fmt.Errorf("--skip must be baseline or publisher, got %q", o.Skip)}
			}
			res, err := bench.RunAppend(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintAppend(g.stdout, o.JSON, res)
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 1000, "number of sessions written concurrently")
	c.Flags().IntVar(&o.Events, "events", 200, "events per session")
	c.Flags().IntVar(&o.Size, "size", 512, "bytes of JSON per event")
	c.Flags().DurationVar(&o.Window, "window", publisher.DefaultWindow, "the publisher's batching window")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line instead of text")
	c.Flags().BoolVar(&o.SyncAlways, "sync-always", false, "run the server with sync: always (fsync every write)")
	c.Flags().StringVar(&o.DataDir, "data", "", "JetStream storage directory (default: a temporary directory, removed afterwards)")
	c.Flags().IntVar(&o.MaxPending, "baseline-max-pending", 4000, "the baseline's async publish window (jetstream.WithPublishAsyncMaxPending; nats.go's default is 4000)")
	c.Flags().StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile (pprof) of the publisher phase to this file")
	c.Flags().IntVar(&o.Rounds, "rounds", 1, "alternate (b) and (a) this many times and report the median round of each (steadier on a shared machine)")
	c.Flags().StringVar(&o.Skip, "skip", "", "skip one phase: baseline or publisher")
	return c
}

// newBenchTurnCmd is `agentlog bench turn`: read-your-writes latency as an agent feels it.
func newBenchTurnCmd(g *globals) *cobra.Command {
	o := bench.TurnOptions{}
	c := &cobra.Command{
		Use:   "turn [--loads 0.5,0.8] [--for 10s] [--json]",
		Short: "Read-your-writes latency of agents' turns (Flush, then a minSeq query) under load, against a raw publish and read-back",
		Long: `turn starts an embedded nats-server and one projector instance (on a connection of its own, as
a deployment runs it; --shared-conn: on the agents' connection, as agentlog dev does), creates
--sessions agents (one publisher session each) and measures:

  the maximum rate: every agent appends assistant/chunk events of --size bytes as fast as it can
      for --max-for, flushing every 1,024 events;
  each load of --loads, for --for: the agents append at that fraction of the maximum, and every
      --probe-every each one ends a turn: Flush, then client.Messages with MinSeq = the last seq
      flushed. The turn latency runs from the start of Flush to the answer (what an agent waits
      before its next model request), the lag from the end of Flush;
  the raw baseline, under the same load: a few probers publish one message with a
      Nats-Expected-Last-Subject-Sequence guard to a stream like AGENTLOG, wait for its ack, then
      read it back with a direct get.

Each phase reports p50, p99 and p99.9 of both, the ratio of the turn's p99 to the baseline's, the
failed queries and writes (counted, never fatal: a writer keeps its events through a disconnect),
the reconnects, and the JetStream requests the query service made per query.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Sessions < 1 || o.Size < 1 || o.Partitions < 1 || o.For <= 0 || o.MaxFor <= 0 || o.ProbeEvery <= 0 || len(o.Loads) == 0 {
				return &usageError{fmt.Errorf("--sessions, --size and --partitions must be >= 1, --for, --max-for and --probe-every > 0, and --loads not empty")}
			}
			for _, l := range o.Loads {
				if l <= 0 || l > 1 {
					return &usageError{fmt.Errorf("--loads must be fractions in (0, 1], got %g", l)}
				}
			}
			r, err := bench.RunTurn(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintTurn(g.stdout, o.JSON, r)
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 50, "agents (one session each)")
	c.Flags().IntVar(&o.Size, "size", 512, "approximate event size in bytes")
	c.Flags().Float64SliceVar(&o.Loads, "loads", []float64{0.5, 0.8}, "load phases, fractions of the agents' maximum rate")
	c.Flags().DurationVar(&o.For, "for", 10*time.Second, "length of each load phase")
	c.Flags().DurationVar(&o.MaxFor, "max-for", 5*time.Second, "length of the maximum-rate phase")
	c.Flags().DurationVar(&o.ProbeEvery, "probe-every", 500*time.Millisecond, "each agent ends a turn this often")
	c.Flags().IntVar(&o.Partitions, "partitions", 16, "partitions of the stream")
	c.Flags().BoolVar(&o.SharedConn, "shared-conn", false, "run the projector on the agents' connection (as agentlog dev does)")
	c.Flags().StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile (pprof) of the load phases to this file")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line")
	return c
}

// newBenchProjectCmd is `agentlog bench project`: (a) the fold rate of one projector instance
// (all built-in units, events applied and checkpointed), (b) the raw rate of an ordered consumer
// reading (and decoding) the same stream, their ratio, and the projection lag under a steady
// append load (append acknowledged -> QueryMessages with minSeq answered).
func newBenchProjectCmd(g *globals) *cobra.Command {
	var o bench.ProjectOptions
	c := &cobra.Command{
		Use:   "project [--json]",
		Short: "Measure one projector's fold rate against a raw ordered consumer, and the projection lag",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Sessions < 1 || o.Events < 1 || o.Size < 1 || o.Batch < 1 || o.Rounds < 1 || o.Partitions < 1 {
				return &usageError{fmt.Errorf("--sessions, --events, --size, --batch, --rounds and --partitions must be >= 1")}
			}
			if o.LagLoad < 0 || o.LagLoad > 1 || (o.LagLoad > 0 && (o.LagFor <= 0 || o.LagSessions < 1)) {
				return &usageError{fmt.Errorf("--lag-load must be in [0, 1] (0: no lag phase), with --lag-for > 0 and --lag-sessions >= 1; got %g, %s and %d", o.LagLoad, o.LagFor, o.LagSessions)}
			}
			r, err := bench.RunProject(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintProject(g.stdout, o.JSON, r)
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 400, "sessions in the pre-filled stream")
	c.Flags().IntVar(&o.Events, "events", 1000, "events per session")
	c.Flags().IntVar(&o.Rounds, "rounds", 3, "alternate (b) and (a) this many times and report the median round of each (steadier on a shared machine)")
	c.Flags().IntVar(&o.Size, "size", 512, "approximate event size in bytes")
	c.Flags().IntVar(&o.Batch, "batch", 10, "events per record")
	c.Flags().IntVar(&o.Partitions, "partitions", 16, "partitions of the stream")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line")
	c.Flags().Float64Var(&o.LagLoad, "lag-load", 0.8, "the lag phase appends at this fraction of the publishers' maximum rate, measured first (0: skip the phase)")
	c.Flags().IntVar(&o.LagSessions, "lag-sessions", 50, "publishers (one session each) of the lag phase")
	c.Flags().DurationVar(&o.LagFor, "lag-for", 5*time.Second, "length of the lag phase (the maximum rate is measured for half of it before)")
	c.Flags().StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile (pprof) of the last round's fold phase (after Start) to this file")
	return c
}

func newBenchMemoryCmd(g *globals) *cobra.Command {
	o := bench.MemoryOptions{}
	c := &cobra.Command{
		Use:   "memory [--events N] [--size BYTES] [--binary PATH]",
		Short: "Peak memory of import, events and fork of one big session, and the first messages' latency",
		Long: `memory writes one session of --events assistant/chunk events (about --size bytes of JSON each;
the defaults make 400,000 events, about 60 MB of JSONL) to a JSONL file, starts ` + "`agentlog dev --projectors 0`" + `
(the server and a forker) and a separate ` + "`agentlog projector`" + ` as child processes in a temporary
directory, and measures, each as a child process of --binary (default: this binary):

  import           agentlog import FILE: its peak RSS (getrusage of the child) and wall time
  first messages   agentlog messages ID right after the import: wall time (the projector folds the
                   session first)
  events           agentlog events ID > /dev/null: its peak RSS and wall time
  fork             agentlog fork ID: the dev process's peak RSS growth while it runs (VmHWM after
                   resetting it through /proc/PID/clear_refs, minus VmRSS before)

It prints one JSON object with the figures, the issue's targets and whether each is met. Linux only
(it reads /proc). The machine is shared: wall times are noisy.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Events < 4 || o.Size < 1 {
				return &usageError{fmt.Errorf("--events must be >= 4 and --size >= 1 (got %d, %d)", o.Events, o.Size)}
			}
			res, err := bench.RunMemory(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintMemory(g.stdout, res)
		},
	}
	c.Flags().IntVar(&o.Events, "events", 400_000, "events in the session")
	c.Flags().IntVar(&o.Size, "size", 80, "bytes of each chunk's data JSON (80: a 400,000-event file of about 60 MB)")
	c.Flags().StringVar(&o.Binary, "binary", "", "the agentlog binary to measure (default: this one; e.g. a build of main, for a before/after)")
	c.Flags().StringVar(&o.DataDir, "data", "", "working directory (default: a temporary directory, removed afterwards)")
	c.Flags().DurationVar(&o.Timeout, "step-timeout", 10*time.Minute, "deadline of each measured command")
	return c
}

func newBenchForkCmd(g *globals) *cobra.Command {
	o := bench.ForkOptions{}
	c := &cobra.Command{
		Use:   "fork [--events N] [--size BYTES] [--rounds R] [--json]",
		Short: "Fork latency against reading the source and publishing the same bytes, in one run",
		Long: `fork starts an embedded nats-server (file storage in a temporary directory, or --data), stores one
source session of --events events (records of --record-events events) and measures, in the same run
and on the same server, alternating --rounds times:

  (b) baseline: the raw work of a fork: read the source's subject with an ordered consumer and
      publish each record's bytes (its data and headers) once to a new subject with async
      publishing, waiting for every ack;
  (a) agentlog: client.Fork of the whole source (default boundary) to a new child, through a
      forker service in this process: checks, the streaming read and seed validation, the child's
      metadata and its records (one atomic batch).

ratio = the median fork time / the median baseline time. The source is, with --source chunks, one
closed turn of assistant/chunk events of --size bytes each; with --source generated, a long,
well-formed generated session (messages, tool calls and results, compaction replaces) whose event
sizes are the generator's. fork_peak_rss_growth_bytes is the growth of this process's peak RSS
during one fork (the server runs in this process).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Events < 1 || o.Size < 1 || o.RecordEvents < 1 || o.Rounds < 1 {
				return &usageError{fmt.Errorf("--events, --size, --record-events and --rounds must be >= 1")}
			}
			if o.Source != "chunks" && o.Source != "generated" {
				return &usageError{fmt.Errorf("--source must be chunks or generated, got %q", o.Source)}
			}
			res, err := bench.RunFork(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintFork(g.stdout, o.JSON, res)
		},
	}
	c.Flags().IntVar(&o.Events, "events", 10000, "events of the source session")
	c.Flags().IntVar(&o.Size, "size", 512, "bytes of JSON per event (--source chunks)")
	c.Flags().IntVar(&o.RecordEvents, "record-events", 50, "events per record of the source")
	c.Flags().StringVar(&o.Source, "source", "chunks", "the source's events: chunks or generated")
	c.Flags().IntVar(&o.Rounds, "rounds", 5, "alternate (b) and (a) this many times and report the median of each")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line instead of text")
	c.Flags().StringVar(&o.DataDir, "data", "", "JetStream storage directory (default: a temporary directory, removed afterwards)")
	c.Flags().StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile (pprof) of the rounds (both phases) to this file")
	return c
}

func newBenchScaleCmd(g *globals) *cobra.Command {
	o := bench.ScaleOptions{}
	c := &cobra.Command{
		Use:   "scale [--sessions N | --million] [--json]",
		Short: "Append, memory, disk, projector start, listing and query latency at N sessions against 1,000",
		Long: `scale runs twice, on a fresh nats-server each time (a child process of this one, so that its
RSS is its own, file storage in a temporary directory or under --data): with 1,000 sessions, then
with --sessions (default 100,000; --million: 1,000,000). Each run:

  1. fills the stream: every session gets its metadata (a KV create) and one record of --events
     events, 64 at a time (fill_sessions_per_sec);
  2. measures append throughput: --sample sessions spread over the id space get --records
     guarded records of --events events each, --workers at a time, while the stream holds every
     session (append_events_per_sec: the same work in both runs);
  3. reads the server's RSS and the storage directory's size;
  4. starts a projector in this process and times its Start and its catch-up (every event folded
     and checkpointed), and this process's RSS growth;
  5. times client.Sessions (the first page of 100, median of 3; and every session once) and
     client.Messages of sampled sessions (first query each).

ratio = append_events_per_sec at N / at 1,000; ratios holds every figure's N / 1k.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Million {
				o.Sessions = 1_000_000
			}
			if o.Sessions < 1000 || o.Events < 1 || o.Sample < 1 || o.Records < 1 || o.Workers < 1 {
				return &usageError{fmt.Errorf("--sessions must be >= 1000, and --events, --sample, --records, --workers >= 1")}
			}
			if o.Sessions > 200_000 && !o.Million && o.Sessions != 1_000_000 {
				return &usageError{fmt.Errorf("--sessions %d: above 200,000 give --million (1,000,000) explicitly", o.Sessions)}
			}
			res, err := bench.RunScale(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintScale(g.stdout, o.JSON, res)
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 100_000, "sessions of the large run (the other has 1,000)")
	c.Flags().BoolVar(&o.Million, "million", false, "the large run has 1,000,000 sessions")
	c.Flags().IntVar(&o.Events, "events", 4, "events per record (the fill writes one record per session)")
	c.Flags().IntVar(&o.Sample, "sample", 1000, "sessions the append phase writes to")
	c.Flags().IntVar(&o.Records, "records", 20, "records the append phase writes to each sampled session")
	c.Flags().IntVar(&o.Workers, "workers", 64, "concurrent writers of the fill and the append phase")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line")
	c.Flags().StringVar(&o.DataDir, "data", "", "parent of the runs' storage directories (default: a temporary directory, removed afterwards)")
	c.Flags().StringVar(&o.ServerCPUProfile, "server-cpuprofile", "", "write a CPU profile (pprof) of the large run's server process to this file")
	return c
}

// newBenchScaleServerCmd is the hidden child of bench scale: an embedded nats-server on a random
// port in --data, which prints its client URL on stdout and runs until stdin closes or a signal.
func newBenchScaleServerCmd(g *globals) *cobra.Command {
	var dir, profile string
	c := &cobra.Command{
		Use:    "scale-server --data DIR",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			return bench.ScaleServer(dir, profile, g.stdout)
		},
	}
	c.Flags().StringVar(&dir, "data", "", "JetStream storage directory")
	c.Flags().StringVar(&profile, "cpuprofile", "", "write a CPU profile (pprof) of this process to this file")
	return c
}

func newBenchLifecycleCmd(g *globals) *cobra.Command {
	o := bench.LifecycleOptions{}
	var phases string
	c := &cobra.Command{
		Use:   "lifecycle [--sessions N --active M] [--phases archive,restore,scale] [--json]",
		Short: "Archive throughput and size, restore against fork, and a large store with most sessions archived, each against its baseline in one run",
		Long: `lifecycle measures the targets of the session lifecycle (ARCHITECTURE.md, "Lifecycle"), each
against a baseline of the same run:

  archive: --archive-sessions sessions of --archive-events events (generated agent sessions, 25
      events a record, folded by a projector) archived by one lifecycle pass, against the raw work
      on as many others (read the records, publish their bytes once, purge the subject):
      archive_sessions_per_sec (target >= 2,000), and the archives' bytes against gzip -6 of the
      same packed JSONL (archived_bytes_ratio, target <= 1.2);
  restore: a --restore-events session restored from its archive against a fork of it, median of
      --rounds (restore_ratio, target <= 2.0);
  scale: a store of --sessions sessions (default 1,000,000) of which --active stay active, the
      others archived: append to the active ones against a fresh store of --active sessions
      (append_ratio, target >= 0.9), the hot stream's bytes against the same store before
      archiving (hot_bytes_ratio, <= 0.05), a projector restarted with its checkpoints until it
      serves a fresh messages query (restart_ready_ms, <= 2,000), and the first page of
      sessions --limit 50 (list_first_page_ms, <= 200).

The scale phase runs its servers as child processes (as bench scale does). --sessions 100000
--active 1000 finishes in a few minutes; the default (a million) takes far longer on 2 cores.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if phases != "" {
				o.Phases = strings.Split(phases, ",")
				for _, p := range o.Phases {
					if p != "archive" && p != "restore" && p != "scale" {
						return &usageError{fmt.Errorf("--phases: %q is not archive, restore or scale", p)}
					}
				}
			}
			if o.Sessions < 1000 || o.Active < 1 || o.Active > o.Sessions || o.ArchiveSessions < 1 || o.ArchiveEvents < 4 || o.RestoreEvents < 4 || o.Rounds < 1 || o.Workers < 1 {
				return &usageError{fmt.Errorf("--sessions >= 1000, 1 <= --active <= --sessions, and the other counts >= 1 (events >= 4)")}
			}
			res, err := bench.RunLifecycle(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			return bench.PrintLifecycle(g.stdout, o.JSON, res)
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 1_000_000, "sessions of the large store (scale phase)")
	c.Flags().IntVar(&o.Active, "active", 10_000, "of which stay active (scale phase)")
	c.Flags().IntVar(&o.ArchiveSessions, "archive-sessions", 4000, "sessions the archive phase archives")
	c.Flags().IntVar(&o.ArchiveEvents, "archive-events", 100, "events per session of the archive phase")
	c.Flags().IntVar(&o.RestoreEvents, "restore-events", 10_000, "events of the restore phase's session")
	c.Flags().IntVar(&o.Rounds, "rounds", 3, "rounds of the restore phase")
	c.Flags().IntVar(&o.Workers, "workers", 64, "concurrent writers and archivers")
	c.Flags().StringVar(&phases, "phases", "", "comma-separated phases to run (default all)")
	c.Flags().StringVar(&o.HotCompression, "hot-compression", "s2", "the hot stream's compression in the scale phase: s2 or none (the hot path's measurement)")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line")
	c.Flags().StringVar(&o.DataDir, "data", "", "parent of the runs' storage directories (default: a temporary directory, removed afterwards)")
	return c
}
