package integration_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// logTo is a text logger writing to b.
func logTo(b *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// writeSome appends evs and flushes them.
func writeSome(ctx context.Context, w *publisher.Writer, evs []session.Event) error {
	for _, ev := range evs {
		if err := w.Append(ev); err != nil {
			return err
		}
	}
	return w.Flush(ctx)
}

// TestIdleWriterAcrossServerRestart: a writer idle while the server restarts (down for less than
// its lease TTL, and for more) writes again within 10 s of the server being back, is not fenced,
// holds its lease again, and logs the failed renewals once.
func TestIdleWriterAcrossServerRestart(t *testing.T) {
	for _, c := range []struct {
		name string
		down time.Duration
	}{{"lease live", 500 * time.Millisecond}, {"lease expired", 5 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			const ttl = 2 * time.Second
			srv := startOwnServer(t)
			_, st := connectStore(t, srv.URL(), &store.Config{})
			ncA, stA := connectStore(t, srv.URL(), nil)
			logs := &syncBuffer{}
			pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", Logger: logTo(logs), LeaseTTL: ttl})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const id = "idle"
			w, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
			if err != nil {
				t.Fatal(err)
			}
			evs := chunkEvents("A", 0, 9)
			if err := writeSome(ctx, w, evs[:3]); err != nil {
				t.Fatal(err)
			}
			srv.stop()
			time.Sleep(c.down) // the outage of the case: a sleep is the point
			srv.start()
			back := time.Now()
			if err := writeSome(ctx, w, evs[3:6]); err != nil {
				t.Fatalf("first write after the restart: %v\n%s", err, logs.String())
			}
			took := time.Since(back)
			t.Logf("%s: first write %s after the server was back", c.name, took.Round(time.Millisecond))
			if took > 10*time.Second {
				t.Fatalf("first write %s after the server was back, want within 10 s", took)
			}
			checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("the writer to hold its lease again", func() bool {
				l, _, err := storetest.Session(st, id).Lease(ctx)
				return err == nil && l.Writer == "A"
			}))
			ncB, stB := connectStore(t, srv.URL(), nil)
			pb := newPublisher(t, stB, ncB, publisher.Options{WriterID: "B", Logger: quietLogger()})
			if _, err := pb.Open(ctx, id); !errors.Is(err, publisher.ErrSessionLive) {
				t.Fatalf("Open by another writer after the restart: %v, want ErrSessionLive", err)
			}
			if err := writeSome(ctx, w, evs[6:]); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			checkLog(t, st, id, evs, len(evs))
			out := logs.String()
			if n := strings.Count(out, "level=WARN"); n > 1 {
				t.Fatalf("%d warnings, want at most one (renewals failing):\n%s", n, out)
			}
			t.Logf("publisher log:\n%s", out)
		})
	}
}

// TestWriterLeaseTakenWhileServerDown: writer A's lease expires while the server is down; when it
// is back, writer B opens the session before A can reach the server (A is behind a proxy that
// drops its traffic). A is then fenced by its lease renewal, without writing.
func TestWriterLeaseTakenWhileServerDown(t *testing.T) {
	const ttl = 2 * time.Second
	srv := startOwnServer(t)
	_, st := connectStore(t, srv.URL(), &store.Config{})
	proxy := newFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.port))
	ncA, stA := connectStore(t, proxy.URL(), nil)
	logs := &syncBuffer{}
	pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", Logger: logTo(logs), LeaseTTL: ttl})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "taken"
	wa, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	evs := chunkEvents("A", 0, 6)
	if err := writeSome(ctx, wa, evs[:3]); err != nil {
		t.Fatal(err)
	}
	proxy.SetDrop(true, true)
	srv.stop()
	time.Sleep(2 * ttl) // a sleep, not a condition: A's lease expires while the server is down
	srv.start()
	ncB, stB := connectStore(t, srv.URL(), nil)
	pb := newPublisher(t, stB, ncB, publisher.Options{WriterID: "B", Logger: quietLogger()})
	// A's lease expired while the server was down; the server removes it shortly after its start.
	wb, err := openWhenDead(ctx, t, pb, id)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := storetest.Session(st, id).TailFromLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetDrop(false, false)
	proxy.Cut()
	// Nothing is admitted (a wrong seq), so only the renewal can fence A.
	wrongSeq := evs[3]
	wrongSeq.Seq = 99
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("A fenced by its lease renewal", func() bool {
		return errors.Is(wa.Append(wrongSeq), publisher.ErrFenced)
	}))
	if err := wa.Flush(ctx); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A's Flush: %v, want ErrLeaseLost (fenced by its renewal)", err)
	}
	after, err := storetest.Session(st, id).TailFromLeader(ctx)
	if err != nil || after.LastStreamSeq != tail.LastStreamSeq {
		t.Fatalf("A wrote after B took the session: tail %+v (was %+v), %v", after, tail, err)
	}
	if l, _, err := storetest.Session(st, id).Lease(ctx); err != nil || l.Writer != "B" {
		t.Fatalf("lease after A was fenced: %+v, %v; want B's", l, err)
	}
	if err := wb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.Load(id, got); err != nil {
		t.Fatal(err)
	}
	t.Logf("publisher A log:\n%s", logs.String())
}

// TestWriterLeaseBucketLost: agentlog_writers is deleted under a live writer (a server that lost
// its state): the writer creates it again and takes its lease back, so another writer's Open is
// still refused; its writes go on; the failure is logged once.
func TestWriterLeaseBucketLost(t *testing.T) {
	const ttl = 2 * time.Second
	srv := startOwnServer(t)
	_, st := connectStore(t, srv.URL(), &store.Config{})
	ncA, stA := connectStore(t, srv.URL(), nil)
	logs := &syncBuffer{}
	pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", Logger: logTo(logs), LeaseTTL: ttl})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "bucket-lost"
	w, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	evs := chunkEvents("A", 0, 6)
	if err := writeSome(ctx, w, evs[:3]); err != nil {
		t.Fatal(err)
	}
	if err := st.JetStream().DeleteKeyValue(ctx, wire.WritersBucket); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("the writer to hold its lease again", func() bool {
		l, _, err := storetest.Session(st, id).Lease(ctx)
		return err == nil && l.Writer == "A"
	}))
	t.Logf("lease back %s after the bucket was deleted", time.Since(lost).Round(time.Millisecond))
	ncB, stB := connectStore(t, srv.URL(), nil)
	pb := newPublisher(t, stB, ncB, publisher.Options{WriterID: "B", Logger: quietLogger()})
	if _, err := pb.Open(ctx, id); !errors.Is(err, publisher.ErrSessionLive) {
		t.Fatalf("Open by another writer: %v, want ErrSessionLive", err)
	}
	if err := writeSome(ctx, w, evs[3:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLog(t, st, id, evs, len(evs))
	if n := strings.Count(logs.String(), "level=WARN"); n > 1 {
		t.Fatalf("%d warnings, want at most one:\n%s", n, logs.String())
	}
	t.Logf("publisher log:\n%s", logs.String())
}

// TestFlushAcrossServerRestart: a Flush called while the server is down (default retry budget)
// returns within 10 s of the server being back, with the events durable.
func TestFlushAcrossServerRestart(t *testing.T) {
	srv := startOwnServer(t)
	_, st := connectStore(t, srv.URL(), &store.Config{})
	nc, sta := connectStore(t, srv.URL(), nil)
	logs := &syncBuffer{}
	p := newPublisher(t, sta, nc, publisher.Options{WriterID: "A", Logger: logTo(logs), LeaseTTL: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "flush-across"
	w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	evs := chunkEvents("A", 0, 6)
	if err := writeSome(ctx, w, evs[:3]); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	flushed := make(chan error, 1)
	go func() { flushed <- writeSome(ctx, w, evs[3:]) }()
	time.Sleep(3 * time.Second) // the outage the flush waits across: a sleep is the point
	srv.start()
	back := time.Now()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("Flush across the restart: %v\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Flush did not return within 10 s of the server being back:\n%s", logs.String())
	}
	t.Logf("Flush returned %s after the server was back", time.Since(back).Round(time.Millisecond))
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLog(t, st, id, evs, len(evs))
	if n := strings.Count(logs.String(), "level=WARN"); n > 1 {
		t.Fatalf("%d warnings, want at most one:\n%s", n, logs.String())
	}
}
