package publisher

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentlog/agentlog/session"
)

// textEvents is a turn whose user message ends in a lone surrogate escape and whose tool result
// ends in a byte-cut emoji (F0 9F 98).
func textEvents(t *testing.T) []session.Event {
	return []session.Event{
		ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`),
		ev(t, `{"type":"user/message","seq":1,"time":2,"data":{"role":"user","content":"lone \ud83d, pair \ud83d\ude00"},"surfaceOp":"append"}`),
		ev(t, `{"type":"tool/call","seq":2,"time":3,"data":{"turn":1,"step":1,"callId":"c1","name":"read"}}`),
		func() session.Event {
			e := ev(t, `{"type":"tool/result","seq":3,"time":4,"data":{"turn":1,"step":1,"message":{"role":"tool","content":[{"type":"tool-result","toolCallId":"c1","output":"CUT"}],"source":{"callId":"c1"}}},"surfaceOp":"append"}`)
			e.Data = []byte(strings.Replace(string(e.Data), "CUT", "cut \xf0\x9f\x98", 1))
			return e
		}(),
	}
}

// Live appends store neither ill-formed UTF-8 nor an unpaired surrogate escape: both become
// U+FFFD, counted per string; a surrogate pair is kept.
func TestAppendSanitizesText(t *testing.T) {
	e := newEnv(t)
	p := e.publisher(t, "w1", newFakeClock())
	ctx := ctxT(t)
	w, err := p.Create(ctx, header("text"))
	if err != nil {
		t.Fatal(err)
	}
	evs := textEvents(t)
	// A refused Append repaired nothing that counts: the user message without its surfaceOp.
	bad := evs[1]
	bad.SurfaceOp = nil
	if err := w.Append(evs[0]); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(bad); err == nil || w.SanitizedStrings() != 0 {
		t.Fatalf("refused Append: %v; SanitizedStrings %d, want 0", err, w.SanitizedStrings())
	}
	for _, x := range evs[1:] {
		if err := w.Append(x); err != nil {
			t.Fatalf("Append seq %d: %v", x.Seq, err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w.SanitizedStrings() != 2 || p.SanitizedStrings() != 2 {
		t.Errorf("SanitizedStrings: writer %d publisher %d, want 2", w.SanitizedStrings(), p.SanitizedStrings())
	}
	got := e.stored(t, "text")
	if len(got) != 4 {
		t.Fatalf("%d events stored", len(got))
	}
	for _, x := range got {
		if !utf8.Valid(x.Data) || strings.Contains(string(x.Data), `\ud83d,`) {
			t.Errorf("seq %d stored %s", x.Seq, x.Data)
		}
	}
	if want := "{\"role\":\"user\",\"content\":\"lone \uFFFD, pair \\ud83d\\ude00\"}"; string(got[1].Data) != want {
		t.Errorf("user message stored %s, want %s", got[1].Data, want)
	}
	if !strings.Contains(string(got[3].Data), "\"cut \uFFFD\"") {
		t.Errorf("tool result stored %s", got[3].Data)
	}
}

// With KeepLoneSurrogates (import), a lone surrogate escape is kept as the reference keeps it;
// ill-formed UTF-8 still becomes U+FFFD, as the reference reads it.
func TestAppendKeepLoneSurrogates(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	p, err := New(e.store, e.nc, Options{WriterID: "w1", Now: clk.Now, KeepLoneSurrogates: true})
	if err != nil {
		t.Fatal(err)
	}
	p.after = clk.AfterFunc
	ctx := ctxT(t)
	t.Cleanup(func() { _ = p.Close(ctx) })
	w, err := p.Create(ctx, header("keep"))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range textEvents(t) {
		if err := w.Append(x); err != nil {
			t.Fatalf("Append seq %d: %v", x.Seq, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if w.SanitizedStrings() != 1 {
		t.Errorf("SanitizedStrings %d, want 1 (the cut emoji)", w.SanitizedStrings())
	}
	got := e.stored(t, "keep")
	if string(got[1].Data) != `{"role":"user","content":"lone \ud83d, pair \ud83d\ude00"}` {
		t.Errorf("user message stored %s", got[1].Data)
	}
	if !strings.Contains(string(got[3].Data), "\"cut \uFFFD\"") || !utf8.Valid(got[3].Data) {
		t.Errorf("tool result stored %s", got[3].Data)
	}
}
