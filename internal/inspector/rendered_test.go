package inspector

import (
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
)

// TestRenderedLogs: a page's events are taken once, by the key naming its last seq and record;
// what is too large is not kept, and the oldest go first beyond the bound.
func TestRenderedLogs(t *testing.T) {
	r := newRenderedLogs()
	evs := []session.Event{{Type: "turn/start", Seq: 0, Time: "1", Data: []byte(`{"turn":1}`)}}
	r.put("s", evs, client.Position{StreamSeq: 7, NextSeq: 1})
	if _, _, ok := r.take(renderedKey{id: "s", lastSeq: 0, streamSeq: 8}); ok {
		t.Fatal("taken with another record")
	}
	got, pos, ok := r.take(renderedKey{id: "s", lastSeq: 0, streamSeq: 7})
	if !ok || len(got) != 1 || pos.StreamSeq != 7 {
		t.Fatalf("take: %v %+v %v", got, pos, ok)
	}
	if _, _, ok := r.take(renderedKey{id: "s", lastSeq: 0, streamSeq: 7}); ok || r.bytes != 0 {
		t.Fatalf("taken twice (%d bytes held)", r.bytes)
	}
	big := []session.Event{{Type: "x/y", Seq: 0, Time: "1", Data: make([]byte, renderedMaxBytes/4+1)}}
	r.put("big", big, client.Position{StreamSeq: 1, NextSeq: 1})
	if len(r.byKey) != 0 {
		t.Fatal("a log over a quarter of the bound was kept")
	}
	chunk := []session.Event{{Type: "x/y", Seq: 0, Time: "1", Data: make([]byte, renderedMaxBytes/8)}}
	for i := range 12 {
		r.put(string(rune('a'+i)), chunk, client.Position{StreamSeq: 1, NextSeq: 1})
	}
	if r.bytes > renderedMaxBytes || r.byKey[renderedKey{id: "a", lastSeq: 0, streamSeq: 1}] != nil || r.byKey[renderedKey{id: "l", lastSeq: 0, streamSeq: 1}] == nil {
		t.Fatalf("over the bound: %d bytes, %d entries", r.bytes, len(r.byKey))
	}
}
