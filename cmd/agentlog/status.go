package main

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/agentlog/agentlog/client"
	"github.com/spf13/cobra"
)

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status ID [--json]",
		Short: "Show a session's state: last seq, open turn, lineage, children, each projection unit's lag",
		Long: `status shows a session's last seq, its open turn (as the messages unit last folded it, with the
seq it is as of: "3 (as of seq 120 of 130: the projection lags)"), its
parent and seed length, its fork children, and for each stored projection unit its asOfSeq and lag
(last seq - asOfSeq), with the session, seq, unit and rule of stopped units. ID may be a unique prefix.
Finding the children reads every session's header (a pass over agentlog_sessions). --json prints one
object: {"id","createdAt","lastSeq","events","openTurn","parentSession","seedLength","children",
"units":[{"unit","stateVersion","asOfSeq","lag","error"?}],"stopped":[{"session","seq","unit","rule","message"}],
"dataLoss"?:{"fromSeq","toSeq","streamSeq"?,"detail","detectedAt"}}.

A session whose metadata or projections name records its log no longer holds (a server that lost
acknowledged writes, a purge outside agentlog) is shown with its data loss, and status exits 1.`,
		Args:              idArgs("one session ID"),
		ValidArgsFunction: g.completeSessionIDs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			id, err := g.resolveID(ctx, args[0])
			if err != nil {
				return err
			}
			nc, c, err := g.client("agentlog-status")
			if err != nil {
				return err
			}
			defer nc.Close()
			s, err := c.Status(ctx, id)
			lost := s.DataLoss != nil && errors.Is(err, client.ErrDataLoss)
			if err != nil && !lost {
				return clientExit(err)
			}
			if asJSON {
				if werr := writeJSON(g.stdout, s, false); werr != nil {
					return werr
				}
				return err // the status is printed; a data loss is an error all the same
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintf(tw, "session\t%s\n", termSafe(s.ID))
			fmt.Fprintf(tw, "created\t%s\n", formatMs(s.CreatedAt))
			fmt.Fprintf(tw, "state\t%s\n", s.State)
			if s.Hold {
				fmt.Fprintf(tw, "hold\theld: %s\n", termSafe(s.HoldReason))
			}
			fmt.Fprintf(tw, "last seq\t%d (%d events)\n", s.LastSeq, s.Events)
			fmt.Fprintf(tw, "open turn\t%s\n", openTurnLine(s))
			parent := "-"
			if s.ParentSession != nil {
				parent = termSafe(*s.ParentSession)
			}
			if s.SeedLength != nil {
				parent += fmt.Sprintf(" (seed length %d)", *s.SeedLength)
			}
			fmt.Fprintf(tw, "parent\t%s\n", parent)
			fmt.Fprintf(tw, "children\t%s\n", dash(termSafeJoin(s.Children, ", ")))
			fmt.Fprintln(tw, "\nUNIT\tAS OF SEQ\tLAG\tSTOPPED")
			for _, u := range s.Units {
				stopped := "-"
				if u.Error != nil {
					stopped = fmt.Sprintf("at seq %d (rule %s): %s", u.Error.Seq, u.Error.Rule, u.Error.Message)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", u.Unit, u.AsOfSeq, u.Lag, stopped)
			}
			if l := s.DataLoss; l != nil {
				fmt.Fprintf(tw, "\nDATA LOSS\tseqs %d..%d: %s\n", l.FromSeq, l.ToSeq, l.Detail)
			}
			if ferr := tw.Flush(); ferr != nil {
				return ferr
			}
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object")
	return c
}

// openTurnLine is status's open turn with the seq it is as of: the messages unit's asOfSeq, which
// lags the log's last seq while the projector catches up ("3 (as of seq 120 of 130)").
func openTurnLine(s client.Status) string {
	asOf := int64(-2)
	for _, u := range s.Units {
		if u.Unit == "messages" {
			asOf = u.AsOfSeq
		}
	}
	turn := "none"
	if s.OpenTurn != nil {
		turn = strconv.FormatInt(*s.OpenTurn, 10)
	}
	switch {
	case asOf == -2:
		return "unknown (no messages projection stored yet)"
	case asOf < 0:
		return fmt.Sprintf("%s (as of no event folded yet; last seq %d)", turn, s.LastSeq)
	case asOf == s.LastSeq:
		return fmt.Sprintf("%s (as of seq %d, the last)", turn, asOf)
	}
	return fmt.Sprintf("%s (as of seq %d of %d: the projection lags)", turn, asOf, s.LastSeq)
}
