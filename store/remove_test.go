package store

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// TestRemoveSession removes every piece of a session (records, metadata, projection keys, lease,
// error reports), leaves other sessions alone, and lets the id be created again as a new
// incarnation with an empty log.
func TestRemoveSession(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	id, other := "rm.me é", "rm.me"
	tok, _ := wire.Token(id)
	for _, x := range []string{id, other} {
		if err := s.CreateSession(ctx, session.Header{ID: x, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		r, err := sessionOf(s, x).Append(ctx, 0, evs(0, 3, "a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sessionOf(s, x).Append(ctx, r.StreamSeq, evs(3, 5, "b")); err != nil {
			t.Fatal(err)
		}
		xt, _ := wire.Token(x)
		for _, unit := range []string{"messages", "turns"} {
			if _, err := s.projections.Put(ctx, unit+"."+xt, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.js.Publish(ctx, wire.ErrorsPrefix+"."+xt, []byte(`{"type":"agent/error"}`)); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := sessionOf(s, id).Info(ctx)
	if _, err := sessionOf(s, id).AcquireLease(ctx, Lease{Writer: "w1", Host: "h", PID: 1, Since: 1}, 10*time.Second, false); err != nil {
		t.Fatal(err)
	}

	rm, err := sessionOf(s, id).Remove(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rm.Projections)
	if !rm.Metadata || rm.Records != 2 || rm.Events != 5 || rm.ErrorReports != 1 || rm.Lease == nil || rm.Lease.Writer != "w1" ||
		rm.Incarnation != before.Incarnation || !slices.Equal(rm.Projections, []string{"messages." + tok, "turns." + tok}) {
		t.Fatalf("Removed = %+v", rm)
	}
	if _, err := headerOf(sessionOf(s, id).Info(ctx)); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("metadata after rm: %v", err)
	}
	if evs, last, err := readAll(ctx, sessionOf(s, id)); err != nil || len(evs) != 0 || last != 0 {
		t.Fatalf("log after rm: %d events, last %d, %v", len(evs), last, err)
	}
	if keys, _ := s.projectionKeys(ctx, tok); len(keys) != 0 {
		t.Fatalf("projection keys after rm: %v", keys)
	}
	if _, _, err := sessionOf(s, id).Lease(ctx); !errors.Is(err, ErrNoLease) {
		t.Fatalf("lease after rm: %v", err)
	}
	if found, err := sessionOf(s, id).anythingStored(ctx); found || err != nil {
		t.Fatalf("anythingStored after rm: %v, %v", found, err)
	}
	// The other session is untouched.
	if evs, _, err := readAll(ctx, sessionOf(s, other)); err != nil || len(evs) != 5 {
		t.Fatalf("other session: %d events, %v", len(evs), err)
	}
	otok, _ := wire.Token(other)
	if keys, _ := s.projectionKeys(ctx, otok); len(keys) != 2 {
		t.Fatalf("other session's projection keys: %v", keys)
	}

	// Nothing left: refused, naming the session.
	if _, err := sessionOf(s, id).Remove(ctx); !errors.Is(err, ErrSessionNotFound) || !strings.Contains(err.Error(), `"rm.me é"`) {
		t.Fatalf("second rm: %v, want ErrSessionNotFound naming the id", err)
	}
	// Re-create: a new incarnation, an empty log, guard 0 works again.
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 2}); err != nil {
		t.Fatal(err)
	}
	after, err := sessionOf(s, id).Info(ctx)
	if err != nil || after.Incarnation == before.Incarnation || after.Header.CreatedAt != 2 {
		t.Fatalf("re-created: %+v, %v", after, err)
	}
	if _, err := sessionOf(s, id).Append(ctx, 0, evs(0, 1, "new")); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveKeepsDenyDelete: rm purges a whole subject, while deleting one record from a session
// is still denied.
func TestRemoveKeepsDenyDelete(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	r, err := sessionOf(s, "keep").Append(ctx, 0, evs(0, 2, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.stream.DeleteMsg(ctx, r.StreamSeq); err == nil {
		t.Fatal("deleting one record was allowed")
	}
	if !s.stream.CachedInfo().Config.DenyDelete || s.stream.CachedInfo().Config.DenyPurge {
		t.Fatalf("stream config: deny_delete %v, deny_purge %v", s.stream.CachedInfo().Config.DenyDelete, s.stream.CachedInfo().Config.DenyPurge)
	}
	// Records without metadata (an orphan) are removed too.
	rm, err := sessionOf(s, "keep").Remove(ctx)
	if err != nil || rm.Metadata || rm.Records != 1 || rm.Events != 2 {
		t.Fatalf("rm of an orphan log: %+v, %v", rm, err)
	}
}

// TestRemoveFinishesAHalfDoneRemoval: metadata left marked by a removal that stopped is found
// by the next one; meanwhile the id is not found, and cannot be created.
func TestRemoveFinishesAHalfDoneRemoval(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	id := "half"
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	info, _ := sessionOf(s, id).Info(ctx)
	// Mark it as RemoveSession's step 1 does, and stop there.
	if _, err := s.markDeleting(ctx, id, info.Header.Raw, info.Revision, info.Incarnation); err != nil {
		t.Fatal(err)
	}
	if _, err := headerOf(sessionOf(s, id).Info(ctx)); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("GetSession of a marked session: %v", err)
	}
	if err := sessionOf(s, id).CheckCurrent(ctx, info.Incarnation); !errors.Is(err, ErrSessionDeleted) {
		t.Fatalf("CheckCurrent of a marked session: %v", err)
	}
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 2}); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("CreateSession of a marked session: %v", err)
	}
	rm, err := sessionOf(s, id).Remove(ctx)
	if err != nil || !rm.Metadata || rm.Incarnation != info.Incarnation {
		t.Fatalf("rm of a marked session: %+v, %v", rm, err)
	}
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 2}); err != nil {
		t.Fatal(err)
	}
}

// TestPurgeThrough removes only the records at or below the stream seq given.
func TestPurgeThrough(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	r1, err := sessionOf(s, "p").Append(ctx, 0, evs(0, 1, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "p").Append(ctx, r1.StreamSeq, evs(1, 2, "b")); err != nil {
		t.Fatal(err)
	}
	if n, err := sessionOf(s, "p").PurgeThrough(ctx, r1.StreamSeq); err != nil || n != 1 {
		t.Fatalf("PurgeThrough: %d, %v", n, err)
	}
	if tail, err := sessionOf(s, "p").TailFromLeader(ctx); err != nil || tail.NextSeq != 2 {
		t.Fatalf("tail after PurgeThrough: %+v, %v", tail, err)
	}
}
