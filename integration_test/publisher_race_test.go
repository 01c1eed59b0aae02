package integration_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// TestPublisherTwoWritersRace runs two publishers (two connections, two writer ids) against one
// session at once, 1,000 rounds (200 with -short), on sessions interleaved on one stream:
//
//   - brand-new sessions, where both expect stream seq 0: A creates the session and flushes its
//     first event while B opens (resumes) it, writing an end-seed at seq 0;
//   - existing sessions, where both hold the same tail: both append a different event and Flush.
//
// Exactly one wins each round — the other is fenced with ErrConflict (or its Open is refused) —
// and every log stays contiguous and valid.
func TestPublisherTwoWritersRace(t *testing.T) {
	rounds := 1000
	if testing.Short() {
		rounds = 200
	}
	srv := startOwnServer(t)
	_, st := connectStore(t, srv.URL(), &store.Config{})
	ncA, stA := connectStore(t, srv.URL(), nil)
	ncB, stB := connectStore(t, srv.URL(), nil)
	pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", Logger: quietLogger()})
	pb := newPublisher(t, stB, ncB, publisher.Options{WriterID: "B", Logger: quietLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const existing = 8 // sessions reused by the existing-session rounds
	winsA, winsB := 0, 0
	for r := range rounds {
		var a, b *publisher.Writer
		var errA, errB error
		var wg sync.WaitGroup
		if r%2 == 0 { // brand-new session
			id := fmt.Sprintf("race-new-%d", r)
			w, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Append(chunkEvents("A", 0, 1)[0]); err != nil {
				t.Fatal(err)
			}
			wg.Add(2)
			go func() { defer wg.Done(); errA = w.Flush(ctx) }()
			go func() { defer wg.Done(); b, errB = pb.Open(ctx, id, publisher.Takeover()) }()
			wg.Wait()
			a = w
			if errB != nil && !errors.Is(errB, publisher.ErrConflict) {
				t.Fatalf("round %d: B's Open: %v", r, errB)
			}
			if errA != nil && !errors.Is(errA, publisher.ErrConflict) && !errors.Is(errA, publisher.ErrFenced) {
				t.Fatalf("round %d: A's Flush: %v", r, errA) // ErrFenced: A's renewal saw B's takeover first
			}
			if errA != nil && errB != nil {
				t.Fatalf("round %d: both lost: %v / %v", r, errA, errB)
			}
			if errA == nil && errB == nil {
				// B's Open read the log after A's record and resumed after it: the writes were
				// serialized, not concurrent. A must now be fenced by B's end-seed.
				if errA = a.Append(chunkEvents("A", 1, 1)[0]); errA == nil {
					errA = a.Flush(ctx)
				}
				if !errors.Is(errA, publisher.ErrConflict) && !errors.Is(errA, publisher.ErrFenced) {
					t.Fatalf("round %d: A wrote after B resumed the session: %v", r, errA)
				}
			}
		} else { // existing session: both hold the same tail, both write
			id := fmt.Sprintf("race-old-%d", r%(2*existing))
			var err error
			if a, err = pa.Open(ctx, id); errors.Is(err, store.ErrSessionNotFound) {
				a, err = pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.NextSeq() == 0 { // give it a record so that B can open it
				if err := a.Append(session.EndSeed(0, 1785000000000)); err != nil {
					t.Fatal(err)
				}
				if err := a.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if b, err = pb.Open(ctx, id, publisher.Takeover()); err != nil {
				t.Fatal(err)
			}
			if a.NextSeq() != b.NextSeq() {
				t.Fatalf("round %d: A at seq %d, B at %d after opening", r, a.NextSeq(), b.NextSeq())
			}
			seq := int(a.NextSeq())
			// B took A's lease over: A's renewal may fence A before it even appends.
			errA = a.Append(chunkEvents("A", seq, 1)[0])
			if errA != nil && !errors.Is(errA, publisher.ErrFenced) {
				t.Fatal(errA)
			}
			if err := b.Append(chunkEvents("B", seq, 1)[0]); err != nil {
				t.Fatal(err)
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				if errA == nil {
					errA = a.Flush(ctx)
				}
			}()
			go func() { defer wg.Done(); errB = b.Flush(ctx) }()
			wg.Wait()
			if (errA == nil) == (errB == nil) {
				t.Fatalf("round %d: A %v, B %v: want exactly one winner", r, errA, errB)
			}
			for _, e := range []error{errA, errB} {
				if e != nil && !errors.Is(e, publisher.ErrConflict) && !errors.Is(e, publisher.ErrFenced) {
					t.Fatalf("round %d: the loser got %v, want ErrConflict or ErrFenced", r, e)
				}
			}
		}
		if errA == nil {
			winsA++
		} else {
			winsB++
		}
		for _, w := range []*publisher.Writer{a, b} {
			if w != nil {
				if err := w.Close(ctx); err != nil && !errors.Is(err, publisher.ErrFenced) && !errors.Is(err, publisher.ErrConflict) {
					t.Fatalf("round %d: close: %v", r, err)
				}
			}
		}
	}
	t.Logf("%d rounds: A won %d, B won %d", rounds, winsA, winsB)
	// Every log is contiguous (Read checks that each record continues the previous one) and valid.
	for r := range rounds {
		id := fmt.Sprintf("race-new-%d", r)
		if r%2 == 1 {
			if r >= 2*existing {
				continue
			}
			id = fmt.Sprintf("race-old-%d", r)
		}
		evs, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
		if err != nil {
			t.Fatalf("session %q: %v", id, err)
		}
		if _, err := session.Load(id, evs); err != nil {
			t.Fatalf("session %q: %v", id, err)
		}
	}
}
