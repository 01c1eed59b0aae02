package publisher

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

func TestCreateWritesNoRecord(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)

	w, err := p.Create(ctx, header("fresh"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if w.ID() != "fresh" || w.NextSeq() != 0 {
		t.Fatalf("new writer: id %q next seq %d", w.ID(), w.NextSeq())
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if recs := e.records(t, "fresh"); len(recs) != 0 {
		t.Fatalf("Create wrote %d records, want none", len(recs))
	}
	tail, err := storetest.Session(e.store, "fresh").Tail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tail.LastStreamSeq != 0 || tail.NextSeq != 0 {
		t.Fatalf("tail after Create: %+v", tail)
	}
	h, err := storetest.Header(storetest.Session(e.store, "fresh").Info(ctx))
	if err != nil || h.ID != "fresh" {
		t.Fatalf("metadata after Create: %+v, %v", h, err)
	}
}

func TestCreateTwice(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p1 := e.publisher(t, "w1", clk)
	p2 := e.publisher(t, "w2", clk)
	ctx := ctxT(t)
	if _, err := p1.Create(ctx, header("dup")); err != nil {
		t.Fatal(err)
	}
	_, err := p2.Create(ctx, header("dup"))
	if !errors.Is(err, ErrSessionExists) || !errors.Is(err, store.ErrSessionExists) {
		t.Fatalf("second Create: %v, want ErrSessionExists wrapping jetstream.ErrSessionExists", err)
	}
	if !strings.Contains(err.Error(), `"dup"`) {
		t.Fatalf("error does not name the session: %v", err)
	}
	// Same publisher, same id: refused without touching KV.
	if _, err := p1.Create(ctx, header("dup")); !errors.Is(err, ErrAlreadyOpen) {
		t.Fatalf("Create of an open session in the same publisher: %v, want ErrAlreadyOpen", err)
	}
}

func TestAppendFlushDurable(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)

	// Two sessions interleaved on one stream: guards are stream seqs, not session seqs.
	wa, err := p.Create(ctx, header("a"))
	if err != nil {
		t.Fatal(err)
	}
	wb, err := p.Create(ctx, header("b"))
	if err != nil {
		t.Fatal(err)
	}
	want := fixtureEvents(t, len(fixture))
	for i, x := range want {
		for _, w := range []*Writer{wa, wb} {
			if err := w.Append(x); err != nil {
				t.Fatalf("Append seq %d to %s: %v", i, w.ID(), err)
			}
			if i%3 == 2 {
				if err := w.Flush(ctx); err != nil {
					t.Fatalf("Flush %s: %v", w.ID(), err)
				}
				if got := w.DurableSeq(); got != int64(i+1) {
					t.Fatalf("%s durable seq %d after Flush, want %d", w.ID(), got, i+1)
				}
				if n := clk.Active(); n != 0 && w == wb {
					t.Fatalf("%d windows still open after Flush, want 0 (Flush consumes the window)", n)
				}
			}
		}
	}
	incs := map[string]string{"a": wa.Incarnation(), "b": wb.Incarnation()}
	if incs["a"] == "" || incs["a"] == incs["b"] {
		t.Fatalf("incarnations %q: want two distinct ones", incs)
	}
	for _, id := range []string{"a", "b"} {
		got := e.stored(t, id)
		if len(got) != len(want) {
			t.Fatalf("%s: read back %d events, want %d", id, len(got), len(want))
		}
		for i := range want {
			if err := sessiontest.SameEvent(got[i], want[i]); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		recs := e.records(t, id)
		if len(recs) != 3 {
			t.Fatalf("%s: %d records, want 3 (one per Flush)", id, len(recs))
		}
		for i, r := range recs {
			if r.events[0].Seq != int64(3*i) || len(r.events) != 3 {
				t.Fatalf("%s record %d: first seq %d, %d events", id, i, r.events[0].Seq, len(r.events))
			}
			wantID := fmt.Sprintf("w1.%s.%s.%d", tokenOf(t, id), incs[id], 3*i)
			if got := r.header.Get(njs.MsgIDHeader); got != wantID {
				t.Fatalf("%s record %d: Nats-Msg-Id %q, want %q", id, i, got, wantID)
			}
		}
	}
	// The writers' Surface follows the log (replace folded).
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wa.Append(ev(t, `{"type":"turn/start","seq":9,"time":1,"data":{"turn":2}}`)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}
}

func tokenOf(t *testing.T, id string) string {
	tok, err := wire.Token(id)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestWindowBatching drives the reference's vector "batching-window": 20 events 10 ms apart from
// t=0 with a 200 ms fixed window give one write at t=200 ms.
func TestWindowBatching(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)
	started := make(chan int64, 16)
	p.beforeWrite = func(_ string, first int64) { started <- first }

	w, err := p.Create(ctx, header("win"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if i > 0 {
			clk.Advance(10 * time.Millisecond) // t = 10*i ms: still inside the window opened at t=0
		}
		if _, err := w.Emit("note/x", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), EmitOptions{Ignorable: true}); err != nil {
			t.Fatalf("Emit %d: %v", i, err)
		}
		select {
		case s := <-started:
			t.Fatalf("a write of seq %d started at t=%d ms, inside the window", s, 10*i)
		default:
		}
	}
	if clk.Active() != 1 {
		t.Fatalf("%d windows open, want 1 (later events join without extending it)", clk.Active())
	}
	clk.Advance(10 * time.Millisecond) // t = 200 ms: the window ends
	if s := recv(t, started); s != 0 {
		t.Fatalf("first write starts at seq %d", s)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := e.records(t, "win")
	if len(recs) != 1 || len(recs[0].events) != 20 {
		t.Fatalf("got %d records (first with %d events), want one record of 20", len(recs), len(recs[0].events))
	}
	for i, x := range recs[0].events {
		if x.Seq != int64(i) || string(x.Data) != fmt.Sprintf(`{"i":%d}`, i) || x.Time != json.Number(fmt.Sprint(1785000000000+10*i)) || !x.Ignorable {
			t.Fatalf("event %d changed by batching: %+v", i, x)
		}
	}
	select {
	case s := <-started:
		t.Fatalf("unexpected extra write at seq %d", s)
	default:
	}
}

// TestWindowDuringWrite: events that arrive during a write start their own window; a window that
// ends before the write does is written right after it, and an event arriving after that window
// ended waits for its own window.
func TestWindowDuringWrite(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)
	started := make(chan int64, 16)
	gate := make(chan struct{})
	p.beforeWrite = func(_ string, first int64) {
		started <- first
		if first == 0 {
			<-gate
		}
	}
	w, err := p.Create(ctx, header("busy"))
	if err != nil {
		t.Fatal(err)
	}
	emit := func(i int) {
		t.Helper()
		if _, err := w.Emit("note/x", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), EmitOptions{Ignorable: true}); err != nil {
			t.Fatal(err)
		}
	}
	emit(0)
	emit(1)
	clk.Advance(200 * time.Millisecond)
	if s := recv(t, started); s != 0 {
		t.Fatalf("write 1 starts at %d", s)
	}
	emit(2) // during write 1: opens its own window
	if clk.Active() != 1 {
		t.Fatalf("event during a write opened %d windows, want 1", clk.Active())
	}
	clk.Advance(200 * time.Millisecond) // that window ends while write 1 is still in flight
	emit(3)                             // after it ended: a window of its own
	select {
	case s := <-started:
		t.Fatalf("write of seq %d started while another was in flight", s)
	default:
	}
	close(gate)
	if s := recv(t, started); s != 2 {
		t.Fatalf("write 2 starts at seq %d, want 2", s)
	}
	clk.Advance(200 * time.Millisecond)
	if s := recv(t, started); s != 3 {
		t.Fatalf("write 3 starts at seq %d, want 3", s)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs := e.records(t, "busy")
	var shape []string
	for _, r := range recs {
		shape = append(shape, fmt.Sprintf("%d+%d", r.events[0].Seq, len(r.events)))
	}
	if got := strings.Join(shape, " "); got != "0+2 2+1 3+1" {
		t.Fatalf("records %s, want 0+2 2+1 3+1", got)
	}
}

func TestInvalidEventRefused(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)
	w, err := p.Create(ctx, header("strict"))
	if err != nil {
		t.Fatal(err)
	}
	good := fixtureEvents(t, 2)
	if err := w.Append(good[0]); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		ev   session.Event
	}{
		{"surface type without surfaceOp", ev(t, `{"type":"user/message","seq":1,"time":1,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"x"}],"source":{"kind":"user"}}}`)},
		{"surfaceOp on a non-surface type", ev(t, `{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1},"surfaceOp":"append"}`)},
		{"replace of a missing node", ev(t, `{"type":"user/message","seq":1,"time":1,"data":{"id":"u1","role":"user","content":[],"source":{"kind":"user"}},"surfaceOp":{"op":"replace","start":0,"end":0},"sourceEventSeqs":[0]}`)},
		{"seq gap", ev(t, `{"type":"step/start","seq":5,"time":1,"data":{"turn":1,"step":1}}`)},
		{"seq repeat", ev(t, `{"type":"step/start","seq":0,"time":1,"data":{"turn":1,"step":1}}`)},
		{"no data", session.Event{Type: "step/start", Seq: 1, Time: "1"}},
		{"no type", session.Event{Seq: 1, Time: "1", Data: json.RawMessage(`{}`)}},
	}
	for _, b := range bad {
		err := w.Append(b.ev)
		if err == nil {
			t.Fatalf("%s: accepted", b.name)
		}
		se := mustAs[*session.Error](t, err)
		if se.Session != "strict" || se.Rule == "" || se.Seq != b.ev.Seq {
			t.Fatalf("%s: error %+v does not name the session, seq and rule", b.name, se)
		}
		if w.NextSeq() != 1 {
			t.Fatalf("%s: refused event moved NextSeq to %d", b.name, w.NextSeq())
		}
	}
	if _, err := w.Emit("user/message", json.RawMessage(`{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}`), EmitOptions{}); err == nil {
		t.Fatal("Emit of a surface type without surfaceOp accepted")
	}
	if err := w.Append(good[1]); err != nil {
		t.Fatalf("valid event after refusals: %v", err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.stored(t, "strict")
	if len(got) != 2 {
		t.Fatalf("stored %d events, want 2", len(got))
	}
	for i := range got {
		if err := sessiontest.SameEvent(got[i], good[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplaceLooksUpDurableTarget: a tool/result replace whose target is already durable (not in
// memory) is validated against the stored log.
func TestReplaceLooksUpDurableTarget(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p := e.publisher(t, "w1", clk)
	ctx := ctxT(t)
	w, err := p.Create(ctx, header("lookup"))
	if err != nil {
		t.Fatal(err)
	}
	all := fixtureEvents(t, len(fixture))
	for _, x := range all[:6] {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A replace that changes more than the inner result content is refused...
	badReplace := all[6]
	badReplace.Data = json.RawMessage(strings.Replace(string(all[6].Data), `"id":"r1"`, `"id":"r2"`, 1))
	if err := w.Append(badReplace); err == nil {
		t.Fatal("tool/result replace changing the message id accepted")
	}
	// ...and the valid one is accepted, with its target read back from the store.
	for _, x := range all[6:] {
		if err := w.Append(x); err != nil {
			t.Fatalf("seq %d: %v", x.Seq, err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	nodes := fmt.Sprint(w.surface.Nodes)
	gen := w.surface.ReplaceGeneration
	w.mu.Unlock()
	if nodes != "[1 3 6]" || gen != 1 {
		t.Fatalf("surface nodes %s generation %d, want [1 3 6] and 1 (oracle)", nodes, gen)
	}
}

func TestTwoWritersConflict(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	pa := e.publisher(t, "wa", clk)
	pb := e.publisher(t, "wb", clk)
	ctx := ctxT(t)

	wa, err := pa.Create(ctx, header("shared"))
	if err != nil {
		t.Fatal(err)
	}
	turn := []session.Event{
		ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`),
		ev(t, `{"type":"user/message","seq":1,"time":2,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`),
		ev(t, `{"type":"turn/end","seq":2,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}`),
	}
	for _, x := range turn {
		if err := wa.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Writer B resumes the same session: end-seed at seq 3.
	if _, err := pb.Open(ctx, "shared"); !errors.Is(err, ErrSessionLive) {
		t.Fatalf("Open while A is live: %v, want ErrSessionLive", err)
	}
	wb, err := pb.Open(ctx, "shared", Takeover())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if wb.NextSeq() != 4 {
		t.Fatalf("B next seq %d, want 4", wb.NextSeq())
	}
	// A still believes seq 3 is next: its write hits the guard.
	if err := wa.Append(ev(t, `{"type":"turn/start","seq":3,"time":4,"data":{"turn":2}}`)); err != nil {
		t.Fatal(err)
	}
	err = wa.Flush(ctx)
	if !errors.Is(err, ErrConflict) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("A Flush: %v, want ErrConflict", err)
	}
	we := mustAs[*WriteError](t, err)
	if we.Session != "shared" || we.FirstSeq != 3 || we.LastSeq != 3 {
		t.Fatalf("conflict error %+v", we)
	}
	select {
	case rep := <-wa.Errors():
		if !errors.Is(rep, ErrConflict) {
			t.Fatalf("Errors delivered %v", rep)
		}
	default:
		t.Fatal("conflict not reported on Errors")
	}
	// Fenced: every later call.
	if err := wa.Append(ev(t, `{"type":"turn/start","seq":4,"time":4,"data":{"turn":2}}`)); !errors.Is(err, ErrFenced) {
		t.Fatalf("Append after conflict: %v, want ErrFenced", err)
	}
	if _, err := wa.Emit("turn/start", json.RawMessage(`{"turn":2}`), EmitOptions{}); !errors.Is(err, ErrFenced) {
		t.Fatalf("Emit after conflict: %v, want ErrFenced", err)
	}
	if err := wa.Flush(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("Flush after conflict: %v, want ErrFenced", err)
	}
	if err := wa.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("Close after conflict: %v, want ErrFenced", err)
	}
	// B keeps writing; the log stays contiguous and valid.
	if _, err := wb.Emit("turn/start", json.RawMessage(`{"turn":2}`), EmitOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.stored(t, "shared")
	var types []string
	for i, x := range got {
		if x.Seq != int64(i) {
			t.Fatalf("log not contiguous at index %d: seq %d", i, x.Seq)
		}
		types = append(types, x.Type)
	}
	if s := strings.Join(types, " "); s != "turn/start user/message turn/end session/end-seed turn/start" {
		t.Fatalf("log %s", s)
	}
	if _, err := session.Load("shared", got); err != nil {
		t.Fatalf("stored log refused: %v", err)
	}
}

// openTurnRepair is the oracle's `repair` for fixture[:5] (node /tmp/oracle/oracle.mjs): the tool
// call was recorded (seq 4) without a result.
var openTurnRepair = []string{
	`{"type":"tool/result","seq":5,"time":1785000000004,"data":{"turn":1,"step":1,"message":{"id":"interrupted-tool-result-call-1-5","role":"user","source":{"kind":"tool","callId":"call-1"},"content":[{"type":"tool-result","toolCallId":"call-1","isError":true,"content":[{"type":"text","text":"The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly."}]}]},"error":{"name":"ToolOutcomeUnknownError","code":"TOOL_OUTCOME_UNKNOWN"}},"surfaceOp":"append","sourceEventSeqs":[4]}`,
	`{"type":"step/end","seq":6,"time":1785000000004,"data":{"turn":1,"step":1}}`,
	`{"type":"turn/end","seq":7,"time":1785000000004,"data":{"turn":1,"reason":{"kind":"interrupted"}}}`,
}

func TestOpenRepairsOpenTurn(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	pa := e.publisher(t, "wa", clk)
	wa, err := pa.Create(ctx, header("crashed"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fixtureEvents(t, 5)
	for _, x := range prefix {
		if err := wa.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(e.records(t, "crashed"))

	// "Crash": a new publisher resumes the session.
	clk.Advance(time.Hour)
	pb := e.publisher(t, "wb", clk)
	wb, err := pb.Open(ctx, "crashed", Takeover()) // wa's process "died": its lease is still live
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	recs := e.records(t, "crashed")
	if len(recs) != before+1 {
		t.Fatalf("Open wrote %d records, want exactly 1", len(recs)-before)
	}
	written := recs[len(recs)-1].events
	wantRepair := session.Repair(prefix)
	if len(wantRepair) != len(openTurnRepair) {
		t.Fatalf("session.Repair gives %d closers, the oracle %d", len(wantRepair), len(openTurnRepair))
	}
	if len(written) != len(wantRepair)+1 {
		t.Fatalf("resume record has %d events, want %d closers + end-seed", len(written), len(wantRepair))
	}
	for i, oracleLine := range openTurnRepair {
		got := written[i]
		if err := sessiontest.SameEvent(got, wantRepair[i]); err != nil {
			t.Fatalf("closer %d differs from session.Repair: %v", i, err)
		}
		gotLine, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if !sessiontest.JSONEqual(t, gotLine, []byte(oracleLine)) {
			t.Fatalf("closer %d\n%s\ndiffers from the oracle's repair\n%s", i, gotLine, oracleLine)
		}
	}
	marker := written[len(written)-1]
	if marker.Type != "session/end-seed" || marker.Seq != 8 || string(marker.Data) != "{}" ||
		marker.Time != json.Number(fmt.Sprint(clk.Now().UnixMilli())) {
		t.Fatalf("marker %+v, want session/end-seed at seq 8 with data {} and time now", marker)
	}
	if wb.NextSeq() != 9 || wb.DurableSeq() != 9 {
		t.Fatalf("after Open: next seq %d durable %d, want 9", wb.NextSeq(), wb.DurableSeq())
	}
	if _, err := session.Load("crashed", e.stored(t, "crashed")); err != nil {
		t.Fatalf("repaired log refused: %v", err)
	}
	if err := pb.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Reopening again: the log ends with end-seed and the turn is closed, so nothing is written.
	pc := e.publisher(t, "wc", clk)
	wc, err := pc.Open(ctx, "crashed")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.records(t, "crashed")); n != len(recs) {
		t.Fatalf("Open of a log ending with end-seed wrote %d records", n-len(recs))
	}
	if wc.NextSeq() != 9 {
		t.Fatalf("next seq %d, want 9", wc.NextSeq())
	}
}

func TestOpenEndSeedOnly(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	pa := e.publisher(t, "wa", clk)

	// Created, never written: resume marks seq 0 (reference: Session.create(id, [])).
	if _, err := pa.Create(ctx, header("empty")); err != nil {
		t.Fatal(err)
	}
	// A closed log: resume appends only the marker at seq len.
	wa, err := pa.Create(ctx, header("closed"))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range fixtureEvents(t, len(fixture)) {
		if err := wa.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := pa.Close(ctx); err != nil {
		t.Fatal(err)
	}

	pb := e.publisher(t, "wb", clk)
	for id, wantSeq := range map[string]int64{"empty": 0, "closed": int64(len(fixture))} {
		w, err := pb.Open(ctx, id)
		if err != nil {
			t.Fatalf("Open %s: %v", id, err)
		}
		got := e.stored(t, id)
		last := got[len(got)-1]
		if len(got) != int(wantSeq)+1 || last.Type != "session/end-seed" || last.Seq != wantSeq {
			t.Fatalf("%s: %d events, last %s at %d; want end-seed at %d", id, len(got), last.Type, last.Seq, wantSeq)
		}
		if w.NextSeq() != wantSeq+1 {
			t.Fatalf("%s: next seq %d", id, w.NextSeq())
		}
	}
}

func TestOpenRefusals(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)

	_, err := p.Open(ctx, "nobody")
	if !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("Open of an unknown session: %v, want ErrSessionNotFound", err)
	}
	// Same id can be retried after a failed Open (the reservation is released).
	if _, err := p.Open(ctx, "nobody"); errors.Is(err, ErrAlreadyOpen) {
		t.Fatal("failed Open left the session reserved")
	}

	// A stored log that breaks a rule (written around the publisher): refused, nothing written.
	bad := []session.Event{
		ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`),
		ev(t, `{"type":"user/message","seq":1,"time":2,"data":{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}}`),
	}
	if _, err := storetest.Session(e.store, "broken").Append(ctx, 0, bad, store.WithMsgID("raw.1")); err != nil {
		t.Fatal(err)
	}
	_, err = p.Open(ctx, "broken")
	se := mustAs[*session.Error](t, err)
	if se.Seq != 1 || se.Rule == "" {
		t.Fatalf("refusal %+v does not name seq 1 and the rule", se)
	}
	if n := len(e.records(t, "broken")); n != 1 {
		t.Fatalf("refused Open wrote: %d records", n)
	}
}

// TestFailureNeverAnEvent: a failed write keeps its events pending (ahead of newer ones, in
// order), is reported once on Errors and as an agent/error report, and pauses automatic retry —
// even for a window that ended during the failed write; Flush retries at once; the next new event's
// window writes everything. Nothing about the failure enters the log.
func TestFailureNeverAnEvent(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)
	started := make(chan int64, 16)
	gate := make(chan struct{})
	p.beforeWrite = func(_ string, first int64) {
		started <- first
		if first == 3 {
			<-gate
		}
	}
	sub, err := e.connect(t).SubscribeSync(wire.ErrorsPrefix + ".>")
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.Create(ctx, header("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	all := fixtureEvents(t, len(fixture))
	for _, x := range all[:3] {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, started)

	// Make the stream refuse our records (a real server-side refusal: max message size).
	orig := setMaxMsgSize(t, e, 16)
	for _, x := range all[3:5] {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(200 * time.Millisecond)
	if s := recv(t, started); s != 3 {
		t.Fatalf("write starts at %d", s)
	}
	// During the (doomed) write, seq 5 arrives and its window ends; then seq 6 arrives and its
	// window is still open when the write fails.
	if err := w.Append(all[5]); err != nil {
		t.Fatal(err)
	}
	clk.Advance(200 * time.Millisecond)
	if err := w.Append(all[6]); err != nil {
		t.Fatal(err)
	}
	close(gate)
	rep := recv(t, w.Errors())
	we := mustAs[*WriteError](t, rep)
	if we.Session != "flaky" || we.FirstSeq != 3 || we.LastSeq != 4 {
		t.Fatalf("reported %+v, want session flaky seqs 3..4", we)
	}
	msg, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no agent/error report: %v", err)
	}
	var report ErrorReport
	if err := json.Unmarshal(msg.Data, &report); err != nil {
		t.Fatal(err)
	}
	if msg.Subject != wire.ErrorsPrefix+"."+tokenOf(t, "flaky") || report.Type != "agent/error" ||
		report.Session != "flaky" || report.FirstSeq != 3 || report.LastSeq != 4 || report.Error == "" ||
		report.Time != clk.Now().UnixMilli() {
		t.Fatalf("report on %s: %+v", msg.Subject, report)
	}
	// Retry paused: no window open, time passing writes nothing (neither seq 5 whose window ended
	// during the write, nor seq 6 whose window was open).
	if clk.Active() != 0 {
		t.Fatalf("%d windows open after a failure, want 0 (retry paused)", clk.Active())
	}
	clk.Advance(time.Hour)
	if w.DurableSeq() != 3 {
		t.Fatalf("durable seq %d", w.DurableSeq())
	}
	// Flush retries at once — the failed events then seqs 5 and 6, as one record — and returns the
	// error when the retry fails too.
	err = w.Flush(ctx)
	if we := mustAs[*WriteError](t, err); we.FirstSeq != 3 || we.LastSeq != 6 {
		t.Fatalf("Flush during the failure: %v, want a failed write of seqs 3..6", err)
	}
	if s := recv(t, started); s != 3 {
		t.Fatalf("the retry starts at %d, want 3 (the only write since the failure)", s)
	}
	if rep := recv(t, w.Errors()); mustAs[*WriteError](t, rep).LastSeq != 6 { // the retry's failure, reported once
		t.Fatalf("retry failure reported as %v", rep)
	}
	select {
	case extra := <-w.Errors():
		t.Fatalf("failure reported twice: %v", extra)
	default:
	}

	// Repair the stream; the next new event opens a fresh window that writes the failed events
	// ahead of it, in order, as one record.
	setMaxMsgSize(t, e, orig)
	if err := w.Append(all[7]); err != nil {
		t.Fatal(err)
	}
	if clk.Active() != 1 {
		t.Fatalf("new event after a failure opened %d windows, want 1", clk.Active())
	}
	clk.Advance(200 * time.Millisecond)
	if s := recv(t, started); s != 3 {
		t.Fatalf("write after the fresh window starts at %d", s)
	}
	for _, x := range all[8:] {
		if err := w.Append(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.stored(t, "flaky")
	if len(got) != len(all) {
		t.Fatalf("stored %d events, want %d", len(got), len(all))
	}
	for i := range all {
		if err := sessiontest.SameEvent(got[i], all[i]); err != nil {
			t.Fatal(err)
		}
	}
	recs := e.records(t, "flaky")
	var shape []string
	for _, r := range recs {
		shape = append(shape, fmt.Sprintf("%d+%d", r.events[0].Seq, len(r.events)))
	}
	if s := strings.Join(shape, " "); s != "0+3 3+5 8+1" {
		t.Fatalf("records %s, want 0+3 3+5 8+1", s)
	}
	for _, x := range got {
		if strings.Contains(x.Type, "error") {
			t.Fatalf("a failure entered the log: %+v", x)
		}
	}
}

// setMaxMsgSize sets the AGENTLOG stream's max_msg_size (bytes) and returns the previous value.
func setMaxMsgSize(t *testing.T, e *env, n int32) int32 {
	t.Helper()
	ctx := ctxT(t)
	info, err := e.store.Stream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgSize = n
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("update stream max_msg_size %d: %v", n, err)
	}
	return info.Config.MaxMsgSize
}

func TestErrorsChannelDropsOldest(t *testing.T) {
	p := offline(t, "w")
	w := newWriter(p, storetest.Session(p.store, "s"), "", session.NewSurface(), acked{})
	for i := range errorsBuffer + 5 {
		w.mu.Lock()
		w.reportLocked(&WriteError{Session: "s", FirstSeq: int64(i), LastSeq: int64(i), Err: errors.New("x")})
		w.mu.Unlock()
	}
	if w.DroppedErrors() != 5 {
		t.Fatalf("dropped %d, want 5", w.DroppedErrors())
	}
	first := (<-w.Errors()).(*WriteError)
	if first.FirstSeq != 5 {
		t.Fatalf("oldest kept report is seq %d, want 5", first.FirstSeq)
	}
}

func TestOwnTail(t *testing.T) {
	cases := []struct {
		tail store.Tail
		want bool
	}{
		{store.Tail{LastMsgID: "w.t.3", NextSeq: 6}, true},
		{store.Tail{LastMsgID: "w.t.3", NextSeq: 7}, false},  // not ending at our last seq
		{store.Tail{LastMsgID: "w.t.31", NextSeq: 6}, false}, // another record's id
		{store.Tail{LastMsgID: "w.t.3.2", NextSeq: 6}, true}, // split-part suffix
		{store.Tail{LastMsgID: "x.t.3", NextSeq: 6}, false},
		{store.Tail{LastMsgID: "", NextSeq: 6}, false},
	}
	for _, c := range cases {
		if got := ownTail(c.tail, "w.t.3", 5); got != c.want {
			t.Errorf("ownTail(%+v) = %v, want %v", c.tail, got, c.want)
		}
	}
}

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("wrapped: %w", njs.ErrNoStreamResponse), true},
		{nats.ErrTimeout, true},
		{&njs.APIError{Code: 503, ErrorCode: 10008}, true},
		{&njs.APIError{Code: 429, ErrorCode: 10167}, true},
		{&njs.APIError{Code: 409, ErrorCode: 10158}, true},
		{&njs.APIError{Code: 400, ErrorCode: 10054}, false},
		{fmt.Errorf("x: %w", store.ErrConflict), false},
		{errors.New("other"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestDuplicateAfterLostAck(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)
	evs := fixtureEvents(t, 2)
	// The first try was stored but its ack was lost; the retry carries the same Nats-Msg-Id.
	msgID := p.msgID(tokenOf(t, "lost"), "inc", 0)
	first, err := storetest.Session(e.store, "lost").Append(ctx, 0, evs, store.WithMsgID(msgID))
	if err != nil {
		t.Fatal(err)
	}
	seq, _, err := p.writeRecord(ctx, storetest.Session(p.store, "lost"), acked{nextSeq: evs[0].Seq}, p.connGen(), msgID, evs)
	if err != nil {
		t.Fatalf("retry after a lost ack: %v", err)
	}
	if seq != first.StreamSeq {
		t.Fatalf("retry reports stream seq %d, the record is at %d", seq, first.StreamSeq)
	}
	if n := len(e.stored(t, "lost")); n != 2 {
		t.Fatalf("events appended twice: %d stored", n)
	}
	// A stale guard whose tail is someone else's record: conflict.
	if _, _, err := p.writeRecord(ctx, storetest.Session(p.store, "lost"), acked{nextSeq: evs[0].Seq}, p.connGen(), p.msgID(tokenOf(t, "lost"), "inc", 7), evs); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale guard: %v, want ErrConflict", err)
	}
}
