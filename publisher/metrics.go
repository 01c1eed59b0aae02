package publisher

import (
	"context"
	"errors"
	"time"

	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Publisher's Prometheus metrics (Publisher.Collector).
type metrics struct {
	events, records, bytes prometheus.Counter
	writeSeconds           prometheus.Histogram
	failures               *prometheus.CounterVec // kind
	fenced                 prometheus.Counter
	funcs                  []prometheus.Collector
}

// Failure kinds of agentlog_publisher_write_failures_total.
var failureKinds = []string{"conflict", "acked_lost", "deleted", "fenced", "timeout", "no_responders", "other"}

func newMetrics(p *Publisher) *metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		events:  counter("agentlog_publisher_appended_events_total", "Events written durably."),
		records: counter("agentlog_publisher_appended_records_total", "Records (one per written batch) written durably."),
		bytes:   counter("agentlog_publisher_appended_bytes_total", "Bytes of the events' JSON fields (type, time, data, surfaceOp, sourceEventSeqs) written durably."),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentlog_publisher_write_duration_seconds",
			Help:    "Time to write one record durably, retries included (from its batch's write start to its ack).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentlog_publisher_write_failures_total",
			Help: "Record writes that failed, by kind (conflict, acked_lost, deleted and fenced also fence the writer)."}, []string{"kind"}),
		fenced: counter("agentlog_publisher_fenced_writers_total", "Writers fenced: a guard conflict, a takeover of their lease, lost acknowledged events, or their session deleted."),
	}
	for _, k := range failureKinds {
		m.failures.WithLabelValues(k)
	}
	m.funcs = []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentlog_publisher_pending_events",
			Help: "Events admitted and not yet durable (pending and in flight), over the open writers."},
			func() float64 { n, _ := p.pending(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentlog_publisher_pending_bytes",
			Help: "Bytes (as counted by Options.MaxPendingBytes) of the events not yet durable, over the open writers."},
			func() float64 { _, b := p.pending(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentlog_publisher_writers",
			Help: "Open writers."},
			func() float64 { p.mu.Lock(); defer p.mu.Unlock(); return float64(len(p.writers)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentlog_publisher_sanitized_strings_total",
			Help: "Strings of event data repaired by Append (ill-formed UTF-8, lone surrogate escapes)."},
			func() float64 { return float64(p.SanitizedStrings()) }),
	}
	return m
}

// pending sums the events and bytes not yet durable over the open writers.
func (p *Publisher) pending() (events, bytes int64) {
	p.mu.Lock()
	ws := make([]*Writer, 0, len(p.writers))
	for _, w := range p.writers {
		ws = append(ws, w)
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		events += int64(len(w.pending) + len(w.inflight))
		bytes += w.backlog
		w.mu.Unlock()
	}
	return events, bytes
}

// Collector returns the publisher's metrics (agentlog_publisher_*) for the agent process's
// prometheus.Registry. Several publishers in one process: register each through
// prometheus.WrapRegistererWith with a label of its own.
func (p *Publisher) Collector() prometheus.Collector { return (*collector)(p) }

type collector Publisher

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.metrics.all() {
		x.Describe(ch)
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c.metrics.all() {
		x.Collect(ch)
	}
}

func (m *metrics) all() []prometheus.Collector {
	return append([]prometheus.Collector{m.events, m.records, m.bytes, m.writeSeconds, m.failures, m.fenced}, m.funcs...)
}

// wrote counts a record written durably.
func (m *metrics) wrote(start time.Time, events int, bytes int64) {
	m.events.Add(float64(events))
	m.records.Inc()
	m.bytes.Add(float64(bytes))
	m.writeSeconds.Observe(time.Since(start).Seconds())
}

// failed counts a failed record write.
func (m *metrics) failed(err error) { m.failures.WithLabelValues(failureKind(err)).Inc() }

func failureKind(err error) string {
	switch {
	case errors.Is(err, ErrSessionDeleted):
		return "deleted"
	case errors.Is(err, ErrAckedLost):
		return "acked_lost"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrFenced) || errors.Is(err, store.ErrLeaseLost):
		return "fenced"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	}
	return "other"
}
