package main

import (
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/spf13/cobra"
)

// purgeRefusal explains a lifecycle operation refused for want of the right to purge.
func purgeRefusal(g *globals, what string, err error) error {
	if r := g.refusal(); r != nil || errors.Is(err, store.ErrRemoveNotStarted) || errors.Is(err, store.ErrNoPurgeRight) {
		if r == nil {
			r = err
		}
		return fmt.Errorf("%s needs the tenant's operator (or lifecycle) role: it purges the hot records it moves (deploy/SECURITY.md, \"Roles\"); nothing was changed. %w", what, r)
	}
	return err
}

func newArchiveCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "archive ID [--json]",
		Short: "Move a session's log into cold storage (AGENTLOG_ARCHIVE) now",
		Long: `archive moves session ID out of the hot stream AGENTLOG, as the lifecycle pass does after the
policy's archive-after: its packed JSONL (offloaded events inline) and its projection states are
written, zstd-compressed, to AGENTLOG_ARCHIVE, then its hot records, projection keys and blobs are
removed. Every read serves it as before, byte for byte; a write (publisher.Open, agentlog append, the
TypeScript backend) restores it first. A session under a legal hold is refused; so is one without
events. An archive that stopped part-way is finished by running it again. It needs the operator's
(or the lifecycle) role. A writer that appends meanwhile keeps its records hot after the archived
prefix ("raced").`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := wire.Token(args[0]); err != nil {
				return &exitError{code: 1, err: err}
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, st, err := g.connect(ctx, "agentlog-archive")
			if err != nil {
				return err
			}
			defer nc.Close()
			ss, err := st.Session(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			res, err := ss.Archive(ctx)
			if err != nil {
				return purgeRefusal(g, "archive "+shellquote.Quote(args[0]), err)
			}
			if asJSON {
				return writeJSON(g.stdout, res, false)
			}
			switch {
			case res.Already:
				fmt.Fprintf(g.stdout, "session %q was archived already (archive %s, %d events)\n", res.Session, res.ArchiveID, res.Events)
			case res.Raced:
				fmt.Fprintf(g.stdout, "session %q: events 0..%d archived; a writer appended meanwhile, its records stay hot (run archive again once it is idle)\n", res.Session, res.Events-1)
			default:
				fmt.Fprintf(g.stdout, "archived session %q: %d events, %d records, %d bytes of packed JSONL stored in %d bytes (%d parts), %d projection states, %d blobs\n",
					res.Session, res.Events, res.Records, res.JSONLBytes, res.StoredBytes, res.Parts, res.Projections, res.Blobs)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","archived","already"?,"raced"?,"archiveId","events","records","jsonlBytes","storedBytes","parts","projections","blobs","lastActivity"}`)
	return c
}

func newRestoreCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "restore ID [--json]",
		Short: "Bring an archived session back to the hot stream",
		Long: `restore writes an archived session's events back to the hot stream AGENTLOG as one atomic write
(guarded: of two restores, one writes and the other finds its records), as publisher.Open does
before it writes. Its projections are folded again by the projector. A session that is not archived
is left as it is. The archive itself is removed later by the lifecycle pass (a restore needs no
right to purge).`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, st, err := g.connect(ctx, "agentlog-restore")
			if err != nil {
				return err
			}
			defer nc.Close()
			ss, err := st.Session(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			res, err := ss.Restore(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, res, false)
			}
			if res.Already {
				fmt.Fprintf(g.stdout, "session %q is not archived: nothing to restore\n", res.Session)
			} else {
				fmt.Fprintf(g.stdout, "restored session %q: %d events back in %s (archive %s)\n", res.Session, res.Events, wire.StreamName, res.ArchiveID)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","restored","already"?,"archiveId","events","streamSeq"}`)
	return c
}

func newHoldCmd(g *globals) *cobra.Command {
	var reason string
	var release, asJSON bool
	c := &cobra.Command{
		Use:   "hold ID --reason TEXT | hold --release ID",
		Short: "Put a session under a legal hold (never archived nor deleted), or end it",
		Long: `hold exempts session ID from archiving and from deletion (retention, and agentlog rm, which
refuses a held session) until hold --release ID. The hold lives in the cluster (KV bucket
agentlog_lifecycle), so every projector sees it. A fork of a held session is not held.`,
		Args: idArgs("one session ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !release && reason == "" {
				return &usageError{errors.New("hold needs --reason TEXT (or --release)")}
			}
			if release && reason != "" {
				return &usageError{errors.New("--release takes no --reason")}
			}
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, st, err := g.connect(ctx, "agentlog-hold")
			if err != nil {
				return err
			}
			defer nc.Close()
			ss, err := st.Session(args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if release {
				if err := ss.ReleaseHold(ctx); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "released the hold of session %q\n", args[0])
				return nil
			}
			h, err := ss.Hold(ctx, reason)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, h, false)
			}
			fmt.Fprintf(g.stdout, "session %q is held: %s\n", h.Session, h.Reason)
			return nil
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the session is held (required)")
	c.Flags().BoolVar(&release, "release", false, "end the session's hold")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"session","reason","since"}`)
	return c
}

func newLifecycleCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "lifecycle run [--dry-run] [--json]",
		Short: "Apply the lifecycle policy (archive idle sessions, delete those past retention) once",
		Args:  exactArgs(0, "a subcommand (run)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return &usageError{fmt.Errorf("%s needs a subcommand (run)", cmd.CommandPath())}
		},
	}
	var dry, asJSON bool
	var limit int
	run := &cobra.Command{
		Use:   "run [--dry-run] [--json] [--limit N]",
		Short: "Run one lifecycle pass now",
		Long: `run applies the cluster's lifecycle policy (agentlog provision --archive-after D --retain-for D)
once, as the projector that owns partition 0 does every --lifecycle-interval: it archives the
sessions with no append for archive-after (not held, without a live writer), deletes as rm does the
sessions whose last activity is older than retain-for (hot or archived, not held), and removes the
archives that restored sessions left behind. Then it removes the orphan blobs as agentlog gc does
(grace ` + store.DefaultBlobGrace.String() + `). --dry-run lists what it would archive or delete, and why, and changes
nothing. It needs the operator's role.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			nc, st, err := g.connect(ctx, "agentlog-lifecycle")
			if err != nil {
				return err
			}
			defer nc.Close()
			p, err := st.GetPolicy(ctx)
			if err != nil {
				return err
			}
			res, err := st.LifecyclePass(ctx, p, store.PassOptions{DryRun: dry, Limit: limit})
			if err != nil {
				return purgeRefusal(g, "lifecycle run", err)
			}
			if !dry {
				c, err := st.CollectBlobs(ctx, store.DefaultBlobGrace)
				if err != nil {
					return fmt.Errorf("lifecycle run: the pass is done; removing orphan blobs failed: %w", err)
				}
				res.Blobs = &c
			}
			if asJSON {
				return writeJSON(g.stdout, res, false)
			}
			verb := ""
			if dry {
				verb = " (dry run: nothing changed)"
			}
			fmt.Fprintf(g.stdout, "lifecycle pass%s: archive-after %s, retain-for %s; %d hot sessions; archived %d (%d bytes), deleted %d; skipped %d held, %d with a live writer; %d stale archives removed; %d errors; %.0f ms\n",
				verb, res.ArchiveAfter, res.RetainFor, res.HotSessions, res.Archived, res.ArchivedBytes, res.Deleted, res.Held, res.Live, res.StaleArchives, res.Errors, res.ElapsedMs)
			for _, a := range res.Actions {
				line := fmt.Sprintf("  %-7s %s: %s", a.Action, shellquote.Quote(a.Session), a.Reason)
				if a.Error != "" {
					line += "; failed: " + a.Error
				}
				if a.Raced {
					line += "; a writer appended meanwhile (kept hot)"
				}
				fmt.Fprintln(g.stdout, line)
			}
			if res.Blobs != nil {
				printCollected(g, *res.Blobs, store.DefaultBlobGrace)
			}
			if res.Errors > 0 {
				return &exitError{code: 1, err: fmt.Errorf("lifecycle run: %d sessions failed", res.Errors)}
			}
			return nil
		},
	}
	run.Flags().BoolVar(&dry, "dry-run", false, "list what the pass would archive or delete, and why; change nothing")
	run.Flags().BoolVar(&asJSON, "json", false, `print {"archiveAfter","retainFor","dryRun","hotSessions","archived","archivedBytes","deleted","held","live","errors","staleArchives","elapsedMs","actions":[{"session","action","reason","lastActivity","error"?}],"blobs"?:{as agentlog gc --json}}`)
	run.Flags().IntVar(&limit, "limit", 0, "stop after this many archives and deletions (0: none)")
	c.AddCommand(run)
	return c
}

// policyFlags are provision's --archive-after and --retain-for.
type policyFlags struct{ archiveAfter, retainFor string }

func (f *policyFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.archiveAfter, "archive-after", "", "archive a session with no append for this long (a duration, 30d, or off; default: keep the cluster's, 24h on a new one)")
	c.Flags().StringVar(&f.retainFor, "retain-for", "", "delete a session whose last activity is older than this, archived or not (a duration, 30d, or off; default: keep the cluster's, off on a new one)")
}

// apply stores the policy flags given, keeping the cluster's values for the others.
func (f *policyFlags) apply(cmd *cobra.Command, g *globals, st *store.Store) (store.Policy, error) {
	ctx := cmd.Context()
	p, err := st.GetPolicy(ctx)
	if err != nil {
		return p, err
	}
	if f.archiveAfter == "" && f.retainFor == "" {
		return p, nil
	}
	if f.archiveAfter != "" {
		if p.ArchiveAfter, err = store.ParsePolicyDuration(f.archiveAfter); err != nil {
			return p, &usageError{fmt.Errorf("--archive-after: %w", err)}
		}
	}
	if f.retainFor != "" {
		if p.RetainFor, err = store.ParsePolicyDuration(f.retainFor); err != nil {
			return p, &usageError{fmt.Errorf("--retain-for: %w", err)}
		}
	}
	if p.ArchiveAfter > 0 && p.RetainFor > 0 && p.RetainFor <= p.ArchiveAfter {
		fmt.Fprintf(g.stderr, "agentlog: note: retain-for %s is not longer than archive-after %s: sessions are deleted before they would be archived\n",
			store.FormatPolicyDuration(p.RetainFor), store.FormatPolicyDuration(p.ArchiveAfter))
	}
	return p, st.SetPolicy(ctx, p)
}
