package bench

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// benchRounds is every round's rate of a benchmark, (a) and (b), sorted; the figures a result
// reports are the median round's.
type benchRounds struct {
	RoundsEventsPerSec         []float64 `json:"rounds_events_per_sec,omitempty"`
	RoundsBaselineEventsPerSec []float64 `json:"rounds_baseline_events_per_sec,omitempty"`
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchDir is dir, or when it is "" a new temporary directory named prefix* that cleanup removes.
func benchDir(dir, prefix string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", func() {}, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// heapBytes is the live heap (bytes of heap objects), after a GC when gc is set.
func heapBytes(gc bool) int64 {
	if gc {
		runtime.GC()
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

var benchLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// benchServer starts a dev stack without services (the benchmark starts the ones it times): an
// embedded nats-server with opts, its connection and the provisioned store; stop closes the
// connection and shuts the server down.
func benchServer(ctx context.Context, opts devstack.Options) (nc *nats.Conn, st *store.Store, stop func(), err error) {
	opts.Logger = benchLogger
	s, err := devstack.Start(ctx, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return s.Conn(), s.Store(), func() { _ = s.Close() }, nil
}

// startCPUProfile starts a CPU profile written to path (none when path is ""); stop ends it and
// closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
