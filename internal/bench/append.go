package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// AppendOptions are the flags of `agentlog bench append`.
type AppendOptions struct {
	Sessions   int
	Events     int
	Size       int
	Window     time.Duration
	JSON       bool
	SyncAlways bool
	DataDir    string
	Skip       string // "baseline" or "publisher": skip that phase (its figures are 0)
	MaxPending int    // the baseline's PublishAsyncMaxPending
	CPUProfile string // write a CPU profile of the publisher phase here
	Rounds     int    // alternating (b), (a) rounds; the median of each is reported
}

// AppendResult is the JSON line printed by `agentlog bench append --json`. Rates are events/s,
// durations ms, sizes bytes.
type AppendResult struct {
	Sessions         int   `json:"sessions"`
	EventsPerSession int   `json:"events_per_session"`
	EventBytes       int   `json:"event_bytes"`
	WindowMs         int64 `json:"window_ms"`
	SyncAlways       bool  `json:"sync_always"`
	GOMAXPROCS       int   `json:"gomaxprocs"`

	EventsPerSec         float64 `json:"events_per_sec"`
	BaselineEventsPerSec float64 `json:"baseline_events_per_sec"`
	Ratio                float64 `json:"ratio"`
	FlushP50Ms           float64 `json:"flush_p50_ms"`
	FlushP99Ms           float64 `json:"flush_p99_ms"`
	FlushMaxMs           float64 `json:"flush_max_ms"`
	ElapsedMs            float64 `json:"elapsed_ms"`
	BaselineElapsedMs    float64 `json:"baseline_elapsed_ms"`
	CreateMs             float64 `json:"create_ms"`
	Records              uint64  `json:"records"`
	EventsPerRecord      float64 `json:"events_per_record"`
	StoredBytes          uint64  `json:"stored_bytes"`
	BaselineStoredBytes  uint64  `json:"baseline_stored_bytes"`
	// Heap per open Writer after its Flush (Surface, maps, channels; no events), and the peak heap
	// growth during the publisher phase per session (pending events, records being encoded, the
	// embedded server's buffers: the server runs in this process).
	IdleHeapPerSessionBytes int64 `json:"idle_heap_per_session_bytes"`
	PeakHeapPerSessionBytes int64 `json:"peak_heap_per_session_bytes"`
	benchRounds                   // with --rounds > 1 the figures above are the median round's
}

// PrintAppend writes r as one JSON line (asJSON) or as text.
func PrintAppend(w io.Writer, asJSON bool, r AppendResult) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	_, err := fmt.Fprintf(w, `agentlog bench append: %d sessions x %d events x %d bytes, window %s, sync_always %v, GOMAXPROCS %d
  publisher:  %10.0f events/s  (%.0f ms; %d records, %.1f events/record; final Flush p50 %.1f ms, p99 %.1f ms, max %.1f ms; create %.0f ms untimed)
  raw async:  %10.0f events/s  (%.0f ms)
  ratio:      %10.2f
  heap per session: %d bytes idle after Flush, %d bytes peak while writing (includes the in-process server)
`, r.Sessions, r.EventsPerSession, r.EventBytes, time.Duration(r.WindowMs)*time.Millisecond, r.SyncAlways, r.GOMAXPROCS,
		r.EventsPerSec, r.ElapsedMs, r.Records, r.EventsPerRecord, r.FlushP50Ms, r.FlushP99Ms, r.FlushMaxMs, r.CreateMs,
		r.BaselineEventsPerSec, r.BaselineElapsedMs, r.Ratio, r.IdleHeapPerSessionBytes, r.PeakHeapPerSessionBytes)
	return err
}

// RunAppend measures (b) raw async publishing and (a) the publisher, o.Rounds times each, on one
// embedded server, and returns the median rounds and their ratio; progress goes to logw.
func RunAppend(ctx context.Context, o AppendOptions, logw io.Writer) (AppendResult, error) {
	res := AppendResult{
		Sessions: o.Sessions, EventsPerSession: o.Events, EventBytes: o.Size,
		WindowMs: o.Window.Milliseconds(), SyncAlways: o.SyncAlways, GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	dir, cleanup, err := benchDir(o.DataDir, "agentlog-bench-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	nc, st, stop, err := benchServer(ctx, devstack.Options{DataDir: dir, SyncAlways: o.SyncAlways, Name: "agentlog-bench"})
	if err != nil {
		return res, err
	}
	defer stop()
	js := st.JetStream()

	// The same events for both phases (generated before any timing).
	events := make([][]session.Event, o.Sessions)
	t0 := time.Now().UnixMilli()
	for i := range events {
		if events[i], err = loggen.ChunkTurn(uint64(i), o.Events, o.Size, t0); err != nil {
			return res, err
		}
	}

	// Rounds alternate (b) and (a) so that load from outside this process hits both alike; the
	// figures reported are the median round of each.
	var base, pub []AppendResult
	for r := range o.Rounds {
		if o.Skip != "baseline" {
			fmt.Fprintf(logw, "bench: round %d/%d: (b) raw async publishing, %d sessions x %d events...\n", r+1, o.Rounds, o.Sessions, o.Events)
			el, stored, err := benchBaseline(ctx, nc, js, st, events, o.MaxPending)
			if err != nil {
				return res, fmt.Errorf("baseline: %w", err)
			}
			base = append(base, AppendResult{
				BaselineElapsedMs:    ms(el),
				BaselineEventsPerSec: float64(o.Sessions*o.Events) / el.Seconds(),
				BaselineStoredBytes:  stored,
			})
		}
		if o.Skip != "publisher" {
			fmt.Fprintf(logw, "bench: round %d/%d: (a) agentlog publisher, %d sessions x %d events, window %s...\n", r+1, o.Rounds, o.Sessions, o.Events, o.Window)
			var pr AppendResult
			if err := benchPublisher(ctx, nc, st, o, r, events, &pr); err != nil {
				return res, fmt.Errorf("publisher: %w", err)
			}
			pub = append(pub, pr)
		}
	}
	if len(base) > 0 {
		slices.SortFunc(base, func(a, b AppendResult) int { return cmp.Compare(a.BaselineEventsPerSec, b.BaselineEventsPerSec) })
		for _, b := range base {
			res.RoundsBaselineEventsPerSec = append(res.RoundsBaselineEventsPerSec, round1(b.BaselineEventsPerSec))
		}
		m := base[len(base)/2]
		res.BaselineElapsedMs, res.BaselineEventsPerSec, res.BaselineStoredBytes = m.BaselineElapsedMs, m.BaselineEventsPerSec, m.BaselineStoredBytes
	}
	if len(pub) > 0 {
		slices.SortFunc(pub, func(a, b AppendResult) int { return cmp.Compare(a.EventsPerSec, b.EventsPerSec) })
		for _, p := range pub {
			res.RoundsEventsPerSec = append(res.RoundsEventsPerSec, round1(p.EventsPerSec))
		}
		m := pub[len(pub)/2]
		res.EventsPerSec, res.FlushP50Ms, res.FlushP99Ms, res.FlushMaxMs = m.EventsPerSec, m.FlushP50Ms, m.FlushP99Ms, m.FlushMaxMs
		res.ElapsedMs, res.CreateMs, res.Records, res.EventsPerRecord, res.StoredBytes = m.ElapsedMs, m.CreateMs, m.Records, m.EventsPerRecord, m.StoredBytes
		res.IdleHeapPerSessionBytes, res.PeakHeapPerSessionBytes = m.IdleHeapPerSessionBytes, m.PeakHeapPerSessionBytes
	}
	if res.BaselineEventsPerSec > 0 && res.EventsPerSec > 0 {
		res.Ratio = res.EventsPerSec / res.BaselineEventsPerSec
	}
	return res, nil
}

// benchBaseline publishes every event as its own message (its JSON line, encoded in the loop as
// the publisher encodes it) with PublishMsgAsync, one goroutine per session, into
// AGENTLOG_BENCH_RAW (AGENTLOG's config under another name and subject), and waits for every ack.
// It returns the wall time and the stream's stored bytes.
func benchBaseline(ctx context.Context, nc *nats.Conn, js natsjs.JetStream, st *store.Store, events [][]session.Event, maxPending int) (time.Duration, uint64, error) {
	cfg := st.Stream().CachedInfo().Config
	cfg.Name = "AGENTLOG_BENCH_RAW"
	cfg.Subjects = []string{"agentlog_bench_raw.>"}
	cfg.Description = "agentlog bench append: the raw async publishing baseline"
	cfg.Metadata = nil
	cfg.AllowAtomicPublish = false
	ajsc, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(maxPending))
	if err != nil {
		return 0, 0, err
	}
	raw, err := js.CreateStream(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), cfg.Name) }()

	var firstErr error
	var errOnce sync.Once
	fail := func(err error) { errOnce.Do(func() { firstErr = err }) }
	var wg sync.WaitGroup
	start := time.Now()
	for i := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subj := "agentlog_bench_raw." + strconv.Itoa(i)
			futs := make([]natsjs.PubAckFuture, 0, len(events[i]))
			for _, ev := range events[i] {
				l, err := ev.MarshalJSON()
				if err != nil {
					fail(fmt.Errorf("session %d: encode seq %d: %w", i, ev.Seq, err))
					return
				}
				f, err := ajsc.PublishMsgAsync(&nats.Msg{Subject: subj, Data: l}, natsjs.WithStallWait(time.Minute))
				if err != nil {
					fail(fmt.Errorf("session %d: publish: %w", i, err))
					return
				}
				futs = append(futs, f)
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					fail(fmt.Errorf("session %d: ack: %w", i, err))
					return
				case <-ctx.Done():
					fail(ctx.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	info, err := raw.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return el, info.State.Bytes, nil
}

// benchPublisher creates every session (untimed), then Appends all events of all sessions
// concurrently and Flushes each session at its end.
func benchPublisher(ctx context.Context, nc *nats.Conn, st *store.Store, o AppendOptions, round int, events [][]session.Event, res *AppendResult) error {
	before, err := st.Stream().Info(ctx)
	if err != nil {
		return err
	}
	p, err := publisher.New(st, nc, publisher.Options{Window: o.Window, WriterID: "bench", Logger: benchLogger})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close(cctx)
	}()

	heap0 := heapBytes(true)
	createStart := time.Now()
	writers := make([]*publisher.Writer, len(events))
	var mu sync.Mutex
	var cerr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range events {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			w, err := p.Create(ctx, session.Header{ID: fmt.Sprintf("bench-r%d-%06d", round, i), CreatedAt: time.Now().UnixMilli()})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && cerr == nil {
				cerr = err
			}
			writers[i] = w
		}()
	}
	wg.Wait()
	if cerr != nil {
		return cerr
	}
	res.CreateMs = ms(time.Since(createStart))

	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if h := heapBytes(false); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()

	if round == 0 {
		stopProfile, err := startCPUProfile(o.CPUProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	flushes := make([]time.Duration, len(events))
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	for i := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := writers[i]
			for _, ev := range events[i] {
				if err := w.Append(ev); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
			fs := time.Now()
			if err := w.Flush(ctx); err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			flushes[i] = time.Since(fs)
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(stopSampling)
	<-sampled
	if firstErr != nil {
		return firstErr
	}
	n := len(events) * len(events[0])
	res.ElapsedMs = ms(el)
	res.EventsPerSec = float64(n) / el.Seconds()
	slices.Sort(flushes)
	res.FlushP50Ms = ms(flushes[len(flushes)*50/100])
	res.FlushP99Ms = ms(flushes[min(len(flushes)-1, len(flushes)*99/100)])
	res.FlushMaxMs = ms(flushes[len(flushes)-1])

	after, err := st.Stream().Info(ctx)
	if err != nil {
		return err
	}
	res.Records = after.State.Msgs - before.State.Msgs
	res.StoredBytes = after.State.Bytes - before.State.Bytes
	if res.Records > 0 {
		res.EventsPerRecord = float64(n) / float64(res.Records)
	}
	// Idle cost of an open Writer: writers are still open (and referenced) here.
	idle := heapBytes(true)
	res.IdleHeapPerSessionBytes = (idle - heap0) / int64(len(events))
	res.PeakHeapPerSessionBytes = (peak.Load() - heap0) / int64(len(events))
	runtime.KeepAlive(writers)
	if res.Records == 0 {
		return errors.New("no record was written")
	}
	return nil
}
