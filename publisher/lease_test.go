package publisher

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	njs "github.com/nats-io/nats.go/jetstream"
)

// purge removes every record of session id (an operator's purge, or what a server that lost data
// holds).
func (e *env) purge(t *testing.T, id string) {
	t.Helper()
	subj, err := wire.SessionSubject(id, e.store.Partitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Stream().Purge(ctxT(t), njs.WithPurgeSubject(subj)); err != nil {
		t.Fatal(err)
	}
}

// writeTurns appends fixture events [from, to) and flushes.
func writeFlush(t *testing.T, w *Writer, evs []session.Event) {
	t.Helper()
	for _, x := range evs {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestAckedLost: writer A acknowledged seqs 0..5 (two records); the log loses them and another
// writer writes a shorter prefix 0..2 (or a longer log). A's next Flush reports ErrAckedLost
// naming the lost range, on Errors and as an agent/error report, writes nothing, and A is fenced.
// The log stays contiguous and readable.
func TestAckedLost(t *testing.T) {
	for _, c := range []struct {
		name      string
		rewrite   int   // events the other writer writes after the purge
		from, to  int64 // the lost range A must report
		storedLen int
	}{
		{"shorter prefix", 3, 3, 5, 3},
		{"longer log", 7, 3, 5, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			clk := newFakeClock()
			ctx := ctxT(t)
			id := "lossy"
			tok := tokenOf(t, id)
			reports, err := e.nc.SubscribeSync(wire.ErrorsPrefix + "." + tok)
			if err != nil {
				t.Fatal(err)
			}
			pa := e.publisher(t, "wa", clk)
			wa, err := pa.Create(ctx, header(id))
			if err != nil {
				t.Fatal(err)
			}
			all := fixtureEvents(t, len(fixture))
			writeFlush(t, wa, all[:3])
			writeFlush(t, wa, all[3:6])

			e.purge(t, id)
			if _, err := storetest.Session(e.store, id).Append(ctx, 0, all[:c.rewrite], store.WithMsgID("other.0")); err != nil {
				t.Fatal(err)
			}
			before := len(e.records(t, id))

			if err := wa.Append(session.EndSeed(6, 1)); err != nil {
				t.Fatal(err)
			}
			err = wa.Flush(ctx)
			var lost *AckedLostError
			if !errors.As(err, &lost) || !errors.Is(err, ErrAckedLost) || !errors.Is(err, ErrFenced) {
				t.Fatalf("Flush after the loss: %v, want *AckedLostError (ErrAckedLost, ErrFenced)", err)
			}
			if lost.Session != id || lost.FromSeq != c.from || lost.ToSeq != c.to {
				t.Fatalf("lost %+v, want session %q seqs %d..%d", lost, id, c.from, c.to)
			}
			if rep := recv(t, wa.Errors()); !errors.Is(rep, ErrAckedLost) {
				t.Fatalf("Errors delivered %v", rep)
			}
			msg, err := reports.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("no agent/error report: %v", err)
			}
			var rep ErrorReport
			if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Lost == nil || rep.Lost[0] != c.from || rep.Lost[1] != c.to || !rep.Fenced {
				t.Fatalf("report %s (%v), want lost [%d,%d] and fenced", msg.Data, err, c.from, c.to)
			}
			if err := wa.Append(session.EndSeed(7, 1)); !errors.Is(err, ErrFenced) || !errors.Is(err, ErrAckedLost) {
				t.Fatalf("Append after the loss: %v, want ErrFenced", err)
			}
			if n := len(e.records(t, id)); n != before {
				t.Fatalf("the fenced writer wrote %d records", n-before)
			}
			got := e.stored(t, id)
			if len(got) != c.storedLen {
				t.Fatalf("log holds %d events, want %d", len(got), c.storedLen)
			}
			if _, err := session.Load(id, got); err != nil {
				t.Fatalf("log after the loss: %v", err)
			}
			// The writer's lease is gone with it: the session opens without a takeover.
			if err := wa.Close(ctx); !errors.Is(err, ErrFenced) {
				t.Fatalf("Close: %v, want ErrFenced", err)
			}
			pb := e.publisher(t, "wb", clk)
			if _, err := pb.Open(ctx, id); err != nil {
				t.Fatalf("Open after the fenced writer closed: %v", err)
			}
		})
	}
}

// TestOpenLiveRefusedAndTakeover: Open of a session whose writer is live is a *LiveError naming
// the session and the writer, and writes nothing; Takeover fences the old writer (its next Flush
// is ErrFenced), whose renewal notices it too; a closed writer's session opens at once.
func TestOpenLiveRefusedAndTakeover(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	pa, err := New(e.store, e.nc, Options{WriterID: "wa", Now: clk.Now, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close(ctx)
	wa, err := pa.Create(ctx, header("live"))
	if err != nil {
		t.Fatal(err)
	}
	all := fixtureEvents(t, len(fixture))
	writeFlush(t, wa, all[:5]) // an open turn with a tool call
	pb := e.publisher(t, "wb", clk)
	// Refused, twice the TTL later too: the lease is renewed.
	for range 2 {
		_, err = pb.Open(ctx, "live")
		var le *LiveError
		if !errors.As(err, &le) || !errors.Is(err, ErrSessionLive) || le.Session != "live" || le.Writer != "wa" || le.PID == 0 {
			t.Fatalf("Open while wa is live: %v, want *LiveError naming session and writer", err)
		}
		if n := len(e.stored(t, "live")); n != 5 {
			t.Fatalf("a refused Open wrote: %d events", n)
		}
		time.Sleep(2 * time.Second) // a sleep, not a condition: the TTL passes, and wa's renewal keeps its lease
	}
	if _, err := pb.Create(ctx, header("live")); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("Create of a live existing session: %v, want ErrSessionExists", err)
	}
	wb, err := pb.Open(ctx, "live", Takeover())
	if err != nil {
		t.Fatalf("Open with Takeover: %v", err)
	}
	if err = wa.Append(all[5]); err == nil {
		err = wa.Flush(ctx)
	}
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer after the takeover: %v, want ErrFenced", err)
	}
	if err := wb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.stored(t, "live")
	if _, err := session.Load("live", got); err != nil {
		t.Fatalf("log after the takeover: %v", err)
	}
	// wb closed: its lease is gone, the session opens without a takeover.
	pc := e.publisher(t, "wc", clk)
	if _, err := pc.Open(ctx, "live"); err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
}

// TestTakeoverFencesIdleWriter: a takeover that writes nothing (the log already ends with
// end-seed) still fences the old writer, by its lease renewal.
func TestTakeoverFencesIdleWriter(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	pa, err := New(e.store, e.nc, Options{WriterID: "wa", Now: clk.Now, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close(ctx)
	wa, err := pa.Create(ctx, header("idle"))
	if err != nil {
		t.Fatal(err)
	}
	writeFlush(t, wa, []session.Event{session.EndSeed(0, 1)})
	pb := e.publisher(t, "wb", clk)
	if _, err := pb.Open(ctx, "idle", Takeover()); err != nil {
		t.Fatal(err)
	}
	rep := recv(t, wa.Errors())
	if !errors.Is(rep, ErrFenced) || !errors.Is(rep, store.ErrLeaseLost) {
		t.Fatalf("old writer reported %v, want ErrFenced by the lost lease", rep)
	}
	if err := wa.Append(session.EndSeed(1, 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Append: %v, want ErrFenced", err)
	}
}

// TestIncarnation: a session deleted and created again under the same id gets another incarnation
// and other Nats-Msg-Ids, so its first record is stored even within the dedupe window, by the same
// writer id.
func TestIncarnation(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)
	ev0 := fixtureEvents(t, 1)
	var incs, ids []string
	for round := range 2 {
		w, err := p.Create(ctx, header("again"))
		if err != nil {
			t.Fatalf("round %d: Create: %v", round, err)
		}
		writeFlush(t, w, ev0)
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := storetest.Session(e.store, "again").Info(ctx)
		if err != nil || info.Incarnation != w.Incarnation() || info.Incarnation == "" {
			t.Fatalf("round %d: stored incarnation %+v (%v), writer's %q", round, info, err, w.Incarnation())
		}
		recs := e.records(t, "again")
		if len(recs) != 1 {
			t.Fatalf("round %d: %d records, want 1 (not deduplicated)", round, len(recs))
		}
		incs = append(incs, info.Incarnation)
		ids = append(ids, recs[0].header.Get(njs.MsgIDHeader))
		e.purge(t, "again")
		if err := storetest.Session(e.store, "again").DeleteMetadata(ctx, info.Revision); err != nil {
			t.Fatal(err)
		}
	}
	if incs[0] == incs[1] || ids[0] == ids[1] {
		t.Fatalf("incarnations %q, msg ids %q: want both to differ", incs, ids)
	}
}

// TestLegacySessionWithoutIncarnation: metadata written before incarnations opens and writes with
// the legacy Nats-Msg-Id <writer>.<token>.<firstSeq>.
func TestLegacySessionWithoutIncarnation(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	if _, err := storetest.SessionsKV(e.store).Create(ctx, "old", []byte(`{"type":"session","version":0,"id":"old","createdAt":1}`)); err != nil {
		t.Fatal(err)
	}
	p := e.publisher(t, "w1", clk)
	w, err := p.Open(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if w.Incarnation() != "" {
		t.Fatalf("incarnation %q, want legacy \"\"", w.Incarnation())
	}
	if got := e.records(t, "old")[0].header.Get(njs.MsgIDHeader); got != "w1.old.0" {
		t.Fatalf("Nats-Msg-Id %q, want w1.old.0", got)
	}

}

// TestOpenOptionRefused: an OpenOption that refuses its input, or a nil one, fails Open with
// ErrInvalidOption naming the session and the option's reason, before anything is done: no lease
// is taken, no closer written, and the session opens once the option is left out.
func TestOpenOptionRefused(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	pa := e.publisher(t, "wa", clk)
	wa, err := pa.Create(ctx, header("opt"))
	if err != nil {
		t.Fatal(err)
	}
	all := fixtureEvents(t, len(fixture))
	writeFlush(t, wa, all[:5]) // an open turn: a real Open writes closers; wa's lease is live
	refuse := OpenOption(func(*openOptions) error { return errors.New("want a positive bound, got -1") })
	pb := e.publisher(t, "wb", clk)
	for _, opts := range [][]OpenOption{{Takeover(), refuse}, {nil}} {
		_, err := pb.Open(ctx, "opt", opts...)
		if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), `"opt"`) {
			t.Fatalf("Open with %d options: %v, want ErrInvalidOption naming the session", len(opts), err)
		}
		if len(opts) == 2 && !strings.Contains(err.Error(), "want a positive bound, got -1") {
			t.Fatalf("Open with a refusing option: %v, want the option's reason", err)
		}
		if n := len(e.stored(t, "opt")); n != 5 {
			t.Fatalf("a refused Open wrote: %d events", n)
		}
	}
	l, _, err := storetest.Session(e.store, "opt").Lease(ctx)
	if err != nil || l.Writer != "wa" {
		t.Fatalf("lease after the refused Opens: %+v %v; want wa's, untouched", l, err)
	}
	wb, err := pb.Open(ctx, "opt", Takeover())
	if err != nil {
		t.Fatalf("Open without the refusing option: %v", err)
	}
	if err := wb.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
