package bench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"
)

// TestBenchProject runs RunProject (`agentlog bench project`) small (AGENTLOG_BENCH_PROJECT=full: the defaults,
// and the JSON line is logged).
func TestBenchProject(t *testing.T) {
	o := ProjectOptions{Sessions: 20, Events: 50, Size: 256, Batch: 10, LagLoad: 0.8, LagSessions: 10, LagFor: time.Second, Partitions: 4, Rounds: 2}
	if os.Getenv("AGENTLOG_BENCH_PROJECT") == "full" {
		o = ProjectOptions{Sessions: 400, Events: 1000, Size: 512, Batch: 10, LagLoad: 0.8, LagSessions: 50, LagFor: 5 * time.Second, Partitions: 16, Rounds: 3}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := RunProject(ctx, o, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r)
	t.Logf("%s", b)
	if r.Events != o.Sessions*o.Events || r.Records != o.Sessions*o.Events/o.Batch || r.EventsPerSec <= 0 || r.BaselineEventsPerSec <= 0 || r.LagSamples == 0 ||
		len(r.RoundsEventsPerSec) != o.Rounds || len(r.RoundsBaselineEventsPerSec) != o.Rounds {
		t.Fatalf("result %s", b)
	}
}
