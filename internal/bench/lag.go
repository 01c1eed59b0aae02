package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// lagResult is what benchLagUnderLoad measures (rates events/s, lags ms).
type lagResult struct {
	MaxEventsPerSec    float64 // the publishers' rate, unthrottled (the projector running)
	AppendEventsPerSec float64 // the rate achieved in the lag phase
	Samples, Failures  int
	FirstError         string
	P50Ms, P99Ms       float64
}

// lagEvent is the publisher's next event of a bench lag session: turn/start, step/start, then
// assistant/chunk events of about size bytes (the turn stays open; the fold does not care).
func lagEvent(seq int64, pad string) session.Event {
	ev := session.Event{Seq: seq, Time: json.Number(strconv.FormatInt(time.Now().UnixMilli(), 10))}
	switch seq {
	case 0:
		ev.Type, ev.Data = "turn/start", json.RawMessage(`{"turn":1}`)
	case 1:
		ev.Type, ev.Data = "step/start", json.RawMessage(`{"turn":1,"step":1}`)
	default:
		ev.Type = "assistant/chunk"
		ev.Data = json.RawMessage(`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"` + pad + `"}}`)
	}
	return ev
}

// benchLagUnderLoad measures the projection lag while publishers append at load (a fraction) of
// their maximum rate, on the projector already running: (1) sessions publishers (one Writer each,
// the default window) append as fast as they can for dur/2, flushing every 1,024 events, which
// gives the maximum rate; (2) the
// same writers append at load x that rate for dur, and each, every second, flushes (the
// append is then acknowledged) and asks the query service for its messages with minSeq = the
// last seq flushed: the lag is the time from the flush's return to the answer.
func benchLagUnderLoad(ctx context.Context, st *store.Store, nc *nats.Conn, sessions, size int, load float64, dur time.Duration, logw io.Writer) (lagResult, error) {
	var res lagResult
	p, err := publisher.New(st, nc, publisher.Options{WriterID: "bench-lag", Logger: benchLogger})
	if err != nil {
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close(cctx)
	}()
	qc, err := client.New(nc)
	if err != nil {
		return res, err
	}
	pad := make([]byte, max(size-120, 1))
	for i := range pad {
		pad[i] = "abcdefghijklmnopqrstuvwxyz"[i%26]
	}
	writers := make([]*publisher.Writer, sessions)
	next := make([]int64, sessions)
	for i := range writers {
		if writers[i], err = p.Create(ctx, session.Header{ID: fmt.Sprintf("lag-%04d", i), CreatedAt: time.Now().UnixMilli()}); err != nil {
			return res, err
		}
	}
	// (1) The maximum rate.
	fmt.Fprintf(logw, "bench project: lag: %d publishers at their maximum rate for %s...\n", sessions, dur/2)
	var total atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(dur / 2)
	for i, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				for range 64 {
					err := w.Append(lagEvent(next[i], string(pad)))
					var be *publisher.BacklogError
					if errors.As(err, &be) {
						// Faster than the server takes them: wait for what is pending (the
						// rate counts durable events only in the end).
						if err = w.Flush(ctx); err == nil {
							err = w.Append(lagEvent(next[i], string(pad)))
						}
					}
					if err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
					next[i]++
				}
				total.Add(64)
				if next[i]%1024 < 64 {
					// A Flush every 1,024 events bounds a writer's window (its record and its
					// atomic batch), as an agent that reads back its writes would.
					if err := w.Flush(ctx); err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
				}
			}
			if err := w.Flush(ctx); err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	res.MaxEventsPerSec = round1(float64(total.Load()) / time.Since(start).Seconds())

	// (2) At load x the maximum, with probes.
	perSession := res.MaxEventsPerSec * load / float64(sessions) // events/s of each writer
	const tick = 10 * time.Millisecond
	const probeEvery = time.Second
	fmt.Fprintf(logw, "bench project: lag: %d publishers at %.0f%% of %.0f events/s for %s...\n", sessions, load*100, res.MaxEventsPerSec, dur)
	var mu sync.Mutex
	var lags []time.Duration
	total.Store(0)
	start = time.Now()
	end = start.Add(dur)
	for i, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(tick)
			defer t.Stop()
			sent := 0
			lastProbe := time.Now().Add(-time.Duration(i) * probeEvery / time.Duration(sessions)) // spread the probes
			for now := time.Now(); now.Before(end); now = <-t.C {
				// Paced by the time elapsed, so that a slow flush or a missed tick is caught up.
				for due := int(perSession * now.Sub(start).Seconds()); sent < due; sent++ {
					if err := w.Append(lagEvent(next[i], string(pad))); err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
					next[i]++
					total.Add(1)
				}
				if now.Sub(lastProbe) < probeEvery {
					continue
				}
				lastProbe = now
				if err := w.Flush(ctx); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				acked, seq := time.Now(), next[i]-1
				id := w.ID()
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := qc.Messages(ctx, id, client.MinSeq(seq))
					lag := time.Since(acked)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						if res.Failures++; res.Failures == 1 {
							res.FirstError = fmt.Sprintf("session %q seq %d: %v", id, seq, err)
						}
						return
					}
					lags = append(lags, lag)
				}()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return res, firstErr
	}
	res.AppendEventsPerSec = round1(float64(total.Load()) / dur.Seconds())
	slices.Sort(lags)
	res.Samples = len(lags)
	if len(lags) > 0 {
		res.P50Ms = ms(lags[len(lags)/2])
		res.P99Ms = ms(lags[min(len(lags)-1, len(lags)*99/100)])
	}
	return res, nil
}
