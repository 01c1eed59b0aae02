package publisher

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// bigToolResult is the fixture's tool/result (seq 5) with a text of n bytes.
func bigToolResult(t *testing.T, n int) session.Event {
	return ev(t, strings.Replace(fixture[5], "a very long result", strings.Repeat("r", n), 1))
}

// sameLines fails unless got encodes to exactly the lines of want.
func sameLines(t *testing.T, got, want []session.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("stored %d events, want %d", len(got), len(want))
	}
	for i := range want {
		g, _ := got[i].AppendJSON(nil)
		w, _ := want[i].AppendJSON(nil)
		if !bytes.Equal(g, w) {
			t.Fatalf("event %d (seq %d) differs: %d bytes stored, %d appended", i, want[i].Seq, len(g), len(w))
		}
	}
}

// TestLargeToolResultInOneWindow: a 5 MiB tool/result with small siblings in one 200 ms window is
// stored (its data offloaded to agentlog_blobs) and read back in order and byte-identical; the
// replace of it in a later window looks it up through the log, blob included.
func TestLargeToolResultInOneWindow(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	w, err := p.Create(ctxT(t), header("big"))
	if err != nil {
		t.Fatal(err)
	}
	window := fixtureEvents(t, 5)
	window = append(window, bigToolResult(t, 5<<20))
	for _, x := range window {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(DefaultWindow)
	if err := w.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	recs := e.records(t, "big")
	if len(recs) != 1 || recs[0].header.Get(wire.HeaderFormat) != wire.RecordFormatChunks {
		t.Fatalf("%d records (first: %v), want one record of format 2", len(recs), recs[0].header)
	}
	rest := fixtureEvents(t, 9)[6:]
	for _, x := range rest {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	sameLines(t, e.stored(t, "big"), append(window, rest...))
}

// TestOversizedEventRefusedAtAppend: an event over Options.MaxEventBytes is refused by Append
// with ErrEventTooLarge (rule event-too-large) naming the session, the seq and the limit; it
// never enters the window, so the session's later events are still written; Abort drops what is
// pending without writing it.
func TestOversizedEventRefusedAtAppend(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p, err := New(e.store, e.nc, Options{WriterID: "w1", Now: clk.Now, RetryBudget: 300 * time.Millisecond, MaxEventBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p.after = clk.AfterFunc
	t.Cleanup(func() { _ = p.Close(ctxT(t)) })
	w, err := p.Create(ctxT(t), header("big"))
	if err != nil {
		t.Fatal(err)
	}
	big := ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"pad":"`+strings.Repeat("x", 2<<20)+`"}}`)
	err = w.Append(big)
	var se *session.Error
	if !errors.Is(err, store.ErrEventTooLarge) || !errors.As(err, &se) || se.Rule != session.RuleEventTooLarge ||
		!strings.Contains(err.Error(), "2097152 bytes") || !strings.Contains(err.Error(), `session "big" seq 0`) {
		t.Fatalf("Append of an oversized event: %v; want ErrEventTooLarge naming the session, seq, rule and limit", err)
	}
	for _, x := range fixtureEvents(t, 2) {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got := e.stored(t, "big"); len(got) != 2 {
		t.Fatalf("stored %d events, want 2", len(got))
	}

	// Abort drops pending events: nothing more is written.
	more := fixtureEvents(t, 4)[2:]
	for _, x := range more {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if uncertain := w.Abort(); uncertain {
		t.Fatal("Abort with no write in flight reported an uncertain outcome")
	}
	if err := w.Append(fixtureEvents(t, 5)[4]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Abort: %v, want ErrClosed", err)
	}
	if got := e.stored(t, "big"); len(got) != 2 {
		t.Fatalf("after Abort: stored %d events, want 2", len(got))
	}
	if _, err := New(e.store, e.nc, Options{MaxEventBytes: -1}); err == nil {
		t.Fatal("New with a negative MaxEventBytes succeeded")
	}
}
