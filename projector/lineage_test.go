package projector

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

// usageTurn is one turn (turn, from seq) whose one step reports input tokens in a usage chunk.
func usageTurn(turn, seq, input int64) []session.Event {
	d := func(s string) string { return fmt.Sprintf(s, turn) }
	return []session.Event{
		ev(seq, "turn/start", d(`{"turn":%d}`), "", ""),
		userMsg(seq+1, fmt.Sprintf("u%d", turn), "go on"),
		ev(seq+2, "step/start", d(`{"turn":%d,"step":1}`), "", ""),
		ev(seq+3, "assistant/chunk", fmt.Sprintf(`{"turn":%d,"step":1,"chunk":{"type":"usage","usage":{"inputTokens":%d,"outputTokens":1}}}`, turn, input), "", ""),
		ev(seq+4, "assistant/message", fmt.Sprintf(`{"turn":%d,"step":1,"message":{"id":"a%d","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}}}`, turn, turn), "append", ""),
		ev(seq+5, "step/end", d(`{"turn":%d,"step":1}`), "", ""),
		ev(seq+6, "turn/end", d(`{"turn":%d,"reason":{"kind":"completed"}}`), "", ""),
	}
}

// A fork chain parent → child → grandchild, forked by the forker and projected by a projector:
// usage and turns count the whole log as before, and split it into the session's own events
// (seq >= the header's seedLength) and the seed it inherited. The parent spends 480 input tokens,
// the child 160 of its own; the grandchild has no event past its seed.
func TestLineageOwnAndInherited(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	f, err := forker.New(e.store, e.nc, forker.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop() })
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}

	e.create("parent")
	e.appendRecord("parent", usageTurn(1, 0, 480))
	fork := func(source, child string) int64 {
		t.Helper()
		res, err := c.Fork(ctx(t), client.ForkRequest{Source: source, Child: child})
		if err != nil || res.ParentSession != source {
			t.Fatalf("fork %s -> %s: %+v %v", source, child, res, err)
		}
		tail, err := storetest.Session(e.store, child).Tail(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		e.tails[child] = tail.LastStreamSeq
		return tail.NextSeq
	}
	next := fork("parent", "child") // seed 0..6, end-seed at 7
	e.appendRecord("child", usageTurn(2, next, 160))
	last := fork("child", "grandchild") - 1

	check := func(id string, minSeq int64, total, own, inherited, seed int64, turns, ownTurns int64) {
		t.Helper()
		r, err := queryProjection(ctx(t), e.nc, id, UnitUsage, minSeq)
		if err != nil {
			t.Fatalf("%s usage: %v", id, err)
		}
		var u UsageView
		if err := json.Unmarshal(r.View, &u); err != nil {
			t.Fatal(err)
		}
		if u.InputTokens != total || u.Own.InputTokens != own || u.Inherited.InputTokens != inherited || u.SeedLength != seed ||
			u.Steps != turns || u.Own.Steps != ownTurns || u.Inherited.Steps != turns-ownTurns {
			t.Errorf("%s usage %s: want input %d, own %d, inherited %d, seedLength %d, steps %d (own %d)", id, r.View, total, own, inherited, seed, turns, ownTurns)
		}
		r, err = queryProjection(ctx(t), e.nc, id, UnitTurns, minSeq)
		if err != nil {
			t.Fatalf("%s turns: %v", id, err)
		}
		var tu TurnsState
		if err := json.Unmarshal(r.View, &tu); err != nil {
			t.Fatal(err)
		}
		if tu.Count != turns || tu.OwnCount != ownTurns || tu.InheritedCount != turns-ownTurns || tu.SeedLength != seed {
			t.Errorf("%s turns %s: want count %d, own %d", id, r.View, turns, ownTurns)
		}
	}
	check("parent", 6, 480, 480, 0, 0, 1, 1)
	check("child", next+6, 640, 160, 480, 7, 2, 1)
	check("grandchild", last, 640, 0, 640, last, 2, 0)

	// The same from the log alone, through FoldSession with the stored header.
	reg, _ := NewRegistry()
	for _, id := range []string{"child", "grandchild"} {
		h, err := storetest.Header(storetest.Session(e.store, id).Info(ctx(t)))
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := storetest.ReadAll(ctx(t), storetest.Session(e.store, id))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := FoldSession(reg, h, evs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := querySnapshot(ctx(t), e.nc, id, -1)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{UnitUsage, UnitTurns} {
			if string(got.Units[k].View) != string(rep.Units[k].View) {
				t.Errorf("%s %s: snapshot %s, FoldSession %s", id, k, got.Units[k].View, rep.Units[k].View)
			}
		}
	}
}
