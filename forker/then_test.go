package forker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// TestForkThenEvents: a fork request's then-events go into the child after its end-seed, in the
// fork's own write; their seqs are assigned when left out, a tool/result replace of a seed event
// reads its target from the source, and the reply says where they went.
func TestForkThenEvents(t *testing.T) {
	e := newEnv(t)
	call := `{"turn":1,"step":1,"callId":"c1","name":"cat","arguments":"{}"}`
	result := func(text string) string {
		return `{"turn":1,"step":1,"message":{"id":"r1","role":"user","source":{"kind":"tool","callId":"c1"},"content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"` + text + `"}]}]}}`
	}
	src := []session.Event{
		{Type: "turn/start", Seq: 0, Time: "1", Data: json.RawMessage(`{"turn":1}`)},
		{Type: "tool/call", Seq: 1, Time: "2", Data: json.RawMessage(call)},
		{Type: "tool/result", Seq: 2, Time: "3", Data: json.RawMessage(result("a very long file")), SurfaceOp: json.RawMessage(`"append"`)},
		{Type: "turn/end", Seq: 3, Time: "4", Data: json.RawMessage(`{"turn":1,"reason":{"kind":"completed"}}`)},
	}
	if err := e.store.CreateSession(ctx(t), session.Header{ID: "src", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	e.appendRecords("src", src, 2)
	then := []json.RawMessage{
		// The tool result of the seed, shortened (a compaction of one tool result).
		json.RawMessage(`{"type":"tool/result","data":` + result("(elided)") + `,"surfaceOp":{"op":"replace","start":2,"end":2},"sourceEventSeqs":[2]}`),
		json.RawMessage(`{"type":"turn/start","seq":6,"time":99,"data":{"turn":2}}`),
	}
	res, err := e.fork(client.ForkRequest{Source: "src", Child: "kid", Then: then})
	if err != nil {
		t.Fatal(err)
	}
	if res.Then == nil || *res.Then != (client.ThenResult{Events: 2, FirstSeq: 5, LastSeq: 6}) || res.SeedLength != 4 {
		t.Fatalf("fork result %+v (then %+v)", res, res.Then)
	}
	_, got, msgs := e.child("kid")
	if len(got) != 7 || got[4].Type != "session/end-seed" || got[5].Time != json.Number("1786000000000") || got[6].Time != "99" {
		t.Fatalf("child events: %+v", got)
	}
	if len(msgs) != 1 || !strings.Contains(string(msgs[0]), "(elided)") {
		t.Fatalf("child messages: %s", msgs)
	}
	records := 0
	if _, err := storetest.Session(e.store, "kid").Records(ctx(t), func(store.Record) error { records++; return nil }); err != nil || records != 1 {
		t.Fatalf("the child has %d records (%v), want the seed, end-seed and then-events in one", records, err)
	}
}

// TestForkThenRefusedLeavesNothing: a then-event that breaks a rule, or carries a seq other than
// its own, refuses the whole fork with a bad request naming the child, the seq and the rule; the
// child has neither metadata nor records, also after a seed long enough for an atomic batch.
func TestForkThenRefusedLeavesNothing(t *testing.T) {
	e := newEnvWith(t, store.Config{Partitions: 4, MaxMsgSize: 8 << 10})
	src := e.longSource(3000)
	for name, c := range map[string]struct{ then, says string }{
		"rule":     {`{"type":"tool/result","data":{},"surfaceOp":"append"}`, "[rule "},
		"seq":      {`{"type":"turn/start","seq":1,"data":{"turn":9}}`, "[rule seq-contiguous]"},
		"not json": {`1`, "then[0] is not a JSON event object"},
	} {
		child := "refused-" + strings.ReplaceAll(name, " ", "-")
		_, err := e.fork(client.ForkRequest{Source: "src", Child: child, Then: []json.RawMessage{json.RawMessage(c.then)}})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != client.CodeBadRequest || !strings.Contains(ce.Description, c.says) {
			t.Fatalf("%s: %v, want a bad request saying %q", name, err, c.says)
		}
		if name != "not json" && !strings.Contains(ce.Description, `session "`+child+`" seq `) {
			t.Fatalf("%s: %q does not name the child and the seq", name, ce.Description)
		}
		if _, err := storetest.Session(e.store, child).Info(ctx(t)); !errors.Is(err, store.ErrSessionNotFound) {
			t.Fatalf("%s: the child's metadata: %v", name, err)
		}
		if tail, err := storetest.Session(e.store, child).TailFromLeader(ctx(t)); err != nil || tail.LastStreamSeq != 0 {
			t.Fatalf("%s: the child has records: %+v %v", name, tail, err)
		}
	}
	// The same fork with valid then-events: a batch of several records, all of it or nothing.
	last := src[len(src)-1].Seq
	res, err := e.fork(client.ForkRequest{Source: "src", Child: "ok", Boundary: &last,
		Then: []json.RawMessage{json.RawMessage(`{"type":"turn/start","data":{"turn":1000}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	_, got, _ := e.child("ok")
	if res.Then == nil || len(got) != len(src)+2 || got[len(got)-1].Type != "turn/start" {
		t.Fatalf("long fork with then: %+v, %d events", res, len(got))
	}
}
