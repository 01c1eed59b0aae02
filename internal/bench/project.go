package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ProjectOptions are the flags of `agentlog bench project`.
type ProjectOptions struct {
	Sessions    int
	Events      int
	Size        int
	Batch       int
	JSON        bool
	LagLoad     float64       // the lag phase's append rate, a fraction of the publishers' maximum (0: no lag phase)
	LagSessions int           // publishers (sessions) of the lag phase
	LagFor      time.Duration // length of the lag phase
	Partitions  int
	Rounds      int    // alternating (b), (a) rounds; the median of each is reported
	CPUProfile  string // write a CPU profile (pprof) of the last round's fold phase here
}

// ProjectResult is the JSON line printed by `agentlog bench project --json`. Rates are
// events/s, durations ms.
type ProjectResult struct {
	Sessions int `json:"sessions"`
	Events   int `json:"events"`
	Records  int `json:"records"`
	// EventsPerSec is the median round's fold rate: events folded and checkpointed after Start
	// returned, over the time from then to the last checkpoint.
	EventsPerSec float64 `json:"events_per_sec"`
	// BaselineEventsPerSec is the median round's ordered-consumer rate (events counted from the
	// records' Agentlog-Count header); BaselineDecodeEventsPerSec decodes every record as well.
	BaselineEventsPerSec       float64 `json:"baseline_events_per_sec"`
	BaselineDecodeEventsPerSec float64 `json:"baseline_decode_events_per_sec"`
	Ratio                      float64 `json:"ratio"` // EventsPerSec / BaselineEventsPerSec
	// DecodeRatio is EventsPerSec / BaselineDecodeEventsPerSec: the fold against a reader that
	// also decodes every record, which every fold must do (the log's rules check each line).
	DecodeRatio float64 `json:"decode_ratio"`
	// BaselinePartitionedEventsPerSec reads the stream as the projector does, one ordered
	// consumer per partition (filtered on agentlog.session.<p>.*), all at once, decoding every
	// record: the server's cost of partitioned reads (each consumer walks every block) is in it.
	// PartitionedRatio is EventsPerSec against it.
	BaselinePartitionedEventsPerSec float64 `json:"baseline_partitioned_events_per_sec"`
	PartitionedRatio                float64 `json:"partitioned_ratio"`
	// The same comparison in CPU time of this process (user and system, the embedded server's
	// included), which other load on the machine disturbs less: ns per event of the fold and of
	// the decoding reader (median rounds), and their ratio (as decode_ratio: 1 is as cheap).
	FoldCPUNsPerEvent           float64 `json:"fold_cpu_ns_per_event"`
	BaselineDecodeCPUNsPerEvent float64 `json:"baseline_decode_cpu_ns_per_event"`
	DecodeCPURatio              float64 `json:"decode_cpu_ratio"`
	FoldMs                      float64 `json:"fold_ms"`
	BaselineMs                  float64 `json:"baseline_ms"`
	// RateIncludesStart is set when the stream was too small to time the fold after Start (most
	// events were folded while Start ran): the rates then count Start's time too.
	RateIncludesStart bool `json:"rate_includes_start,omitempty"`
	// StartMs is Projector.Start (lease, query service, one consumer per partition), which the
	// fold rate excludes: it is a fixed cost, not a rate.
	StartMs float64 `json:"start_ms"`
	Rounds  int     `json:"rounds"`
	benchRounds
	LagSamples int `json:"lag_samples"`
	// LagFailures counts the queries that failed (their lag is not in the percentiles);
	// LagFirstError is the first one's error.
	LagFailures   int     `json:"lag_failures"`
	LagFirstError string  `json:"lag_first_error,omitempty"`
	LagP50Ms      float64 `json:"lag_p50_ms"`
	LagP99Ms      float64 `json:"lag_p99_ms"`
	// The lag phase: the publishers' maximum rate (measured first, the projector running), the
	// fraction of it asked for, and the rate achieved.
	LagPublisherMaxEventsPerSec float64 `json:"lag_publisher_max_events_per_sec"`
	LagLoad                     float64 `json:"lag_load"`
	LagAppendEventsPerSec       float64 `json:"lag_append_events_per_sec"`
	// The lag phase's p99.9 lag, its p99 turn latency (from the start of Flush to the answer, as
	// bench turn measures it), its failed writes (the writers keep their events and retry; a
	// failure is counted, never fatal) and the reconnects of the connection.
	LagP999Ms          float64 `json:"lag_p999_ms"`
	LagTurnP99Ms       float64 `json:"lag_turn_p99_ms"`
	LagWriteFailures   int     `json:"lag_write_failures"`
	LagFirstWriteError string  `json:"lag_first_write_error,omitempty"`
	LagReconnects      uint64  `json:"lag_reconnects"`
}

// PrintProject writes r as one JSON line (asJSON) or as text.
func PrintProject(w io.Writer, asJSON bool, r ProjectResult) error {
	if asJSON {
		b, _ := json.Marshal(r)
		_, err := fmt.Fprintln(w, string(b))
		return err
	}
	_, err := fmt.Fprintf(w, "%d sessions, %d events in %d records; median of %d rounds\n(a) projector: %.0f events/s (%.0f ms, after a start of %.0f ms)\n(b) ordered consumer: %.0f events/s (%.0f ms; %.0f events/s decoding every record)\nratio %.3f (%.3f against decoding every record)\nlag at %.0f of %.0f events/s: p50 %.1f ms, p99 %.1f ms (%d samples, %d failed %s)\n",
		r.Sessions, r.Events, r.Records, r.Rounds, r.EventsPerSec, r.FoldMs, r.StartMs, r.BaselineEventsPerSec, r.BaselineMs, r.BaselineDecodeEventsPerSec, r.Ratio, r.DecodeRatio,
		r.LagAppendEventsPerSec, r.LagPublisherMaxEventsPerSec, r.LagP50Ms, r.LagP99Ms, r.LagSamples, r.LagFailures, r.LagFirstError)
	return err
}

// RunProject measures (a) the fold rate of one projector instance (all built-in units, events
// applied and checkpointed), (b) the raw rate of an ordered consumer reading (and decoding) the
// same stream, their ratio, and the projection lag under a steady append load (append
// acknowledged -> a messages query with minSeq answered); progress goes to logw.
func RunProject(ctx context.Context, o ProjectOptions, logw io.Writer) (ProjectResult, error) {
	res := ProjectResult{Sessions: o.Sessions, Events: o.Sessions * o.Events}
	dir, err := os.MkdirTemp("", "agentlog-bench-project-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	nc, st, stop, err := benchServer(ctx, devstack.Options{DataDir: dir, Name: "agentlog-bench-project", Config: store.Config{Partitions: o.Partitions}})
	if err != nil {
		return res, err
	}
	defer stop()
	js := st.JetStream()

	// Pre-fill: every session in records of o.Batch events.
	fmt.Fprintf(logw, "bench project: writing %d sessions x %d events...\n", o.Sessions, o.Events)
	t0 := time.Now().UnixMilli()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan int)
	var mu sync.Mutex
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				evs, err := loggen.ChunkTurn(uint64(s), o.Events, o.Size, t0)
				if err != nil {
					errs <- err
					return
				}
				id := fmt.Sprintf("bench-%05d", s)
				// Metadata as a publisher's Create writes it (a fold reads it for lineage, and
				// a session without it costs a tail read to tell it from a removed one).
				if err := st.CreateSession(ctx, session.Header{ID: id, CreatedAt: t0}); err != nil {
					errs <- err
					return
				}
				ss, err := st.Session(id)
				if err != nil {
					errs <- err
					return
				}
				var tail uint64
				n := 0
				for len(evs) > 0 {
					k := min(o.Batch, len(evs))
					r, err := ss.Append(ctx, tail, evs[:k])
					if err != nil {
						errs <- err
						return
					}
					tail, evs, n = r.StreamSeq, evs[k:], n+1
				}
				mu.Lock()
				res.Records += n
				mu.Unlock()
			}
		}()
	}
	for s := 0; s < o.Sessions; s++ {
		next <- s
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return res, err
	default:
	}

	// Rounds alternate (b) and (a), so that load from outside this process hits both alike.
	// (b) The raw rate: an ordered consumer reading every record (events counted from the
	// Agentlog-Count header). (a) One projector instance: every event applied to every built-in
	// unit and checkpointed (states written, records acknowledged), timed from the end of Start
	// (partitions assigned, consumers created) to the last checkpoint; each round starts from no
	// projection state (consumers deleted, projections bucket purged).
	var folds, bases, starts, baseDecodes, basePartitioned []time.Duration
	var last *projector.Projector
	defer func() {
		if last != nil {
			_ = last.Stop()
		}
	}()
	var baseDecodeCPU, foldCPUs []float64 // CPU ns per event
	for r := range o.Rounds {
		fmt.Fprintf(logw, "bench project: round %d/%d\n", r+1, o.Rounds)
		base, err := benchOrdered(ctx, st, res.Events, false)
		if err != nil {
			return res, err
		}
		bases = append(bases, base)
		c0 := processCPU()
		bd, err := benchOrdered(ctx, st, res.Events, true)
		if err != nil {
			return res, err
		}
		baseDecodes = append(baseDecodes, bd)
		baseDecodeCPU = append(baseDecodeCPU, float64((processCPU()-c0).Nanoseconds())/float64(res.Events))
		bp, err := benchPartitioned(ctx, st, res.Events)
		if err != nil {
			return res, err
		}
		basePartitioned = append(basePartitioned, bp)
		if last != nil {
			err := last.Stop()
			last = nil
			if err != nil {
				return res, err
			}
			if err := resetProjections(ctx, js, st); err != nil {
				return res, err
			}
		}
		profile := ""
		if r == o.Rounds-1 {
			profile = o.CPUProfile // the last round's fold phase
		}
		start, fold, folded, foldCPU, p, err := benchFold(ctx, st, nc, js, res.Events, profile)
		if err != nil {
			return res, err
		}
		if folded > 0 {
			foldCPUs = append(foldCPUs, float64(foldCPU.Nanoseconds())/float64(folded))
		}
		last = p
		starts, folds = append(starts, start), append(folds, fold)
		rate := float64(folded) / fold.Seconds()
		if folded*2 < int64(res.Events) {
			// Most events were folded while Start ran (a stream too small to time after it):
			// count all of them over Start and the fold together.
			rate, res.RateIncludesStart = float64(res.Events)/(start+fold).Seconds(), true
		}
		res.RoundsEventsPerSec = append(res.RoundsEventsPerSec, round1(rate))
		res.RoundsBaselineEventsPerSec = append(res.RoundsBaselineEventsPerSec, round1(float64(res.Events)/base.Seconds()))
	}
	for _, d := range [][]time.Duration{folds, bases, starts, baseDecodes, basePartitioned} {
		slices.Sort(d)
	}
	slices.Sort(res.RoundsEventsPerSec)
	slices.Sort(res.RoundsBaselineEventsPerSec)
	mid := o.Rounds / 2
	res.Rounds = o.Rounds
	res.FoldMs, res.BaselineMs, res.StartMs = ms(folds[mid]), ms(bases[mid]), ms(starts[mid])
	res.EventsPerSec, res.BaselineEventsPerSec = res.RoundsEventsPerSec[mid], res.RoundsBaselineEventsPerSec[mid]
	res.Ratio = float64(int64(res.EventsPerSec/res.BaselineEventsPerSec*1000+0.5)) / 1000
	res.BaselineDecodeEventsPerSec = round1(float64(res.Events) / baseDecodes[mid].Seconds())
	res.BaselinePartitionedEventsPerSec = round1(float64(res.Events) / basePartitioned[mid].Seconds())
	res.DecodeRatio = float64(int64(res.EventsPerSec/res.BaselineDecodeEventsPerSec*1000+0.5)) / 1000
	res.PartitionedRatio = float64(int64(res.EventsPerSec/res.BaselinePartitionedEventsPerSec*1000+0.5)) / 1000
	if len(foldCPUs) > 0 {
		slices.Sort(foldCPUs)
		slices.Sort(baseDecodeCPU)
		res.FoldCPUNsPerEvent, res.BaselineDecodeCPUNsPerEvent = round1(foldCPUs[len(foldCPUs)/2]), round1(baseDecodeCPU[len(baseDecodeCPU)/2])
		res.DecodeCPURatio = round2(res.BaselineDecodeCPUNsPerEvent / res.FoldCPUNsPerEvent)
	}

	// Lag under load: publishers appending at LagLoad x their maximum rate (on this machine, the
	// projector running); append acknowledged (a Flush returned) -> the query service answers
	// minSeq.
	if o.LagLoad > 0 {
		lr, ph, err := benchLagUnderLoad(ctx, st, nc, o.LagSessions, o.Size, o.LagLoad, o.LagFor, logw)
		if err != nil {
			return res, fmt.Errorf("lag phase: %w", err)
		}
		res.LagP999Ms, res.LagTurnP99Ms, res.LagReconnects = ph.LagP999Ms, ph.TurnP99Ms, ph.Reconnects
		res.LagWriteFailures, res.LagFirstWriteError = ph.WriteFailures, ph.FirstWriteError
		res.LagSamples, res.LagFailures, res.LagFirstError = lr.Samples, lr.Failures, lr.FirstError
		res.LagP50Ms, res.LagP99Ms = lr.P50Ms, lr.P99Ms
		res.LagPublisherMaxEventsPerSec, res.LagAppendEventsPerSec, res.LagLoad = lr.MaxEventsPerSec, lr.AppendEventsPerSec, o.LagLoad
	}
	return res, nil
}

// benchFold starts one projector instance and waits until it has folded and checkpointed want
// events (every partition consumer with nothing pending or unacknowledged). It returns how long
// Start took, how long the fold took after it, how many events were folded after it (workers
// start inside Start, so a few may be folded before it returns), and the running projector, which
// the caller stops; on an error the projector is stopped here. With profile set, the fold (not
// the start) is written to that CPU profile.
func benchFold(ctx context.Context, st *store.Store, nc *nats.Conn, js natsjs.JetStream, want int, profile string) (startT, foldT time.Duration, folded int64, cpu time.Duration, _ *projector.Projector, err error) {
	var f *os.File
	if profile != "" {
		if f, err = os.Create(profile); err != nil {
			return 0, 0, 0, 0, nil, err
		}
		defer f.Close()
	}
	p, err := projector.New(st, nc, projector.Options{Name: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	t0 := time.Now()
	if err := p.Start(ctx); err != nil {
		return 0, 0, 0, 0, nil, err
	}
	startT = time.Since(t0)
	t1, before, c1 := time.Now(), p.Applied(), processCPU()
	defer func() {
		if err != nil {
			_ = p.Stop()
		}
	}()
	if f != nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, 0, 0, nil, err
		}
		defer pprof.StopCPUProfile()
	}
	if err := waitFolded(ctx, st, p, int64(want)); err != nil {
		return 0, 0, 0, 0, nil, err
	}
	return startT, time.Since(t1), p.Applied() - before, processCPU() - c1, p, nil
}

// resetProjections resets what a bench projector left: its partition consumers (created again,
// delivering from the start) and every stored projection state, so that the next round folds the
// whole stream again.
func resetProjections(ctx context.Context, js natsjs.JetStream, st *store.Store) error {
	for part := 0; part < st.Partitions(); part++ {
		if err := st.Stream().DeleteConsumer(ctx, projector.PartitionConsumer(part)); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
			return fmt.Errorf("bench project: deleting consumer %s: %w", projector.PartitionConsumer(part), err)
		}
		// Created again from the start, as agentlog provision creates it (a projector creates none).
		if _, err := st.Stream().CreateConsumer(ctx, store.ProjectorConsumerConfig(part, st.Partitions())); err != nil {
			return fmt.Errorf("bench project: creating consumer %s: %w", projector.PartitionConsumer(part), err)
		}
	}
	kvs, err := js.Stream(ctx, "KV_"+wire.ProjectionsBucket)
	if err != nil {
		return fmt.Errorf("bench project: projections bucket: %w", err)
	}
	if err := kvs.Purge(ctx); err != nil {
		return fmt.Errorf("bench project: purging the projections bucket: %w", err)
	}
	return nil
}

// benchPartitioned reads the whole stream with one ordered consumer per partition at once, each
// decoding its records, until want events were read in all, and returns the time it took.
func benchPartitioned(ctx context.Context, st *store.Store, want int) (time.Duration, error) {
	start := time.Now()
	var read atomic.Int64
	var wg sync.WaitGroup
	all, done := context.WithCancel(ctx) // cancelled once every event was read
	defer done()
	errs := make(chan error, st.Partitions())
	for part := 0; part < st.Partitions(); part++ {
		oc, err := st.Stream().OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{wire.PartitionSubject(part)}})
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			it, err := oc.Messages(natsjs.PullMaxMessages(512))
			if err != nil {
				errs <- err
				return
			}
			defer it.Stop()
			for {
				m, err := it.Next(natsjs.NextContext(all))
				if all.Err() != nil {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				evs, err := wire.DecodeRecord(m.Headers(), m.Data())
				if err != nil {
					errs <- err
					return
				}
				if read.Add(int64(len(evs))) >= int64(want) {
					done()
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return time.Since(start), nil
}

// benchOrdered reads the whole stream with an ordered consumer until want events were read, and
// returns the time it took.
func benchOrdered(ctx context.Context, st *store.Store, want int, decode bool) (time.Duration, error) {
	start := time.Now()
	oc, err := st.Stream().OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{wire.SubjectPrefix + ".>"}})
	if err != nil {
		return 0, err
	}
	it, err := oc.Messages(natsjs.PullMaxBytes(8 << 20))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	read := 0
	for read < want {
		m, err := it.Next()
		if err != nil {
			return 0, err
		}
		if decode {
			evs, err := wire.DecodeRecord(m.Headers(), m.Data())
			if err != nil {
				return 0, err
			}
			read += len(evs)
			continue
		}
		n, err := strconv.Atoi(m.Headers().Get(wire.HeaderCount))
		if err != nil || n < 1 {
			return 0, fmt.Errorf("record without a valid %s header", wire.HeaderCount)
		}
		read += n
	}
	return time.Since(start), nil
}
