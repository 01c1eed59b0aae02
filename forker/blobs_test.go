package forker

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// largeSource is a turn whose user message is n bytes of text (offloaded: larger than a record).
func largeSource(t *testing.T, n int) []session.Event {
	lines := []string{
		`{"type":"turn/start","seq":0,"time":1785000000000,"data":{"turn":1}}`,
		`{"type":"user/message","seq":1,"time":1785000000001,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"` + strings.Repeat("q", n) + `"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
		`{"type":"turn/end","seq":2,"time":1785000000002,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
	}
	out := make([]session.Event, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestForkCopiesBlobs: a fork of a session with an offloaded event gives the child its own copy of
// the blob (under the child's token), so removing the source leaves the child whole, and removing
// the child leaves no blob behind.
func TestForkCopiesBlobs(t *testing.T) {
	e := newEnv(t)
	src := largeSource(t, 3<<20)
	if err := e.store.CreateSession(ctx(t), session.Header{ID: "src", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	e.appendRecords("src", src, 3)
	res, err := e.fork(client.ForkRequest{Source: "src", Child: "kid"})
	if err != nil || res.SeedLength != 3 {
		t.Fatalf("fork: %+v, %v", res, err)
	}
	objs := storetest.Blobs(e.store)
	if len(objs) != 2 {
		t.Fatalf("%d blobs after the fork (%v), want the source's and the child's", len(objs), objs)
	}
	kidTok, _ := wire.Token("kid")
	kidPrefix := wire.BlobPrefix + "." + kidTok + "."
	if !strings.HasPrefix(objs[0], kidPrefix) && !strings.HasPrefix(objs[1], kidPrefix) {
		t.Fatalf("no blob of the child: %s, %s", objs[0], objs[1])
	}
	if _, err := storetest.Session(e.store, "src").Remove(ctx(t)); err != nil {
		t.Fatal(err)
	}
	_, events, msgs := e.child("kid")
	if len(events) != 4 || events[3].Type != "session/end-seed" {
		t.Fatalf("child: %d events", len(events))
	}
	for i := range src {
		g, _ := events[i].AppendJSON(nil)
		w, _ := src[i].AppendJSON(nil)
		if !bytes.Equal(g, w) {
			t.Fatalf("child seq %d differs from the source's (%d bytes, want %d)", i, len(g), len(w))
		}
	}
	if len(msgs) != 1 || !bytes.Equal(msgs[0], json.RawMessage(src[1].Data)) {
		t.Fatalf("child messages: %d", len(msgs))
	}
	rm, err := storetest.Session(e.store, "kid").Remove(ctx(t))
	if err != nil || rm.Blobs != 1 {
		t.Fatalf("rm kid: %+v, %v", rm, err)
	}
	if objs := storetest.Blobs(e.store); len(objs) != 0 {
		t.Fatalf("%d blobs left", len(objs))
	}
}
