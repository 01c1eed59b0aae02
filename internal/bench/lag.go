package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

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
// gives the maximum rate; (2) the same writers append at load x that rate for dur, and each,
// every second, flushes (the append is then acknowledged) and asks the query service for its
// messages with minSeq = the last seq flushed: the lag is the time from the flush's return to the
// answer (turnRig.phase; failures are counted, not fatal).
func benchLagUnderLoad(ctx context.Context, st *store.Store, nc *nats.Conn, sessions, size int, load float64, dur time.Duration, logw io.Writer) (lagResult, TurnPhase, error) {
	var res lagResult
	rig, err := newTurnRig(ctx, st, nc, sessions, size, "lag")
	if err != nil {
		return res, TurnPhase{}, err
	}
	defer rig.close()
	fmt.Fprintf(logw, "bench project: lag: %d publishers at their maximum rate for %s...\n", sessions, dur/2)
	res.MaxEventsPerSec, _ = rig.maxRate(ctx, dur/2)
	fmt.Fprintf(logw, "bench project: lag: %d publishers at %.0f%% of %.0f events/s for %s...\n", sessions, load*100, res.MaxEventsPerSec, dur)
	ph := rig.phase(ctx, load, res.MaxEventsPerSec, dur, time.Second)
	res.AppendEventsPerSec = ph.AppendEventsPerSec
	res.Samples, res.Failures, res.FirstError = ph.Turns, ph.QueryFailures, ph.FirstQueryError
	res.P50Ms, res.P99Ms = ph.LagP50Ms, ph.LagP99Ms
	return res, ph, nil
}
