package integration_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
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
	eventually(t, "A reconnected", ncA.IsConnected)

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
