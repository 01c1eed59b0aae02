package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

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
			c, err := client.New(nc)
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
	case errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrRemoving):
		return nil, nil
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
	}
	c, err := client.New(nc)
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
	var child string
	c := &cobra.Command{
		Use:   "fork ID [--at SEQ] [--child ID]",
		Short: "Start a new session from a prefix of ID (through the fork service)",
		Long: `fork copies events 0..SEQ (default: the last event) of session ID to a new session and appends a
session/end-seed marker. It prints {"child":…,"seedLength":…,"parentSession":…}. A refused fork exits 1
and prints the reference's code and exact text on stderr, e.g.
  OPEN_TURN: fork boundary 2 in session "parent" ends inside open turn 1`,
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
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, _, err := g.connect(ctx, "agentlog-fork")
			if err != nil {
				return err
			}
			defer nc.Close()
			req := client.ForkRequest{Source: args[0], Child: child}
			if cmd.Flags().Changed("at") {
				req.Boundary = &at
			}
			c, err := client.New(nc)
			if err != nil {
				return err
			}
			res, err := c.Fork(ctx, req)
			if err != nil {
				return forkExit(err, req.Source)
			}
			return writeJSON(g.stdout, res, false)
		},
	}
	c.Flags().Int64Var(&at, "at", 0, "fork boundary: the last source seq to copy (inclusive; default: the last event)")
	c.Flags().StringVar(&child, "child", "", "child session id (default: a fresh unique id)")
	return c
}

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
repair and forks — the fields of ../shared/conformance/oracle.mjs. With --all-forks it tries every fork
boundary (omitted, every seq, one past the end, and -1). It needs no server. It exits 0 whether or not
the log is accepted (1 when FILE cannot be read).`,
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
			_, err = fmt.Fprintf(g.stdout, "%s\n", b)
			return err
		},
	}
	c.Flags().BoolVar(&allForks, "all-forks", false, "try every fork boundary, not only the omitted one")
	return c
}
