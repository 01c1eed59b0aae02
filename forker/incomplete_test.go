package forker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// smallRecords is a max message size that puts the parent's seed into several records (a held
// seed written outside an atomic batch, the child marked incomplete).
const smallRecords = 1024

// loadBig stores session "parent" with 40 events of about 200 bytes (a closed turn), in records
// of 3: a seed of about 10 records of smallRecords.
func (e *env) loadBig() []session.Event {
	e.t.Helper()
	events, err := loggen.ChunkTurn(1, 40, 200, now.UnixMilli())
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.CreateSession(ctx(e.t), session.Header{ID: "parent", CreatedAt: now.UnixMilli()}); err != nil {
		e.t.Fatal(err)
	}
	e.appendRecords("parent", events, 3)
	return events
}

var errCut = errors.New("cut mid-seed (test)")

// checkNotServed asserts that no reader serves child id: store Info, the client's Status and
// Events, and the listing.
func (e *env) checkNotServed(id string) {
	e.t.Helper()
	ss := storetest.Session(e.store, id)
	if _, err := ss.Info(ctx(e.t)); !errors.Is(err, store.ErrSessionIncomplete) || !errors.Is(err, store.ErrSessionNotFound) {
		e.t.Fatalf("Info of the incomplete child: %v, want ErrSessionIncomplete and ErrSessionNotFound", err)
	}
	info, err := ss.InfoAny(ctx(e.t))
	if err != nil || info.CompleteAt == 0 {
		e.t.Fatalf("InfoAny of the incomplete child: %+v, %v; want its mark", info, err)
	}
	c, err := client.New(e.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := c.Status(ctx(e.t), id); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "being created") {
		e.t.Fatalf("Status of the incomplete child: %v, want not found (being created)", err)
	}
	n := 0
	err = c.Events(ctx(e.t), id, client.EventsQuery{}, func(session.Event) error { n++; return nil })
	if !errors.Is(err, client.ErrNotFound) || n != 0 {
		e.t.Fatalf("Events of the incomplete child: %d events, %v; want none and not found", n, err)
	}
	if _, err := c.Sessions(ctx(e.t), client.SessionsQuery{Prefix: id}, func(s client.SessionInfo) error {
		if s.ID == id {
			e.t.Errorf("the listing shows the incomplete child %q", id)
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// TestForkCutMidSeedLeavesAnIncompleteChild: a fork whose held seed is cut after its first record
// leaves the child's claim marked incomplete and part of its log; no reader serves it. A retry of
// the same fork (once the claim is AbandonedForkAge old) resumes it: the child's log is then the
// one an uncut fork writes, and its mark is cleared.
func TestForkCutMidSeedLeavesAnIncompleteChild(t *testing.T) {
	e := newEnvWith(t, store.Config{Partitions: 4, MaxMsgSize: smallRecords})
	e.loadBig()
	// An uncut fork for reference: its log spans several records.
	ref, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "whole"})
	if err != nil {
		t.Fatal(err)
	}
	_, want, _ := e.child("whole")
	if last, err := storetest.Session(e.store, "whole").TailFromLeader(ctx(t)); err != nil || last.NextSeq != int64(len(want)) {
		t.Fatalf("whole child tail %+v, %v", last, err)
	}
	if info, err := storetest.Session(e.store, "whole").InfoAny(ctx(t)); err != nil || info.CompleteAt != 0 {
		t.Fatalf("a completed fork keeps its mark: %+v, %v", info, err)
	}

	e.f.seedRecordStored = func(child string, stored int) error {
		if child == "cut" {
			return errCut
		}
		return nil
	}
	_, err = e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "cut"})
	if !errors.Is(err, errCut) || !strings.Contains(err.Error(), "left incomplete") {
		t.Fatalf("cut fork: %v", err)
	}
	tail, err := storetest.Session(e.store, "cut").TailFromLeader(ctx(t))
	if err != nil || tail.NextSeq <= 0 || tail.NextSeq >= int64(len(want)) {
		t.Fatalf("cut child's log: %+v, %v; want part of %d events", tail, err, len(want))
	}
	e.checkNotServed("cut")

	// A retry too soon: the claim may be a fork in progress.
	e.f.seedRecordStored = nil
	_, err = e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "cut"})
	forkErr(t, err, session.CodeSessionAlreadyExists, `session "cut" already exists`)
	e.checkNotServed("cut")

	// The retry once the claim is abandoned resumes it.
	e.f.now = func() time.Time { return now.Add(AbandonedForkAge) }
	res, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "cut"})
	if err != nil || res.Child != "cut" || res.SeedLength != ref.SeedLength {
		t.Fatalf("resumed fork: %+v, %v", res, err)
	}
	h, got, _ := e.child("cut")
	if h.ParentSession != "parent" || len(got) != len(want) {
		t.Fatalf("resumed child: %+v, %d events; want %d", h, len(got), len(want))
	}
	for i := range want {
		if got[i].Type != want[i].Type || string(got[i].Data) != string(want[i].Data) || (got[i].Type != "session/end-seed" && got[i].Time != want[i].Time) {
			t.Fatalf("resumed child event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if info, err := storetest.Session(e.store, "cut").InfoAny(ctx(t)); err != nil || info.CompleteAt != 0 {
		t.Fatalf("the resumed child keeps its mark: %+v, %v", info, err)
	}
}

// TestIncompleteChildRemoved: agentlog rm (store.Session.Remove, the operator's) removes a child
// left incomplete: its metadata and its records.
func TestIncompleteChildRemoved(t *testing.T) {
	e := newEnvWith(t, store.Config{Partitions: 4, MaxMsgSize: smallRecords})
	e.loadBig()
	e.f.seedRecordStored = func(string, int) error { return errCut }
	if _, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "cut"}); !errors.Is(err, errCut) {
		t.Fatalf("cut fork: %v", err)
	}
	ss := storetest.Session(e.store, "cut")
	if _, err := ss.Remove(ctx(t)); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := ss.InfoAny(ctx(t)); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("metadata after the removal: %v", err)
	}
	if tail, err := ss.TailFromLeader(ctx(t)); err != nil || tail.LastStreamSeq != 0 {
		t.Fatalf("records after the removal: %+v, %v", tail, err)
	}
}

// TestIncompleteMarkCompleteByLog: a marked child whose log holds its marked count (the fork
// stopped after its last record, before it cleared the mark) is read as complete.
func TestIncompleteMarkCompleteByLog(t *testing.T) {
	e := newEnv(t)
	events := e.loadParent()
	h := session.Header{ID: "marked", CreatedAt: now.UnixMilli()}
	if err := e.store.CreateSession(ctx(t), h, store.WithIncomplete(int64(len(events)))); err != nil {
		t.Fatal(err)
	}
	ss := storetest.Session(e.store, "marked")
	if _, err := ss.Info(ctx(t)); !errors.Is(err, store.ErrSessionIncomplete) {
		t.Fatalf("Info before the log: %v", err)
	}
	e.appendRecords("marked", events, 3)
	info, err := ss.Info(ctx(t))
	if err != nil || info.CompleteAt != int64(len(events)) {
		t.Fatalf("Info once the log holds its events: %+v, %v", info, err)
	}
	if v := wire.IncompleteHeader; v != "Agentlog-Incomplete" {
		t.Fatalf("the wire name changed: %q", v)
	}
}

// TestBeingCreatedError: the client's not-found of an incomplete child is told apart
// (client.BeingCreated), so that a command does not print its partial log as a log without
// metadata; another not-found is not.
func TestBeingCreatedError(t *testing.T) {
	e := newEnvWith(t, store.Config{Partitions: 4, MaxMsgSize: smallRecords})
	e.loadBig()
	e.f.seedRecordStored = func(string, int) error { return errCut }
	if _, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "cut"}); !errors.Is(err, errCut) {
		t.Fatalf("cut fork: %v", err)
	}
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Header(ctx(t), "cut"); !client.BeingCreated(err) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Header of the incomplete child: %v", err)
	}
	if _, err := c.Header(ctx(t), "nobody"); client.BeingCreated(err) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Header of an unknown session: %v", err)
	}
}
