package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/jsvalue"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// withIDResolution makes c resolve its first argument (an id or a unique prefix, see resolveID)
// and complete session ids.
func withIDResolution(g *globals, c *cobra.Command) *cobra.Command {
	run := c.RunE
	c.ValidArgsFunction = g.completeSessionIDs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 { // a command that takes no id here (events --follow --all)
			return run(cmd, args)
		}
		ctx, cancel := g.withTimeout(cmd.Context())
		id, err := g.resolveID(ctx, args[0])
		cancel()
		if err != nil {
			return err
		}
		return run(cmd, append([]string{id}, args[1:]...))
	}
	return c
}

// withEventsFollow adds --follow, --all, --from-seq and --tail to the events command.
func withEventsFollow(g *globals, c *cobra.Command) *cobra.Command {
	var q client.EventsQuery
	var all bool
	run := c.RunE
	c.Use = "events ID [--packed] [--no-header] [--from-seq N] [--tail N] [--follow] | events --follow --all"
	c.Long = `events prints a session's log as dsh JSONL: its header line, then one event per line. ID may be a
unique prefix of an id. --from-seq N starts at seq N (past the log's last seq it is refused, exit 1,
unless --follow, which waits for it), --tail N prints the last N events (of those; --tail 0 none, as
tail -n 0: with --follow, only the events appended from now on), and --follow goes on printing new
events as they are appended, until SIGINT (exit 0). --follow of a session that does not exist yet
says so on stderr and waits for it to be created (a watcher may start before its agent).

events --follow --all follows every session: each event appended from now on, in the order the
stream stored them, as one JSON line {"session":ID,"event":EVENT}.`
	c.Args = func(cmd *cobra.Command, args []string) error {
		if all {
			return exactArgs(0, "no session ID with --all")(cmd, args)
		}
		return idArgs("one session ID")(cmd, args)
	}
	c.Flags().BoolVar(&q.Follow, "follow", false, "keep printing new events as they are appended, until SIGINT")
	c.Flags().BoolVar(&all, "all", false, "with --follow: every session's new events, as {\"session\",\"event\"} JSON lines")
	c.Flags().Int64Var(&q.FromSeq, "from-seq", 0, "start at this seq")
	c.Flags().Int64Var(&q.Tail, "tail", 0, "only the last N events (--tail 0: none, as tail -n 0; not given: all)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		tailGiven := cmd.Flags().Changed("tail")
		if q.FromSeq < 0 || q.Tail < 0 {
			return &usageError{fmt.Errorf("--from-seq and --tail must be >= 0, got %d and %d", q.FromSeq, q.Tail)}
		}
		noneOld := tailGiven && q.Tail == 0 // --tail 0: no stored event
		if all {
			if !q.Follow || cmd.Flags().Changed("from-seq") || tailGiven || cmd.Flags().Changed("packed") || cmd.Flags().Changed("no-header") {
				return &usageError{errors.New("--all goes with --follow alone (it prints the events appended from now on, of every session)")}
			}
			return followAll(cmd.Context(), g)
		}
		if !q.Follow && q.FromSeq == 0 && !tailGiven {
			return run(cmd, args)
		}
		if packed, _ := cmd.Flags().GetBool("packed"); packed {
			return &usageError{errors.New("--packed cannot be combined with --follow, --from-seq or --tail")}
		}
		noHeader, _ := cmd.Flags().GetBool("no-header")
		ctx := cmd.Context()
		if !q.Follow {
			var cancel context.CancelFunc
			ctx, cancel = g.withTimeout(ctx)
			defer cancel()
		}
		hctx, cancel := g.withTimeout(ctx)
		defer cancel()
		nc, store, err := g.connect(hctx, "agentlog-events")
		if err != nil {
			return err
		}
		defer nc.Close()
		c, err := client.New(nc, g.clientOptions()...)
		if err != nil {
			return err
		}
		hp, err := eventsHeader(hctx, c, args[0])
		if err != nil {
			return err
		}
		ss, err := store.Session(args[0])
		if err != nil {
			return err
		}
		if hp == nil { // a log without metadata is still printed, as without these flags
			if loc, terr := ss.Locate(hctx); terr != nil || loc.NextSeq() == 0 {
				if !q.Follow {
					return fmt.Errorf("session %q not found", args[0])
				}
				// A watcher may start before its agent: wait for the session to be created.
				h, err := waitForSession(ctx, g, c, args[0])
				if err != nil {
					if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
						return nil // SIGINT
					}
					return err
				}
				hp = &h
			}
		}
		if noneOld {
			loc, err := ss.Locate(hctx)
			if err != nil {
				return err
			}
			q.FromSeq, q.Tail = max(q.FromSeq, loc.NextSeq()), 0
		} else if !q.Follow && q.FromSeq > 0 {
			// Without --follow, a start past the log's end would print the header alone and look
			// like success: refuse it, naming the end (with --follow it is waited for).
			loc, err := ss.Locate(hctx)
			if err != nil {
				return err
			}
			if last := loc.NextSeq() - 1; q.FromSeq > last {
				end := fmt.Sprintf("its last seq is %d", last)
				if last < 0 {
					end = "it has no events yet"
				}
				return fmt.Errorf("session %q: --from-seq %d is past the end of the log: %s (--follow waits for it)", args[0], q.FromSeq, end)
			}
		}
		bw := bufio.NewWriter(g.stdout)
		defer bw.Flush()
		if !noHeader && hp != nil {
			if err := session.WriteJSONL(bw, hp, nil, session.WriteOptions{}); err != nil {
				return err
			}
			if q.Follow {
				if err := bw.Flush(); err != nil {
					return err
				}
			}
		}
		if noneOld && !q.Follow {
			return bw.Flush()
		}
		one := make([]session.Event, 1)
		err = c.Events(ctx, args[0], q, func(ev session.Event) error {
			one[0] = ev
			if err := session.WriteJSONL(bw, nil, one, session.WriteOptions{}); err != nil {
				return err
			}
			if q.Follow && bw.Buffered() > 0 {
				return bw.Flush()
			}
			return nil
		})
		if q.Follow && errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
			return bw.Flush() // SIGINT
		}
		if err != nil {
			return err
		}
		return bw.Flush()
	}
	return withIDResolution(g, c)
}

// waitForSession waits until session id has metadata, and returns its header. It says on stderr
// that it waits (once), then reads the metadata every pollInterval (a KV get: it needs no right
// beyond what reading the session needs) until it exists or ctx ends.
func waitForSession(ctx context.Context, g *globals, c *client.Client, id string) (session.Header, error) {
	fmt.Fprintf(g.stderr, "agentlog: session %q does not exist yet: waiting for it to be created (Ctrl-C to stop)\n", id)
	for {
		h, err := c.Header(ctx, id)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrRemoving) {
			return session.Header{}, err
		}
		select {
		case <-ctx.Done():
			return session.Header{}, ctx.Err()
		case <-time.After(waitPollInterval):
		}
	}
}

// waitPollInterval is how often a --follow or --watch of a session not created yet looks for it.
const waitPollInterval = 250 * time.Millisecond

// followAll prints every event appended to any session from now on, in stream order, as JSON lines
// {"session":ID,"event":EVENT}, until ctx ends (SIGINT: exit 0). It reads the whole stream from its
// next record on (store.FollowAll: direct gets woken by a core subscription, no consumer).
func followAll(ctx context.Context, g *globals) error {
	hctx, cancel := g.withTimeout(ctx)
	nc, st, err := g.connect(hctx, "agentlog-events")
	cancel()
	if err != nil {
		return err
	}
	defer nc.Close()
	bw := bufio.NewWriter(g.stdout)
	defer bw.Flush()
	var line []byte
	err = st.FollowAll(ctx, func(m *natsjs.RawStreamMsg) error {
		evs, err := st.DecodeRecord(ctx, m.Header, m.Data)
		if err != nil {
			return err // names the session, the seq and the rule
		}
		id, err := wire.IDFromToken(m.Header.Get(wire.HeaderSession))
		if err != nil {
			return err
		}
		for i := range evs {
			line = append(line[:0], `{"session":`...)
			line = jsvalue.AppendQuote(line, id)
			line = append(line, `,"event":`...)
			if line, err = evs[i].AppendJSON(line); err != nil {
				return err
			}
			line = append(line, "}\n"...)
			if _, err := bw.Write(line); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
	if ctx.Err() != nil {
		return bw.Flush() // SIGINT
	}
	return err
}

// withMessagesWatch adds --watch to the messages command.
func withMessagesWatch(g *globals, c *cobra.Command) *cobra.Command {
	var watch bool
	run := c.RunE
	c.Use = "messages ID [--min-seq N] [--pretty] [--watch]"
	c.Long += `

ID may be a unique prefix of an id. --watch prints the history again, one JSON array per line, each
time the projection advances, until SIGINT (exit 0); a session that does not exist yet is waited for,
saying so on stderr.`
	c.Flags().BoolVar(&watch, "watch", false, "print each new history as the projection advances, until SIGINT")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if !watch {
			return run(cmd, args)
		}
		pretty, _ := cmd.Flags().GetBool("pretty")
		nc, c, err := g.client("agentlog-messages")
		if err != nil {
			return err
		}
		defer nc.Close()
		// A session not created yet is waited for (a watcher may start before its agent).
		hctx, cancel := g.withTimeout(cmd.Context())
		_, err = c.Header(hctx, args[0])
		cancel()
		if errors.Is(err, client.ErrNotFound) && !errors.Is(err, client.ErrRemoving) {
			_, err = waitForSession(cmd.Context(), g, c, args[0])
		}
		if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
			return nil // SIGINT
		}
		if err != nil {
			return err
		}
		err = c.WatchMessages(cmd.Context(), args[0], func(r client.MessagesReply) error {
			if r.Messages == nil {
				r.Messages = []json.RawMessage{}
			}
			return writeJSON(g.stdout, r.Messages, pretty)
		})
		if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
			return nil // SIGINT
		}
		return err
	}
	return withIDResolution(g, c)
}
