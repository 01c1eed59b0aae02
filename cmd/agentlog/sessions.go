package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentlog/agentlog/client"
	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newImportCmd(g *globals) *cobra.Command {
	var id string
	c := &cobra.Command{
		Use:   "import FILE [--session ID]",
		Short: "Append a dsh JSONL session log to a new session through the publisher",
		Long: `import reads a dsh JSONL file (optional header line, events, packed chunk rows), validates the
whole log first, and only then creates the session and appends its events through the publisher. A log
that breaks a rule is refused with the seq and the rule, and nothing is written; so is a log without
events (rule empty-log). The session id defaults to the one in the file's header; importing onto an
existing session is refused.`,
		Args: exactArgs(1, "one FILE argument"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("session") && blankID(id) {
				return &usageError{errors.New("--session must not be blank (leave it out to use the file header's id)")}
			}
			h, events, err := readLogFile(args[0], id)
			if err != nil {
				return err
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, store, err := g.connect(ctx, "agentlog-import")
			if err != nil {
				return err
			}
			defer nc.Close()
			n, err := importLog(ctx, store, nc, h, events)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "imported %d events into session %q\n", n, h.ID)
			return nil
		},
	}
	c.Flags().StringVar(&id, "session", "", "session id (default: the file header's id)")
	return c
}

// readLogFile reads and validates a dsh JSONL file. idOverride, when set, replaces the header's id.
// The returned header always carries the session id; a file without header gets a fresh one.
func readLogFile(path, idOverride string) (session.Header, []session.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return session.Header{}, nil, err
	}
	defer f.Close()
	return readLog(bufio.NewReader(f), path, idOverride)
}

func readLog(r io.Reader, name, idOverride string) (session.Header, []session.Event, error) {
	nameInErrors := idOverride
	if nameInErrors == "" {
		nameInErrors = "session"
	}
	hp, events, err := session.ReadJSONL(r, nameInErrors)
	if err != nil {
		var se *session.Error
		if idOverride != "" && errors.As(err, &se) {
			err = se.ForSession(idOverride)
		}
		return session.Header{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	var h session.Header
	if hp != nil {
		h = *hp
	} else {
		h = session.Header{Version: 0, CreatedAt: time.Now().UnixMilli()}
	}
	if idOverride != "" {
		h.ID = idOverride
		h.Raw = nil
	}
	if len(events) == 0 {
		id := h.ID
		if id == "" {
			id = nameInErrors
		}
		return session.Header{}, nil, fmt.Errorf("%s: nothing written: %w", name, session.NewError(id, -1, 0, session.RuleEmptyLog,
			"the log holds no events, and import creates a session from its events (a session without events is created through the API, publisher.Create)"))
	}
	if h.ID == "" {
		return session.Header{}, nil, &usageError{fmt.Errorf("%s has no header with a session id: pass --session ID", name)}
	}
	if _, err := session.Load(h.ID, events); err != nil {
		return session.Header{}, nil, fmt.Errorf("%s: refused, nothing written: %w", name, err)
	}
	return h, events, nil
}

// importLog creates the session and appends events through the publisher, returning once they are
// durable. It returns the number of events written.
//
// An import is all or nothing: the publisher's window is disabled, so every event stays pending
// until Close, which writes them as one record (split by the store into one atomic batch when it is
// larger than the stream's max message size). If anything fails, the writer is aborted (nothing
// pending is written) and the session's metadata is removed again when its log is still empty, so
// the import can simply be retried.
func importLog(ctx context.Context, store *ajs.Store, nc *nats.Conn, h session.Header, events []session.Event) (n int, err error) {
	pub, err := publisher.New(store, nc, publisher.Options{
		Window:          24 * time.Hour, // never fires: Close writes everything at once
		MaxPendingBytes: -1,
		AttemptTimeout:  2 * time.Minute,
		// Faithful to the file as the reference reads it: ill-formed UTF-8 becomes U+FFFD (as
		// Node decodes the file), lone surrogate escapes stay.
		KeepLoneSurrogates: true,
	})
	if err != nil {
		return 0, err
	}
	if err := refuseOrphanRecords(ctx, store, h.ID); err != nil {
		return 0, err
	}
	w, err := pub.Create(ctx, h)
	if err != nil {
		return 0, err
	}
	for _, ev := range events {
		if err := w.Append(ev); err != nil {
			return 0, rollbackImport(store, w, h.ID, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		return 0, rollbackImport(store, w, h.ID, err)
	}
	return len(events), nil
}

// refuseOrphanRecords refuses an import onto id when the id holds records but no metadata (left
// by a writer that died between its first record and its check, or by an rm that stopped
// half-way): creating the metadata would succeed and the first write then conflict, leaving the
// id with metadata as well. Nothing is written.
func refuseOrphanRecords(ctx context.Context, store *ajs.Store, id string) error {
	if _, err := store.GetSession(ctx, id); !errors.Is(err, ajs.ErrSessionNotFound) {
		return nil // it exists (Create refuses it) or cannot be read (Create says why)
	}
	tail, err := store.GetTailFromLeader(ctx, id)
	if err == nil && tail.LastStreamSeq == 0 {
		return nil
	}
	what := "records"
	if err == nil {
		what = fmt.Sprintf("records (to seq %d)", tail.NextSeq-1)
	} else if !errors.As(err, new(*session.Error)) {
		return fmt.Errorf("session %q: reading its log: %w", id, err)
	}
	return fmt.Errorf("session %q: the id holds %s without metadata (a write or a removal stopped half-way); nothing was written: run `agentlog rm %s` to clear it, then import again", id, what, shellQuote(id))
}

// rollbackImport abandons a failed import: it stops the writer without flushing (a write in flight
// is cancelled and waited for), then reads the log from the stream leader and, when it is empty,
// removes the session's metadata so that the import can be retried. It returns the cause with what
// the store now holds (cause names the session).
func rollbackImport(store *ajs.Store, w *publisher.Writer, id string, cause error) error {
	uncertain := w.Abort()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if uncertain {
		return fmt.Errorf("%w; a write got no answer, so the session may hold part of the import: check it with `agentlog events`, and remove it with `agentlog rm %s`", cause, shellQuote(id))
	}
	events, _, err := store.Read(ctx, id) // through the stream leader, unlike a direct get
	if err != nil {
		return fmt.Errorf("%w; the session may be left with metadata and no events (`agentlog rm %s` removes it): %v", cause, shellQuote(id), err)
	}
	if len(events) > 0 {
		return fmt.Errorf("%w; the session holds %d events (`agentlog rm %s` removes it)", cause, len(events), shellQuote(id))
	}
	if err := store.DeleteSession(ctx, id); err != nil {
		return fmt.Errorf("%w; the session is left with metadata and no events (`agentlog rm %s` removes it): %v", cause, shellQuote(id), err)
	}
	return fmt.Errorf("%w; nothing was written", cause)
}

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
			return printEvents(ctx, store, args[0], g.stdout, session.WriteOptions{Pack: packed}, !noHeader)
		},
	}
	c.Flags().BoolVar(&packed, "packed", false, "write runs of 3+ streaming deltas as packed chunk rows")
	c.Flags().BoolVar(&noHeader, "no-header", false, "omit the session header line")
	return c
}

func printEvents(ctx context.Context, store *ajs.Store, id string, out io.Writer, opts session.WriteOptions, withHeader bool) error {
	var hp *session.Header
	h, herr := store.GetSession(ctx, id)
	switch {
	case herr == nil:
		hp = &h
	case !errors.Is(herr, ajs.ErrSessionNotFound):
		return herr
	}
	events, _, err := store.Read(ctx, id)
	if err != nil {
		return err
	}
	if hp == nil && len(events) == 0 {
		return fmt.Errorf("session %q not found", id)
	}
	if !withHeader {
		hp = nil
	}
	bw := bufio.NewWriter(out)
	if err := session.WriteJSONL(bw, hp, events, opts); err != nil {
		return err
	}
	return bw.Flush()
}

func newMessagesCmd(g *globals) *cobra.Command {
	var minSeq int64
	var pretty bool
	c := &cobra.Command{
		Use:   "messages ID",
		Short: "Print a session's derived messages (deriveMessages) as a JSON array, from the projector",
		Long: `messages asks the projector's query service for the message history the model sees. By default it
waits (up to --timeout) until the projection has applied the last event in the log, so it reads its own
writes; --min-seq N waits for seq N instead, and --min-seq -1 takes the projection as it is.`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, store, err := g.connect(ctx, "agentlog-messages")
			if err != nil {
				return err
			}
			defer nc.Close()
			msgs, err := queryMessages(ctx, store, nc, args[0], minSeq)
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
	return c
}

// queryMessages asks the projector for id's messages, waiting for minSeq (-2: the current tail).
func queryMessages(ctx context.Context, store *ajs.Store, nc *nats.Conn, id string, minSeq int64) ([]json.RawMessage, error) {
	if minSeq == -2 {
		tail, err := store.GetTail(ctx, id)
		if err != nil {
			return nil, err
		}
		minSeq = tail.NextSeq - 1
	}
	c, err := client.New(nc)
	if err != nil {
		return nil, err
	}
	var opts []client.Option
	if minSeq >= 0 {
		opts = append(opts, client.MinSeq(minSeq))
	}
	reply, err := c.Messages(ctx, id, opts...)
	if errors.Is(err, client.ErrNotFound) {
		// A session that exists but has no events has no projection yet: its history is empty.
		if _, herr := store.GetSession(ctx, id); herr == nil {
			if tail, terr := store.GetTail(ctx, id); terr == nil && tail.NextSeq == 0 {
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
				if _, err := ajs.Token(id); err != nil {
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
				return forkExit(err)
			}
			return writeJSON(g.stdout, res, false)
		},
	}
	c.Flags().Int64Var(&at, "at", 0, "fork boundary: the last source seq to copy (inclusive; default: the last event)")
	c.Flags().StringVar(&child, "child", "", "child session id (default: a fresh unique id)")
	return c
}

// forkExit turns a fork refusal into exit status 1 with "CODE: text" on stderr (INVALID_SEED for a
// seed-validation refusal, which the reference raises without a code of its own).
func forkExit(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.Code {
		case client.CodeOpenTurn, client.CodeInvalidBoundary, client.CodeSessionNotFound, client.CodeSessionExists,
			client.CodeInvalidSeed:
			return &exitError{code: 1, err: fmt.Errorf("%s: %s", ce.Code, ce.Description)}
		}
	}
	return err
}

func newInspectCmd(g *globals) *cobra.Command {
	var allForks bool
	c := &cobra.Command{
		Use:   "inspect [--all-forks] < FILE",
		Short: "Judge a dsh JSONL log offline, printing the same fields as the conformance oracle",
		Long: `inspect reads a dsh JSONL log on stdin and prints one JSON object: ok, error, acceptedEvents, events,
nodes, replaceGeneration, messages, transcript, openTurn, repair and forks — the fields of
../shared/conformance/oracle.mjs. With --all-forks it tries every fork boundary (omitted, every seq, one
past the end, and -1). It needs no server. It exits 0 whether or not the log is accepted.`,
		Args: exactArgs(0, "no arguments (the log comes on stdin)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			res := session.Inspect(bufio.NewReader(g.stdin), allForks)
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
