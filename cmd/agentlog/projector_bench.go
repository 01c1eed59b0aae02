package main

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
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/sessiontest"
	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
)

// benchProjectOptions are the flags of `agentlog bench project`.
type benchProjectOptions struct {
	Sessions   int
	Events     int
	Size       int
	Batch      int
	JSON       bool
	LagRate    int           // records/s appended during the lag phase (0: no lag phase)
	LagFor     time.Duration // length of the lag phase
	Partitions int
	Rounds     int    // alternating (b), (a) rounds; the median of each is reported
	CPUProfile string // write a CPU profile (pprof) of the last round's fold phase here
}

// benchProjectResult is the JSON line printed by `agentlog bench project --json`. Rates are
// events/s, durations ms.
type benchProjectResult struct {
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
	FoldMs      float64 `json:"fold_ms"`
	BaselineMs  float64 `json:"baseline_ms"`
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
	LagFailures            int     `json:"lag_failures"`
	LagFirstError          string  `json:"lag_first_error,omitempty"`
	LagP50Ms               float64 `json:"lag_p50_ms"`
	LagP99Ms               float64 `json:"lag_p99_ms"`
	LagAppendRecordsPerSec int     `json:"lag_append_records_per_sec"`
}

// newBenchProjectCmd is `agentlog bench project`: (a) the fold rate of one projector instance
// (all built-in units, events applied and checkpointed), (b) the raw rate of an ordered consumer
// reading (and decoding) the same stream, their ratio, and the projection lag under a steady
// append load (append acknowledged -> QueryMessages with minSeq answered).
func newBenchProjectCmd(g *globals) *cobra.Command {
	var o benchProjectOptions
	c := &cobra.Command{
		Use:   "project [--json]",
		Short: "Measure one projector's fold rate against a raw ordered consumer, and the projection lag",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Sessions < 1 || o.Events < 1 || o.Size < 1 || o.Batch < 1 || o.Rounds < 1 || o.Partitions < 1 {
				return &usageError{fmt.Errorf("--sessions, --events, --size, --batch, --rounds and --partitions must be >= 1")}
			}
			if o.LagRate < 0 || (o.LagRate > 0 && o.LagFor <= 0) {
				return &usageError{fmt.Errorf("--lag-rate must be >= 0 (0: no lag phase), and --lag-for > 0 with it; got %d and %s", o.LagRate, o.LagFor)}
			}
			r, err := runBenchProject(cmd.Context(), o, g.stderr)
			if err != nil {
				return err
			}
			if o.JSON {
				b, _ := json.Marshal(r)
				fmt.Fprintln(g.stdout, string(b))
				return nil
			}
			fmt.Fprintf(g.stdout, "%d sessions, %d events in %d records; median of %d rounds\n(a) projector: %.0f events/s (%.0f ms, after a start of %.0f ms)\n(b) ordered consumer: %.0f events/s (%.0f ms; %.0f events/s decoding every record)\nratio %.3f (%.3f against decoding every record)\nlag at %d records/s: p50 %.1f ms, p99 %.1f ms (%d samples, %d failed %s)\n",
				r.Sessions, r.Events, r.Records, r.Rounds, r.EventsPerSec, r.FoldMs, r.StartMs, r.BaselineEventsPerSec, r.BaselineMs, r.BaselineDecodeEventsPerSec, r.Ratio, r.DecodeRatio,
				r.LagAppendRecordsPerSec, r.LagP50Ms, r.LagP99Ms, r.LagSamples, r.LagFailures, r.LagFirstError)
			return nil
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 400, "sessions in the pre-filled stream")
	c.Flags().IntVar(&o.Events, "events", 1000, "events per session")
	c.Flags().IntVar(&o.Rounds, "rounds", 3, "alternate (b) and (a) this many times and report the median round of each (steadier on a shared machine)")
	c.Flags().IntVar(&o.Size, "size", 512, "approximate event size in bytes")
	c.Flags().IntVar(&o.Batch, "batch", 10, "events per record")
	c.Flags().IntVar(&o.Partitions, "partitions", 16, "partitions of the stream")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line")
	c.Flags().IntVar(&o.LagRate, "lag-rate", 200, "records/s appended during the lag phase (0: skip it); the rate achieved is reported")
	c.Flags().DurationVar(&o.LagFor, "lag-for", 5*time.Second, "length of the lag phase")
	c.Flags().StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile (pprof) of the last round's fold phase (after Start) to this file")
	return c
}

func runBenchProject(ctx context.Context, o benchProjectOptions, logw io.Writer) (benchProjectResult, error) {
	res := benchProjectResult{Sessions: o.Sessions, Events: o.Sessions * o.Events}
	dir, err := os.MkdirTemp("", "agentlog-bench-project-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	nc, store, stop, err := benchServer(ctx, natsdev.ServerOptions{DataDir: dir}, "agentlog-bench-project", ajs.Config{Partitions: o.Partitions})
	if err != nil {
		return res, err
	}
	defer stop()
	js := store.JS

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
				evs, err := sessiontest.ChunkTurn(uint64(s), o.Events, o.Size, t0)
				if err != nil {
					errs <- err
					return
				}
				id := fmt.Sprintf("bench-%05d", s)
				var tail uint64
				n := 0
				for len(evs) > 0 {
					k := min(o.Batch, len(evs))
					r, err := store.Append(ctx, id, tail, evs[:k])
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
	var folds, bases, starts []time.Duration
	var last *projector.Projector
	defer func() {
		if last != nil {
			_ = last.Stop()
		}
	}()
	for r := range o.Rounds {
		fmt.Fprintf(logw, "bench project: round %d/%d\n", r+1, o.Rounds)
		base, err := benchOrdered(ctx, store, res.Events, false)
		if err != nil {
			return res, err
		}
		bases = append(bases, base)
		if last != nil {
			err := last.Stop()
			last = nil
			if err != nil {
				return res, err
			}
			if err := resetProjections(ctx, js, store); err != nil {
				return res, err
			}
		}
		profile := ""
		if r == o.Rounds-1 {
			profile = o.CPUProfile // the last round's fold phase
		}
		start, fold, folded, p, err := benchFold(ctx, store, nc, js, res.Events, profile)
		if err != nil {
			return res, err
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
	baseDecode, err := benchOrdered(ctx, store, res.Events, true)
	if err != nil {
		return res, err
	}
	res.BaselineDecodeEventsPerSec = round1(float64(res.Events) / baseDecode.Seconds())
	for _, d := range [][]time.Duration{folds, bases, starts} {
		slices.Sort(d)
	}
	slices.Sort(res.RoundsEventsPerSec)
	slices.Sort(res.RoundsBaselineEventsPerSec)
	mid := o.Rounds / 2
	res.Rounds = o.Rounds
	res.FoldMs, res.BaselineMs, res.StartMs = ms(folds[mid]), ms(bases[mid]), ms(starts[mid])
	res.EventsPerSec, res.BaselineEventsPerSec = res.RoundsEventsPerSec[mid], res.RoundsBaselineEventsPerSec[mid]
	res.Ratio = float64(int64(res.EventsPerSec/res.BaselineEventsPerSec*1000+0.5)) / 1000
	res.DecodeRatio = float64(int64(res.EventsPerSec/res.BaselineDecodeEventsPerSec*1000+0.5)) / 1000

	// Lag under a steady append load: append acknowledged -> the query service answers minSeq.
	if o.LagRate > 0 {
		qc, err := client.New(nc)
		if err != nil {
			return res, err
		}
		var lags []time.Duration
		var lmu sync.Mutex
		var qwg sync.WaitGroup
		tails := map[string]uint64{}
		nextSeq := map[string]int64{}
		tick := time.NewTicker(max(time.Second/time.Duration(o.LagRate), time.Microsecond))
		lagStart := time.Now()
		end := lagStart.Add(o.LagFor)
		appended := 0
		for i := 0; time.Now().Before(end); i, appended = i+1, appended+1 {
			<-tick.C
			id := fmt.Sprintf("lag-%03d", i%100)
			seq := nextSeq[id]
			ev := session.Event{Type: "turn/start", Seq: seq, Time: "1785000000000", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d}`, seq+1))}
			if seq%2 == 1 {
				ev = session.Event{Type: "turn/end", Seq: seq, Time: "1785000000000", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, seq))}
			}
			r, err := store.Append(ctx, id, tails[id], []session.Event{ev})
			if err != nil {
				return res, err
			}
			acked := time.Now()
			tails[id], nextSeq[id] = r.StreamSeq, seq+1
			qwg.Add(1)
			go func() {
				defer qwg.Done()
				_, err := qc.Messages(ctx, id, client.MinSeq(seq))
				lag := time.Since(acked)
				lmu.Lock()
				defer lmu.Unlock()
				if err != nil {
					if res.LagFailures++; res.LagFailures == 1 {
						res.LagFirstError = fmt.Sprintf("session %q seq %d: %v", id, seq, err)
					}
					return
				}
				lags = append(lags, lag)
			}()
		}
		tick.Stop()
		// The rate achieved, which is below the one asked for when appends cannot keep up.
		res.LagAppendRecordsPerSec = int(float64(appended)/time.Since(lagStart).Seconds() + 0.5)
		qwg.Wait()
		slices.Sort(lags)
		res.LagSamples = len(lags)
		if len(lags) > 0 {
			res.LagP50Ms = ms(lags[len(lags)/2])
			res.LagP99Ms = ms(lags[min(len(lags)-1, len(lags)*99/100)])
		}
	}
	return res, nil
}

// benchFold starts one projector instance and waits until it has folded and checkpointed want
// events (every partition consumer with nothing pending or unacknowledged). It returns how long
// Start took, how long the fold took after it, how many events were folded after it (workers
// start inside Start, so a few may be folded before it returns), and the running projector, which
// the caller stops; on an error the projector is stopped here. With profile set, the fold (not
// the start) is written to that CPU profile.
func benchFold(ctx context.Context, store *ajs.Store, nc *nats.Conn, js natsjs.JetStream, want int, profile string) (startT, foldT time.Duration, folded int64, _ *projector.Projector, err error) {
	var f *os.File
	if profile != "" {
		if f, err = os.Create(profile); err != nil {
			return 0, 0, 0, nil, err
		}
		defer f.Close()
	}
	p := projector.New(store, nc, projector.Options{Name: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t0 := time.Now()
	if err := p.Start(ctx); err != nil {
		return 0, 0, 0, nil, err
	}
	startT = time.Since(t0)
	t1, before := time.Now(), p.Applied()
	defer func() {
		if err != nil {
			_ = p.Stop()
		}
	}()
	if f != nil {
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, 0, 0, nil, err
		}
		defer pprof.StopCPUProfile()
	}
	for {
		done := p.Applied() >= int64(want)
		for part := 0; part < store.Partitions && done; part++ {
			c, err := js.Consumer(ctx, ajs.StreamName, projector.PartitionConsumer(part))
			if err != nil {
				return 0, 0, 0, nil, err
			}
			ci, err := c.Info(ctx)
			if err != nil {
				return 0, 0, 0, nil, err
			}
			done = ci.NumPending == 0 && ci.NumAckPending == 0
		}
		if done {
			return startT, time.Since(t1), p.Applied() - before, p, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, 0, nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// resetProjections removes what a bench projector left: its partition consumers and every stored
// projection state, so that the next round folds the whole stream again.
func resetProjections(ctx context.Context, js natsjs.JetStream, store *ajs.Store) error {
	for part := 0; part < store.Partitions; part++ {
		if err := store.Stream.DeleteConsumer(ctx, projector.PartitionConsumer(part)); err != nil && !errors.Is(err, natsjs.ErrConsumerNotFound) {
			return fmt.Errorf("bench project: deleting consumer %s: %w", projector.PartitionConsumer(part), err)
		}
	}
	kvs, err := js.Stream(ctx, "KV_"+ajs.ProjectionsBucket)
	if err != nil {
		return fmt.Errorf("bench project: projections bucket: %w", err)
	}
	if err := kvs.Purge(ctx); err != nil {
		return fmt.Errorf("bench project: purging the projections bucket: %w", err)
	}
	return nil
}

// benchOrdered reads the whole stream with an ordered consumer until want events were read, and
// returns the time it took.
func benchOrdered(ctx context.Context, store *ajs.Store, want int, decode bool) (time.Duration, error) {
	start := time.Now()
	oc, err := store.Stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{ajs.SubjectPrefix + ".>"}})
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
			evs, err := ajs.DecodeRecord(m.Headers(), m.Data())
			if err != nil {
				return 0, err
			}
			read += len(evs)
			continue
		}
		n, err := strconv.Atoi(m.Headers().Get(ajs.HeaderCount))
		if err != nil || n < 1 {
			return 0, fmt.Errorf("record without a valid %s header", ajs.HeaderCount)
		}
		read += n
	}
	return time.Since(start), nil
}
