package publisher

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

var quotedSession = regexp.MustCompile(`session "((?:[^"\\]|\\.)*)"`)

// repeatedPrefix returns what msg repeats, if anything: a package prefix (`agentlog: `,
// `publisher: `, `jetstream: `) twice, or the same `session "X"` twice (ARCHITECTURE.md, Errors).
func repeatedPrefix(msg string) string {
	for _, p := range []string{"agentlog: ", "publisher: ", "jetstream: "} {
		if strings.Count(msg, p) > 1 {
			return p
		}
	}
	seen := map[string]bool{}
	for _, m := range quotedSession.FindAllString(msg, -1) {
		if seen[m] {
			return m
		}
		seen[m] = true
	}
	return ""
}

func TestRepeatedPrefix(t *testing.T) {
	for msg, want := range map[string]string{
		`publisher: open session "x": read log: agentlog: read session "x": boom`: `session "x"`,
		`publisher: session "x": publisher: writer closed`:                        "publisher: ",
		`agentlog: a: agentlog: b`:                                                "agentlog: ",
		`publisher: open: read session "x" after stream seq 3: session "y" seq 2`: "",
	} {
		if got := repeatedPrefix(msg); got != want {
			t.Errorf("repeatedPrefix(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestErrorTextsNameThingsOnce walks representative error paths of the publisher (and the
// jetstream errors it passes on) and checks that no message repeats a prefix or the session.
func TestErrorTextsNameThingsOnce(t *testing.T) {
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)
	var errs []error
	add := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		errs = append(errs, err)
	}

	// Open of a missing session; Open of a stored log that breaks a rule; a jetstream read error.
	_, err := p.Open(ctx, "nobody")
	add("Open missing", err)
	bad := []session.Event{
		ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`),
		ev(t, `{"type":"user/message","seq":1,"time":2,"data":{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}}`),
	}
	if _, err := storetest.Session(e.store, "broken").Append(ctx, 0, bad, store.WithMsgID("raw.1")); err != nil {
		t.Fatal(err)
	}
	_, err = p.Open(ctx, "broken")
	add("Open broken", err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Open(cctx, "broken")
	add("Open with a canceled context", err)
	_, _, err = storetest.ReadAll(cctx, storetest.Session(e.store, "broken"))
	add("Read with a canceled context", err)
	_, err = storetest.Header(storetest.Session(e.store, "nobody").Info(ctx))
	add("GetSession missing", err)
	_, err = p.Open(ctx, "")
	add("Open empty id", err)
	// Create of an id the store cannot hold: a *session.Error naming the id and the rule, as every
	// refusal ([rule X]), under the one prefix.
	for _, c := range []struct {
		id   string
		rule session.Rule
	}{{"", session.RuleIDEmpty}, {strings.Repeat("x", wire.MaxSessionIDBytes+1), session.RuleIDTooLong}, {"bad\xff", session.RuleIDUTF8}} {
		_, err := p.Create(ctx, header(c.id))
		if !errors.Is(err, &session.Error{Rule: c.rule}) || !strings.HasPrefix(err.Error(), "publisher: create: ") || !strings.HasSuffix(err.Error(), "[rule "+string(c.rule)+"]") {
			t.Errorf("Create(%.50q): %v; want a *session.Error of rule %s under publisher: create:", c.id, err, c.rule)
		}
		add("Create invalid id", err)
	}

	// Create twice; a second writer in one publisher; Append of a bad event, an oversized one.
	w, err := p.Create(ctx, header("w"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.publisher(t, "w2", clk).Create(ctx, header("w"))
	add("Create existing", err)
	_, err = p.Open(ctx, "w")
	add("Open already open", err)
	add("Append bad seq", w.Append(ev(t, `{"type":"turn/start","seq":5,"time":1,"data":{"turn":1}}`)))
	add("Append bad surfaceOp", w.Append(bad[1]))
	capped, err := New(e.store, e.nc, Options{WriterID: "wcap", Now: clk.Now, MaxEventBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close(ctx)
	wc, err := capped.Create(ctx, header("wcap"))
	if err != nil {
		t.Fatal(err)
	}
	add("Append oversized", wc.Append(ev(t, `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"pad":"`+strings.Repeat("x", 2048)+`"}}`)))

	// A closed writer; a closed publisher.
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	add("Append after Close", w.Append(bad[0]))
	pc := e.publisher(t, "w3", clk)
	if err := pc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = pc.Create(ctx, header("late"))
	add("Create after Publisher.Close", err)

	// A live session; a fenced writer: A writes, B takes the session over, A's next write fails.
	pa, pb := e.publisher(t, "wa", clk), e.publisher(t, "wb", clk)
	wa, err := pa.Create(ctx, header("shared"))
	if err != nil {
		t.Fatal(err)
	}
	if err := wa.Append(bad[0]); err != nil {
		t.Fatal(err)
	}
	if err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = pb.Open(ctx, "shared")
	add("Open of a live session", err)
	if _, err := pb.Open(ctx, "shared", Takeover()); err != nil {
		t.Fatal(err)
	}
	if err := wa.Append(ev(t, `{"type":"turn/end","seq":1,"time":3,"data":{"turn":1,"reason":{"kind":"completed"}}}`)); err != nil {
		t.Fatal(err)
	}
	add("Flush into a conflict", wa.Flush(ctx))
	add("Append when fenced", wa.Append(ev(t, `{"type":"turn/start","seq":2,"time":4,"data":{"turn":2}}`)))
	add("Close when fenced", wa.Close(ctx))

	for _, err := range errs {
		msg := err.Error()
		t.Log(msg)
		if r := repeatedPrefix(msg); r != "" {
			t.Errorf("%q repeats %q", msg, r)
		}
		if strings.Contains(msg, "(rule ") {
			t.Errorf("%q names its rule as (rule X), not as every refusal does, [rule X]", msg)
		}
	}
}
