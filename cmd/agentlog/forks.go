package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/agentlog/agentlog/session"
	"github.com/spf13/cobra"
)

func newForksCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "forks ID [--json]",
		Short: "List a session's valid fork boundaries: one line per turn end, with the turn's first user message",
		Long: `forks lists where session ID can be forked (agentlog fork ID --at SEQ): a boundary may not fall
inside an open turn, so the valid ones are the turn ends and what follows them up to the next
turn/start. One line per turn end: its seq (SEQ), the last seq the same range allows (THROUGH), the
turn, how it ended, when, and the turn's first user message (cut; newlines shown as spaces). A leading
line with turn "-" covers events before the first turn. ID may be a unique prefix. --json prints one
JSON array of {"seq","through","turn","reason"?,"time","userSeq","userText"} (client.ForkBoundaries).`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, c, err := g.client("agentlog-forks")
			if err != nil {
				return err
			}
			defer nc.Close()
			bs, err := c.ForkBoundaries(ctx, args[0])
			if err != nil {
				return clientExit(err)
			}
			if asJSON {
				return writeJSON(g.stdout, bs, false)
			}
			if len(bs) == 0 {
				fmt.Fprintf(g.stdout, "session %s has no valid fork boundary yet (no event, or its first turn is still open); a fork without --at copies nothing\n", quoteID(args[0]))
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tTHROUGH\tTURN\tENDED\tAT\tFIRST USER MESSAGE")
			for _, b := range bs {
				turn, reason := "-", "-"
				if b.Turn != 0 || b.Reason != "" {
					turn, reason = fmt.Sprint(b.Turn), dash(b.Reason)
				}
				user := "-"
				if b.UserSeq >= 0 {
					user = oneLine(session.CutRunes(b.UserText, 80))
				}
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", b.Seq, b.Through, turn, reason, formatMs(b.Time), user)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON array of the boundaries")
	return c
}

// oneLine makes text fit one line of a table: control characters (newlines, tabs) become spaces,
// runs of spaces one.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
	return strings.Join(strings.Fields(s), " ")
}
