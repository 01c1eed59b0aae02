package main

import (
	"fmt"
	"time"

	"github.com/agentlog/agentlog/projector"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// newRebuildCmd is `agentlog rebuild UNIT [--session ID]...`: it recomputes a projection unit's
// stored states from the session logs (projector.Rebuild), next to running projectors.
func newRebuildCmd(g *globals) *cobra.Command {
	var ids []string
	var quiet bool
	c := &cobra.Command{
		Use:   "rebuild UNIT [--session ID]...",
		Short: "Recompute a projection unit's states from the session logs",
		Long: `rebuild recomputes the state of projection unit UNIT (messages, transcript, title, todos, usage,
tools, turns) for every session, or for the sessions named with --session, from seq 0 of each log, and
stores it in the agentlog_projections KV bucket with a revision compare-and-swap. Running projectors
need not stop: one that holds a rebuilt session in memory reloads it at its next write. A session whose
log breaks a rule is rebuilt up to that event and keeps the error. Progress goes to stderr.

A new stateVersion of a unit needs no rebuild: stored states of another stateVersion are rebuilt in
place when their session gets a record, or is queried. rebuild is for a unit whose fold was wrong.`,
		Args: exactArgs(1, "one argument, the unit key"),
		RunE: func(cmd *cobra.Command, args []string) error {
			unit := args[0]
			reg, err := projector.NewRegistry()
			if err != nil {
				return err
			}
			if _, ok := reg.Unit(unit); !ok {
				return &usageError{fmt.Errorf("no projection unit %q (units: %v)", unit, reg.Keys())}
			}
			nc, store, err := g.connect(cmd.Context(), "agentlog-rebuild")
			if err != nil {
				return err
			}
			defer nc.Close()
			var sel []string
			if len(ids) > 0 {
				sel = ids
			}
			var bar *progressbar.ProgressBar
			barChecked := false
			start := time.Now()
			res, err := projector.Rebuild(cmd.Context(), store, reg, unit, sel, func(done, total int) {
				if quiet {
					return
				}
				if bar == nil && !barChecked {
					barChecked = true
					bar = newProgressBar(g.stderr, int64(total), "rebuild "+unit, "sessions")
				}
				if bar != nil {
					_ = bar.Set(done)
				}
			})
			if bar != nil {
				_ = bar.Finish()
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "rebuilt %s: %d session(s) (%d stopped by a rule their log breaks), %d without events, in %s\n",
				unit, res.Sessions, res.Stopped, res.Empty, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringArrayVar(&ids, "session", nil, "rebuild only this session (repeatable; default: every session)")
	c.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	return c
}
