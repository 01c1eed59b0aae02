package forker

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// TestRemoveSourceAfterFork: a fork that completed before the removal keeps its child.
func TestRemoveSourceAfterFork(t *testing.T) {
	e := newEnv(t)
	parent := e.loadParent()
	if _, err := e.fork(client.ForkRequest{Source: "parent", Child: "kept"}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(e.store, "parent").Remove(ctx(t)); err != nil {
		t.Fatal(err)
	}
	h, events, _ := e.child("kept")
	if h.ParentSession != "parent" || len(events) != len(parent)+1 {
		t.Fatalf("child after rm of its source: parent %q, %d events", h.ParentSession, len(events))
	}
	_, err := e.fork(client.ForkRequest{Source: "parent", Child: "late"})
	forkErr(t, err, session.CodeSessionNotFound, `session "parent" not found`)
}

// TestRemoveSourceDuringFork: a removal that starts after the fork read the source makes the
// fork fail SESSION_NOT_FOUND, with no child left.
func TestRemoveSourceDuringFork(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	e.f.afterSourceRead = func(source string) {
		if _, err := storetest.Session(e.store, source).Remove(context.Background()); err != nil {
			t.Errorf("rm: %v", err)
		}
	}
	_, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "orphan"})
	forkErr(t, err, session.CodeSessionNotFound, `session "parent" not found`)
	if _, err := storetest.Header(storetest.Session(e.store, "orphan").Info(ctx(t))); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("child metadata: %v", err)
	}
	if tail, err := storetest.Session(e.store, "orphan").TailFromLeader(ctx(t)); err != nil || tail.LastStreamSeq != 0 {
		t.Fatalf("child log: %+v, %v", tail, err)
	}
}

// TestRemoveChildDuringFork: a removal of the child between its claim and its record makes the
// fork fail naming the child. The forker may not purge, so its record stays, with the child's
// metadata marked removed: no read serves it, and agentlog rm (the operator) clears it, after which
// a later fork can take the id.
func TestRemoveChildDuringFork(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	e.f.beforeRecord = func(child string) {
		if _, err := storetest.Session(e.store, child).Remove(context.Background()); err != nil {
			t.Errorf("rm: %v", err)
		}
	}
	_, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "c"})
	var cl *childLeftError
	if err == nil || !strings.Contains(err.Error(), "removed during the fork") || !strings.Contains(err.Error(), "agentlog rm c") ||
		!errors.Is(err, store.ErrSessionDeleted) || !errors.As(err, &cl) || cl.child != "c" {
		t.Fatalf("fork onto a child removed meanwhile: %v", err)
	}
	if _, err := storetest.Header(storetest.Session(e.store, "c").Info(ctx(t))); !errors.Is(err, store.ErrSessionDeleted) {
		t.Fatalf("child metadata: %v, want marked removed", err)
	}
	if tail, err := storetest.Session(e.store, "c").TailFromLeader(ctx(t)); err != nil || tail.LastStreamSeq == 0 {
		t.Fatalf("child log: %+v, %v, want the fork's record left", tail, err)
	}
	e.f.beforeRecord = nil
	if _, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "c"}); err == nil {
		t.Fatal("a fork took an id left marked removed")
	}
	rm, err := storetest.Session(e.store, "c").Remove(ctx(t))
	if err != nil || rm.Records == 0 || !rm.Metadata {
		t.Fatalf("rm of the left child: %+v, %v", rm, err)
	}
	if tail, err := storetest.Session(e.store, "c").TailFromLeader(ctx(t)); err != nil || tail.LastStreamSeq != 0 {
		t.Fatalf("child log after rm: %+v, %v", tail, err)
	}
	if _, err := e.f.Fork(ctx(t), client.ForkRequest{Source: "parent", Child: "c"}); err != nil {
		t.Fatal(err)
	}
}

// TestForkOfSourceWhoseRemovalStoppedHalfWay: an rm that stopped after marking the source's
// metadata (before purging its records) leaves the source not found for a fork too
// (ARCHITECTURE.md, "Deleting a session"), not forked as a log without metadata.
func TestForkOfSourceWhoseRemovalStoppedHalfWay(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	testnats.MarkRemoving(t, e.store, "parent")
	_, err := e.fork(client.ForkRequest{Source: "parent", Child: "of-half-removed"})
	forkErr(t, err, session.CodeSessionNotFound, `session "parent" not found`)
	if tail, err := storetest.Session(e.store, "of-half-removed").TailFromLeader(ctx(t)); err != nil || tail.LastStreamSeq != 0 {
		t.Fatalf("child log: %+v, %v", tail, err)
	}
	// The rm run again finishes it; then the id is free.
	if _, err := storetest.Session(e.store, "parent").Remove(ctx(t)); err != nil {
		t.Fatal(err)
	}
	_, err = e.fork(client.ForkRequest{Source: "parent", Child: "of-half-removed"})
	forkErr(t, err, session.CodeSessionNotFound, `session "parent" not found`)
}

// TestChildLeftReplyNamesTheChild: the error reply of a fork that may have left part of its child
// (its record's outcome unknown, or its record left without metadata) names the child in its
// body, and its text says what is wrong without a CLI command; other errors have no body.
func TestChildLeftReplyNamesTheChild(t *testing.T) {
	err := &childLeftError{"c 1", errors.New(`fork of session "p" onto "c 1": the outcome of writing the child's record is unknown: timeout`)}
	code, desc := wireError(err)
	if body := string(errorBody(err)); code != client.CodeInternal || body != `{"child":"c 1"}` || strings.Contains(desc, "agentlog ") {
		t.Fatalf("child left: %s %q, body %s", code, desc, body)
	}
	if body := errorBody(&requestError{"bad request"}); body != nil {
		t.Fatalf("a bad request's body: %s", body)
	}
}
