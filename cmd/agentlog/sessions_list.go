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
	c := &cobra.Command{
		Use:   "sessions [--prefix P] [--after ID] [--limit N] [--json]",
		Short: "List sessions: id, createdAt, last seq, event count, parent and children",
		Long: `sessions lists the sessions in agentlog_sessions in byte order of their ids, printing a page at a
time as it goes. --limit N stops after N; when more remain, the cursor of the next page is printed on
stderr ("next: --after ID"). --json prints JSON lines, one object per session:
{"id","createdAt","lastActivity"?,"lastSeq","events","parentSession"?,"seedLength"?,"children"}. lastSeq
is -1 for a session without events; lastActivity is when its last record was stored (Unix ms).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if q.Limit < 0 {
				return &usageError{fmt.Errorf("--limit must be >= 0, got %d", q.Limit)}
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
				fmt.Fprintln(tw, "ID\tCREATED\tLAST SEQ\tEVENTS\tPARENT\tCHILDREN")
			}
			n := 0
			next, err := c.Sessions(ctx, q, func(s client.SessionInfo) error {
				if asJSON {
					if err := writeJSON(bw, s, false); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", termSafe(s.ID), formatMs(s.CreatedAt), s.LastSeq, s.Events, dash(termSafe(s.ParentSession)), dash(termSafeJoin(s.Children, ",")))
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
	c.Flags().StringVar(&q.Prefix, "prefix", "", "only ids starting with P")
	c.Flags().StringVar(&q.After, "after", "", "only ids after ID (the cursor a previous page printed)")
	c.Flags().IntVar(&q.Limit, "limit", 0, "at most N sessions (0: all)")
	c.Flags().BoolVar(&asJSON, "json", false, "JSON lines, one object per session")
	return c
}

// client dials --nats and returns a Client over the connection (close the connection when done).
func (g *globals) client(name string) (*nats.Conn, *client.Client, error) {
	nc, _, err := natsdev.Connect(g.natsURL, g.natsOptions(name)...)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(nc)
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
		return &exitError{code: 1, err: fmt.Errorf("session id prefix %q is ambiguous; candidates:\n  %s%s", ae.Prefix, strings.Join(ae.Candidates, "\n  "), more)}
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
