package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/spf13/cobra"
)

func newRmCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "rm ID [--json]",
		Short: "Delete a session: its records and blobs, metadata, projections, writer lease and error reports",
		Long: `rm deletes session ID: its records in stream AGENTLOG (a purge of its subject) and the blobs of
its offloaded events in agentlog_blobs, its metadata in
agentlog_sessions, its projection states in agentlog_projections, its writer lease in agentlog_writers
and its error reports in AGENTLOG_ERRORS. A live writer of the session is fenced: its next write
fails. The id can then be created again, as a new session. It prints what it removed (--json: one
JSON object). An id with nothing stored is refused (exit 1). An rm that failed half-way is finished
by running it again.`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := wire.Token(args[0]); err != nil {
				return &exitError{code: 1, err: err}
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, _, err := g.connect(ctx, "agentlog-rm")
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc)
			if err != nil {
				return err
			}
			rm, err := c.Remove(ctx, args[0])
			if r := g.refusal(); err != nil && r != nil {
				state := "it stopped part-way: the session reads as not found until rm is run again with the operator's credentials"
				if errors.Is(err, store.ErrRemoveNotStarted) {
					state = "nothing was changed"
				}
				return fmt.Errorf("rm %s: removing a session needs the tenant's operator role (it purges the session's subjects; deploy/SECURITY.md, \"Roles\"); %s. %w", shellquote.Quote(args[0]), state, r)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, rm, false)
			}
			printRemoved(g, rm)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","incarnation","metadata","records","events","projections","lease","errorReports","blobs"}`)
	return c
}

// printRemoved prints rm for a human, one line per kind of state.
func printRemoved(g *globals, rm client.Removed) {
	w := g.stdout
	fmt.Fprintf(w, "removed session %q", rm.Session)
	if rm.Incarnation != "" {
		fmt.Fprintf(w, " (incarnation %s)", rm.Incarnation)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  records:       %d (%d events)\n", rm.Records, rm.Events)
	fmt.Fprintf(w, "  blobs:         %d\n", rm.Blobs)
	meta := "none"
	if rm.Metadata {
		meta = "removed"
	}
	fmt.Fprintf(w, "  metadata:      %s\n", meta)
	fmt.Fprintf(w, "  projections:   %d keys", len(rm.Projections))
	if len(rm.Projections) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(rm.Projections, ", "))
	}
	fmt.Fprintln(w)
	if l := rm.Lease; l != nil {
		fmt.Fprintf(w, "  writer lease:  writer %q (host %s, pid %d, since %s), fenced\n", l.Writer, l.Host, l.PID,
			time.UnixMilli(l.Since).UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "  writer lease:  none")
	}
	fmt.Fprintf(w, "  error reports: %d\n", rm.ErrorReports)
}
