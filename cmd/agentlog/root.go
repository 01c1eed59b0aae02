package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// DefaultNATSURL is used when neither --nats nor AGENTLOG_NATS_URL nor NATS_URL is set.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// globals holds the persistent flags shared by every command.
type globals struct {
	natsURL string // without user info: resolve moves it into conn
	conn    connFlags
	timeout time.Duration
	// maxEventBytes is --max-event-bytes of the commands that write events (0: not given there).
	maxEventBytes int64

	mu      sync.Mutex
	refuse  context.CancelCauseFunc // cancels the running command (nil for services)
	refused error                   // the permission violation that did
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root, _ := newRoot(stdin, stdout, stderr)
	return root
}

// newRoot is newRootCmd, with the globals the commands share (run asks them for a refusal).
func newRoot(stdin io.Reader, stdout, stderr io.Writer) (*cobra.Command, *globals) {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "agentlog",
		Short: "agentlog: an event-sourced session log for AI agents, on NATS JetStream",
		Long: `agentlog stores every agent session as one JetStream subject: the durable, append-only log of
its turns, steps, messages, streamed chunks, tool calls and results, and compactions. Projectors fold
sessions into the message history the model sees; the forker branches a session from a prefix.

Quick start:
  agentlog demo                      # everything, end to end, on an embedded server
  agentlog dev --data ./data         # a local server with the services, for the other commands`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	g.conn.addConnFlags(g, root.PersistentFlags())
	root.PersistentFlags().StringVar(&g.conn.contextFlag, "context", "", "use the saved connection settings `NAME` below flags and environment variables (agentlog context; env "+contextEnv+")")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 30*time.Second, "deadline for one command's requests to NATS")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if isOffline(c) || isContextCmd(c) || strings.HasPrefix(c.Name(), cobra.ShellCompRequestCmd) {
			return nil // shell completion parses its flags later and resolves them itself
		}
		if g.timeout <= 0 {
			return &usageError{fmt.Errorf("--timeout must be positive, got %s", g.timeout)}
		}
		if err := g.conn.resolve(g, root.PersistentFlags()); err != nil {
			return err
		}
		g.failFastOnRefusal(c)
		return nil
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &usageError{fmt.Errorf("%s: %w (see %s --help)", c.CommandPath(), err, c.CommandPath())}
	})
	root.AddCommand(
		newProvisionCmd(g),
		markService(newProjectorCmd(g)),
		markService(newForkerCmd(g)),
		newImportCmd(g),
		withIDCompletion(g, newAppendCmd(g)), // a write takes the exact id, no prefix
		withEventsFollow(g, newEventsCmd(g)),
		withIDResolution(g, newShowCmd(g)),
		withMessagesWatch(g, newMessagesCmd(g)),
		withIDResolution(g, newForkCmd(g)),
		withIDResolution(g, newForksCmd(g)),
		withIDCompletion(g, newRmCmd(g)), // a delete takes the exact id, no prefix
		withIDCompletion(g, newArchiveCmd(g)),
		withIDCompletion(g, newRestoreCmd(g)),
		withIDCompletion(g, newHoldCmd(g)),
		newLifecycleCmd(g),
		newGCCmd(g),
		markOffline(newInspectCmd(g)),
		markOffline(newDemoCmd(g)),
		withUnitCompletion(newRebuildCmd(g)),
		markOffline(newBenchCmd(g)), // its own embedded server
		newSessionsCmd(g),
		newStatusCmd(g),
		markOffline(newVersionCmd(g)),
		markOffline(newDevCmd(g)), // its own embedded server
		newUICmd(g),
		newContextCmd(g),
	)
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "completion":
			c.Short = "Print the shell completion script of agentlog (bash, zsh, fish or powershell)"
			refuseUnknownShell(c)
			markOffline(c)
		case "help":
			markOffline(c)
		case "ui": // the web inspector serves many requests: one refused must not stop it
			markService(c)
		}
	}
	hideConnFlags(root)
	return root, g
}

// exactArgs returns a cobra.PositionalArgs that reports a usage error unless exactly n args are
// given; what says in the message what it takes ("one session ID", "no arguments").
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{fmt.Errorf("%s takes %s (got %d arguments)", c.CommandPath(), what, len(args))}
		}
		return nil
	}
}

// idArgs is exactArgs(1, what) for a command whose argument is a session id: a blank id (empty or
// only white space, see blankID) is a usage error too (exit 2), as a blank import --session is.
func idArgs(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := exactArgs(1, what)(c, args); err != nil {
			return err
		}
		if blankID(args[0]) {
			return &usageError{fmt.Errorf("%s takes %s: the session ID is blank", c.CommandPath(), what)}
		}
		return nil
	}
}

// blankID reports whether a session id given on the command line is blank: empty or only white
// space. Every command refuses one as a usage error (exit 2).
func blankID(id string) bool { return strings.TrimSpace(id) == "" }

// natsOptions are the connection options of every command that dials --nats, named name: the
// credentials and TLS of --creds, --nkey, --user/--password, --token (or the URL's user info),
// --tls-ca, --tls-cert and --tls-key, or their environment variables (connopts.go).
func (g *globals) natsOptions(name string) []nats.Option {
	return append([]nats.Option{nats.Name(name), nats.ErrorHandler(g.asyncError)}, g.conn.opts...)
}

// clientOptions are the client.New options of every command: the JetStream domain (--js-domain).
func (g *globals) clientOptions() []client.Option {
	return []client.Option{client.Domain(g.conn.jsDomain)}
}

// addMaxEventBytesFlag gives a command that writes events the flag --max-event-bytes, which
// connect applies to the Store it returns.
func (g *globals) addMaxEventBytesFlag(c *cobra.Command) {
	g.maxEventBytes = store.DefaultMaxEventBytes
	c.Flags().Var((*positiveBytes)(&g.maxEventBytes), "max-event-bytes",
		"refuse an event whose JSON line is larger than this many bytes (events larger than one record are stored as blobs of the stream "+wire.BlobStream+")")
}

// positiveBytes is an int64 flag value that must be > 0.
type positiveBytes int64

func (b *positiveBytes) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *positiveBytes) Type() string   { return "bytes" }
func (b *positiveBytes) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("want a positive number of bytes, got %q", v)
	}
	*b = positiveBytes(n)
	return nil
}

// connect dials the configured NATS server and attaches to a provisioned agentlog.
func (g *globals) connect(ctx context.Context, name string) (*nats.Conn, *store.Store, error) {
	nc, js, err := natsdev.ConnectDomain(g.natsURL, g.conn.jsDomain, g.natsOptions(name)...)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, js)
	if err != nil {
		nc.Close()
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, natsjs.ErrJetStreamNotEnabled) || errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount) {
			return nil, nil, fmt.Errorf("NATS at %s: %w (%s)", g.natsURL, err, g.noJetStream())
		}
		return nil, nil, fmt.Errorf("NATS at %s: %w", g.natsURL, err) // run adds the hint (hint)
	}
	return nc, st.WithMaxEventBytes(g.maxEventBytes), nil
}

// noJetStream says what to check when no JetStream answered the connection's requests.
func (g *globals) noJetStream() string {
	if d := g.conn.jsDomain; d != "" {
		return fmt.Sprintf("no JetStream answered in domain %q: check that it is the domain of agentlog's server (jetstream { domain: %s }) and, through a leaf node, that the leaf is linked to it", d, d)
	}
	return "no JetStream answered: is JetStream enabled for this account? Connected to a leaf node, give the hub's domain with --js-domain"
}

// connectWait is connect for the long-running services: while NATS cannot be reached, or agentlog
// is not provisioned there, it says so once on logger and retries with backoff (retryWhile) until
// it succeeds or ctx ends. An incompatible stream or bucket is returned at once.
func (g *globals) connectWait(ctx context.Context, name string, logger *slog.Logger) (*nats.Conn, *store.Store, error) {
	var nc *nats.Conn
	var st *store.Store
	waited, err := retryWhile(ctx, logger, "NATS at "+g.natsURL,
		"agentlog: waiting for NATS (not reachable, or agentlog not provisioned yet); retrying until it is",
		func() (err error) { nc, st, err = g.connect(ctx, name); return err },
		func(err error) bool { return !errors.Is(err, store.ErrIncompatible) && !connectionFailedForGood(err) },
		"url", g.natsURL)
	if err != nil {
		return nil, nil, err
	}
	if waited {
		logger.Info("agentlog: NATS reached and agentlog provisioned there; starting", "url", g.natsURL)
	}
	return nc, st, nil
}

// retryWhile runs try until it succeeds, fails with an error retry refuses, or ctx ends, waiting
// with backoff (250 ms to 5 s) in between; the first failure it retries is logged once on logger
// as msg, with attrs and the error. It reports whether it waited; the error of a ctx that ended
// names what it waited for.
func retryWhile(ctx context.Context, logger *slog.Logger, what, msg string, try func() error, retry func(error) bool, attrs ...any) (bool, error) {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(250*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	waited := false
	for {
		err := try()
		if err == nil || !retry(err) || ctx.Err() != nil {
			return waited, err
		}
		if !waited {
			waited = true
			logger.Warn(msg, append(attrs, "err", withHint(err))...)
		}
		select {
		case <-ctx.Done():
			return waited, fmt.Errorf("gave up waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(b.NextBackOff()):
		}
	}
}

// withTimeout bounds one command's requests by --timeout.
func (g *globals) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.timeout)
}
