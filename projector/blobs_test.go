package projector

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// TestFoldOfMissingBlob: a record whose offloaded event's blob is gone stops the session's
// projection at that event (rule record-blob, naming the session and the seq) rather than fold
// other bytes; the partition goes on with the other sessions.
func TestFoldOfMissingBlob(t *testing.T) {
	e := newEnv(t)
	text := strings.Repeat("z", 2<<20)
	events := []session.Event{
		{Type: "user/message", Seq: 0, Time: "1", Data: json.RawMessage(`{"id":"m0","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`), SurfaceOp: json.RawMessage(`"append"`)},
		{Type: "user/message", Seq: 1, Time: "2", Data: json.RawMessage(`{"id":"m1","role":"user","content":[{"type":"text","text":"` + text + `"}],"source":{"kind":"user"}}`), SurfaceOp: json.RawMessage(`"append"`)},
	}
	for _, id := range []string{"lost", "kept"} {
		e.create(id)
		e.appendRecord(id, events)
	}
	objs := storetest.Blobs(e.store)
	if len(objs) != 2 {
		t.Fatalf("%d blobs (%v), want 2", len(objs), objs)
	}
	lostTok, _ := wire.Token("lost")
	for _, o := range objs {
		if strings.HasPrefix(o, wire.BlobSessionFilter(lostTok)[:len(wire.BlobSessionFilter(lostTok))-1]) {
			if err := e.store.RemoveBlob(ctx(t), o); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.startProjector("p1")
	p := e.waitStored("lost", func(p Projection) bool { return p.Error != nil })
	if p.Error.Rule != session.RuleRecordBlob || p.Error.Seq != 1 || !strings.Contains(p.Error.Message, `session "lost"`) || !strings.Contains(p.Error.Message, "missing") {
		t.Fatalf("projection of a session whose blob is gone: %+v", p.Error)
	}
	_, err := queryMessages(ctx(t), e.nc, "lost", -1)
	queryErr(t, err, client.CodeStopped, "lost")
	r, err := queryMessages(ctx(t), e.nc, "kept", 1)
	if err != nil || len(r.Messages) != 2 || !strings.Contains(string(r.Messages[1]), text) {
		t.Fatalf("the other session: %d messages, %v", len(r.Messages), err)
	}
}
