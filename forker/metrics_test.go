package forker

import (
	"encoding/json"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetrics: forks are counted by code, with their latency; Ready follows Start and Stop.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	if err := e.f.Ready(ctx(t)); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	note := func(seq int64) session.Event {
		return session.Event{Type: "test/note", Seq: seq, Time: "1785000000000", Data: json.RawMessage(`{}`)}
	}
	if err := e.store.CreateSession(ctx(t), session.Header{ID: "src", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	e.appendRecords("src", []session.Event{note(0), note(1)}, 2)
	if _, err := e.fork(client.ForkRequest{Source: "src", Child: "kid"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fork(client.ForkRequest{Source: "nobody"}); err == nil {
		t.Fatal("fork of an unknown source")
	}
	if _, err := e.fork(client.ForkRequest{Source: "src", Child: "kid"}); err == nil {
		t.Fatal("fork onto an existing child")
	}
	m := e.f.metrics
	for code, want := range map[string]float64{"200": 1, string(session.CodeSessionNotFound): 1, string(session.CodeSessionAlreadyExists): 1} {
		if got := testutil.ToFloat64(m.forks.WithLabelValues(code)); got != want {
			t.Errorf("forks{code=%s} = %v, want %v", code, got, want)
		}
	}
	if n := testutil.CollectAndCount(e.f.Collector(), "agentlog_forker_fork_duration_seconds"); n != 1 {
		t.Errorf("fork latency histogram: %d series", n)
	}
	if problems, err := testutil.CollectAndLint(e.f.Collector()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if err := e.f.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := e.f.Ready(ctx(t)); err == nil {
		t.Error("Ready after Stop")
	}
}
