package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/spf13/cobra"
)

// withIDResolution makes c resolve its first argument (an id or a unique prefix, see resolveID)
// and complete session ids.
func withIDResolution(g *globals, c *cobra.Command) *cobra.Command {
	run := c.RunE
	c.ValidArgsFunction = g.completeSessionIDs
	c.RunE = func(cmd *cobra.Command, args []string) error {
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

// withEventsFollow adds --follow, --from-seq and --tail to the events command.
func withEventsFollow(g *globals, c *cobra.Command) *cobra.Command {
	var q client.EventsQuery
	run := c.RunE
	c.Use = "events ID [--packed] [--no-header] [--from-seq N] [--tail N] [--follow]"
	c.Long = `events prints a session's log as dsh JSONL: its header line, then one event per line. ID may be a
unique prefix of an id. --from-seq N starts at seq N (past the log's last seq it is refused, exit 1,
unless --follow, which waits for it), --tail N prints the last N events (of those),
and --follow goes on printing new events as they are appended, until SIGINT (exit 0).`
	c.Flags().BoolVar(&q.Follow, "follow", false, "keep printing new events as they are appended, until SIGINT")
	c.Flags().Int64Var(&q.FromSeq, "from-seq", 0, "start at this seq")
	c.Flags().Int64Var(&q.Tail, "tail", 0, "only the last N events (0: all)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if q.FromSeq < 0 || q.Tail < 0 {
			return &usageError{fmt.Errorf("--from-seq and --tail must be >= 0, got %d and %d", q.FromSeq, q.Tail)}
		}
		if !q.Follow && q.FromSeq == 0 && q.Tail == 0 {
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
		c, err := client.New(nc)
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
		if hp == nil { // a log without metadata is still printed, as without these flags; an unknown id is refused at once, --follow too
			if loc, terr := ss.Locate(hctx); terr != nil || loc.NextSeq() == 0 {
				return fmt.Errorf("session %q not found", args[0])
			}
		}
		if !q.Follow && q.FromSeq > 0 {
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

// withMessagesWatch adds --watch to the messages command.
func withMessagesWatch(g *globals, c *cobra.Command) *cobra.Command {
	var watch bool
	run := c.RunE
	c.Use = "messages ID [--min-seq N] [--pretty] [--watch]"
	c.Long += `

ID may be a unique prefix of an id. --watch prints the history again, one JSON array per line, each
time the projection advances, until SIGINT (exit 0).`
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
		// An unknown session is refused at once, as without --watch (not watched until it appears).
		hctx, cancel := g.withTimeout(cmd.Context())
		_, err = c.Header(hctx, args[0])
		cancel()
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
