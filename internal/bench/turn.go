package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// TurnOptions are the flags of `agentlog bench turn`.
type TurnOptions struct {
	Sessions   int           // publishers (agents), one session each
	Size       int           // approximate event size in bytes
	Loads      []float64     // the load phases, fractions of the publishers' maximum rate
	For        time.Duration // length of each load phase
	MaxFor     time.Duration // length of the maximum-rate phase, before the load phases
	ProbeEvery time.Duration // each agent ends a turn this often: Flush, then a minSeq query
	Partitions int
	// SharedConn runs the projector on the agents' connection, as `agentlog dev` runs its
	// services (one connection); otherwise it has its own, as a deployment's projector does.
	SharedConn bool
	JSON       bool
	CPUProfile string // write a CPU profile (pprof) of the load phases to this file
}

// TurnResult is what `agentlog bench turn --json` prints: the maximum rate, then one entry per
// load phase. Rates are events/s, latencies ms.
type TurnResult struct {
	Sessions   int  `json:"sessions"`
	EventBytes int  `json:"event_bytes"`
	Partitions int  `json:"partitions"`
	SharedConn bool `json:"shared_conn"`
	GOMAXPROCS int  `json:"gomaxprocs"`
	// MaxEventsPerSec is the publishers' rate appending as fast as they can (the projector
	// running), which the phases' loads are fractions of.
	MaxEventsPerSec float64     `json:"max_events_per_sec"`
	MaxFailures     int         `json:"max_write_failures"`
	Phases          []TurnPhase `json:"phases"`
}

// TurnPhase is one load phase of bench turn (or the lag phase of bench project).
type TurnPhase struct {
	Load               float64 `json:"load"`
	AppendEventsPerSec float64 `json:"append_events_per_sec"`
	// Turns is the number of turns measured: Flush returned, then the messages query with minSeq
	// = the last seq flushed answered. Turn latency runs from the start of Flush to the answer
	// (what the agent waits for before its next model request); lag from the end of Flush.
	Turns      int     `json:"turns"`
	TurnP50Ms  float64 `json:"turn_p50_ms"`
	TurnP99Ms  float64 `json:"turn_p99_ms"`
	TurnP999Ms float64 `json:"turn_p999_ms"`
	LagP50Ms   float64 `json:"lag_p50_ms"`
	LagP99Ms   float64 `json:"lag_p99_ms"`
	LagP999Ms  float64 `json:"lag_p999_ms"`
	FlushP99Ms float64 `json:"flush_p99_ms"`
	// The raw baseline, measured alongside under the same load: a guarded publish to a stream
	// like AGENTLOG, its ack, then a direct get of that subject's last message (the least a
	// read-your-writes through JetStream costs). Ratio is TurnP99Ms / BaselineP99Ms.
	BaselineSamples int     `json:"baseline_samples"`
	BaselineP50Ms   float64 `json:"baseline_p50_ms"`
	BaselineP99Ms   float64 `json:"baseline_p99_ms"`
	BaselineP999Ms  float64 `json:"baseline_p999_ms"`
	Ratio           float64 `json:"ratio"`
	// Failures: queries that failed (not in the percentiles), flushes and appends that failed
	// (the writer keeps the events and retries), the first of each, and the agents' connection's
	// reconnects during the phase.
	QueryFailures   int    `json:"query_failures"`
	FirstQueryError string `json:"first_query_error,omitempty"`
	WriteFailures   int    `json:"write_failures"`
	FirstWriteError string `json:"first_write_error,omitempty"`
	Reconnects      uint64 `json:"reconnects"`
	// ProjectorReconnects: the projector's connection's reconnects (0 with SharedConn: the same).
	ProjectorReconnects uint64 `json:"projector_reconnects"`
	BaselineFailures    int    `json:"baseline_failures"`
	// StoreRequestsPerQuery is the JetStream requests the query service made per query answered
	// (agentlog_query_store_requests_total over agentlog_query_requests_total; -1 when the
	// projector does not count them).
	StoreRequestsPerQuery float64 `json:"store_requests_per_query"`
	// QueryServiceMeanMs is the mean time the query service took from a query's arrival to its
	// reply (agentlog_query_duration_seconds), the wait for minSeq included.
	QueryServiceMeanMs float64 `json:"query_service_mean_ms"`
}

// PrintTurn prints r as one JSON line, or as text.
func PrintTurn(w io.Writer, asJSON bool, r TurnResult) error {
	if asJSON {
		b, _ := json.Marshal(r)
		_, err := fmt.Fprintln(w, string(b))
		return err
	}
	fmt.Fprintf(w, "%d agents, events of %d bytes, %d partitions; maximum %.0f events/s\n", r.Sessions, r.EventBytes, r.Partitions, r.MaxEventsPerSec)
	for _, p := range r.Phases {
		if _, err := fmt.Fprintf(w, "at %.0f%% (%.0f events/s): turn p50 %.1f p99 %.1f p999 %.1f ms (lag p99 %.1f ms), raw p99 %.1f ms, ratio %.2f; %d turns, %d failed queries, %d failed writes, %d+%d reconnects, %.1f store requests per query\n",
			p.Load*100, p.AppendEventsPerSec, p.TurnP50Ms, p.TurnP99Ms, p.TurnP999Ms, p.LagP99Ms, p.BaselineP99Ms, p.Ratio, p.Turns, p.QueryFailures, p.WriteFailures, p.Reconnects, p.ProjectorReconnects, p.StoreRequestsPerQuery); err != nil {
			return err
		}
	}
	return nil
}

// RunTurn measures read-your-writes as an agent feels it: sessions agents append at a steady
// rate; each ends a turn every ProbeEvery (Flush, then client.Messages with MinSeq of the last
// seq flushed), at each load of the agents' maximum rate, measured first; progress goes to logw.
func RunTurn(ctx context.Context, o TurnOptions, logw io.Writer) (TurnResult, error) {
	res := TurnResult{Sessions: o.Sessions, EventBytes: o.Size, Partitions: o.Partitions, SharedConn: o.SharedConn, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	dir, err := os.MkdirTemp("", "agentlog-bench-turn-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	nc, st, stop, err := benchServer(ctx, devstack.Options{DataDir: dir, Name: "agentlog-bench-turn", Config: store.Config{Partitions: o.Partitions}})
	if err != nil {
		return res, err
	}
	defer stop()
	pnc, pst := nc, st
	if !o.SharedConn {
		var pjs natsjs.JetStream
		if pnc, pjs, err = natsdev.Connect(nc.ConnectedUrl(), nats.Name("agentlog-bench-turn-projector")); err != nil {
			return res, err
		}
		defer pnc.Close()
		if pst, err = store.Open(ctx, pjs); err != nil {
			return res, err
		}
	}
	p, err := projector.New(pst, pnc, projector.Options{Name: "bench-turn", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return res, err
	}
	if err := p.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = p.Stop() }()
	rig, err := newTurnRig(ctx, st, nc, o.Sessions, o.Size, "turn")
	if err != nil {
		return res, err
	}
	defer rig.close()
	rig.counters = projectorCounters(p)
	if pnc != nc {
		rig.pnc = pnc
	}
	fmt.Fprintf(logw, "bench turn: %d agents at their maximum rate for %s...\n", o.Sessions, o.MaxFor)
	res.MaxEventsPerSec, res.MaxFailures = rig.maxRate(ctx, o.MaxFor)
	stopProfile, err := startCPUProfile(o.CPUProfile)
	if err != nil {
		return res, err
	}
	defer stopProfile()
	for _, load := range o.Loads {
		fmt.Fprintf(logw, "bench turn: %d agents at %.0f%% of %.0f events/s for %s...\n", o.Sessions, load*100, res.MaxEventsPerSec, o.For)
		res.Phases = append(res.Phases, rig.phase(ctx, load, res.MaxEventsPerSec, o.For, o.ProbeEvery))
	}
	return res, nil
}

// projectorCounters reads p's query counters: the JetStream requests its query service made and
// the queries it answered (store is -1 when p does not count them).
func projectorCounters(p *projector.Projector) func() (store, queries, seconds float64) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(p.Collector()); err != nil {
		return func() (float64, float64, float64) { return -1, 0, 0 }
	}
	return func() (float64, float64, float64) {
		mfs, err := reg.Gather()
		if err != nil {
			return -1, 0, 0
		}
		storeReqs, queries, seconds := -1.0, 0.0, 0.0
		for _, mf := range mfs {
			switch mf.GetName() {
			case "agentlog_query_duration_seconds":
				for _, m := range mf.GetMetric() {
					seconds += m.GetHistogram().GetSampleSum()
				}
			case "agentlog_query_store_requests_total":
				storeReqs = 0
				for _, m := range mf.GetMetric() {
					storeReqs += m.GetCounter().GetValue()
				}
			case "agentlog_query_requests_total":
				for _, m := range mf.GetMetric() {
					queries += m.GetCounter().GetValue()
				}
			}
		}
		return storeReqs, queries, seconds
	}
}

// turnRig is the agents of a turn or lag measurement: one Writer per session and the raw
// baseline's probers, on one connection.
type turnRig struct {
	nc       *nats.Conn
	st       *store.Store
	pub      *publisher.Publisher
	qc       *client.Client
	writers  []*publisher.Writer
	next     []int64
	pad      string
	raw      natsjs.Stream
	prefix   string
	pnc      *nats.Conn                               // the projector's connection (nil: the agents')
	counters func() (store, queries, seconds float64) // nil: none
}

// rawProbers is how many agents of the raw baseline probe alongside the measured ones.
const rawProbers = 8

// newTurnRig creates sessions sessions (ids prefix-NNNN) with a Writer each, and the raw
// baseline's stream.
func newTurnRig(ctx context.Context, st *store.Store, nc *nats.Conn, sessions, size int, prefix string) (*turnRig, error) {
	r := &turnRig{nc: nc, st: st, prefix: prefix}
	var err error
	if r.pub, err = publisher.New(st, nc, publisher.Options{WriterID: "bench-" + prefix, Logger: benchLogger}); err != nil {
		return nil, err
	}
	if r.qc, err = client.New(nc); err != nil {
		return nil, err
	}
	pad := make([]byte, max(size-120, 1))
	for i := range pad {
		pad[i] = "abcdefghijklmnopqrstuvwxyz"[i%26]
	}
	r.pad = string(pad)
	r.writers, r.next = make([]*publisher.Writer, sessions), make([]int64, sessions)
	for i := range r.writers {
		if r.writers[i], err = r.pub.Create(ctx, session.Header{ID: fmt.Sprintf("%s-%04d", prefix, i), CreatedAt: time.Now().UnixMilli()}); err != nil {
			r.close()
			return nil, err
		}
	}
	r.raw, err = st.JetStream().CreateOrUpdateStream(ctx, natsjs.StreamConfig{Name: "BENCH_RAW_" + strings.ToUpper(prefix), Subjects: []string{"benchraw." + prefix + ".>"},
		Storage: natsjs.FileStorage, Compression: natsjs.S2Compression, AllowDirect: true})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("the raw baseline's stream: %w", err)
	}
	return r, nil
}

func (r *turnRig) close() {
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = r.pub.Close(cctx)
}

// failures counts failures and keeps the first one's text.
type failures struct {
	mu    sync.Mutex
	n     int
	first string
}

func (f *failures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n++; f.n == 1 {
		f.first = fmt.Sprintf(format, args...)
	}
}

// appendNext appends writer i's next event; a BacklogError (faster than the server takes them)
// waits for what is pending first. Other failures are counted in wf; the event is not appended.
func (r *turnRig) appendNext(ctx context.Context, i int, wf *failures) bool {
	w := r.writers[i]
	err := w.Append(lagEvent(r.next[i], r.pad))
	var be *publisher.BacklogError
	if errors.As(err, &be) {
		if err = w.Flush(ctx); err == nil {
			err = w.Append(lagEvent(r.next[i], r.pad))
		}
	}
	if err != nil {
		wf.add("session %q seq %d: %v", w.ID(), r.next[i], err)
		return false
	}
	r.next[i]++
	return true
}

// flush flushes writer i with a bound of 30 s, counting a failure in wf.
func (r *turnRig) flush(ctx context.Context, i int, wf *failures) error {
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := r.writers[i].Flush(fctx)
	if err != nil {
		wf.add("session %q: flush: %v", r.writers[i].ID(), err)
	}
	return err
}

// maxRate appends as fast as the writers can for dur, flushing every 1,024 events (which bounds
// a writer's window as an agent that reads back its writes would), and returns the rate of the
// events made durable and the write failures.
func (r *turnRig) maxRate(ctx context.Context, dur time.Duration) (float64, int) {
	var total atomic.Int64
	var wf failures
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(dur)
	for i := range r.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				for range 64 {
					if r.appendNext(ctx, i, &wf) {
						total.Add(1)
					}
				}
				if r.next[i]%1024 < 64 {
					_ = r.flush(ctx, i, &wf)
				}
			}
			_ = r.flush(ctx, i, &wf)
		}()
	}
	wg.Wait()
	return round1(float64(total.Load()) / time.Since(start).Seconds()), wf.n
}

// phase appends at load x rate for dur; every probeEvery each agent ends a turn (Flush, then a
// messages query with minSeq = its last seq), and the raw baseline's probers publish and read
// back at the same pace.
func (r *turnRig) phase(ctx context.Context, load, rate float64, dur, probeEvery time.Duration) TurnPhase {
	res := TurnPhase{Load: load, StoreRequestsPerQuery: -1}
	sessions := len(r.writers)
	perSession := rate * load / float64(sessions)
	const tick = 10 * time.Millisecond
	var mu sync.Mutex
	var turns, lags, flushes, raws []time.Duration
	var qf, wf, rf failures
	var total atomic.Int64
	reconnects := r.nc.Stats().Reconnects
	var preconnects uint64
	if r.pnc != nil {
		preconnects = r.pnc.Stats().Reconnects
	}
	var store0, queries0, seconds0 float64
	if r.counters != nil {
		store0, queries0, seconds0 = r.counters()
	}
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(dur)
	for i, w := range r.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(tick)
			defer t.Stop()
			sent := 0
			lastProbe := time.Now().Add(-time.Duration(i) * probeEvery / time.Duration(sessions)) // spread the turns
			for now := time.Now(); now.Before(end) && ctx.Err() == nil; now = <-t.C {
				// Paced by the time elapsed, so that a slow flush or a missed tick is caught up.
				for due := int(perSession * now.Sub(start).Seconds()); sent < due; sent++ {
					if r.appendNext(ctx, i, &wf) {
						total.Add(1)
					}
				}
				if now.Sub(lastProbe) < probeEvery {
					continue
				}
				lastProbe = now
				t0 := time.Now()
				if r.flush(ctx, i, &wf) != nil {
					continue
				}
				t1, seq, id := time.Now(), r.next[i]-1, w.ID()
				if seq < 0 {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					_, err := r.qc.Messages(qctx, id, client.MinSeq(seq))
					t2 := time.Now()
					if err != nil {
						qf.add("session %q seq %d: %v", id, seq, err)
						return
					}
					mu.Lock()
					turns, lags, flushes = append(turns, t2.Sub(t0)), append(lags, t2.Sub(t1)), append(flushes, t1.Sub(t0))
					mu.Unlock()
				}()
			}
		}()
	}
	for k := range min(rawProbers, sessions) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subject := "benchraw." + r.prefix + "." + strconv.Itoa(k)
			var last uint64
			if m, err := r.raw.GetLastMsgForSubject(ctx, subject); err == nil {
				last = m.Sequence
			}
			body := []byte(`{"type":"assistant/chunk","seq":0,"time":0,"data":{"text":"` + r.pad + `"}}`)
			ticker := time.NewTicker(probeEvery)
			defer ticker.Stop()
			time.Sleep(time.Duration(k) * probeEvery / rawProbers)
			for time.Now().Before(end) && ctx.Err() == nil {
				t0 := time.Now()
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ack, err := r.st.JetStream().PublishMsg(pctx, &nats.Msg{Subject: subject, Data: body}, natsjs.WithExpectLastSequencePerSubject(last))
				if err == nil {
					last = ack.Sequence
					var m *natsjs.RawStreamMsg
					if m, err = r.raw.GetLastMsgForSubject(pctx, subject); err == nil && m.Sequence != ack.Sequence {
						err = fmt.Errorf("read back stream seq %d, wrote %d", m.Sequence, ack.Sequence)
					}
				}
				cancel()
				if err != nil {
					rf.add("raw %s: %v", subject, err)
				} else {
					mu.Lock()
					raws = append(raws, time.Since(t0))
					mu.Unlock()
				}
				select {
				case <-ticker.C:
				case <-ctx.Done():
				}
			}
		}()
	}
	wg.Wait()
	res.AppendEventsPerSec = round1(float64(total.Load()) / dur.Seconds())
	for _, d := range [][]time.Duration{turns, lags, flushes, raws} {
		slices.Sort(d)
	}
	res.Turns, res.BaselineSamples = len(turns), len(raws)
	res.TurnP50Ms, res.TurnP99Ms, res.TurnP999Ms = pct(turns, 0.5), pct(turns, 0.99), pct(turns, 0.999)
	res.LagP50Ms, res.LagP99Ms, res.LagP999Ms = pct(lags, 0.5), pct(lags, 0.99), pct(lags, 0.999)
	res.FlushP99Ms = pct(flushes, 0.99)
	res.BaselineP50Ms, res.BaselineP99Ms, res.BaselineP999Ms = pct(raws, 0.5), pct(raws, 0.99), pct(raws, 0.999)
	if res.BaselineP99Ms > 0 {
		res.Ratio = round2(res.TurnP99Ms / res.BaselineP99Ms)
	}
	res.QueryFailures, res.FirstQueryError = qf.n, qf.first
	res.WriteFailures, res.FirstWriteError = wf.n, wf.first
	res.BaselineFailures = rf.n
	res.Reconnects = r.nc.Stats().Reconnects - reconnects
	if r.pnc != nil {
		res.ProjectorReconnects = r.pnc.Stats().Reconnects - preconnects
	}
	if r.counters != nil {
		s1, q1, sec1 := r.counters()
		if s1 >= 0 && q1 > queries0 {
			res.StoreRequestsPerQuery = round2((s1 - store0) / (q1 - queries0))
		}
		if q1 > queries0 {
			res.QueryServiceMeanMs = round2((sec1 - seconds0) * 1000 / (q1 - queries0))
		}
	}
	return res
}

// pct is the q-quantile of sorted durations, in ms (0 for none).
func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return ms(sorted[min(len(sorted)-1, int(float64(len(sorted))*q))])
}
