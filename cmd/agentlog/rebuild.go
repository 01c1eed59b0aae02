package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/store"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

// newRebuildCmd is `agentlog rebuild UNIT [--session ID]...`: it recomputes a projection unit's
// stored states from the session logs (projector.Rebuild), next to running projectors.
func newRebuildCmd(g *globals) *cobra.Command {
	var ids []string
	var quiet, asJSON bool
	c := &cobra.Command{
		Use:   "rebuild UNIT [--session ID]...",
		Short: "Recompute a projection unit's states from the session logs",
		Long: `rebuild recomputes the state of projection unit UNIT (messages, transcript, title, todos, usage,
tools, turns) for every session (not those being removed), or for the sessions named with --session, from
seq 0 of each log, and
stores it in the agentlog_projections KV bucket with a revision compare-and-swap. Running projectors
need not stop: one that holds a rebuilt session in memory reloads it at its next write. A session whose
log breaks a rule is rebuilt up to that event and keeps the error. A --session that names no session
(neither metadata nor records), or one being removed, is refused (exit 1) before anything is rebuilt.
A progress bar goes to
stderr when it is a terminal; --json prints the result as one JSON object.

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
			sel := ids
			if len(ids) > 0 {
				if err := checkSessionsExist(cmd.Context(), store, ids); err != nil {
					return err
				}
			} else {
				c, err := client.New(nc, g.clientOptions()...)
				if err != nil {
					return err
				}
				if sel, err = c.SessionIDs(cmd.Context(), "", 0); err != nil { // not those being removed
					return err
				}
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
			el := time.Since(start)
			if asJSON {
				return writeJSON(g.stdout, rebuildResult{Unit: unit, Sessions: res.Sessions, Stopped: res.Stopped, Empty: res.Empty,
					ElapsedMs: float64(el.Microseconds()) / 1000}, false)
			}
			fmt.Fprintf(g.stdout, "rebuilt %s: %d session(s) (%d stopped by a rule their log breaks), %d without events, in %s\n",
				unit, res.Sessions, res.Stopped, res.Empty, el.Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringArrayVar(&ids, "session", nil, "rebuild only this session (repeatable; default: every session)")
	c.Flags().BoolVar(&quiet, "quiet", false, "no progress bar (there is none unless stderr is a terminal)")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"unit","sessions","stopped","empty","elapsedMs"}`)
	return c
}

// rebuildResult is what `agentlog rebuild --json` prints.
type rebuildResult struct {
	Unit      string  `json:"unit"`
	Sessions  int     `json:"sessions"` // rebuilt, stopped ones included
	Stopped   int     `json:"stopped"`  // stopped by a rule their log breaks
	Empty     int     `json:"empty"`    // without events
	ElapsedMs float64 `json:"elapsedMs"`
}

// checkSessionsExist refuses ids that name no session (neither metadata nor records) or a session
// being removed.
func checkSessionsExist(ctx context.Context, st *store.Store, ids []string) error {
	for _, id := range ids {
		ss, err := st.Session(id)
		if err != nil {
			return err
		}
		_, err = ss.Info(ctx)
		if err == nil {
			continue
		}
		if errors.Is(err, store.ErrSessionDeleted) {
			return fmt.Errorf("session %q is being removed (an earlier removal stopped part-way): nothing was rebuilt; run `agentlog rm %s` to finish", id, shellquote.Quote(id))
		}
		if !errors.Is(err, store.ErrSessionNotFound) {
			return err
		}
		if t, terr := ss.Tail(ctx); terr != nil || t.NextSeq == 0 {
			return fmt.Errorf("session %q not found (no metadata, no records): nothing was rebuilt", id)
		}
	}
	return nil
}
