package main

import (
	"fmt"
	"time"

	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/spf13/cobra"
)

func newGCCmd(g *globals) *cobra.Command {
	var asJSON bool
	var grace time.Duration
	c := &cobra.Command{
		Use:   "gc [--grace DURATION] [--json]",
		Short: "Remove orphan blobs: offloaded events whose record was never written (operator)",
		Long: `gc removes the orphan blobs of stream AGENTLOG_BLOBS (and of the legacy Object Store bucket
agentlog_blobs): blobs older than --grace that no stored record references, of sessions without a live
writer. An append stores an offloaded event's blob before its record, so a writer killed between the
two, an upload that failed part-way, a retry whose first try was stored, or a session removed by other
means than agentlog rm leaves one behind. Blobs of committed records are never removed (agentlog rm
removes those with their session). It purges (agentlog.blob.<token>.<id>.*), which only the operator's
role may: run it, or agentlog lifecycle run (which runs it too), as the operator, e.g. hourly. --grace
must leave time for an append in progress: at least ` + store.MinBlobGrace.String() + `. It prints what it
kept and removed (--json: one JSON object).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < store.MinBlobGrace {
				return &usageError{fmt.Errorf("--grace %s is below %s: an append in progress could lose its blob", grace, store.MinBlobGrace)}
			}
			nc, store, err := g.connect(cmd.Context(), "agentlog-gc")
			if err != nil {
				return err
			}
			defer nc.Close()
			ctx, cancel := g.withTimeout(cmd.Context())
			defer cancel()
			c, err := store.CollectBlobs(ctx, grace)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, c, false)
			}
			printCollected(g, c, grace)
			return nil
		},
	}
	c.Flags().DurationVar(&grace, "grace", store.DefaultBlobGrace, "remove only orphans older than this")
	c.Flags().BoolVar(&asJSON, "json", false, `print {"blobs","young","live","used","foreign","removed","sessions","partialYoung","partialRemoved"}`)
	return c
}

// printCollected prints what CollectBlobs found and removed.
func printCollected(g *globals, c store.Collected, grace time.Duration) {
	fmt.Fprintf(g.stdout, "%s: %d blobs, %d removed (orphans older than %s)\n", wire.BlobStream, c.Blobs, len(c.Removed), grace)
	fmt.Fprintf(g.stdout, "  kept: %d referenced by a record, %d younger than the grace, %d of a live writer, %d not agentlog's\n", c.Used, c.Young, c.Live, c.Foreign)
	for _, name := range c.Removed {
		fmt.Fprintf(g.stdout, "  removed %s\n", name)
	}
	if n := len(c.PartialRemoved) + c.PartialYoung; n > 0 {
		fmt.Fprintf(g.stdout, "  failed legacy uploads (%s chunks without an object): %d purged, %d younger than the grace\n", wire.BlobsBucket, len(c.PartialRemoved), c.PartialYoung)
	}
}
