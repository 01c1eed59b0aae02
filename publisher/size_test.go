package publisher

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/jetstream"
)

// TestOversizedEventRefusedAtAppend: an event that could not fit in any record is refused by
// Append with ErrEventTooLarge naming its size and the limit; it never enters the window, so the
// session's later events are still written; Abort drops what is pending without writing it.
func TestOversizedEventRefusedAtAppend(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	w, err := p.Create(ctxT(t), header("big"))
	if err != nil {
		t.Fatal(err)
	}
	big := ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"pad":"`+strings.Repeat("x", int(e.store.MaxMsgSize))+`"}}`)
	err = w.Append(big)
	if !errors.Is(err, jetstream.ErrEventTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(e.store.MaxMsgSize)) ||
		!strings.Contains(err.Error(), `session "big" seq 0`) {
		t.Fatalf("Append of an oversized event: %v; want ErrEventTooLarge naming the session, seq and limit", err)
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
}
