package forker

import (
	"bytes"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// longSource stores a generated, well-formed session (compaction replaces and tool-result
// prunes included) of about n events as "src" in records of 10 and returns its events.
func (e *env) longSource(n int) []session.Event {
	e.t.Helper()
	l := loggen.GenerateWith(7, loggen.Options{MaxTurns: n / 20, MaxEvents: n, Steady: true})
	_, events, err := session.ReadJSONL(bytes.NewReader(l.JSONL()), "src")
	if err != nil {
		e.t.Fatalf("ReadJSONL: %v", err)
	}
	if err := e.store.CreateSession(ctx(e.t), session.Header{ID: "src", CreatedAt: 1}); err != nil {
		e.t.Fatal(err)
	}
	e.appendRecords("src", events, 10)
	return events
}

// TestForkStreamsALongSeed: a seed far larger than one record is written as an atomic batch of
// records, and the child's events are exactly the in-memory fork's (ForkSeed + ForkChild), at the
// end of the log and at an inner turn boundary.
func TestForkStreamsALongSeed(t *testing.T) {
	e := newEnvWith(t, store.Config{Partitions: 4, MaxMsgSize: 8 << 10})
	src := e.longSource(3000)
	var inner *int64
	for i := len(src) / 2; i < len(src); i++ {
		if src[i].Type == "turn/end" {
			inner = ptr(src[i].Seq)
			break
		}
	}
	if inner == nil {
		t.Fatal("the generated log has no turn/end in its second half")
	}
	for _, b := range []*int64{nil, inner} {
		seed, ferr := session.ForkSeed("src", src, b)
		if ferr != nil {
			t.Fatalf("ForkSeed(%v): %v", b, ferr)
		}
		want, ferr := session.ForkChild(seed, now.UnixMilli())
		if ferr != nil {
			t.Fatalf("ForkChild: %v", ferr)
		}
		res, err := e.fork(client.ForkRequest{Source: "src", Boundary: b})
		if err != nil {
			t.Fatalf("fork at %v: %v", b, err)
		}
		if res.SeedLength != len(seed) {
			t.Fatalf("seedLength %d, want %d", res.SeedLength, len(seed))
		}
		var records int
		if _, err := storetest.Session(e.store, res.Child).Records(ctx(t), func(store.Record) error { records++; return nil }); err != nil {
			t.Fatal(err)
		}
		if records < 2 {
			t.Fatalf("the child has %d record(s); the test wants a seed over several", records)
		}
		h, got, _ := e.child(res.Child)
		if h.SeedLength == nil || *h.SeedLength != int64(len(seed)) || h.ParentSession != "src" {
			t.Fatalf("child header %+v", h)
		}
		if len(got) != len(want) {
			t.Fatalf("child has %d events, want %d", len(got), len(want))
		}
		for i := range want {
			if err := sessiontest.SameEvent(got[i], want[i]); err != nil {
				t.Fatalf("child event %d: %v", i, err)
			}
		}
	}
}

// TestForkOfALongSeedRefusedLeavesNothing: a boundary inside an open turn is refused OPEN_TURN
// after the seed was streamed into a batch; the batch is dropped, so the child has neither
// metadata nor records.
func TestForkOfALongSeedRefusedLeavesNothing(t *testing.T) {
	e := newEnvWith(t, store.Config{Partitions: 4, MaxMsgSize: 8 << 10})
	src := e.longSource(3000)
	b := int64(-1)
	for i := len(src) - 1; i > 0; i-- {
		if src[i].Type == "turn/start" {
			b = src[i].Seq + 1
			break
		}
	}
	seed, ferr := session.ForkSeed("src", src, &b)
	if ferr == nil || ferr.Code != session.CodeOpenTurn {
		t.Fatalf("ForkSeed at %d: %v, want OPEN_TURN (seed %d)", b, ferr, len(seed))
	}
	_, err := e.fork(client.ForkRequest{Source: "src", Boundary: &b, Child: "refused"})
	forkErr(t, err, session.CodeOpenTurn, ferr.Msg)
	hdr, _, tail, err := e.f.exists(ctx(t), storetest.Session(e.store, "refused"))
	if evs := tail.LastStreamSeq > 0; err != nil || hdr != nil || evs {
		t.Fatalf("after a refused fork the child has metadata %v, records %v (%v)", hdr, evs, err)
	}
}
