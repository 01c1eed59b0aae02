package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"time"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/session"
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
	CPUProfile string // write a CPU profile (pprof) of the fold phase here
}

// benchProjectResult is the JSON line printed by `agentlog bench project --json`. Rates are
// events/s, durations ms.
type benchProjectResult struct {
	Sessions                   int     `json:"sessions"`
	Events                     int     `json:"events"`
	Records                    int     `json:"records"`
	EventsPerSec               float64 `json:"events_per_sec"`
	BaselineEventsPerSec       float64 `json:"baseline_events_per_sec"`
	BaselineDecodeEventsPerSec float64 `json:"baseline_decode_events_per_sec"`
	Ratio                      float64 `json:"ratio"`
	FoldMs                     float64 `json:"fold_ms"`
	BaselineMs                 float64 `json:"baseline_ms"`
	LagSamples                 int     `json:"lag_samples"`
	LagP50Ms                   float64 `json:"lag_p50_ms"`
	LagP99Ms                   float64 `json:"lag_p99_ms"`
	LagAppendRecordsPerSec     int     `json:"lag_append_records_per_sec"`
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
			if o.Sessions < 1 || o.Events < 1 || o.Size < 1 || o.Batch < 1 {
				return &usageError{fmt.Errorf("--sessions, --events, --size and --batch must be >= 1")}
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
			fmt.Fprintf(g.stdout, "%d sessions, %d events in %d records\n(a) projector: %.0f events/s (%.0f ms)\n(b) ordered consumer: %.0f events/s (%.0f ms; %.0f events/s decoding every record)\nratio %.2f\nlag at %d records/s: p50 %.1f ms, p99 %.1f ms (%d samples)\n",
				r.Sessions, r.Events, r.Records, r.EventsPerSec, r.FoldMs, r.BaselineEventsPerSec, r.BaselineMs, r.BaselineDecodeEventsPerSec, r.Ratio,
				r.LagAppendRecordsPerSec, r.LagP50Ms, r.LagP99Ms, r.LagSamples)
			return nil
		},
	}
	c.Flags().IntVar(&o.Sessions, "sessions", 200, "sessions in the pre-filled stream")
	c.Flags().IntVar(&o.Events, "events", 500, "events per session")
	c.Flags().IntVar(&o.Size, "size", 512, "approximate event size in bytes")
	c.Flags().IntVar(&o.Batch, "batch", 10, "events per record")
	c.Flags().IntVar(&o.Partitions, "partitions", 16, "partitions of the stream")
	c.Flags().BoolVar(&o.JSON, "json", false, "print one JSON line")
	c.Flags().IntVar(&o.LagRate, "lag-rate", 200, "records/s appended during the lag phase (0: skip it)")
	c.Flags().DurationVar(&o.LagFor, "lag-for", 5*time.Second, "length of the lag phase")
	c.Flags().StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile (pprof) of the fold phase to this file")
	return c
}

func runBenchProject(ctx context.Context, o benchProjectOptions, logw io.Writer) (benchProjectResult, error) {
	res := benchProjectResult{Sessions: o.Sessions, Events: o.Sessions * o.Events}
	dir, err := os.MkdirTemp("", "agentlog-bench-project-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := ajs.RunEmbedded(ajs.EmbeddedOptions{DataDir: dir})
	if err != nil {
		return res, err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	nc, js, err := ajs.Connect(srv.ClientURL(), "agentlog-bench-project")
	if err != nil {
		return res, err
	}
	defer nc.Close()
	store, err := ajs.Provision(ctx, js, ajs.Config{Partitions: o.Partitions})
	if err != nil {
		return res, err
	}

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
				evs, err := benchEvents(uint64(s), o.Events, o.Size, t0)
				if err != nil {
					errs <- err
					return
				}
				id := fmt.Sprintf("bench-%05d", s)
				var tail uint64
				n := 0
				for len(evs) > 0 {
					k := min(o.Batch, len(evs))
					r, err := store.Append(ctx, id, tail, "", evs[:k])
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

	// (b) The raw rate: an ordered consumer reading every record (events counted from the
	// Agentlog-Count header), then the same with every record decoded (ajs.DecodeRecord).
	base, err := benchOrdered(ctx, store, res.Events, false)
	if err != nil {
		return res, err
	}
	baseDecode, err := benchOrdered(ctx, store, res.Events, true)
	if err != nil {
		return res, err
	}
	res.BaselineDecodeEventsPerSec = round1(float64(res.Events) / baseDecode.Seconds())

	// (a) One projector instance: every event applied to every built-in unit and checkpointed
	// (states written, records acknowledged).
	p := projector.New(store, nc, projector.Options{Name: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	start := time.Now()
	if err := p.Start(ctx); err != nil {
		return res, err
	}
	defer func() { _ = p.Stop() }()
	for {
		done := p.Applied() >= int64(res.Events)
		if done {
			for part := 0; part < store.Partitions && done; part++ {
				c, err := js.Consumer(ctx, ajs.StreamName, projector.PartitionConsumer(part))
				if err != nil {
					return res, err
				}
				ci, err := c.Info(ctx)
				if err != nil {
					return res, err
				}
				done = ci.NumPending == 0 && ci.NumAckPending == 0
			}
		}
		if done {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	fold := time.Since(start)
	res.FoldMs, res.BaselineMs = ms(fold), ms(base)
	res.EventsPerSec = round1(float64(res.Events) / fold.Seconds())
	res.BaselineEventsPerSec = round1(float64(res.Events) / base.Seconds())
	res.Ratio = float64(int64(res.EventsPerSec/res.BaselineEventsPerSec*1000+0.5)) / 1000

	// Lag under a steady append load: append acknowledged -> the query service answers minSeq.
	if o.LagRate > 0 {
		res.LagAppendRecordsPerSec = o.LagRate
		var lags []time.Duration
		var lmu sync.Mutex
		var qwg sync.WaitGroup
		tails := map[string]uint64{}
		nextSeq := map[string]int64{}
		tick := time.NewTicker(time.Second / time.Duration(o.LagRate))
		end := time.Now().Add(o.LagFor)
		for i := 0; time.Now().Before(end); i++ {
			<-tick.C
			id := fmt.Sprintf("lag-%03d", i%100)
			seq := nextSeq[id]
			ev := session.Event{Type: "turn/start", Seq: seq, Time: "1785000000000", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d}`, seq+1))}
			if seq%2 == 1 {
				ev = session.Event{Type: "turn/end", Seq: seq, Time: "1785000000000", Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, seq))}
			}
			r, err := store.Append(ctx, id, tails[id], "", []session.Event{ev})
			if err != nil {
				return res, err
			}
			acked := time.Now()
			tails[id], nextSeq[id] = r.StreamSeq, seq+1
			qwg.Add(1)
			go func() {
				defer qwg.Done()
				if _, err := projector.QueryMessages(ctx, nc, id, seq); err == nil {
					lmu.Lock()
					lags = append(lags, time.Since(acked))
					lmu.Unlock()
				}
			}()
		}
		tick.Stop()
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
