package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newEventsCmd(g *globals) *cobra.Command {
	var packed, noHeader bool
	c := &cobra.Command{
		Use:   "events ID",
		Short: "Print a session's log as dsh JSONL (header line, then one event per line)",
		Args:  idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, store, err := g.connect(ctx, "agentlog-events")
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, g.clientOptions()...)
			if err != nil {
				return err
			}
			return printEvents(ctx, c, store, args[0], g.stdout, session.WriteOptions{Pack: packed}, !noHeader)
		},
	}
	c.Flags().BoolVar(&packed, "packed", false, "write runs of 3+ streaming deltas as packed chunk rows")
	c.Flags().BoolVar(&noHeader, "no-header", false, "omit the session header line")
	return c
}

// printEvents writes session id as dsh JSONL to out, a record at a time as it is read (memory
// bounded by one record, or with Pack by one run of chunks), never the whole log.
func printEvents(ctx context.Context, c *client.Client, st *store.Store, id string, out io.Writer, opts session.WriteOptions, withHeader bool) error {
	hp, err := eventsHeader(ctx, c, id)
	if err != nil {
		return err
	}
	jw := session.NewJSONLWriter(out, opts)
	if withHeader && hp != nil {
		if err := jw.WriteHeader(hp); err != nil {
			return err
		}
	}
	ss, err := st.Session(id)
	if err != nil {
		return err
	}
	last, err := ss.Records(ctx, func(r store.Record) error {
		return jw.Write(r.Events...)
	})
	if err != nil {
		return err
	}
	if hp == nil && last == 0 {
		return fmt.Errorf("session %q not found", id)
	}
	return jw.Flush()
}

// eventsHeader reads the header events prints: nil for a log without metadata (printed all the
// same); a session being removed is refused (client.ErrRemoving), like every read of it.
func eventsHeader(ctx context.Context, c *client.Client, id string) (*session.Header, error) {
	h, err := c.Header(ctx, id)
	switch {
	case err == nil:
		return &h, nil
	case errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrRemoving) && !client.BeingCreated(err):
		return nil, nil // a log without metadata is printed all the same (not an incomplete fork's)
	}
	return nil, err
}

func newMessagesCmd(g *globals) *cobra.Command {
	var minSeq int64
	var pretty, allowLoss bool
	c := &cobra.Command{
		Use:   "messages ID",
		Short: "Print a session's derived messages (deriveMessages) as a JSON array, from the projector",
		Long: `messages asks the projector's query service for the message history the model sees. By default it
waits (up to --timeout) until the projection has applied the last event in the log, so it reads its own
writes; --min-seq N waits for seq N instead, and --min-seq -1 takes the projection as it is.

A session whose log lost acknowledged records (a server that lost writes, a purge outside agentlog)
is refused, naming the seqs, with exit status 1; --allow-data-loss prints the messages of what the
log holds instead.`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, store, err := g.connect(ctx, "agentlog-messages")
			if err != nil {
				return err
			}
			defer nc.Close()
			var opts []client.Option
			if allowLoss {
				opts = append(opts, client.AllowDataLoss())
			}
			msgs, err := queryMessages(ctx, store, nc, args[0], minSeq, opts...)
			if err != nil {
				return err
			}
			return writeJSON(g.stdout, msgs, pretty)
		},
	}
	c.Flags().Int64Var(&minSeq, "min-seq", -2, "wait until the projection has applied this seq (-2: the log's last seq; -1: don't wait)")
	c.PreRunE = func(*cobra.Command, []string) error {
		if minSeq < -2 {
			return &usageError{fmt.Errorf("--min-seq must be a seq >= 0, -1 (don't wait) or -2 (the log's last seq), got %d", minSeq)}
		}
		return nil
	}
	c.Flags().BoolVar(&pretty, "pretty", false, "indent the JSON")
	c.Flags().BoolVar(&allowLoss, "allow-data-loss", false, "print the messages of what the log holds even when it lost acknowledged records")
	return c
}

// queryMessages asks the projector for id's messages, waiting for minSeq (-2: the current tail),
// with the client options opts.
func queryMessages(ctx context.Context, st *store.Store, nc *nats.Conn, id string, minSeq int64, opts ...client.Option) ([]json.RawMessage, error) {
	ss, err := st.Session(id)
	if err != nil {
		return nil, err
	}
	if minSeq == -2 {
		tail, err := ss.Tail(ctx)
		if err != nil {
			return nil, err
		}
		minSeq = tail.NextSeq - 1
	} else if minSeq >= 0 {
		// A seq the log does not hold would be waited for until the timeout: refuse it at once,
		// naming the end, as events --from-seq does (the leader's tail: a write acked before this
		// read is in it; an archived log's end is its archive's).
		loc, err := ss.Locate(ctx)
		if err != nil {
			return nil, err
		}
		if last := loc.NextSeq() - 1; minSeq > last {
			end := fmt.Sprintf("its last seq is %d", last)
			if last < 0 {
				end = "it has no events yet"
			}
			if _, herr := ss.Info(ctx); errors.Is(herr, store.ErrSessionNotFound) && last < 0 {
				return nil, fmt.Errorf("session %q not found", id)
			}
			return nil, fmt.Errorf("session %q: --min-seq %d is past the end of the log: %s (messages waits only for a seq the log holds)", id, minSeq, end)
		}
	}
	c, err := client.New(nc, client.Domain(st.Domain()))
	if err != nil {
		return nil, err
	}
	if minSeq >= 0 {
		opts = append(opts, client.MinSeq(minSeq))
	}
	reply, err := c.Messages(ctx, id, opts...)
	if errors.Is(err, client.ErrNotFound) {
		// A session that exists but has no events has no projection yet: its history is empty.
		if _, herr := ss.Info(ctx); herr == nil {
			if tail, terr := ss.Tail(ctx); terr == nil && tail.NextSeq == 0 {
				return []json.RawMessage{}, nil
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if reply.Messages == nil {
		return []json.RawMessage{}, nil
	}
	return reply.Messages, nil
}

// writeJSON writes v as one JSON line (indented with pretty), without HTML-escaping, so event and
// message bytes such as '<' and '&' come out as they were stored.
func writeJSON(w io.Writer, v any, pretty bool) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if pretty {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}

func newForkCmd(g *globals) *cobra.Command {
	var at int64
	var child, then string
	var asJSON bool
	c := &cobra.Command{
		Use:   "fork ID [--at SEQ] [--child ID] [--then FILE|-] [--json]",
		Short: "Start a new session from a prefix of ID (through the fork service)",
		Long: `fork copies events 0..SEQ (default: the last event) of session ID to a new session and appends a
session/end-seed marker. It prints what it did in words:
  forked session "parent" at seq 41 into "child": 42 events copied (seed length 42), then the end-seed marker
and with --json one object {"child","seedLength","parentSession","then"?}. SEQ must end a turn (agentlog
forks ID lists the boundaries). A refused fork exits 1 and prints the reference's code and exact text on
stderr, e.g.
  OPEN_TURN: fork boundary 2 in session "parent" ends inside open turn 1

--then FILE (- for stdin) appends dsh JSONL events to the child after its end-seed marker, in the same
write as the seed: the child appears with them or not at all (edit-then-fork, e.g. a replacement user
message). An event without "seq" gets the next one (the first is seed length + 1), one with a seq must
carry exactly that one; "time" defaults to now. The events are checked against the child's log as it
will be (the log's rules, as append checks them): a refused one names its seq and rule, and no child is
created. The then-events travel in the fork request, one NATS message: together they must fit the
server's max_payload (1 MiB by default); a larger event is refused naming it, and goes in with
agentlog append after the fork (which offloads large events).`,
		Args: idArgs("one source session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("child") && blankID(child) {
				return &usageError{errors.New("--child must not be blank (leave it out for a fresh unique id)")}
			}
			ids := []string{args[0]}
			if cmd.Flags().Changed("child") {
				ids = append(ids, child) // without --child the forker picks one
			}
			for _, id := range ids {
				if _, err := wire.Token(id); err != nil {
					return &exitError{code: 1, err: err}
				}
			}
			req := client.ForkRequest{Source: args[0], Child: child}
			if cmd.Flags().Changed("at") {
				req.Boundary = &at
			}
			if cmd.Flags().Changed("then") {
				evs, err := readThenEvents(then, g.stdin)
				if err != nil {
					return err
				}
				req.Then = evs
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, _, err := g.connect(ctx, "agentlog-fork")
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, g.clientOptions()...)
			if err != nil {
				return err
			}
			res, err := c.Fork(ctx, req)
			if err != nil {
				return forkExit(err, req.Source)
			}
			if asJSON {
				return writeJSON(g.stdout, res, false)
			}
			printForked(g, res)
			return nil
		},
	}
	c.Flags().Int64Var(&at, "at", 0, "fork boundary: the last source seq to copy (inclusive; default: the last event); it must end a turn (agentlog forks ID lists them)")
	c.Flags().StringVar(&child, "child", "", "child session id (default: a fresh unique id)")
	c.Flags().StringVar(&then, "then", "", "append the dsh JSONL events of `FILE` (- for stdin) to the child after its seed, in the same write (edit-then-fork)")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"child","seedLength","parentSession","then"?}`)
	return c
}

// printForked prints a committed fork for a human, and a note when the child's header left out
// the source's cwd.
func printForked(g *globals, res client.ForkResult) {
	at := "an empty seed"
	if res.SeedLength > 0 {
		at = fmt.Sprintf("seq %d", res.SeedLength-1)
	}
	fmt.Fprintf(g.stdout, "forked session %s at %s into %s (seed length %d)", quoteID(res.ParentSession), at, quoteID(res.Child), res.SeedLength)
	if t := res.Then; t != nil && t.Events > 0 {
		fmt.Fprintf(g.stdout, ", then %d --then events (seqs %d..%d)", t.Events, t.FirstSeq, t.LastSeq)
	}
	fmt.Fprintln(g.stdout)
	if res.CwdDropped != "" {
		fmt.Fprintf(g.stderr, "agentlog: note: the child has no cwd: the source's %s is not an absolute path, which dsh cannot restore (agentlog import --cwd DIR sets one)\n", quoteID(res.CwdDropped))
	}
}

// quoteID quotes a session id for a line of text, as errors do.
func quoteID(id string) string { return strconv.Quote(id) }

// forkExit turns a fork refusal into exit status 1 with "CODE: text" on stderr (INVALID_SEED for a
// seed-validation refusal, which the reference raises without a code of its own). The reference's
// texts of OPEN_TURN, INVALID_BOUNDARY and INVALID_SEED do not name the session: source is added.
func forkExit(err error, source string) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.Code {
		case client.CodeSessionNotFound, client.CodeSessionExists:
			return &exitError{code: 1, err: fmt.Errorf("%s: %s", ce.Code, ce.Description)}
		case client.CodeOpenTurn, client.CodeInvalidBoundary, client.CodeInvalidSeed:
			return &exitError{code: 1, err: fmt.Errorf("%s: %s (fork of session %q)", ce.Code, ce.Description, source)}
		}
	}
	return err
}

func newInspectCmd(g *globals) *cobra.Command {
	var allForks bool
	c := &cobra.Command{
		Use:   "inspect [--all-forks] [FILE|-]",
		Short: "Judge a dsh JSONL log offline, printing the same fields as the conformance oracle",
		Long: `inspect reads a dsh JSONL log from FILE, or from stdin (no argument, or -), and prints one JSON
object: ok, error, acceptedEvents, events, nodes, replaceGeneration, messages, transcript, openTurn,
repair and forks — the fields of ../shared/conformance/oracle.mjs, byte for byte as it prints them. With
--all-forks it tries every fork boundary (omitted, every seq, one past the end, and -1). It needs no
server. Exit status: 0 when the log is accepted (and for empty input, as the oracle); 1 when it is
refused (ok:false: the same JSON on stdout, and the reason on stderr) or FILE cannot be read. The
oracle itself exits 0 either way: compare the JSON, not the exit status.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return &usageError{fmt.Errorf("%s takes at most one FILE argument (got %d)", c.CommandPath(), len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			in := g.stdin
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			res := session.Inspect(bufio.NewReader(in), allForks)
			// Written as MarshalJSON produced it: the reference allows deeper nesting than
			// encoding/json re-validates (DEPARTURES.md).
			b, err := res.MarshalJSON()
			if err != nil {
				return fmt.Errorf("inspect: encode result: %w", err)
			}
			if _, err := fmt.Fprintf(g.stdout, "%s\n", b); err != nil {
				return err
			}
			if !res.OK {
				return &exitError{code: 1, err: fmt.Errorf("inspect: the log is refused: %s", res.Error)}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&allForks, "all-forks", false, "try every fork boundary, not only the omitted one")
	return c
}
