package projector

import (
	"testing"

	"github.com/agentlog/agentlog/internal/storetest"
)

// TestFoldOverDeleteMarkers: keys that a projector removed with KV purges (a session removed
// while it folded it: store.Session.DeleteProjections, no stream purge) end with a marker; a
// session created again under the id is folded all the same: the first write of each key expects
// the marker's revision.
func TestFoldOverDeleteMarkers(t *testing.T) {
	e := newEnv(t)
	kv := storetest.ProjectionsKV(e.store)
	for _, u := range []string{UnitMessages, "turns", "title"} {
		if _, err := kv.Put(ctx(t), u+".again", []byte(`{"stale":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	ss := storetest.Session(e.store, "again")
	if keys, err := ss.DeleteProjections(ctx(t)); err != nil || len(keys) != 3 {
		t.Fatalf("DeleteProjections: %v, %v", keys, err)
	}
	if rev, err := ss.ProjectionMarker(ctx(t), UnitMessages); err != nil || rev == 0 {
		t.Fatalf("marker: %d, %v", rev, err)
	}
	e.create("again")
	e.appendRecord("again", toolSession())
	e.startProjector("p1")
	p := e.waitStored("again", func(p Projection) bool { return p.AsOfSeq == 10 })
	if int64s(p.State.Nodes) != "[2,3,7,10]" {
		t.Fatalf("projection over the markers: %+v", p)
	}
}
