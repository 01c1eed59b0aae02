package projector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestHelperProjector is not a test: it is the projector process the scale-out tests start (the
// test binary re-executed with AGENTLOG_HELPER_URL set). It runs until it is killed.
func TestHelperProjector(t *testing.T) {
	url := os.Getenv("AGENTLOG_HELPER_URL")
	if url == "" {
		t.Skip("helper process for TestKilledInstanceFailsOver (runs only when started by it)")
	}
	name := os.Getenv("AGENTLOG_HELPER_NAME")
	nc, js, err := natsdev.Connect(url, nats.Name(name))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	st, err := store.Open(context.Background(), js)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logger := quietLogger()
	if os.Getenv("AGENTLOG_DEBUG_PINS") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	p, err := New(st, nc, Options{Name: name, Logger: logger})
	if err == nil {
		err = p.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("ready")
	select {}
}

// startProcess starts a projector process named name against the env's server.
func (e *env) startProcess(name string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProjector$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTLOG_HELPER_URL="+e.url, "AGENTLOG_HELPER_NAME="+name)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("starting projector process %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if os.Getenv("AGENTLOG_DEBUG_PINS") != "" {
			e.t.Logf("process %s:\n%s", name, out.String())
		}
	})
	return cmd
}

// waitMembers blocks until the members bucket lists exactly names and each of them consumes
// the partitions Assign gives it; it returns what each owns.
func (e *env) waitMembers(names ...string) map[string][]int {
	e.t.Helper()
	slices.Sort(names)
	var kv jetstream.KeyValue
	var owned map[string][]int
	checkfor.Check(e.t, 90*time.Second, 10*time.Millisecond, func() error {
		if kv == nil {
			k, err := e.store.JetStream().KeyValue(ctx(e.t), MembersBucket)
			if err != nil {
				return err
			}
			kv = k
		}
		keys, err := kv.ListKeys(ctx(e.t))
		if err != nil {
			return err
		}
		var got []string
		for k := range keys.Keys() {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, names) {
			return fmt.Errorf("members %v, want %v", got, names)
		}
		owned = map[string][]int{}
		for _, n := range names {
			ent, err := kv.Get(ctx(e.t), n)
			if err != nil {
				return fmt.Errorf("member %s: %w", n, err)
			}
			var v MemberValue
			if err := json.Unmarshal(ent.Value(), &v); err != nil {
				return fmt.Errorf("member %s: %w", n, err)
			}
			if want := Assign(names, n, e.store.Partitions()); !slices.Equal(v.Owned, want) {
				return fmt.Errorf("member %s owns %v, want %v", n, v.Owned, want)
			}
			owned[n] = v.Owned
		}
		return nil
	})
	return owned
}

// loader appends toolSession to many sessions concurrently, in records of 1..3 events.
type loader struct {
	e   *env
	mu  sync.Mutex
	ids []string
}

func (l *loader) run(prefix string, n, workers int, pause func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprintf("%s-%03d", prefix, i)
				l.write(id, i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		if pause != nil {
			pause(i)
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

func (l *loader) write(id string, i int) {
	store := l.e.store
	c := context.Background()
	if err := store.CreateSession(c, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
		l.e.t.Errorf("CreateSession %s: %v", id, err)
		return
	}
	events := toolSession()
	var tail uint64
	for k := 0; len(events) > 0; k++ {
		size := min((i+k)%3+1, len(events))
		res, err := storetest.Session(store, id).Append(c, tail, events[:size])
		if err != nil {
			l.e.t.Errorf("Append %s: %v", id, err)
			return
		}
		tail, events = res.StreamSeq, events[size:]
	}
	l.mu.Lock()
	l.ids = append(l.ids, id)
	l.mu.Unlock()
}

// checkAll asserts that every session written is fully projected, by every unit, exactly as the
// units' definitions give (nothing lost, nothing applied twice).
func (l *loader) checkAll(t *testing.T) {
	t.Helper()
	reg, _ := NewRegistry()
	want, err := Fold(reg, "x", toolSession())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range l.ids {
		r, err := queryMessages(ctx(t), l.e.nc, id, 10)
		if err != nil {
			tok, _ := wire.Token(id)
			part := wire.Partition(tok, l.e.store.Partitions())
			cons, _ := l.e.store.JetStream().Consumer(ctx(t), wire.StreamName, PartitionConsumer(part))
			ci, _ := cons.Info(ctx(t))
			t.Fatalf("%s (partition %d, consumer %+v): %v", id, part, ci, err)
		}
		if r.AsOfSeq != 10 || int64s(r.Nodes) != toolNodes || len(r.Messages) != 4 {
			t.Fatalf("%s: messages %+v", id, r)
		}
		snap, err := ReadSnapshot(ctx(t), l.e.store, reg, id)
		if err != nil {
			t.Fatalf("%s: snapshot: %v", id, err)
		}
		for k, wu := range want.Units {
			if gu := snap.Units[k]; string(gu.View) != string(wu.View) || gu.AsOfSeq != 10 || gu.Error != nil {
				t.Fatalf("%s: unit %s: %+v, want %s", id, k, gu, wu.View)
			}
		}
	}
}

// waitProjected blocks until the messages projection of id reaches seq.
func (e *env) waitProjected(id string, seq int64) {
	e.t.Helper()
	if _, err := queryMessages(ctx(e.t), e.nc, id, seq); err != nil {
		// The wait of one query is bounded; ask again while the partition is being taken over.
		if !strings.Contains(err.Error(), "408") && !errors.Is(err, client.ErrTimeout) {
			e.t.Fatalf("%s: %v", id, err)
		}
		e.waitProjected(id, seq)
	}
}

// TestKilledInstanceFailsOver runs three projector processes on one embedded server, imports
// sessions concurrently, kills one process with SIGKILL mid-load, and checks that every session
// is projected exactly as the units give. It measures the failover: from the kill to the moment
// a record written then on each partition of the killed instance is projected.
func TestKilledInstanceFailsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three projector processes")
	}
	e := newEnvP(t, 6)
	e.startProjector("query-only-observer") // serves queries; owns a share of the partitions too
	procs := map[string]*exec.Cmd{}
	for _, n := range []string{"p1", "p2", "p3"} {
		procs[n] = e.startProcess(n)
	}
	victim := e.waitMembers("p1", "p2", "p3", "query-only-observer")["p2"]
	if len(victim) == 0 {
		t.Fatal("p2 owns no partition")
	}

	l := &loader{e: e}
	var failover time.Duration
	l.run("s", 120, 4, func(i int) {
		if i != 60 {
			return
		}
		if os.Getenv("AGENTLOG_DEBUG_PINS") != "" {
			for part := 0; part < e.store.Partitions(); part++ {
				cons, _ := e.store.JetStream().Consumer(ctx(t), wire.StreamName, PartitionConsumer(part))
				ci, _ := cons.Info(ctx(t))
				t.Logf("partition %d victim %v: %+v waiting %d", part, slices.Contains(victim, part), ci.PriorityGroups, ci.NumWaiting)
			}
		}
		if err := procs["p2"].Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_, _ = procs["p2"].Process.Wait() // it is dead from here on
		killed := time.Now()
		t.Logf("killed p2 at %s", killed.Format("15:04:05.000"))
		// One probe session per partition of the victim, written right after the kill.
		var probes []string
		for k := 0; len(probes) < len(victim); k++ {
			id := fmt.Sprintf("probe-%d", k)
			tok, _ := wire.Token(id)
			if slices.Contains(victim, wire.Partition(tok, e.store.Partitions())) && !slices.ContainsFunc(probes, func(p string) bool {
				pt, _ := wire.Token(p)
				return wire.Partition(pt, e.store.Partitions()) == wire.Partition(tok, e.store.Partitions())
			}) {
				e.create(id)
				e.appendRecord(id, []session.Event{userMsg(0, "x", "probe")})
				probes = append(probes, id)
			}
		}
		for _, id := range probes {
			e.waitProjected(id, 0)
		}
		failover = time.Since(killed)
		t.Logf("probes %v projected at %s", probes, time.Now().Format("15:04:05.000"))
		if os.Getenv("AGENTLOG_DEBUG_PINS") != "" {
			for part := 0; part < e.store.Partitions(); part++ {
				cons, _ := e.store.JetStream().Consumer(ctx(t), wire.StreamName, PartitionConsumer(part))
				ci, _ := cons.Info(ctx(t))
				t.Logf("after: partition %d victim %v: %+v waiting %d", part, slices.Contains(victim, part), ci.PriorityGroups, ci.NumWaiting)
			}
		}
	})
	t.Logf("failover: the killed instance's %d partitions resumed on the survivors %v after SIGKILL", len(victim), failover.Round(time.Millisecond))
	l.checkAll(t)
}

// TestScaleOneThreeOne adds two instances to one under load, then stops them, and checks that
// nothing is lost and nothing applied twice.
func TestScaleOneThreeOne(t *testing.T) {
	e := newEnvP(t, 6)
	e.startProjector("a")
	l := &loader{e: e}
	var b, c *Projector
	l.run("s", 90, 3, func(i int) {
		switch i {
		case 30:
			b, c = e.startProjector("b"), e.startProjector("c")
		case 45:
			// All three hold partitions before the scale-in.
			checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
				if len(b.Owned()) == 0 || len(c.Owned()) == 0 {
					return fmt.Errorf("b owns %v, c owns %v", b.Owned(), c.Owned())
				}
				return nil
			})
		case 60:
			if err := b.Stop(); err != nil {
				t.Error(err)
			}
			if err := c.Stop(); err != nil {
				t.Error(err)
			}
		}
	})
	l.checkAll(t)
}

// TestLeaseRenewalDoesNotWaitForHandover holds the workers' mutex, as a slow handover in rebalance
// does, and checks that the lease is renewed all the same, naming the partitions consumed: a
// renewal that waited for the handover could let the lease lapse (MemberTTL) and the partitions
// flap between instances.
func TestLeaseRenewalDoesNotWaitForHandover(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	owned := p.Owned()
	if len(owned) != e.store.Partitions() {
		t.Fatalf("a lone instance owns %v of %d partitions", owned, e.store.Partitions())
	}
	p.wmu.Lock()
	renewed := make(chan struct{})
	go func() { p.renew(ctx(t)); close(renewed) }()
	select {
	case <-renewed:
	case <-time.After(10 * time.Second): // a deadlock guard, not a timing assertion
		p.wmu.Unlock()
		t.Fatal("renew waited for the workers' mutex")
	}
	if got := p.Owned(); !slices.Equal(got, owned) {
		t.Errorf("Owned() under a handover = %v, want %v", got, owned)
	}
	p.wmu.Unlock()
	ent, err := p.members.Get(ctx(t), p.memberKey)
	if err != nil {
		t.Fatal(err)
	}
	var mv MemberValue
	if err := json.Unmarshal(ent.Value(), &mv); err != nil || !slices.Equal(mv.Owned, owned) {
		t.Fatalf("lease %s: owned %v, want %v (%v)", ent.Value(), mv.Owned, owned, err)
	}
}

// countHandler counts the log records whose message contains sub.
type countHandler struct {
	sub string
	n   *atomic.Int64
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.sub) {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// TestFailedCheckpointIsRetriedAtTheInterval makes every checkpoint write fail (the projections
// bucket refuses messages over 8 bytes) and counts the retries over a second: a failed checkpoint
// is retried every FlushInterval (50 ms), not every time the partition is idle for flushLinger
// (0.5 ms; at 2 ms it hammered the KV bucket 347 times a second). The bound is loose (40, for one
// partition holding the session); only a retry loop exceeds it.
func TestFailedCheckpointIsRetriedAtTheInterval(t *testing.T) {
	e := newEnv(t)
	var n atomic.Int64
	e.startProjectorOpts("p1", Options{Logger: slog.New(countHandler{"checkpoint failed", &n})})
	kv, err := e.store.JetStream().Stream(ctx(t), "KV_"+wire.ProjectionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kv.CachedInfo().Config
	cfg.MaxMsgSize = 8
	if _, err := e.store.JetStream().UpdateStream(ctx(t), cfg); err != nil {
		t.Fatal(err)
	}
	e.create("s")
	e.appendRecord("s", []session.Event{ev(0, "turn/start", `{"turn":1}`, "", "")})
	checkfor.Check(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n.Load() == 0 {
			return errors.New("no checkpoint failed: the test does not test anything")
		}
		return nil
	})
	n.Store(0)
	// A sleep, not a condition: the test counts the retries over this second.
	time.Sleep(time.Second)
	if got := n.Load(); got > 40 {
		t.Errorf("a failed checkpoint was retried %d times in 1 s", got)
	}
}

// TestStateTooLargeStopsTheSession grows a session's messages state past what one KV value may
// hold (lowered here to 3000 bytes): the checkpoint does not fail forever, the session's projection
// stops with rule state-too-large naming the session (what is stored stays small), its messages
// are still served (folded from the log per query), and another session is not affected.
func TestStateTooLargeStopsTheSession(t *testing.T) {
	lowerStateLimit(t, 3000)
	e := newEnv(t)
	var failed atomic.Int64
	e.startProjectorOpts("p1", Options{Logger: slog.New(countHandler{"checkpoint failed", &failed})})
	e.create("long")
	e.create("short")
	var evs []session.Event
	for seq := int64(0); seq < 600; seq++ {
		evs = append(evs, userMsg(seq, fmt.Sprint("m", seq), "hi"))
	}
	e.appendChunked("long", evs, 100)
	e.appendRecord("short", evs[:3])
	if r, err := queryMessages(ctx(t), e.nc, "short", 2); err != nil || len(r.Messages) != 3 {
		t.Fatalf("the other session: %+v, %v", r, err)
	}
	stopped := e.waitStored("long", func(p Projection) bool { return p.Error != nil })
	if stopped.Error.Rule != session.RuleStateTooLarge || !strings.Contains(stopped.Error.Message, `"long"`) {
		t.Fatalf("stored error %+v, want rule %s naming the session", stopped.Error, session.RuleStateTooLarge)
	}
	// Its messages are still served, folded from the log for each query.
	r, err := queryMessages(ctx(t), e.nc, "long", 599)
	if err != nil || len(r.Messages) != 600 || r.AsOfSeq != 599 || !sameMessages(r.Messages, e.wantMessages("long", r.Nodes)) {
		t.Fatalf("messages of the session whose state is too large: %d messages, asOfSeq %d, %v", len(r.Messages), r.AsOfSeq, err)
	}
	// The surface endpoint shows the stored error.
	sp, err := querySurface(ctx(t), e.nc, "long", -1)
	if err != nil || sp.Error == nil || sp.Error.Rule != session.RuleStateTooLarge {
		t.Fatalf("surface of the stopped projection: %+v, %v", sp.Error, err)
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d checkpoints failed; a too-large state must stop the session, not fail the checkpoint", n)
	}
}

// TestStateTooLargeWhileWaiting: a read-your-writes query that is waiting when the session's state
// outgrows one KV value gets the messages (folded from the log), not 409; a minSeq past the end of
// the log waits for it; and a rebuild of another unit of that session stops it too, instead of
// storing it past the stopped gate.
func TestStateTooLargeWhileWaiting(t *testing.T) {
	lowerStateLimit(t, 3000)
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("long")
	var evs []session.Event
	for seq := int64(0); seq < 601; seq++ {
		evs = append(evs, userMsg(seq, fmt.Sprint("m", seq), "hi"))
	}
	type result struct {
		r   client.MessagesReply
		err error
	}
	waiting := make(chan result, 1)
	go func() { r, err := queryMessages(ctx(t), e.nc, "long", 599); waiting <- result{r, err} }()
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		if w := p.query.waiting.Load(); w != 1 {
			return fmt.Errorf("%d queries waiting, want 1", w)
		}
		return nil
	})
	e.appendChunked("long", evs[:600], 100)
	got := <-waiting
	if got.err != nil || len(got.r.Messages) != 600 {
		t.Fatalf("query waiting while the state outgrew KV: %d messages, %v", len(got.r.Messages), got.err)
	}
	e.waitStored("long", func(p Projection) bool { return p.Error != nil && p.Error.Rule == session.RuleStateTooLarge })
	later := make(chan result, 1)
	go func() { r, err := queryMessages(ctx(t), e.nc, "long", 600); later <- result{r, err} }()
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		if w := p.query.waiting.Load(); w != 1 {
			return fmt.Errorf("%d queries waiting, want 1", w)
		}
		return nil
	})
	e.appendRecord("long", evs[600:])
	got = <-later
	if got.err != nil || len(got.r.Messages) != 601 {
		t.Fatalf("minSeq past the end of the log: %d messages, %v", len(got.r.Messages), got.err)
	}
	reg, _ := NewRegistry()
	if _, err := Rebuild(ctx(t), e.store, reg, UnitTitle, []string{"long"}, nil); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token("long")
	ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitTitle, tok))
	if err != nil {
		t.Fatal(err)
	}
	var v storedValue
	if err := json.Unmarshal(ent.Value(), &v); err != nil || v.Error == nil || v.Error.Rule != session.RuleStateTooLarge {
		t.Fatalf("rebuilt title unit of the stopped session: %s", ent.Value())
	}
}

// TestRebuildAfterTooLargeAndShrink: a session stopped with state-too-large stays stopped even
// when a later compaction shrinks its surface; rebuilding another unit stops that unit with the
// same error instead of storing it running past the stopped gate.
func TestRebuildAfterTooLargeAndShrink(t *testing.T) {
	lowerStateLimit(t, 3000)
	e := newEnv(t)
	e.startProjector("p1")
	e.create("long")
	var evs []session.Event
	for seq := int64(0); seq < 600; seq++ {
		evs = append(evs, userMsg(seq, fmt.Sprint("m", seq), "hi"))
	}
	e.appendChunked("long", evs, 100)
	e.waitStored("long", func(p Projection) bool { return p.Error != nil && p.Error.Rule == session.RuleStateTooLarge })
	src := make([]string, 600)
	for i := range src {
		src[i] = fmt.Sprint(i)
	}
	rep := ev(600, "user/message", `{"id":"sum","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}}`,
		`{"op":"replace","start":0,"end":599}`, "["+strings.Join(src, ",")+"]")
	e.appendRecord("long", []session.Event{rep})
	reg, _ := NewRegistry()
	if _, err := Rebuild(ctx(t), e.store, reg, UnitTitle, []string{"long"}, nil); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token("long")
	ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitTitle, tok))
	if err != nil {
		t.Fatal(err)
	}
	var v storedValue
	if err := json.Unmarshal(ent.Value(), &v); err != nil || v.Error == nil || v.Error.Rule != session.RuleStateTooLarge {
		t.Fatalf("rebuilt title unit of a stopped session whose surface shrank: %.300s", ent.Value())
	}
	// Its messages are the compacted history, folded from the log.
	r, err := queryMessages(ctx(t), e.nc, "long", 600)
	if err != nil || len(r.Messages) != 1 || int64s(r.Nodes) != "[600]" {
		t.Fatalf("messages after the compaction: %+v, %v", r.Nodes, err)
	}
}

// TestTooLargeWaitersDoNotStarveOthers: queries of a session whose state outgrew KV that wait for
// a seq past the end of its log wait in wait slots (not answering slots): other sessions are still
// answered, and the waiters get 408 by their own deadline, not a client-side timeout.
func TestTooLargeWaitersDoNotStarveOthers(t *testing.T) {
	lowerStateLimit(t, 3000)
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("long")
	e.create("small")
	var evs []session.Event
	for seq := int64(0); seq < 600; seq++ {
		evs = append(evs, userMsg(seq, fmt.Sprint("m", seq), "hi"))
	}
	e.appendChunked("long", evs, 100)
	e.appendRecord("small", evs[:1])
	e.waitStored("long", func(p Projection) bool { return p.Error != nil && p.Error.Rule == session.RuleStateTooLarge })
	errs := make(chan error, cap(p.query.work))
	for range cap(p.query.work) {
		go func() {
			c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := queryMessages(c, e.nc, "long", 10000)
			errs <- err
		}()
	}
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		if w := p.query.waiting.Load(); w != int64(cap(p.query.work)) {
			return fmt.Errorf("%d queries waiting, want int64(cap(p.query.work))", w)
		}
		return nil
	})
	if _, err := queryMessages(ctx(t), e.nc, "small", 0); err != nil {
		t.Fatalf("another session while the too-large session's queries wait: %v", err)
	}
	for range cap(p.query.work) {
		queryErr(t, <-errs, client.CodeTimeout, "long")
	}
}
