package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

func newSessionsCmd(g *globals) *cobra.Command {
	var q client.SessionsQuery
	var asJSON bool
	var activeWithin time.Duration
	var createdAfter, createdBefore string
	c := &cobra.Command{
		Use:   "sessions [--sort created|activity|id] [--state active|archived|held] [filters] [--limit N] [--after CURSOR] [--json]",
		Short: "List sessions (newest first), with their state, and search them by state, activity, creation, parent and title",
		Long: `sessions lists sessions, printing a page at a time as it goes, in the order --sort:

  created   newest first, by when the session was created in this store (the default): a page reads
            only its own rows, whatever the number of sessions;
  activity  by last activity (when its last record was stored), newest first: the sessions with
            records in the hot stream (one headers-only pass over their last records), then the
            archived ones; sessions without events are not listed;
  id        byte order of the ids: one pass over every session's header.

Filters (all that are given apply): --state active|archived|held, --open-turn, --errored (agent/error
reports: failed writes), --stopped (a projection unit stopped), --active-within D (last activity in
the last D), --created-after and --created-before (RFC 3339 times or Unix ms), --parent ID (its
forks, from the lineage index), --title TEXT (a substring of the title, any case), --prefix P (ids
starting with P). A filter on something a page's rows do not carry (state, open turn, title...) reads
windows of rows until the page is full: its cost grows with how far the matches are.

--limit N stops after N; when more remain, the next page's cursor is printed on stderr ("next:
--after CURSOR"). --json prints JSON lines, one object per session: {"id","createdAt",
"lastActivity"?,"lastSeq","events","parentSession"?,"seedLength"?,"children","title"?,"openTurn"?,
"stopped"?,"errored"?,"state","held"?}. lastSeq is -1 for a session without events; lastActivity is
when its last record was stored (Unix ms).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if q.Limit < 0 {
				return &usageError{fmt.Errorf("--limit must be >= 0, got %d", q.Limit)}
			}
			switch q.Sort {
			case client.SortCreated, client.SortActivity, client.SortID:
			default:
				return &usageError{fmt.Errorf("--sort %q: want created, activity or id", q.Sort)}
			}
			switch q.State {
			case "", client.StateActive, client.StateArchived, client.StateHeld:
			default:
				return &usageError{fmt.Errorf("--state %q: want active, archived or held", q.State)}
			}
			if activeWithin < 0 {
				return &usageError{fmt.Errorf("--active-within must be > 0, got %s", activeWithin)}
			}
			if activeWithin > 0 {
				q.ActiveSince = time.Now().Add(-activeWithin)
			}
			var err error
			if q.CreatedAfter, err = parseTimeFlag("--created-after", createdAfter); err != nil {
				return err
			}
			if q.CreatedBefore, err = parseTimeFlag("--created-before", createdBefore); err != nil {
				return err
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, c, err := g.client("agentlog-sessions")
			if err != nil {
				return err
			}
			defer nc.Close()
			bw := bufio.NewWriter(g.stdout)
			defer bw.Flush()
			tw := tabwriter.NewWriter(bw, 0, 8, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tLAST ACTIVITY\tLAST SEQ\tEVENTS\tPARENT\tCHILDREN")
			}
			n := 0
			next, err := c.Sessions(ctx, q, func(s client.SessionInfo) error {
				if asJSON {
					if err := writeJSON(bw, s, false); err != nil {
						return err
					}
				} else {
					state := s.State
					if s.Held {
						state += ",held"
					}
					activity := "-"
					if s.LastActivity > 0 {
						activity = formatMs(s.LastActivity)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", termSafe(s.ID), state, formatMs(s.CreatedAt), activity, s.LastSeq, s.Events, dash(termSafe(s.ParentSession)), dash(termSafeJoin(s.Children, ",")))
				}
				if n++; n%256 == 0 { // print as it goes
					if err := tw.Flush(); err != nil {
						return err
					}
					return bw.Flush()
				}
				return nil
			})
			if err != nil {
				return clientExit(err)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(g.stderr, "next: --after %s\n", shellquote.Quote(next))
			}
			return nil
		},
	}
	c.Flags().StringVar(&q.Sort, "sort", client.SortCreated, "order: created (newest first), activity (last activity first) or id")
	c.Flags().StringVar(&q.State, "state", "", "only sessions in this state: active, archived or held")
	c.Flags().BoolVar(&q.OpenTurn, "open-turn", false, "only sessions whose last turn is open")
	c.Flags().BoolVar(&q.Errored, "errored", false, "only sessions with agent/error reports (failed writes)")
	c.Flags().BoolVar(&q.Stopped, "stopped", false, "only sessions with a stopped projection unit")
	c.Flags().DurationVar(&activeWithin, "active-within", 0, "only sessions with activity in the last D (1h: active in the last hour)")
	c.Flags().StringVar(&createdAfter, "created-after", "", "only sessions created at or after T (RFC 3339, or Unix ms)")
	c.Flags().StringVar(&createdBefore, "created-before", "", "only sessions created before T (RFC 3339, or Unix ms)")
	c.Flags().StringVar(&q.Parent, "parent", "", "only the forks of session ID")
	c.Flags().StringVar(&q.Title, "title", "", "only sessions whose title contains TEXT (any case)")
	c.Flags().StringVar(&q.Prefix, "prefix", "", "only ids starting with P")
	c.Flags().StringVar(&q.After, "after", "", "continue after CURSOR (what the previous page printed; an id with --sort id)")
	c.Flags().IntVar(&q.Limit, "limit", 0, "at most N sessions (0: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "JSON lines, one object per session")
	return c
}

// parseTimeFlag reads an RFC 3339 time or Unix ms ("" is the zero time).
func parseTimeFlag(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, &usageError{fmt.Errorf("%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or Unix ms", flag, v)}
	}
	return t, nil
}

// client dials --nats and returns a Client over the connection (close the connection when done).
func (g *globals) client(name string) (*nats.Conn, *client.Client, error) {
	nc, _, err := natsdev.ConnectDomain(g.natsURL, g.conn.jsDomain, g.natsOptions(name)...)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(nc, g.clientOptions()...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

// resolveID resolves an id argument (see client.Resolve). A blank one is a usage error; an
// ambiguous prefix exits 1 listing its candidates; an unknown one is returned as given, for the
// command to report. A prefix expanded to an id is noted on stderr.
func (g *globals) resolveID(ctx context.Context, arg string) (string, error) {
	if blankID(arg) {
		return "", &usageError{errors.New("the session ID is blank")}
	}
	nc, c, err := g.client("agentlog-resolve")
	if err != nil {
		return "", err
	}
	defer nc.Close()
	id, err := c.Resolve(ctx, arg)
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrBadRequest) {
		return arg, nil
	}
	if err != nil {
		return "", clientExit(err)
	}
	if id != arg {
		// Say so: right after `rm x`, "x" may name a child "x1" by its prefix.
		fmt.Fprintf(g.stderr, "agentlog: no session is named %q; using %q, the one session id it is a prefix of\n", arg, id)
	}
	return id, nil
}

// clientExit maps a client error to its exit status: an ambiguous id exits 1 with its candidates.
func clientExit(err error) error {
	var ae *client.AmbiguousError
	if errors.As(err, &ae) {
		more := ""
		if ae.More {
			more = "\n  ..."
		}
		quoted := make([]string, len(ae.Candidates)) // quoted, as sessions lists them: an id may hold a newline
		for i, c := range ae.Candidates {
			quoted[i] = quoteID(c)
		}
		return &exitError{code: 1, err: fmt.Errorf("session id prefix %q is ambiguous; candidates:\n  %s%s", ae.Prefix, strings.Join(quoted, "\n  "), more)}
	}
	return err
}

func formatMs(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// termSafe returns id as is when every rune of it is printable (no control characters, no
// escape sequences, no tabs), else quoted as a Go string, so that an id cannot drive the terminal
// or break a table's columns.
func termSafe(id string) string {
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return strconv.Quote(id)
		}
	}
	return id
}

// termSafeJoin is strings.Join of ids, each made termSafe.
func termSafeJoin(ids []string, sep string) string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = termSafe(id)
	}
	return strings.Join(out, sep)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
