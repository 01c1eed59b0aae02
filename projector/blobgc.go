package projector

import (
	"context"
	"slices"
	"time"
)

// blobGC is the periodic removal of orphan blobs (Options.BlobGCInterval, BlobGrace).
type blobGC struct {
	interval time.Duration // < 0: never
	grace    time.Duration
}

// collectBlobs removes the orphan blobs of agentlog_blobs when this instance owns partition 0, so
// that one instance of the group does it (two during a handover do no harm: a removal is
// idempotent and only ever takes orphans). Failures are logged and retried at the next interval.
func (p *Projector) collectBlobs(ctx context.Context) {
	if !slices.Contains(p.Owned(), 0) {
		return
	}
	c, err := p.store.CollectBlobs(ctx, p.blobGC.grace)
	if err != nil {
		if ctx.Err() == nil {
			p.logger.Warn("projector: removing orphan blobs failed; retried at the next interval", "err", err, "removed", len(c.Removed), "interval", p.blobGC.interval)
		}
		return
	}
	if len(c.Removed) > 0 || len(c.PartialRemoved) > 0 {
		p.logger.Info("projector: removed orphan blobs (offloaded events whose record was never written) and failed uploads", "removed", len(c.Removed), "failedUploads", len(c.PartialRemoved), "blobs", c.Blobs, "grace", p.blobGC.grace)
	}
}
