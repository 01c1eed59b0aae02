package forker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a forker's Prometheus metrics.
type metrics struct {
	forks   *prometheus.CounterVec // code
	seconds prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		forks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentlog_forker_forks_total",
			Help: "Fork requests answered, by reply code (200: forked; else the refusal's code)."}, []string{"code"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentlog_forker_fork_duration_seconds",
			Help:    "Time to answer one fork request.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
	}
}

func (m *metrics) answered(start time.Time, code client.Code) {
	m.forks.WithLabelValues(string(code)).Inc()
	m.seconds.Observe(time.Since(start).Seconds())
}

// Collector returns the forker's metrics (agentlog_forker_*) for a process's prometheus.Registry.
func (f *Forker) Collector() prometheus.Collector { return (*collector)(f) }

type collector Forker

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.metrics.forks.Describe(ch)
	c.metrics.seconds.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.metrics.forks.Collect(ch)
	c.metrics.seconds.Collect(ch)
}

// Ready reports why the forker cannot serve (nil: it can).
func (f *Forker) Ready(context.Context) error {
	f.mu.Lock()
	started, stopped := f.started, f.stopped
	f.mu.Unlock()
	switch {
	case !started:
		return errors.New("forker not started")
	case stopped:
		return errors.New("forker stopped")
	case f.nc.Status() != nats.CONNECTED:
		return fmt.Errorf("not connected to NATS (%s)", f.nc.Status())
	}
	return nil
}
