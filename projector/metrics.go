package projector

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// metrics are a projector's Prometheus metrics, labelled with its instance name.
type metrics struct {
	records            prometheus.Counter
	checkpointSeconds  prometheus.Histogram
	checkpointFailures prometheus.Counter
	stopped            *prometheus.CounterVec // unit, rule
	cacheHits          *prometheus.CounterVec // cache
	cacheMisses        *prometheus.CounterVec // cache
	queries            *prometheus.CounterVec // endpoint, code
	querySeconds       *prometheus.HistogramVec
	storeRequests      *prometheus.CounterVec // request
	funcs              []prometheus.Collector

	lagRecords *prometheus.Desc
	lagSeconds *prometheus.Desc
}

// latencyBuckets are the buckets of the latency histograms, in seconds (0.5 ms to 30 s).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(p *Projector) *metrics {
	cl := prometheus.Labels{"projector": p.name}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl})
	}
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
	}
	m := &metrics{
		records: counter("agentlog_projector_records_folded_total", "Records (JetStream messages of 1..K events) folded."),
		checkpointSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "agentlog_projector_checkpoint_duration_seconds",
			Help: "Time to write one checkpoint (the changed states of a partition, to KV).", Buckets: latencyBuckets, ConstLabels: cl}),
		checkpointFailures: counter("agentlog_projector_checkpoint_failures_total", "Checkpoints that failed (retried)."),
		stopped: vec("agentlog_projector_stopped_sessions_total",
			"Units stopped for a session, by unit and rule (unit messages: the log broke a rule, every unit stopped).", "unit", "rule"),
		cacheHits:   vec("agentlog_projector_cache_hits_total", "Cache hits: cache state (session states) or query (events kept for messages queries).", "cache"),
		cacheMisses: vec("agentlog_projector_cache_misses_total", "Cache misses: cache state (read from KV) or query (log read from its start).", "cache"),
		queries:     vec("agentlog_query_requests_total", "Query service requests answered, by endpoint and reply code (200: success).", "endpoint", "code"),
		querySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentlog_query_duration_seconds",
			Help: "Time from a query's arrival to its reply, including any wait for minSeq.", Buckets: latencyBuckets, ConstLabels: cl}, []string{"endpoint"}),
		storeRequests: vec("agentlog_query_store_requests_total",
			"JetStream requests the query service made to answer queries, by what they read: projection (a state), metadata, tail (a subject's last record), record (one record, or one batched direct get of a log read), consumer (no longer counted: reads create no consumer).", "request"),
		lagRecords: prometheus.NewDesc("agentlog_projector_lag_records",
			"Records of an owned partition not yet folded and acknowledged (the consumer's pending and unacknowledged).", []string{"partition"}, cl),
		lagSeconds: prometheus.NewDesc("agentlog_projector_lag_seconds",
			"Age of the oldest record of an owned partition not yet acknowledged (0: caught up).", []string{"partition"}, cl),
	}
	m.funcs = []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentlog_projector_events_folded_total",
			Help: "Events folded (all partitions; each event once, whatever the number of units).", ConstLabels: cl},
			func() float64 { return float64(p.Applied()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentlog_projector_refolds_total",
			Help: "Stored states found not to match their session's log (records lost, a purge, a re-create), and refolded.", ConstLabels: cl},
			func() float64 { return float64(p.Refolds()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentlog_projector_partitions_owned",
			Help: "Partitions this instance consumes.", ConstLabels: cl},
			func() float64 { return float64(len(p.Owned())) }),
	}
	for _, r := range []string{reqProjection, reqMetadata, reqTail, reqRecord, reqConsumer} {
		m.storeRequests.WithLabelValues(r)
	}
	for _, c := range []string{"state", "query"} {
		m.cacheHits.WithLabelValues(c)
		m.cacheMisses.WithLabelValues(c)
	}
	return m
}

// Collector returns the projector's metrics (agentlog_projector_* and agentlog_query_*), labelled
// projector=<name>, for a process's prometheus.Registry. Lag is read from the partitions'
// consumers at each collection.
func (p *Projector) Collector() prometheus.Collector { return (*collector)(p) }

type collector Projector

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range append(c.metrics.all(), c.lcm.collectors()...) {
		x.Describe(ch)
	}
	ch <- c.metrics.lagRecords
	ch <- c.metrics.lagSeconds
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range append(c.metrics.all(), c.lcm.collectors()...) {
		x.Collect(ch)
	}
	(*Projector)(c).collectLag(ch)
}

// all are the metrics other than the lag.
func (m *metrics) all() []prometheus.Collector {
	return append([]prometheus.Collector{m.records, m.checkpointSeconds, m.checkpointFailures, m.stopped,
		m.cacheHits, m.cacheMisses, m.queries, m.querySeconds, m.storeRequests}, m.funcs...)
}

// lagTimeout bounds the consumer reads of one collection.
const lagTimeout = 2 * time.Second

// collectLag reads each owned partition's consumer: its pending and unacknowledged records, and
// the time of the first unacknowledged one.
func (p *Projector) collectLag(ch chan<- prometheus.Metric) {
	owned := p.Owned()
	if len(owned) == 0 || p.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	for _, part := range owned {
		records, age, err := p.partitionLag(ctx, part)
		if err != nil {
			continue // unknown: no sample
		}
		label := strconv.Itoa(part)
		ch <- prometheus.MustNewConstMetric(p.metrics.lagRecords, prometheus.GaugeValue, float64(records), label)
		ch <- prometheus.MustNewConstMetric(p.metrics.lagSeconds, prometheus.GaugeValue, age.Seconds(), label)
	}
}

func (p *Projector) partitionLag(ctx context.Context, part int) (uint64, time.Duration, error) {
	info, err := p.store.JetStream().Consumer(ctx, wire.StreamName, PartitionConsumer(part))
	if err != nil {
		return 0, 0, err
	}
	ci := info.CachedInfo()
	behind := ci.NumPending + uint64(ci.NumAckPending)
	if behind == 0 {
		return 0, 0, nil
	}
	msg, err := p.store.Stream().GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(wire.PartitionSubject(part)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return behind, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	return behind, max(time.Since(msg.Time), 0), nil
}

// The hooks of the fold and the query service.

func (m *metrics) folded() { m.records.Inc() }

func (m *metrics) cache(c string, hit bool) {
	if m == nil {
		return
	}
	if hit {
		m.cacheHits.WithLabelValues(c).Inc()
	} else {
		m.cacheMisses.WithLabelValues(c).Inc()
	}
}

func (m *metrics) checkpoint(start time.Time, err error) {
	m.checkpointSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		m.checkpointFailures.Inc()
	}
}

func (m *metrics) stop(unit string, pe *ProjectionError) {
	if pe != nil {
		m.stopped.WithLabelValues(unit, string(pe.Rule)).Inc()
	}
}

// meter counts the reply of one query (its endpoint, its arrival) in the metrics and in the
// endpoint's micro stats.
type meter struct {
	m        *metrics
	ep       *endpointStats
	endpoint string
	start    time.Time
	span     trace.Span // the query's span (nil: none), ended here
	session  *string    // the session named in the span
}

// done counts a reply: codeOK, or an error reply's code and description.
func (o meter) done(code client.Code, desc string) {
	d := time.Since(o.start)
	if o.span != nil {
		sess := ""
		if o.session != nil {
			sess = *o.session
		}
		endQuerySpan(o.span, sess, code, desc)
	}
	if o.ep != nil {
		errCode := string(code)
		if code == codeOK {
			errCode = ""
		}
		o.ep.record(d, errCode, desc)
	}
	if o.m == nil || o.endpoint == "" {
		return
	}
	o.m.queries.WithLabelValues(o.endpoint, string(code)).Inc()
	o.m.querySeconds.WithLabelValues(o.endpoint).Observe(d.Seconds())
}

// The requests agentlog_query_store_requests_total counts.
const (
	reqProjection = "projection"
	reqMetadata   = "metadata"
	reqTail       = "tail"
	reqRecord     = "record"
	reqConsumer   = "consumer"
)

// storeRequest counts n JetStream requests of kind made to answer a query (m may be nil).
func (m *metrics) storeRequest(kind string, n int) {
	if m != nil && n > 0 {
		m.storeRequests.WithLabelValues(kind).Add(float64(n))
	}
}
