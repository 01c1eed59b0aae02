package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// counter is a user unit counting events; v2 counts twice as much, so that a state folded by v1
// is told from a rebuilt one.
func counter(version int) Def[int] {
	return Def[int]{Key: "counter", StateVersion: version, Init: func() int { return 0 },
		Apply: func(n int, _ session.Event) (int, error) { return n + version, nil }}
}

func (e *env) startProjectorWith(name string, reg *Registry) *Projector {
	e.t.Helper()
	nc, js, err := natsdev.Connect(e.url, nats.Name(name))
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := store.Open(ctx(e.t), js)
	if err != nil {
		e.t.Fatal(err)
	}
	p := mustNew(e.t, st, nc, Options{Name: name, Logger: quietLogger(), Registry: reg})
	if err := p.Start(ctx(e.t)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Stop(); nc.Close() })
	return p
}

func TestNewStateVersionRebuildsInPlace(t *testing.T) {
	e := newEnv(t)
	reg1, _ := NewRegistry(counter(1))
	p1 := e.startProjectorWith("v1", reg1)
	events := toolSession()
	for _, id := range []string{"busy", "idle"} {
		e.create(id)
		e.appendRecord(id, events[0:5])
	}
	for _, id := range []string{"busy", "idle"} {
		if r, err := queryProjection(ctx(t), e.nc, id, "counter", 4); err != nil || string(r.View) != "5" || r.StateVersion != 1 {
			t.Fatalf("%s: v1 counter %+v %v", id, r, err)
		}
	}
	// Deploy v2 of the unit: the stored v1 states are discarded and rebuilt from the log, with
	// no stop of the stream: by the projector when the session gets a record, by the query
	// service when it is asked for an idle one.
	if err := p1.Stop(); err != nil {
		t.Fatal(err)
	}
	reg2, _ := NewRegistry(counter(2))
	e.startProjectorWith("v2", reg2)
	e.appendRecord("busy", events[5:11])
	r, err := queryProjection(ctx(t), e.nc, "busy", "counter", 10)
	if err != nil || string(r.View) != "22" || r.StateVersion != 2 || r.AsOfSeq != 10 {
		t.Fatalf("busy: v2 counter %+v %v", r, err)
	}
	r, err = queryProjection(ctx(t), e.nc, "idle", "counter", -1)
	if err != nil || string(r.View) != "10" || r.StateVersion != 2 || r.AsOfSeq != 4 {
		t.Fatalf("idle: v2 counter %+v %v", r, err)
	}
	// The query service wrote the rebuilt state back.
	tok, _ := wire.Token("idle")
	info, err := storetest.Session(e.store, "idle").Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey("counter", tok))
	if err != nil || string(ent.Value()) != `{"stateVersion":2,"asOfSeq":4,"log":{"incarnation":"`+info.Incarnation+`","streamSeq":2},"state":10}` {
		t.Fatalf("idle: stored %s %v", ent.Value(), err)
	}
}

func TestRebuildCommand(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	events := append(toolSession(), ev(11, "session/title", `{"title":"T","messageSeqs":[],"source":{"kind":"fallback"}}`, "", ""))
	for _, id := range []string{"a", "b", "c"} {
		e.create(id)
		e.appendRecord(id, events)
	}
	e.create("empty")
	for _, id := range []string{"a", "b", "c", "removing"} {
		if id == "removing" {
			e.create(id)
			e.appendRecord(id, events)
		}
		if _, err := queryMessages(ctx(t), e.nc, id, 11); err != nil {
			t.Fatal(err)
		}
	}
	// "removing" is being removed (an rm stopped part-way): the listing leaves it out, and
	// named, it is skipped.
	testnats.MarkRemoving(t, e.store, "removing")
	rtok, _ := wire.Token("removing")
	if err := storetest.ProjectionsKV(e.store).Delete(ctx(t), wire.ProjectionKey(UnitTitle, rtok)); err != nil {
		t.Fatal(err)
	}
	// Damage the title state of "b" (a wrong state at the right stateVersion).
	tok, _ := wire.Token("b")
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitTitle, tok))
		if err != nil {
			return err
		}
		var v storedValue
		if err := json.Unmarshal(ent.Value(), &v); err != nil || v.AsOfSeq != 11 {
			return fmt.Errorf("the title value of b: %s (%v), want asOfSeq 11", ent.Value(), err)
		}
		return nil
	})
	if _, err := storetest.ProjectionsKV(e.store).Put(ctx(t), wire.ProjectionKey(UnitTitle, tok), []byte(`{"stateVersion":1,"asOfSeq":11,"state":{"title":"WRONG","seq":3}}`)); err != nil {
		t.Fatal(err)
	}
	reg, _ := NewRegistry()
	c, _ := queryClient(e.nc, -1)
	ids, err := c.SessionIDs(ctx(t), "", 0)
	if err != nil || len(ids) != 4 {
		t.Fatalf("SessionIDs: %v %v; want a, b, c and empty", ids, err)
	}
	var calls []int
	res, err := Rebuild(ctx(t), e.store, reg, UnitTitle, ids, func(done, total int) {
		if total != 4 {
			t.Errorf("total %d, want 4", total)
		}
		calls = append(calls, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sessions != 3 || res.Empty != 1 || res.Stopped != 0 || len(calls) != 4 || calls[3] != 4 {
		t.Fatalf("rebuild: %+v, progress %v", res, calls)
	}
	r, err := queryProjection(ctx(t), e.nc, "b", UnitTitle, -1)
	if err != nil || string(r.View) != `{"title":"T","seq":11,"source":{"kind":"fallback"}}` {
		t.Fatalf("b: title %+v %v", r, err)
	}
	if _, err := Rebuild(ctx(t), e.store, reg, "nope", nil, nil); err == nil {
		t.Fatal("rebuild of an unknown unit accepted")
	}
	if res, err := Rebuild(ctx(t), e.store, reg, UnitTitle, []string{"removing"}, nil); err != nil || res != (RebuildResult{}) {
		t.Fatalf("rebuild of a session being removed: %+v %v; want it skipped", res, err)
	}
	if _, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitTitle, rtok)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the session being removed got a title state: %v", err)
	}
	// One session only.
	res, err = Rebuild(ctx(t), e.store, reg, UnitMessages, []string{"a"}, nil)
	if err != nil || res.Sessions != 1 {
		t.Fatalf("rebuild messages of a: %+v %v", res, err)
	}
	if r, err := queryMessages(ctx(t), e.nc, "a", -1); err != nil || int64s(r.Nodes) != toolNodes {
		t.Fatalf("a after rebuild: %+v %v", r, err)
	}
}
