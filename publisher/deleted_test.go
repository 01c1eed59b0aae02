package publisher

import (
	"errors"
	"testing"

	"github.com/agentlog/agentlog/internal/storetest"
)

// TestRemoveFencesWriter: a Writer whose session was removed under it fails its next write with
// a fencing error that matches ErrSessionDeleted, whatever its guard, and never writes a record
// into the removed id.
func TestRemoveFencesWriter(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)
	evs := fixtureEvents(t, 9)

	// Guard > 0: the purge makes the guard fail.
	w, err := p.Create(ctx, header("rm-written"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs[:3] {
		if err := w.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(e.store, "rm-written").Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(evs[3]); err != nil && !errors.Is(err, ErrFenced) {
		t.Fatal(err) // fenced already by its lease renewal is fine too
	}
	if err := w.Flush(ctx); !isFencing(err) || !errors.Is(err, ErrSessionDeleted) && !errors.Is(err, ErrFenced) {
		t.Fatalf("write after rm: %v, want a fencing error (ErrSessionDeleted)", err)
	}
	if recs := e.records(t, "rm-written"); len(recs) != 0 {
		t.Fatalf("%d records in the removed session", len(recs))
	}

	// Guard 0 (created, nothing written yet): checked against the metadata before the write.
	w2, err := p.Create(ctx, header("rm-new"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(e.store, "rm-new").Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w2.Append(evs[0]); err != nil && !errors.Is(err, ErrFenced) {
		t.Fatal(err)
	}
	if err := w2.Flush(ctx); !isFencing(err) {
		t.Fatalf("first write after rm: %v, want a fencing error", err)
	} else if !errors.Is(err, ErrFenced) && (!errors.Is(err, ErrSessionDeleted) || !errors.Is(err, ErrConflict)) {
		t.Fatalf("first write after rm: %v, want ErrConflict and ErrSessionDeleted", err)
	}
	if recs := e.records(t, "rm-new"); len(recs) != 0 {
		t.Fatalf("%d records in the removed session", len(recs))
	}
}

// TestRemoveRacingFirstRecord: a removal that lands between the metadata check and the first
// record (guard 0) is seen after the write; the record is purged again and the writer fenced.
func TestRemoveRacingFirstRecord(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)
	p.beforeWrite = func(id string, first int64) {
		if first == 0 {
			if _, err := storetest.Session(e.store, id).Remove(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	w, err := p.Create(ctx, header("rm-race"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(fixtureEvents(t, 1)[0]); err != nil {
		t.Fatal(err)
	}
	err = w.Flush(ctx)
	if !errors.Is(err, ErrSessionDeleted) || !errors.Is(err, ErrConflict) {
		t.Fatalf("first write raced by rm: %v, want ErrConflict and ErrSessionDeleted", err)
	}
	if recs := e.records(t, "rm-race"); len(recs) != 0 {
		t.Fatalf("%d records left in the removed session", len(recs))
	}
	if err := w.Append(fixtureEvents(t, 2)[1]); !errors.Is(err, ErrFenced) {
		t.Fatalf("Append after: %v, want ErrFenced", err)
	}
	// The id is free for a new session.
	p2 := e.publisher(t, "w2", clk)
	w2, err := p2.Create(ctx, header("rm-race"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Append(fixtureEvents(t, 1)[0]); err != nil {
		t.Fatal(err)
	}
	if err := w2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}
