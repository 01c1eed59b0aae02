package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/spf13/cobra"
)

func newRmCmd(g *globals) *cobra.Command {
	var asJSON, dryRun, yes bool
	c := &cobra.Command{
		Use:   "rm ID [--dry-run] [--yes] [--json]",
		Short: "Delete a session: its records and blobs, metadata, projections, writer lease and error reports",
		Long: `rm deletes session ID: its records in stream AGENTLOG (a purge of its subject) and the blobs of
its offloaded events in AGENTLOG_BLOBS (and legacy agentlog_blobs), its metadata in
agentlog_sessions, its projection states in agentlog_projections, its writer lease in agentlog_writers
and its error reports in AGENTLOG_ERRORS. A live writer of the session is fenced: its next write
fails. The id can then be created again, as a new session. It prints what it removed, in words
(--json: one JSON object). Forks of the session keep their own copy of its events; their parent link
then shows as removed (status: "parent  ID (removed)", the inspector: "forked from ID (removed)").
An id with nothing stored is refused (exit 1). An rm that failed half-way is finished by running it
again.

--dry-run says what rm would remove, and changes nothing. On a terminal (stdin and stderr), rm shows
the same and asks for confirmation; --yes skips the question (scripts and pipes are not asked).`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if _, err := wire.Token(id); err != nil {
				return &exitError{code: 1, err: err}
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, _, err := g.connect(ctx, "agentlog-rm")
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, g.clientOptions()...)
			if err != nil {
				return err
			}
			ask := !yes && !dryRun && askTerminal(g.stdin) && askTerminal(g.stderr)
			var plan rmPlan
			if dryRun || ask {
				if plan, err = planRemove(ctx, c, id); err != nil {
					return err
				}
			}
			if dryRun {
				if asJSON {
					return writeJSON(g.stdout, plan, false)
				}
				plan.print(g.stdout)
				return nil
			}
			if ask {
				plan.print(g.stderr)
				fmt.Fprintf(g.stderr, "Remove session %s? This cannot be undone. [y/N] ", quoteID(id))
				answer, _ := bufio.NewReader(g.stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return &exitError{code: 1, err: fmt.Errorf("rm %s: not confirmed; nothing was removed", shellquote.Quote(id))}
				}
			}
			rm, err := c.Remove(ctx, id)
			var denied *store.RightDeniedError
			if r := g.refusal(); err != nil && (r != nil || errors.As(err, &denied)) {
				state := "it stopped part-way: the session reads as not found until rm is run again with the operator's credentials"
				if errors.Is(err, store.ErrRemoveNotStarted) {
					state = "nothing was changed"
				}
				right := "a right it needs"
				if denied != nil {
					right = denied.Subject
				} else if m := refusedSubject.FindStringSubmatch(r.Error()); m != nil {
					right = m[1]
				}
				if r == nil {
					r = denied.Err
				}
				return fmt.Errorf("rm %s: rm needs the operator role: %s is denied (removing a session purges its subjects; deploy/SECURITY.md, \"Roles\"); %s. %w", shellquote.Quote(id), right, state, r)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, rm, false)
			}
			printRemoved(g, rm, plan.Children)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","incarnation","metadata","records","events","projections","lease","errorReports","blobs"} (with --dry-run: {"session","dryRun","state","events","units","children"})`)
	c.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be removed, and remove nothing")
	c.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation on a terminal")
	return c
}

// refusedSubject finds the subject in a permission violation's text.
var refusedSubject = regexp.MustCompile(`Publish to "([^"]+)"`)

// askTerminal reports whether rm may ask on f (a terminal); a test replaces it.
var askTerminal = isTerminal

// rmPlan is what rm would remove (rm --dry-run): the session's state ("stored", "being removed"
// for an rm that stopped part-way, "records without metadata"), its events, its projection units
// and its fork children (which stay, their parent link marked removed).
type rmPlan struct {
	Session  string   `json:"session"`
	DryRun   bool     `json:"dryRun"`
	State    string   `json:"state"`
	Events   int64    `json:"events"`
	Units    []string `json:"units"`
	Children []string `json:"children"`
}

// planRemove reads what removing id would remove, changing nothing. An id with nothing stored is
// client.ErrNotFound, as rm refuses it.
func planRemove(ctx context.Context, c *client.Client, id string) (rmPlan, error) {
	p := rmPlan{Session: id, DryRun: true, State: "stored", Units: []string{}, Children: []string{}}
	s, err := c.Status(ctx, id)
	switch {
	case err == nil:
		p.Events, p.Children = s.Events, s.Children
		for _, u := range s.Units {
			p.Units = append(p.Units, u.Unit)
		}
		return p, nil
	case errors.Is(err, client.ErrRemoving):
		p.State = "being removed"
	case client.BeingCreated(err):
		p.State = "being created (an incomplete fork)"
	case errors.Is(err, client.ErrNotFound):
		p.State = "records without metadata"
	default:
		return p, err
	}
	last, err := c.LastSeq(ctx, id)
	if err != nil {
		return p, err
	}
	if last < 0 && p.State != "being removed" {
		return p, &exitError{code: 1, err: fmt.Errorf("session %q not found: nothing to remove", id)}
	}
	p.Events = last + 1
	return p, nil
}

// print writes the plan for a human.
func (p rmPlan) print(w io.Writer) {
	switch p.State {
	case "being removed":
		fmt.Fprintf(w, "session %s is being removed (an earlier rm stopped part-way); rm would finish it: %s left\n", quoteID(p.Session), plural(p.Events, "event"))
		return
	case "records without metadata":
		fmt.Fprintf(w, "session %s has no metadata, only records (a write or a removal stopped half-way); rm would remove its %s\n", quoteID(p.Session), plural(p.Events, "event"))
		return
	}
	fmt.Fprintf(w, "rm would remove session %s:\n", quoteID(p.Session))
	fmt.Fprintf(w, "  log:          %s, and their offloaded blobs\n", plural(p.Events, "event"))
	fmt.Fprintln(w, "  metadata:     its header")
	fmt.Fprintf(w, "  projections:  %s\n", unitsText(p.Units))
	fmt.Fprintln(w, "  also:         its writer lease (a live writer is fenced) and its error reports")
	if len(p.Children) > 0 {
		fmt.Fprintf(w, "  kept:         its fork children %s (their own copies; their parent link will show as removed)\n", termSafeJoin(p.Children, ", "))
	}
}

// unitsText is "7 units (messages, title, ...)" or "none".
func unitsText(units []string) string {
	if len(units) == 0 {
		return "none"
	}
	return plural(int64(len(units)), "unit") + " (" + strings.Join(units, ", ") + ")"
}

// printRemoved prints rm for a human, one line per kind of state, in words (the projection keys
// by unit name); children are the fork children rm found before removing (nil: not looked up).
func printRemoved(g *globals, rm client.Removed, children []string) {
	w := g.stdout
	fmt.Fprintf(w, "removed session %q", rm.Session)
	if rm.Incarnation != "" {
		fmt.Fprintf(w, " (incarnation %s)", rm.Incarnation)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  log:           %s (%s)\n", plural(rm.Events, "event"), plural(int64(rm.Records), "record"))
	fmt.Fprintf(w, "  blobs:         %s\n", plural(int64(rm.Blobs), "offloaded event"))
	meta := "none"
	if rm.Metadata {
		meta = "removed"
	}
	fmt.Fprintf(w, "  metadata:      %s\n", meta)
	units := make([]string, 0, len(rm.Projections))
	for _, k := range rm.Projections {
		unit, _, _ := strings.Cut(k, ".") // <unit>.<token>
		units = append(units, unit)
	}
	sort.Strings(units)
	fmt.Fprintf(w, "  projections:   %s\n", unitsText(units))
	if l := rm.Lease; l != nil {
		fmt.Fprintf(w, "  writer lease:  writer %q (host %s, pid %d, since %s), fenced\n", l.Writer, l.Host, l.PID,
			time.UnixMilli(l.Since).UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "  writer lease:  none")
	}
	fmt.Fprintf(w, "  error reports: %d\n", rm.ErrorReports)
	if len(children) > 0 {
		fmt.Fprintf(w, "  kept:          its fork children %s, whose parent link now shows as removed\n", termSafeJoin(children, ", "))
	}
}
