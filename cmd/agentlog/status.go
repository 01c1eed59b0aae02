package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status ID [--json]",
		Short: "Show a session's state: last seq, open turn, lineage, children, each projection unit's lag",
		Long: `status shows a session's last seq, its open turn (as the messages unit last folded it), its
parent and seed length, its fork children, and for each stored projection unit its asOfSeq and lag
(last seq - asOfSeq), with the session, seq, unit and rule of stopped units. ID may be a unique prefix.
Finding the children reads every session's header (a pass over agentlog_sessions). --json prints one
object: {"id","createdAt","lastSeq","events","openTurn","parentSession","seedLength","children",
"units":[{"unit","stateVersion","asOfSeq","lag","error"?}],"stopped":[{"session","seq","unit","rule","message"}]}.`,
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
			if err != nil {
				return clientExit(err)
			}
			if asJSON {
				return writeJSON(g.stdout, s, false)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintf(tw, "session\t%s\n", termSafe(s.ID))
			fmt.Fprintf(tw, "created\t%s\n", formatMs(s.CreatedAt))
			fmt.Fprintf(tw, "last seq\t%d (%d events)\n", s.LastSeq, s.Events)
			if s.OpenTurn != nil {
				fmt.Fprintf(tw, "open turn\t%d\n", *s.OpenTurn)
			} else {
				fmt.Fprintf(tw, "open turn\tnone\n")
			}
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
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object")
	return c
}
