package integration_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// faultWriter drives one session through a publisher: it appends sent in small batches, calls
// Flush every few batches, and counts as acked only what was admitted before a Flush that
// returned nil. A failed Flush is simply retried later (the events stay pending).
type faultWriter struct {
	w     *publisher.Writer
	sent  []session.Event
	acked int
	fails int
}

func (f *faultWriter) run(ctx context.Context, rng *rand.Rand, progress *atomic.Int64) error {
	i := 0
	for batch := 0; i < len(f.sent); batch++ {
		for k := 1 + rng.IntN(8); k > 0 && i < len(f.sent); k-- {
			if err := f.w.Append(f.sent[i]); err != nil {
				return fmt.Errorf("append seq %d: %w", i, err)
			}
			i++
		}
		if batch%3 == 2 {
			f.flush(ctx, i)
			progress.Add(1)
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // the workload's pace, random: a sleep is the point
	}
	return nil
}

func (f *faultWriter) flush(ctx context.Context, admitted int) bool {
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := f.w.Flush(fctx); err != nil {
		f.fails++
		return false
	}
	f.acked = admitted
	return true
}

// drain flushes until everything sent is durable (bounded; the faults have stopped by then).
func (f *faultWriter) drain(t *testing.T, ctx context.Context) {
	t.Helper()
	var err error
	for try := 0; try < 20; try++ {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = f.w.Flush(fctx)
		cancel()
		if err == nil {
			f.acked = len(f.sent)
			return
		}
	}
	t.Fatalf("session %q: Flush still fails after the faults stopped: %v", f.w.ID(), err)
}

// TestPublisherFaultsThroughProxy writes several sessions at once, interleaved on one stream,
// through a TCP proxy that delays, partitions (drops both ways), loses acks (drops server→client)
// and cuts the connections. Afterwards every session's log holds every acknowledged event, no
// event twice, with contiguous seqs, and nothing that was not sent.
func TestPublisherFaultsThroughProxy(t *testing.T) {
	srv := startOwnServer(t)
	_, direct := connectStore(t, srv.URL(), &store.Config{})
	proxy := newFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.port))
	nc, st := connectStore(t, proxy.URL(), nil)
	p := newPublisher(t, st, nc, publisher.Options{
		Window: 20 * time.Millisecond, WriterID: "faulty",
		AttemptTimeout: 700 * time.Millisecond, RetryBudget: 2 * time.Second,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const sessions, events = 6, 240
	fws := make([]*faultWriter, sessions)
	for i := range fws {
		id := fmt.Sprintf("proxy-%d", i)
		w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
		if err != nil {
			t.Fatal(err)
		}
		fws[i] = &faultWriter{w: w, sent: chunkEvents(id, 0, events)}
	}

	var progress atomic.Int64
	stop := make(chan struct{})
	chaosDone := make(chan int)
	go func() { // the faults, one after another, until the writers are done (their sleeps are the faults' lengths)
		rng := rand.New(rand.NewPCG(1, 2))
		n := 0
		for {
			select {
			case <-stop:
				proxy.SetDelay(0)
				proxy.SetDrop(false, false)
				chaosDone <- n
				return
			case <-time.After(time.Duration(20+rng.IntN(60)) * time.Millisecond):
			}
			n++
			switch n % 4 {
			case 0: // latency
				proxy.SetDelay(time.Duration(1+rng.IntN(10)) * time.Millisecond)
			case 1: // partition: nothing gets through, then the connections die
				proxy.SetDelay(0)
				proxy.SetDrop(true, true)
				time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
				proxy.Cut()
				proxy.SetDrop(false, false)
			case 2: // acks lost: the server stores, the client never hears, then a cut
				proxy.SetDrop(false, true)
				time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
				proxy.Cut()
				proxy.SetDrop(false, false)
			case 3:
				proxy.Cut()
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i, fw := range fws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fw.run(ctx, rand.New(rand.NewPCG(uint64(i), 7)), &progress); err != nil {
				errs <- fmt.Errorf("session %q: %w", fw.w.ID(), err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	faults := <-chaosDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	failed := 0
	for _, fw := range fws {
		failed += fw.fails
		fw.drain(t, ctx)
	}
	t.Logf("%d faults injected; %d Flush calls failed during them and were retried", faults, failed)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	interleaved := false
	for _, fw := range fws {
		checkLog(t, direct, fw.w.ID(), fw.sent, fw.acked)
		// The guard is the stream sequence of the session's previous record: with the sessions
		// interleaved on one stream, consecutive records of a session are not consecutive in it.
		var prev uint64
		if _, err := storetest.Session(direct, fw.w.ID()).Records(ctx, func(r store.Record) error {
			seq := r.StreamSeq
			if prev != 0 && seq != prev+1 {
				interleaved = true
			}
			prev = seq
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if !interleaved {
		t.Log("note: no two records of one session were separated by another session's record in this run")
	}
}

// TestPublisherLostAck loses the ack of a stored record (the proxy drops server→client bytes,
// then cuts the connection) and checks that the retry does not append the events twice: within
// the dedupe window the server deduplicates the Nats-Msg-Id; after it expired the guard fails and
// the writer finds its own record at the tail.
func TestPublisherLostAck(t *testing.T) {
	for _, c := range []struct {
		name    string
		expired bool
	}{{"within the dedupe window", false}, {"after the dedupe window expired", true}} {
		t.Run(c.name, func(t *testing.T) {
			srv := startOwnServer(t)
			_, direct := connectStore(t, srv.URL(), &store.Config{DuplicateWindow: 100 * time.Millisecond})
			proxy := newFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.port))
			nc, st := connectStore(t, proxy.URL(), nil)
			p := newPublisher(t, st, nc, publisher.Options{WriterID: "lossy", AttemptTimeout: time.Second, RetryBudget: time.Minute})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const id = "lost-ack"
			w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
			if err != nil {
				t.Fatal(err)
			}
			sent := chunkEvents(id, 0, 8)
			for _, ev := range sent[:3] {
				if err := w.Append(ev); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}

			proxy.SetDrop(false, true) // acks are lost from here on
			for _, ev := range sent[3:] {
				if err := w.Append(ev); err != nil {
					t.Fatal(err)
				}
			}
			flushed := make(chan error, 1)
			go func() { flushed <- w.Flush(ctx) }()
			checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("the record to be stored", func() bool {
				tail, err := storetest.Session(direct, id).Tail(ctx)
				return err == nil && tail.NextSeq == int64(len(sent))
			}))
			if c.expired {
				// The server forgets msg ids older than the window on a timer of the window's
				// length: wait several windows before the retry can reach it.
				time.Sleep(600 * time.Millisecond)
			}
			proxy.SetDrop(false, false)
			proxy.Cut()
			select {
			case err := <-flushed:
				if err != nil {
					t.Fatalf("Flush after a lost ack: %v", err)
				}
			case <-time.After(90 * time.Second):
				t.Fatal("Flush never returned after the lost ack")
			}
			checkLog(t, direct, id, sent, len(sent))
			n := 0
			if _, err := storetest.Session(direct, id).Records(ctx, func(store.Record) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Fatalf("%d records stored, want 2 (the retry after the lost ack stored another)", n)
			}
			// The writer goes on from the right guard.
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPublisherServerRestartMidWrite restarts the server (same port and data) several times while
// sessions are being written. Writes in flight fail or are retried; failed ones are reported and
// put back, and Flush retries them. Afterwards the contract holds for every session.
func TestPublisherServerRestartMidWrite(t *testing.T) {
	srv := startOwnServer(t)
	_, _ = connectStore(t, srv.URL(), &store.Config{})
	nc, st := connectStore(t, srv.URL(), nil)
	p := newPublisher(t, st, nc, publisher.Options{
		Window: 10 * time.Millisecond, WriterID: "restart",
		AttemptTimeout: 500 * time.Millisecond, RetryBudget: 300 * time.Millisecond,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const sessions, events = 4, 300
	fws := make([]*faultWriter, sessions)
	for i := range fws {
		id := fmt.Sprintf("restart-%d", i)
		w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
		if err != nil {
			t.Fatal(err)
		}
		fws[i] = &faultWriter{w: w, sent: chunkEvents(id, 0, events)}
	}
	var progress atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i, fw := range fws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fw.run(ctx, rand.New(rand.NewPCG(uint64(i), 11)), &progress); err != nil {
				errs <- fmt.Errorf("session %q: %w", fw.w.ID(), err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	restarts := 0
	for finished := false; restarts < 3 && !finished; {
		at := progress.Load() + 6 // a few Flushes into the writing
		checkfor.Check(t, 2*time.Minute, 5*time.Millisecond, checkfor.Holds("a few Flushes into the writing", func() bool {
			select {
			case <-done:
				finished = true
			default:
			}
			return finished || progress.Load() >= at
		}))
		if !finished {
			srv.restart()
			restarts++
		}
	}
	<-done
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	failed, reported := 0, 0
	for _, fw := range fws {
		failed += fw.fails
		fw.drain(t, ctx)
		for len(fw.w.Errors()) > 0 {
			we := <-fw.w.Errors()
			var werr *publisher.WriteError
			if !errors.As(we, &werr) || werr.Session != fw.w.ID() {
				t.Fatalf("error report %v is not a *WriteError of %q", we, fw.w.ID())
			}
			reported++
		}
	}
	t.Logf("%d restarts; %d Flush calls failed, %d write failures reported", restarts, failed, reported)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, fw := range fws {
		got := checkLog(t, st, fw.w.ID(), fw.sent, fw.acked)
		if len(got) != len(fw.sent) {
			t.Fatalf("session %q: %d of %d events stored after the final Flush", fw.w.ID(), len(got), len(fw.sent))
		}
	}
}
