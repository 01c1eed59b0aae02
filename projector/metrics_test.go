package projector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/obs"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serveMetrics serves p's metrics on a free port until the test ends.
func serveMetrics(t *testing.T, p *Projector) *obs.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
	srv, err := obs.Serve("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetReady(p.Ready)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// waitMetric scrapes until name{labels} satisfies ok.
func waitMetric(t *testing.T, addr, name string, labels map[string]string, ok func(float64) bool) float64 {
	t.Helper()
	var v float64
	checkfor.Check(t, 20*time.Second, 20*time.Millisecond, func() error {
		fams, err := obs.Scrape(ctx(t), addr)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		if v, found = fams.Value(name, labels); !found || !ok(v) {
			return fmt.Errorf("%s%v = %v (found %v), not as expected", name, labels, v, found)
		}
		return nil
	})
	return v
}

func TestMetricsOfAFold(t *testing.T) {
	e := newEnv(t)
	logs := &syncBuffer{}
	p := e.startProjectorOpts("metrics-1", Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	srv := serveMetrics(t, p)
	addr := srv.Addr()
	events := toolSession()
	e.create("m-a")
	e.appendChunked("m-a", events, 3)
	e.waitStored("m-a", func(p Projection) bool { return p.AsOfSeq == 10 })

	gt := func(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
	me := map[string]string{"projector": "metrics-1"}
	waitMetric(t, addr, "agentlog_projector_events_folded_total", me, gt(11))
	waitMetric(t, addr, "agentlog_projector_records_folded_total", me, gt(5))
	waitMetric(t, addr, "agentlog_projector_checkpoint_duration_seconds", me, gt(1))
	waitMetric(t, addr, "agentlog_projector_partitions_owned", me, func(v float64) bool { return v == 4 })
	waitMetric(t, addr, "agentlog_projector_refolds_total", me, func(float64) bool { return true })
	waitMetric(t, addr, "agentlog_projector_cache_misses_total", map[string]string{"cache": "state"}, gt(1))
	waitMetric(t, addr, "agentlog_projector_cache_hits_total", map[string]string{"cache": "state"}, gt(1))
	// Caught up: every owned partition reports a lag of 0.
	part := map[string]string{"partition": "0"}
	waitMetric(t, addr, "agentlog_projector_lag_records", part, func(v float64) bool { return v == 0 })
	waitMetric(t, addr, "agentlog_projector_lag_seconds", part, func(v float64) bool { return v == 0 })

	// Queries: a success, a 404 and a 408 (minSeq not reached).
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages(ctx(t), "m-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages(ctx(t), "m-a", client.MinSeq(50), client.Timeout(100*time.Millisecond)); !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("minSeq past the log: %v", err)
	}
	if _, err := c.Surface(ctx(t), "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	// The next query of m-a reads only the records appended since: a query cache hit.
	if _, err := c.Messages(ctx(t), "m-a"); err != nil {
		t.Fatal(err)
	}
	one := func(v float64) bool { return v == 1 }
	waitMetric(t, addr, "agentlog_query_requests_total", map[string]string{"endpoint": "messages", "code": "200"}, func(v float64) bool { return v == 2 })
	waitMetric(t, addr, "agentlog_query_requests_total", map[string]string{"endpoint": "messages", "code": "408"}, one)
	waitMetric(t, addr, "agentlog_query_requests_total", map[string]string{"endpoint": "surface", "code": "404"}, one)
	waitMetric(t, addr, "agentlog_query_duration_seconds", map[string]string{"endpoint": "messages"}, func(v float64) bool { return v == 3 })
	waitMetric(t, addr, "agentlog_projector_cache_hits_total", map[string]string{"cache": "query"}, gt(1))
}

func TestMetricsLint(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("lint-1")
	problems, err := testutil.CollectAndLint(p.Collector())
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("%s: %s", pr.Metric, pr.Text)
	}
}

// syncBuffer is a log sink safe for the projector's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestPoisonEventIsVisible: a unit whose Apply fails on an event stops for that session only. The
// failure is in the stored value's error, in agentlog_projector_stopped_sessions_total, and in
// one log line naming the session, the seq, the unit and the rule; the other units of the
// session and the other sessions go on.
func TestPoisonEventIsVisible(t *testing.T) {
	poison := Def[int]{
		Key: "poison", StateVersion: 1, Reads: []string{"tool/call"},
		Init: func() int { return 0 },
		Apply: func(n int, ev session.Event) (int, error) {
			if bytes.Contains(ev.Data, []byte(`"rm"`)) {
				return n, errors.New("refusing rm")
			}
			return n + 1, nil
		},
	}
	reg, err := NewRegistry(poison)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	logs := &syncBuffer{}
	p := e.startProjectorOpts("poison-1", Options{Registry: reg, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	srv := serveMetrics(t, p)

	call := func(seq int64, name string) session.Event {
		return ev(seq, "tool/call", `{"turn":1,"step":1,"callId":"c`+name+`","name":"`+name+`","arguments":"{}"}`, "", "")
	}
	bad := []session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""), call(1, "ls"), call(2, "rm"), call(3, "ls"), userMsg(4, "m1", "still here")}
	good := []session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""), call(1, "ls"), call(2, "cat")}
	e.create("bad")
	e.create("good")
	e.appendRecord("bad", bad[:3])
	e.appendRecord("good", good)
	e.appendRecord("bad", bad[3:])
	e.waitStored("bad", func(p Projection) bool { return p.AsOfSeq == 4 && p.Error == nil })

	// The units' values of one checkpoint are written together, not atomically: wait for poison's.
	tok, _ := wire.Token("bad")
	var v storedValue
	var raw []byte
	checkfor.Check(t, 20*time.Second, 10*time.Millisecond, func() error {
		ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey("poison", tok))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return err
		} else if err != nil {
			t.Fatal(err)
		}
		raw = ent.Value()
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		if v.AsOfSeq < 1 || v.Error == nil {
			return fmt.Errorf("the poison unit's value of bad: %s", raw)
		}
		return nil
	})
	if v.Error == nil || v.Error.Seq != 2 || v.Error.Rule != session.RuleUnitApply || !strings.Contains(v.Error.Message, "refusing rm") || v.AsOfSeq != 1 {
		t.Fatalf("stored poison value of bad: %s", raw)
	}
	// "good" is folded in its own time (another partition, maybe): wait for it, and for its
	// poison and tools values, which a checkpoint writes one after the other.
	e.waitStored("good", func(p Projection) bool { return p.AsOfSeq == 2 })
	var snap client.SnapshotReply
	checkfor.Check(t, 20*time.Second, 10*time.Millisecond, func() error {
		var err error
		if snap, err = ReadSnapshot(ctx(t), e.store, reg, "good"); err != nil {
			t.Fatal(err)
		}
		if snap.Units["poison"].AsOfSeq != 2 || snap.Units["tools"].AsOfSeq != 2 {
			return fmt.Errorf("the units of good are not at seq 2: %+v", snap.Units)
		}
		return nil
	})
	if u := snap.Units["poison"]; u.Error != nil || string(u.View) != "2" {
		t.Fatalf("poison unit of good: %+v %s", u, u.View)
	}
	if u := snap.Units["tools"]; u.Error != nil || u.AsOfSeq != 2 {
		t.Fatalf("tools unit of good: %+v", u)
	}

	waitMetric(t, srv.Addr(), "agentlog_projector_stopped_sessions_total", map[string]string{"unit": "poison", "rule": string(session.RuleUnitApply)},
		func(v float64) bool { return v == 1 })

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["unit"] == "poison" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 1 || lines[0]["session"] != "bad" || lines[0]["seq"] != float64(2) || lines[0]["rule"] != string(session.RuleUnitApply) || lines[0]["level"] != "ERROR" {
		t.Fatalf("log lines about the poison unit: %v\n%s", lines, logs.String())
	}

	// Another instance that reads the stopped unit back does not log or count it again.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	logs2 := &syncBuffer{}
	p2 := e.startProjectorOpts("poison-2", Options{Registry: reg, Logger: slog.New(slog.NewJSONHandler(logs2, nil))})
	e.appendRecord("bad", []session.Event{call(5, "ls")})
	e.waitStored("bad", func(p Projection) bool { return p.AsOfSeq == 5 })
	if strings.Contains(logs2.String(), `"unit":"poison"`) {
		t.Fatalf("logged again by the next instance:\n%s", logs2.String())
	}
	if n := testutil.CollectAndCount(p2.metrics.stopped); n != 0 {
		t.Fatalf("counted again by the next instance: %v", n)
	}
}

// TestLagWhileBehind: a partition held up by a slow unit reports the records it has not
// acknowledged and the age of the oldest, and 0 once it has caught up.
func TestLagWhileBehind(t *testing.T) {
	release := make(chan struct{})
	slow := Def[int]{
		Key: "slow", StateVersion: 1, Reads: []string{"tool/call"},
		Init: func() int { return 0 },
		Apply: func(n int, ev session.Event) (int, error) {
			<-release
			return n + 1, nil
		},
	}
	reg, err := NewRegistry(slow)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvP(t, 1)
	p := e.startProjectorOpts("lag-1", Options{Registry: reg})
	srv := serveMetrics(t, p)
	e.create("lag")
	e.appendRecord("lag", []session.Event{ev(0, "turn/start", `{"turn":1}`, "", ""),
		ev(1, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`, "", "")})
	for i := int64(2); i < 5; i++ {
		e.appendRecord("lag", []session.Event{ev(i, "test/note", `{}`, "", "")})
	}
	part := map[string]string{"partition": "0"}
	waitMetric(t, srv.Addr(), "agentlog_projector_lag_records", part, func(v float64) bool { return v == 4 })
	waitMetric(t, srv.Addr(), "agentlog_projector_lag_seconds", part, func(v float64) bool { return v >= 0.5 })
	close(release)
	e.waitStored("lag", func(p Projection) bool { return p.AsOfSeq == 4 })
	waitMetric(t, srv.Addr(), "agentlog_projector_lag_records", part, func(v float64) bool { return v == 0 })
	waitMetric(t, srv.Addr(), "agentlog_projector_lag_seconds", part, func(v float64) bool { return v == 0 })
}

// TestMicroStatsCountErrorReplies: the agentlog-query service answers $SRV.PING, INFO and STATS,
// and its stats count every reply, the error replies sent from a goroutine included.
func TestMicroStatsCountErrorReplies(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("stats-1")
	e.create("st")
	e.appendRecord("st", toolSession())
	e.waitStored("st", func(p Projection) bool { return p.AsOfSeq == 10 })
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages(ctx(t), "st"); err != nil {
		t.Fatal(err)
	}
	// A wait of 150 ms, and one of 1 ms (the client keeps 250 ms of its timeout for the reply).
	for _, d := range []time.Duration{400 * time.Millisecond, 200 * time.Millisecond} {
		if _, err := c.Messages(ctx(t), "st", client.MinSeq(99), client.Timeout(d)); !errors.Is(err, client.ErrTimeout) {
			t.Fatalf("minSeq past the log, timeout %s: %v", d, err)
		}
	}
	if _, err := c.Surface(ctx(t), "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	request := func(subject string, v any) {
		t.Helper()
		m, err := e.nc.Request(subject, nil, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		if err := json.Unmarshal(m.Data, v); err != nil {
			t.Fatalf("%s: %s: %v", subject, m.Data, err)
		}
	}
	var ping micro.Ping
	request("$SRV.PING."+client.QueryService, &ping)
	if ping.Type != micro.PingResponseType || ping.Name != client.QueryService || ping.Version != QueryServiceVersion || ping.Metadata["instance"] != "stats-1" {
		t.Fatalf("ping %+v", ping)
	}
	var info micro.Info
	request("$SRV.INFO."+client.QueryService+"."+ping.ID, &info)
	if info.Type != micro.InfoResponseType || len(info.Endpoints) != 4 || info.Endpoints[0].Subject != client.MessagesSubject || info.Endpoints[0].QueueGroup != "q" {
		t.Fatalf("info %+v", info)
	}
	var st micro.Stats
	request("$SRV.STATS."+client.QueryService, &st)
	byName := map[string]*micro.EndpointStats{}
	for _, ep := range st.Endpoints {
		byName[ep.Name] = ep
	}
	msgs, surf := byName["messages"], byName["surface"]
	if st.Type != micro.StatsResponseType || msgs == nil || surf == nil {
		t.Fatalf("stats %+v", st)
	}
	if msgs.NumRequests != 3 || msgs.NumErrors != 2 || !strings.HasPrefix(msgs.LastError, "408:") || msgs.ProcessingTime < 150*time.Millisecond {
		t.Fatalf("messages stats %+v", msgs)
	}
	if surf.NumRequests != 1 || surf.NumErrors != 1 || !strings.HasPrefix(surf.LastError, "404:") {
		t.Fatalf("surface stats %+v", surf)
	}
	if p.query.svc.Stats().Endpoints[0].NumErrors != 2 {
		t.Fatal("Stats() differs from $SRV.STATS")
	}
}
