package forker

import (
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
)

// TestForkChildIncarnation: a forked child gets an incarnation of its own (CreateSession gives
// every new session one).
func TestForkChildIncarnation(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	if _, err := e.fork(client.ForkRequest{Source: "parent", Child: "c-inc"}); err != nil {
		t.Fatal(err)
	}
	parent, err := storetest.Session(e.store, "parent").Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	child, err := storetest.Session(e.store, "c-inc").Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if child.Incarnation == "" || child.Incarnation == parent.Incarnation {
		t.Fatalf("child incarnation %q (parent %q): want one of its own", child.Incarnation, parent.Incarnation)
	}
}
