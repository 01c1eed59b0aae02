package store

import (
	"errors"
	"testing"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestLeaveRemoving: a session without metadata, with a delete marker, or already marked is left
// marked removed (never served; Remove finishes it); live metadata of the same incarnation is left
// alone, of another incarnation refused.
func TestLeaveRemoving(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	h := func(id string) session.Header { return session.Header{ID: id, CreatedAt: 1} }

	// No metadata at all: a record stored by a writer whose session was removed.
	if _, err := sessionOf(s, "gone").Append(ctx, 0, evs(0, 2, "x")); err != nil {
		t.Fatal(err)
	}
	if err := sessionOf(s, "gone").LeaveRemoving(ctx, h("gone"), "inc1"); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "gone").Info(ctx); !errors.Is(err, ErrSessionDeleted) {
		t.Fatalf("Info after LeaveRemoving: %v, want ErrSessionDeleted", err)
	}
	if err := s.CreateSession(ctx, h("gone")); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("CreateSession over a marked id: %v", err)
	}
	rm, err := sessionOf(s, "gone").Remove(ctx)
	if err != nil || !rm.Metadata || rm.Records != 1 || rm.Incarnation != "inc1" {
		t.Fatalf("Remove of the marked session: %+v, %v", rm, err)
	}

	// A delete marker (rm finished before the check), then again over its own mark.
	if err := s.CreateSession(ctx, h("del"), WithIncarnation("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "del").Remove(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := sessionOf(s, "del").LeaveRemoving(ctx, h("del"), "b"); err != nil {
			t.Fatal(err)
		}
		if _, err := sessionOf(s, "del").Info(ctx); !errors.Is(err, ErrSessionDeleted) {
			t.Fatalf("Info: %v, want ErrSessionDeleted", err)
		}
	}

	// Live metadata: its own incarnation is left as is, another's refused.
	if err := s.CreateSession(ctx, h("live"), WithIncarnation("mine")); err != nil {
		t.Fatal(err)
	}
	if err := sessionOf(s, "live").LeaveRemoving(ctx, h("live"), "mine"); err != nil {
		t.Fatal(err)
	}
	if err := sessionOf(s, "live").LeaveRemoving(ctx, h("live"), "other"); !errors.Is(err, ErrSessionDeleted) {
		t.Fatalf("LeaveRemoving over another incarnation: %v", err)
	}
	if info, err := sessionOf(s, "live").Info(ctx); err != nil || info.Incarnation != "mine" {
		t.Fatalf("live metadata after LeaveRemoving: %+v, %v", info, err)
	}
}

// TestDeleteProjections: a KV purge of each key of the session (no stream purge), which leaves a
// marker whose revision a create expects (ProjectionMarker); other sessions' keys stay.
func TestDeleteProjections(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	for _, k := range []string{"messages.p1", "turns.p1", "messages.p2"} {
		if _, err := s.projections.Put(ctx, k, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := sessionOf(s, "p1").DeleteProjections(ctx)
	if err != nil || len(keys) != 2 {
		t.Fatalf("DeleteProjections: %v, %v", keys, err)
	}
	if _, err := sessionOf(s, "p1").ProjectionEntry(ctx, "messages"); !errors.Is(err, natsjs.ErrKeyNotFound) {
		t.Fatalf("messages.p1 after DeleteProjections: %v", err)
	}
	if _, err := sessionOf(s, "p2").ProjectionEntry(ctx, "messages"); err != nil {
		t.Fatalf("messages.p2: %v", err)
	}
	rev, err := sessionOf(s, "p1").ProjectionMarker(ctx, "messages")
	if err != nil || rev == 0 {
		t.Fatalf("ProjectionMarker: %d, %v", rev, err)
	}
	if r, err := sessionOf(s, "p2").ProjectionMarker(ctx, "messages"); err != nil || r != 0 {
		t.Fatalf("ProjectionMarker of a key with a value: %d, %v", r, err)
	}
	subj := wire.KVSubject(wire.ProjectionsBucket, "messages.p1")
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: []byte(`{}`)}, natsjs.WithExpectLastSequencePerSubject(0)); err == nil {
		t.Fatal("a create expecting no entry went over the marker")
	}
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: []byte(`{}`)}, natsjs.WithExpectLastSequencePerSubject(rev)); err != nil {
		t.Fatalf("a create expecting the marker: %v", err)
	}
}
