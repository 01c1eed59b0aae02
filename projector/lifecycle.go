package projector

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/agentlog/agentlog/store"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultLifecycleInterval is the default Options.LifecycleInterval.
const DefaultLifecycleInterval = 10 * time.Minute

// lifecycleMetrics count what this instance's lifecycle passes did.
type lifecycleMetrics struct {
	archived, deleted, errors, passes prometheus.Counter
	archivedBytes                     prometheus.Counter
	passSeconds                       prometheus.Histogram
}

func newLifecycleMetrics(cl prometheus.Labels) *lifecycleMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl})
	}
	return &lifecycleMetrics{
		archived:      c("agentlog_lifecycle_archived_sessions_total", "Sessions archived by lifecycle passes (moved from AGENTLOG to AGENTLOG_ARCHIVE)."),
		deleted:       c("agentlog_lifecycle_deleted_sessions_total", "Sessions deleted by lifecycle passes (retention: their last activity older than retain-for)."),
		errors:        c("agentlog_lifecycle_errors_total", "Sessions a lifecycle pass failed to archive or delete (retried at the next pass), and passes that failed."),
		passes:        c("agentlog_lifecycle_passes_total", "Lifecycle passes run."),
		archivedBytes: c("agentlog_lifecycle_archived_bytes_total", "Bytes stored by archives (compressed payloads)."),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentlog_lifecycle_pass_duration_seconds",
			Help: "Duration of one lifecycle pass.", Buckets: []float64{.01, .1, 1, 10, 60, 300, 1800, 3600}, ConstLabels: cl}),
	}
}

func (m *lifecycleMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.archived, m.deleted, m.errors, m.passes, m.archivedBytes, m.passSeconds}
}

// lifecycle runs one lifecycle pass (store.Store.LifecyclePass with the cluster's policy) when
// this instance owns partition 0, so that one instance of the group does it. Credentials without the right to purge
// (a projector's role has none: deploy/SECURITY.md) skip the pass with one clear log line; the
// operator's role, or the lifecycle role, runs it (agentlog lifecycle run, or a projector started
// with those credentials).
func (p *Projector) lifecycle(ctx context.Context) {
	if !slices.Contains(p.Owned(), 0) {
		return
	}
	policy, err := p.store.GetPolicy(ctx)
	if err != nil {
		p.lcm.errors.Inc()
		p.logger.Warn("projector: lifecycle pass: reading the policy failed; retried at the next interval", "err", err)
		return
	}
	if policy.ArchiveAfter == 0 && policy.RetainFor == 0 {
		return
	}
	start := time.Now()
	res, err := p.store.LifecyclePass(ctx, policy, store.PassOptions{})
	p.lcm.passes.Inc()
	p.lcm.passSeconds.Observe(time.Since(start).Seconds())
	p.lcm.archived.Add(float64(res.Archived))
	p.lcm.deleted.Add(float64(res.Deleted))
	p.lcm.archivedBytes.Add(float64(res.ArchivedBytes))
	p.lcm.errors.Add(float64(res.Errors))
	switch {
	case errors.Is(err, store.ErrNoPurgeRight):
		if !p.lifecycleSkipLogged {
			p.lifecycleSkipLogged = true
			p.logger.Warn("projector: lifecycle pass skipped: these credentials may not purge AGENTLOG (run `agentlog lifecycle run` with the operator's or the lifecycle role, or start this projector with them); logged once",
				"archiveAfter", res.ArchiveAfter, "retainFor", res.RetainFor)
		}
		return
	case err != nil:
		if ctx.Err() == nil {
			p.lcm.errors.Inc()
			p.logger.Warn("projector: lifecycle pass failed; retried at the next interval", "err", err)
		}
		return
	}
	if res.Archived > 0 || res.Deleted > 0 || res.Errors > 0 || res.StaleArchives > 0 {
		p.logger.Info("projector: lifecycle pass", "archived", res.Archived, "archivedBytes", res.ArchivedBytes, "deleted", res.Deleted,
			"held", res.Held, "live", res.Live, "staleArchives", res.StaleArchives, "errors", res.Errors, "elapsedMs", res.ElapsedMs)
	}
	for _, a := range res.Actions {
		if a.Error != "" {
			p.logger.Warn("projector: lifecycle pass: a session failed; retried at the next pass", "session", a.Session, "action", a.Action, "err", a.Error)
		}
	}
}
