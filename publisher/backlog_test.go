package publisher

import (
	"errors"
	"testing"
)

// TestBacklogCap: with the store failing, events stay pending until Options.MaxPendingBytes; the
// next Append is refused with a *BacklogError (ErrBacklog, naming the session, seq, counts and the
// last failure) and not admitted; once a Flush succeeds the backlog is empty and Append works again.
func TestBacklogCap(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)
	all := fixtureEvents(t, len(fixture))
	limit := eventBytes(all[0]) + eventBytes(all[1]) + eventBytes(all[2])
	p.opts.MaxPendingBytes = limit
	w, err := p.Create(ctx, header("capped"))
	if err != nil {
		t.Fatal(err)
	}
	orig := setMaxMsgSize(t, e, 16) // every write is refused
	for _, x := range all[:3] {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err == nil {
		t.Fatal("Flush succeeded against a refusing stream")
	}
	err = w.Append(all[3])
	var be *BacklogError
	if !errors.Is(err, ErrBacklog) || !errors.As(err, &be) {
		t.Fatalf("Append over the cap: %v, want a *BacklogError", err)
	}
	if be.Session != "capped" || be.Seq != 3 || be.Pending != 3 || be.PendingBytes != limit || be.Limit != limit || be.LastErr == nil {
		t.Fatalf("backlog error %+v", be)
	}
	if w.NextSeq() != 3 {
		t.Fatalf("refused event was admitted: NextSeq %d", w.NextSeq())
	}
	setMaxMsgSize(t, e, orig)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range all[3:] {
		if err := w.Append(x); err != nil {
			t.Fatalf("Append after the backlog drained: %v", err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.stored(t, "capped"); len(got) != len(all) {
		t.Fatalf("stored %d events, want %d", len(got), len(all))
	}
}
