package integration_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// copyDir copies the regular files of src into dst (created), recursively.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o750)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestStaleWriterAfterDataLoss: writer A acknowledges seqs 0..5 in two records; the server then
// loses the second one (it restarts from a copy of its data taken before it: a crash that lost
// acknowledged writes). Writer B resumes the session, and its record lands at the very stream seq
// of A's lost record, so A's cached guard matches. A's next Flush must not write (that would leave
// a seq gap): A re-reads the tail after its reconnect and reports ErrAckedLost naming seqs 3..5.
// The log stays contiguous and readable.
func TestStaleWriterAfterDataLoss(t *testing.T) {
	srv := startOwnServer(t)
	_, st := connectStore(t, srv.URL(), &store.Config{})
	ncA, stA := connectStore(t, srv.URL(), nil)
	// A long lease TTL: A's renewal must not notice B's takeover first (this test is about the tail).
	pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", Logger: quietLogger(), LeaseTTL: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "stale-after-loss"
	wa, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	evs := chunkEvents("A", 0, 7)
	flush := func(from, to int) error {
		for _, x := range evs[from:to] {
			if err := wa.Append(x); err != nil {
				return err
			}
		}
		return wa.Flush(ctx)
	}
	if err := flush(0, 3); err != nil {
		t.Fatal(err)
	}
	srv.stop()
	snapshot := t.TempDir()
	copyDir(t, srv.dir, snapshot)
	srv.start()
	if err := flush(3, 6); err != nil {
		t.Fatal(err)
	}
	lostTail, err := storetest.Session(st, id).TailFromLeader(ctx)
	if err != nil || lostTail.NextSeq != 6 {
		t.Fatalf("tail before the loss: %+v, %v", lostTail, err)
	}

	// The loss: the server comes back with the data of the snapshot.
	srv.stop()
	if err := os.RemoveAll(srv.dir); err != nil {
		t.Fatal(err)
	}
	copyDir(t, snapshot, srv.dir)
	srv.start()

	ncB, stB := connectStore(t, srv.URL(), nil)
	pb := newPublisher(t, stB, ncB, publisher.Options{WriterID: "B", Logger: quietLogger()})
	wb, err := pb.Open(ctx, id, publisher.Takeover()) // A's (restored) lease is live
	if err != nil {
		t.Fatal(err)
	}
	tail, err := storetest.Session(st, id).TailFromLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail.LastStreamSeq != lostTail.LastStreamSeq {
		t.Logf("B's record is at stream seq %d, A's lost one was at %d: the guard alone would have caught this", tail.LastStreamSeq, lostTail.LastStreamSeq)
	}
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("A reconnected", ncA.IsConnected))

	if err := wa.Append(evs[6]); err != nil {
		t.Fatal(err)
	}
	err = wa.Flush(ctx)
	var lost *publisher.AckedLostError
	if !errors.As(err, &lost) || !errors.Is(err, publisher.ErrFenced) {
		t.Fatalf("A's Flush after the loss: %v, want *AckedLostError", err)
	}
	if lost.Session != id || lost.FromSeq != 3 || lost.ToSeq != 5 {
		t.Fatalf("lost %+v, want session %q seqs 3..5", lost, id)
	}
	after, err := storetest.Session(st, id).TailFromLeader(ctx)
	if err != nil || after.LastStreamSeq != tail.LastStreamSeq {
		t.Fatalf("A wrote after the loss: tail %+v (was %+v), %v", after, tail, err)
	}
	if err := wb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
	if err != nil {
		t.Fatalf("log after the loss does not read back: %v", err)
	}
	if _, err := session.Load(id, got); err != nil {
		t.Fatalf("log after the loss: %v", err)
	}
	for i := range 3 {
		if err := sessiontest.SameEvent(got[i], evs[i]); err != nil {
			t.Fatalf("seq %d: %v", i, err)
		}
	}
}

// reconnectGate holds a connection's reconnects while it is shut (its CustomReconnectDelay
// blocks), so that a test decides when a client comes back.
type reconnectGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newReconnectGate() *reconnectGate {
	g := &reconnectGate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *reconnectGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *reconnectGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// delay is the connection's CustomReconnectDelay: it waits for the gate to be open.
func (g *reconnectGate) delay(int) time.Duration {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
	return 10 * time.Millisecond
}

// syncLog is a slog handler's io.Writer that a test can search.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

// TestStaleWriterWriteDuringOutage: writer A acknowledged seqs 0..5 in two records; the server
// goes down and comes back without the second one (a crash that lost acknowledged writes). A's
// next record is written while A is disconnected: it must not be sent before A has proved its
// tail (nats.go would otherwise send a publish made while reconnecting, with A's cached guard,
// the moment the connection is back). Meanwhile writer B resumes the session (with Takeover,
// A's restored lease being live; or without, A's lease having expired) and its record lands at
// the very stream seq of A's lost record, so A's guard would match. A's Flush must report
// ErrAckedLost (fenced), never nil, and A writes nothing: the log stays B's, contiguous and
// readable.
func TestStaleWriterWriteDuringOutage(t *testing.T) {
	for _, c := range []struct {
		name     string
		leaseTTL time.Duration // A's
		takeover bool          // B's Open
	}{
		{"takeover", time.Minute, true},
		{"expired lease", store.MinLeaseTTL, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startOwnServer(t)
			_, st := connectStore(t, srv.URL(), &store.Config{})
			gate := newReconnectGate()
			ncA, jsA, err := natsdev.Connect(srv.URL(), nats.Name(t.Name()+"-A"), nats.CustomReconnectDelay(gate.delay))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { gate.release(); ncA.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			stA, err := store.Open(ctx, jsA)
			if err != nil {
				t.Fatal(err)
			}
			logA := &syncLog{}
			pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", LeaseTTL: c.leaseTTL,
				Logger: slog.New(slog.NewTextHandler(logA, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			const id = "stale-during-outage"
			wa, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
			if err != nil {
				t.Fatal(err)
			}
			evs := chunkEvents("A", 0, 7)
			flush := func(from, to int) error {
				for _, x := range evs[from:to] {
					if err := wa.Append(x); err != nil {
						return err
					}
				}
				return wa.Flush(ctx)
			}
			if err := flush(0, 3); err != nil {
				t.Fatal(err)
			}
			srv.stop()
			snapshot := t.TempDir()
			copyDir(t, srv.dir, snapshot)
			srv.start()
			checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("A reconnected", ncA.IsConnected))
			if err := flush(3, 6); err != nil {
				t.Fatal(err)
			}
			lostTail, err := storetest.Session(st, id).TailFromLeader(ctx)
			if err != nil || lostTail.NextSeq != 6 {
				t.Fatalf("tail before the loss: %+v, %v", lostTail, err)
			}

			// The loss, with A held disconnected until B has written.
			gate.shut()
			srv.stop()
			checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("A disconnected", func() bool { return !ncA.IsConnected() }))
			if err := os.RemoveAll(srv.dir); err != nil {
				t.Fatal(err)
			}
			copyDir(t, snapshot, srv.dir)
			if err := wa.Append(evs[6]); err != nil {
				t.Fatal(err)
			}
			flushed := make(chan error, 1)
			go func() { flushed <- wa.Flush(ctx) }()
			// A's write is under way: buffered by nats.go (a write that does not wait for the
			// connection) or retried (one that does).
			checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("A's write sent or retried", func() bool {
				n, _ := ncA.Buffered()
				return n > 0 || logA.contains("transient write error")
			}))
			srv.start()

			ncB, stB := connectStore(t, srv.URL(), nil)
			pb := newPublisher(t, stB, ncB, publisher.Options{WriterID: "B", Logger: quietLogger()})
			var opts []publisher.OpenOption
			if c.takeover {
				opts = append(opts, publisher.Takeover())
			} else {
				checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("A's restored lease expired", func() bool {
					_, _, err := storetest.Session(st, id).Lease(ctx)
					return errors.Is(err, store.ErrNoLease)
				}))
			}
			wb, err := pb.Open(ctx, id, opts...)
			if err != nil {
				t.Fatal(err)
			}
			tail, err := storetest.Session(st, id).TailFromLeader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tail.LastStreamSeq != lostTail.LastStreamSeq {
				t.Fatalf("B's record is at stream seq %d, A's lost one was at %d: not the case this test is about", tail.LastStreamSeq, lostTail.LastStreamSeq)
			}
			gate.release()

			// A is fenced: by the proof of its tail (ErrAckedLost), or by its lease renewal, which
			// finds B's lease (short TTL), whichever comes first.
			err = <-flushed
			defer func() {
				if t.Failed() {
					t.Logf("A's log:\n%s", logA.buf.String())
				}
			}()
			var lost *publisher.AckedLostError
			if !errors.Is(err, publisher.ErrFenced) {
				t.Fatalf("A's Flush after the loss: %v, want ErrFenced (ErrAckedLost, or its lease lost)", err)
			}
			if errors.As(err, &lost) && (lost.Session != id || lost.FromSeq != 3 || lost.ToSeq != 5) {
				t.Fatalf("lost %+v, want session %q seqs 3..5", lost, id)
			}
			after, err := storetest.Session(st, id).TailFromLeader(ctx)
			if err != nil || after.LastStreamSeq != tail.LastStreamSeq {
				t.Fatalf("A wrote after the loss: tail %+v (was %+v), %v", after, tail, err)
			}
			if err := wb.Close(ctx); err != nil {
				t.Fatal(err)
			}
			got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
			if err != nil {
				t.Fatalf("log after the loss does not read back: %v", err)
			}
			if _, err := session.Load(id, got); err != nil {
				t.Fatalf("log after the loss: %v", err)
			}
		})
	}
}
