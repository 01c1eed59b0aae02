package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRecreatedSessionRefolds: a session purged and created again under its id (a new
// incarnation) while the projector holds it in memory is refolded from the new log, counted at
// most once; neither the projector nor the query service shows the old history.
func TestRecreatedSessionRefolds(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("s1")
	e.appendRecord("s1", []session.Event{userMsg(0, "m0", "old 0"), userMsg(1, "m1", "old 1"), userMsg(2, "m2", "old 2")})
	e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 2 })
	old, err := storetest.Session(e.store, "s1").Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := wire.SessionSubject("s1", e.store.Partitions())
	if err := e.store.Stream().Purge(ctx(t), jetstream.WithPurgeSubject(sub)); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token("s1")
	if err := storetest.SessionsKV(e.store).Delete(ctx(t), tok); err != nil {
		t.Fatal(err)
	}
	e.create("s1")
	e.tails["s1"] = 0
	e.appendRecord("s1", []session.Event{userMsg(0, "n0", "new 0"), userMsg(1, "n1", "new 1")})
	got := e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 1 })
	if int64s(got.State.Nodes) != "[0,1]" {
		t.Fatalf("after the re-create: %+v", got)
	}
	r, err := queryMessages(ctx(t), e.nc, "s1", 1)
	if err != nil || len(r.Messages) != 2 || !strings.Contains(string(r.Messages[0]), "new 0") {
		t.Fatalf("messages %+v %v", r, err)
	}
	// 1 when the projector met the new incarnation's record while holding the old state; 0 when it
	// saw the metadata delete first and forgot the session (then the new log is a fresh fold).
	// Never more: a re-create is refolded once.
	if n := p.Refolds(); n > 1 {
		t.Fatalf("Refolds() = %d, want at most 1", n)
	}
	now, _ := storetest.Session(e.store, "s1").Info(ctx(t))
	ent, _ := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitMessages, tok))
	if now.Incarnation == old.Incarnation || !strings.Contains(string(ent.Value()), `"incarnation":"`+now.Incarnation+`"`) {
		t.Fatalf("stored %s, incarnation %q (was %q)", ent.Value(), now.Incarnation, old.Incarnation)
	}
}

// TestLegacyStateIsUpgraded: a stored state without a log position (written before it existed)
// is refolded once and stored with one; that is an upgrade, not counted as a refold.
func TestLegacyStateIsUpgraded(t *testing.T) {
	e := newEnv(t)
	e.create("s1")
	e.appendRecord("s1", []session.Event{userMsg(0, "m0", "a"), userMsg(1, "m1", "b")})
	tok, _ := wire.Token("s1")
	// A legacy value, and a wrong one: only a refold shows both messages.
	if _, err := storetest.ProjectionsKV(e.store).Create(ctx(t), wire.ProjectionKey(UnitMessages, tok), []byte(`{"stateVersion":1,"asOfSeq":1,"state":{"nodes":[0],"replaceGeneration":0,"transcript":[0]}}`)); err != nil {
		t.Fatal(err)
	}
	p := e.startProjector("p1")
	r, err := queryMessages(ctx(t), e.nc, "s1", -1)
	if err != nil || len(r.Messages) != 2 {
		t.Fatalf("messages %+v %v", r, err)
	}
	ent, _ := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitMessages, tok))
	if !strings.Contains(string(ent.Value()), `"log":{"incarnation":`) || p.Refolds() != 0 {
		t.Fatalf("stored %s, Refolds %d", ent.Value(), p.Refolds())
	}
}

// A log read for a lookup (a tool/result replace) reaches past the record being folded; the
// position must stay at that record, or the next record looks rewritten and is refolded.
func TestLookupDoesNotMoveThePositionAhead(t *testing.T) {
	e := newEnv(t)
	e.create("lk")
	e.appendChunked("lk", toolSession(), 3) // all stored before the projector starts
	p := e.startProjectorOpts("lookup-1", Options{})
	e.waitStored("lk", func(p Projection) bool { return p.AsOfSeq == 10 })
	if n := p.Refolds(); n != 0 {
		t.Fatalf("Refolds() = %d after folding a log with a lookup, want 0", n)
	}
}

// TestLostRecordsAreReported: the records of a session the projector has folded disappear (a
// purge outside agentlog; a server that lost them is the same to the projector), and a new
// writer writes the session again from seq 0. The messages query refuses with CodeDataLoss naming
// the seqs lost, from the first check on and after the new records are folded too: the loss is
// kept in the stored states (log.lost), not forgotten by the refold. AllowDataLoss answers what
// the log holds; the surface endpoint answers the stored value, its loss included.
func TestLostRecordsAreReported(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("s1")
	e.appendRecord("s1", []session.Event{userMsg(0, "m0", "old 0"), userMsg(1, "m1", "old 1")})
	e.appendRecord("s1", []session.Event{userMsg(2, "m2", "old 2")})
	e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 2 })
	sub, _ := wire.SessionSubject("s1", e.store.Partitions())
	if err := e.store.Stream().Purge(ctx(t), jetstream.WithPurgeSubject(sub)); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		_, err := queryMessages(ctx(t), e.nc, "s1", -1)
		qe := queryErr(t, err, client.CodeDataLoss, "s1")
		if !errors.Is(err, client.ErrDataLoss) || qe.Lost == nil || qe.Lost.FromSeq != 0 || qe.Lost.ToSeq != 2 ||
			!strings.Contains(qe.Description, `session "s1" lost acknowledged records: seqs 0..2`) {
			t.Fatalf("messages %s: %v (lost %+v)", when, err, qe.Lost)
		}
	}
	check("after the purge")
	if p, _ := e.stored("s1"); p.Log == nil || p.Log.Lost == nil || p.AsOfSeq != -1 {
		t.Fatalf("stored after the purge: %+v", p)
	}
	e.tails["s1"] = 0
	e.appendRecord("s1", []session.Event{userMsg(0, "n0", "new 0"), userMsg(1, "n1", "new 1")})
	e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 1 })
	check("after new records")
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Messages(ctx(t), "s1", client.AllowDataLoss())
	if err != nil || len(r.Messages) != 2 || !strings.Contains(string(r.Messages[0]), "new 0") {
		t.Fatalf("messages with AllowDataLoss: %+v, %v", r, err)
	}
	surf, err := querySurface(ctx(t), e.nc, "s1", -1)
	if err != nil || surf.Log == nil || surf.Log.Lost == nil || surf.Log.Lost.ToSeq != 2 {
		t.Fatalf("surface: %+v, %v", surf, err)
	}
	s, err := c.Status(ctx(t), "s1")
	if !errors.Is(err, client.ErrDataLoss) || s.DataLoss == nil || s.DataLoss.ToSeq != 2 || s.LastSeq != 1 {
		t.Fatalf("status: %+v, %v", s, err)
	}
}

// TestRestoredLogIsNoLoss: a session folded, archived (its hot records purged) and restored (its
// events written again at higher stream seqs, with a restore's msg id) is refolded without a
// recorded loss: the stored state, messages and status show none.
func TestRestoredLogIsNoLoss(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("r1")
	e.appendRecord("r1", []session.Event{userMsg(0, "m0", "old 0"), userMsg(1, "m1", "old 1")})
	e.appendRecord("r1", []session.Event{userMsg(2, "m2", "old 2")})
	e.waitStored("r1", func(p Projection) bool { return p.AsOfSeq == 2 })
	tok, _ := wire.Token("r1")
	kv := storetest.ProjectionsKV(e.store)
	before := map[string][]byte{}
	// Every unit's state as of seq 2: the messages state is stored first, the others may follow.
	checkfor.Check(t, 30*time.Second, 10*time.Millisecond, func() error {
		for _, d := range Builtins() {
			ent, err := kv.Get(ctx(t), wire.ProjectionKey(d.Definition().Key, tok))
			if err != nil {
				return fmt.Errorf("unit %s: %w", d.Definition().Key, err)
			}
			var p struct {
				AsOfSeq int64 `json:"asOfSeq"`
			}
			if err := json.Unmarshal(ent.Value(), &p); err != nil || p.AsOfSeq != 2 {
				return fmt.Errorf("unit %s: as of seq %d (%v), want 2", d.Definition().Key, p.AsOfSeq, err)
			}
			before[ent.Key()] = ent.Value()
		}
		return nil
	})
	ss := storetest.Session(e.store, "r1")
	if _, err := ss.Archive(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// The state as folded before the archive, put back (a checkpoint in flight while the archive
	// purged the keys): the restored records are checked against it.
	for k, v := range before {
		if _, err := kv.Put(ctx(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ss.Restore(ctx(t))
	if err != nil || !res.Restored {
		t.Fatalf("restore: %+v, %v", res, err)
	}
	e.tails["r1"] = res.StreamSeq
	e.appendRecord("r1", []session.Event{userMsg(3, "m3", "new 3")})
	p := e.waitStored("r1", func(p Projection) bool { return p.AsOfSeq == 3 })
	if p.Log == nil || p.Log.Lost != nil {
		t.Fatalf("stored after the restore: %+v (lost %+v)", p.Log, p.Log.Lost)
	}
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Messages(ctx(t), "r1", client.MinSeq(3)); err != nil || len(r.Messages) != 4 {
		t.Fatalf("messages after the restore: %+v, %v", r, err)
	}
	if s, err := c.Status(ctx(t), "r1"); err != nil || s.DataLoss != nil {
		t.Fatalf("status after the restore: %+v, %v", s, err)
	}
}
