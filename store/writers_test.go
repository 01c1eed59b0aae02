package store

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

func TestWriterLease(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	a := Lease{Writer: "A", Host: "h", PID: 1, Since: 1785000000000}
	rev, err := sessionOf(s, "s.1").AcquireLease(ctx, a, 5*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	got, grev, err := sessionOf(s, "s.1").Lease(ctx)
	if err != nil || grev != rev || got.Writer != "A" || got.Session != "s.1" || got.TTLMillis != 5000 {
		t.Fatalf("GetLease = %+v rev %d (want %d), %v", got, grev, rev, err)
	}
	// A second writer is refused, naming the holder.
	_, err = sessionOf(s, "s.1").AcquireLease(ctx, Lease{Writer: "B"}, 5*time.Second, false)
	var held *LeaseHeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrLeaseHeld) || held.Holder.Writer != "A" || held.Session != "s.1" {
		t.Fatalf("second AcquireLease: %v, want *LeaseHeldError naming A", err)
	}
	if rev, err = sessionOf(s, "s.1").RenewLease(ctx, rev, a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Takeover: B overwrites; A's renewal is lost, A's release leaves B's lease alone.
	if _, err := sessionOf(s, "s.1").AcquireLease(ctx, Lease{Writer: "B"}, 5*time.Second, true); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "s.1").RenewLease(ctx, rev, a, 5*time.Second); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("renewal after a takeover: %v, want ErrLeaseLost", err)
	}
	if err := sessionOf(s, "s.1").ReleaseLease(ctx, rev); err != nil {
		t.Fatal(err)
	}
	got, brev, err := sessionOf(s, "s.1").Lease(ctx)
	if err != nil || got.Writer != "B" {
		t.Fatalf("after A's release: %+v, %v; want B's lease", got, err)
	}
	if err := sessionOf(s, "s.1").ReleaseLease(ctx, brev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sessionOf(s, "s.1").Lease(ctx); !errors.Is(err, ErrNoLease) {
		t.Fatalf("after release: %v, want ErrNoLease", err)
	}
	if _, err := sessionOf(s, "s.1").AcquireLease(ctx, a, 5*time.Second, false); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if _, err := sessionOf(s, "s.2").AcquireLease(ctx, a, 500*time.Millisecond, false); err == nil {
		t.Fatal("a TTL under 1 s accepted")
	}
}

func TestWriterLeaseExpires(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	if _, err := sessionOf(s, "dead").AcquireLease(ctx, Lease{Writer: "A"}, time.Second, false); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 10*time.Second, 100*time.Millisecond, func() error {
		_, err := sessionOf(s, "dead").AcquireLease(ctx, Lease{Writer: "B"}, time.Second, false)
		if err != nil && !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("acquire after A's TTL: %v", err)
		}
		return err
	})
}

// TestOpenCreatesWritersBucket: a deployment provisioned before agentlog_writers existed gets it
// from Open (and from Provision).
func TestOpenCreatesWritersBucket(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{})
	ctx := testCtx(t)
	if _, err := Provision(ctx, js, Config{}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, wire.WritersBucket); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatalf("Open without agentlog_writers: %v", err)
	}
	if _, err := sessionOf(s, "x").AcquireLease(ctx, Lease{Writer: "A"}, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Provision(ctx, js, Config{}); err != nil {
		t.Fatalf("Provision again: %v", err)
	}
}

func TestSessionIncarnation(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	h := session.Header{ID: "re", CreatedAt: 1}
	if err := s.CreateSession(ctx, h); err != nil {
		t.Fatal(err)
	}
	first, err := sessionOf(s, "re").Info(ctx)
	if err != nil || wire.CheckIncarnation(first.Incarnation) != nil {
		t.Fatalf("GetSessionInfo = %+v, %v; want an incarnation", first, err)
	}
	// The value stays the dsh header line: the incarnation is only in the entry's headers.
	e, err := s.sessions.Get(ctx, "re")
	if err != nil || string(e.Value()) != `{"type":"session","version":0,"id":"re","createdAt":1}` {
		t.Fatalf("stored value %q, %v", e.Value(), err)
	}
	if err := sessionOf(s, "re").DeleteMetadata(ctx, first.Revision+1); !IsWrongLastSequence(err) {
		t.Fatalf("delete at another revision: %v, want a wrong-last-sequence refusal", err)
	}
	if err := sessionOf(s, "re").DeleteMetadata(ctx, first.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "re").Info(ctx); !errors.Is(err, ErrSessionNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.CreateSession(ctx, h, WithIncarnation("given-1")); err != nil {
		t.Fatalf("re-create after delete: %v", err)
	}
	second, err := sessionOf(s, "re").Info(ctx)
	if err != nil || second.Incarnation != "given-1" {
		t.Fatalf("re-created: %+v, %v", second, err)
	}
	if err := s.CreateSession(ctx, h); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("create over a live entry: %v, want ErrSessionExists", err)
	}
	if err := s.CreateSession(ctx, session.Header{ID: "bad"}, WithIncarnation("a.b")); err == nil {
		t.Fatal("incarnation with a dot accepted")
	}
	// Legacy metadata (a plain KV create, no header) reads as incarnation "".
	if _, err := s.sessions.Create(ctx, "legacy", []byte(`{"type":"session","version":0,"id":"legacy","createdAt":1}`)); err != nil {
		t.Fatal(err)
	}
	old, err := sessionOf(s, "legacy").Info(ctx)
	if err != nil || old.Incarnation != "" || old.Header.ID != "legacy" {
		t.Fatalf("legacy: %+v, %v", old, err)
	}
}

func TestNewLeaseNamesThisProcess(t *testing.T) {
	host, _ := os.Hostname()
	l := NewLease("w1")
	if l.Writer != "w1" || l.Host != host || l.PID != os.Getpid() || l.Since != 0 || l.Session != "" {
		t.Fatalf("NewLease(w1) = %+v, want writer w1, host %q, pid %d, nothing else", l, host, os.Getpid())
	}
}
