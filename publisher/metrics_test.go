package publisher

import (
	"context"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gather returns the value of each unlabelled sample, and the sums of the labelled ones, by name
// (a histogram's sample count).
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				out[mf.GetName()] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[mf.GetName()] += m.Gauge.GetValue()
			case m.Histogram != nil:
				out[mf.GetName()] += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func TestCollector(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	pa := e.publisher(t, "wa", clk)
	pb := e.publisher(t, "wb", clk)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if problems, err := testutil.CollectAndLint(pa.Collector()); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	wa, err := pa.Create(ctx, session.Header{ID: "metered", CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []session.Event{
		ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`),
		ev(t, `{"type":"user/message","seq":1,"time":2,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi \ud800"}],"source":{"kind":"user"}},"surfaceOp":"append"}`),
	} {
		if err := wa.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	m := gather(t, pa.Collector())
	if m["agentlog_publisher_pending_events"] != 2 || m["agentlog_publisher_pending_bytes"] <= 128 || m["agentlog_publisher_writers"] != 1 {
		t.Fatalf("before the write: %v", m)
	}
	if err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m = gather(t, pa.Collector())
	if m["agentlog_publisher_appended_events_total"] != 2 || m["agentlog_publisher_appended_records_total"] != 1 ||
		m["agentlog_publisher_appended_bytes_total"] < 100 || m["agentlog_publisher_write_duration_seconds"] != 1 ||
		m["agentlog_publisher_pending_events"] != 0 || m["agentlog_publisher_pending_bytes"] != 0 ||
		m["agentlog_publisher_sanitized_strings_total"] != 1 || m["agentlog_publisher_write_failures_total"] != 0 {
		t.Fatalf("after the write: %v", m)
	}
	// Another writer takes the session over: the first is fenced at its next write.
	if _, err := pb.Open(ctx, "metered", Takeover()); err != nil {
		t.Fatal(err)
	}
	if err := wa.Append(ev(t, `{"type":"turn/end","seq":2,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}`)); err == nil {
		_ = wa.Flush(ctx)
	}
	m = gather(t, pa.Collector())
	if m["agentlog_publisher_fenced_writers_total"] != 1 || m["agentlog_publisher_write_failures_total"] != 1 {
		t.Fatalf("after the takeover: %v", m)
	}
}
