package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// tree renders a lineage as "id(child child(...))".
func tree(n *client.LineageNode) string {
	s := n.ID
	if len(n.Children) > 0 {
		s += "("
		for i, c := range n.Children {
			if i > 0 {
				s += " "
			}
			s += tree(c)
		}
		s += ")"
	}
	return s
}

func TestLineage(t *testing.T) {
	te := testnats.Start(t, store.Config{Partitions: 2})
	c, err := client.New(te.NC)
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(2)
	for _, h := range []session.Header{
		{ID: "root"}, {ID: "k1", ParentSession: "root", SeedLength: &seed}, {ID: "k2", ParentSession: "root", SeedLength: &seed},
		{ID: "g1", ParentSession: "k1", SeedLength: &seed}, {ID: "other"}, {ID: "orphan", ParentSession: "gone", SeedLength: &seed},
	} {
		h.CreatedAt = 1785000000000
		if err := te.Store.CreateSession(ctx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"g1": "root(k1(g1) k2)", "root": "root(k1(g1) k2)", "other": "other", "orphan": "orphan"} {
		l, err := c.Lineage(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if got := tree(l.Root); got != want {
			t.Errorf("Lineage(%s) = %s, want %s", id, got, want)
		}
		if id == "g1" && fmt.Sprint(l.Path) != "[root k1 g1]" {
			t.Errorf("path %v", l.Path)
		}
		if id == "orphan" && l.MissingParent != "gone" {
			t.Errorf("missing parent %q", l.MissingParent)
		}
		// Every node has its createdAt, a fork or not (the inspector's "created" read 0 for a root).
		var walk func(*client.LineageNode)
		walk = func(n *client.LineageNode) {
			if n.CreatedAt != 1785000000000 {
				t.Errorf("Lineage(%s): node %s has createdAt %d", id, n.ID, n.CreatedAt)
			}
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(l.Root)
	}
	if _, err := storetest.Session(te.Store, "root").Append(ctx(t), 0, events()); err != nil {
		t.Fatal(err)
	}
	if n, err := c.LastSeq(ctx(t), "root"); err != nil || n != int64(len(events())-1) {
		t.Errorf("LastSeq(root) = %d, %v", n, err)
	}
	if n, err := c.LastSeq(ctx(t), "k1"); err != nil || n != -1 {
		t.Errorf("LastSeq of a session without events = %d, %v", n, err)
	}
	for i := range 510 { // a listing of more than 512 reads the last records with one headers-only pass
		if err := te.Store.CreateSession(ctx(t), session.Header{ID: fmt.Sprintf("e%03d", i), CreatedAt: 1785000000000}); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []client.SessionsQuery{{}, {Prefix: "r", Limit: 10}} { // the headers-only pass, and the batched direct gets
		rows, _ := list(t, c, q)
		found := false
		for _, r := range rows {
			found = found || r.ID == "root"
			if (r.ID == "root") != (r.LastActivity > 1785000000000) {
				t.Errorf("%+v: %s lastActivity %d", q, r.ID, r.LastActivity)
			}
		}
		if !found {
			t.Errorf("%+v: root not listed", q)
		}
	}
	if _, err := c.Lineage(ctx(t), "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}
	if h, err := c.Header(ctx(t), "k1"); err != nil || h.ParentSession != "root" || *h.SeedLength != 2 {
		t.Errorf("Header: %+v %v", h, err)
	}
	if r, err := c.ErrorReports(ctx(t), "k1", 5); err != nil || len(r) != 0 {
		t.Errorf("ErrorReports of a session without reports: %v %v", r, err)
	}
	for i := range 7 {
		subj, _ := wire.ErrorsSubject("k1")
		if _, err := te.Store.JetStream().Publish(ctx(t), subj, fmt.Appendf(nil, `{"type":"agent/error","n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := c.ErrorReports(ctx(t), "k1", 5); err != nil || len(r) != 5 || string(r[0]) != `{"type":"agent/error","n":2}` || string(r[4]) != `{"type":"agent/error","n":6}` {
		t.Errorf("the last 5 of 7 reports: %s %v", r, err)
	}
}

// TestParentCreatedAgain: a parent removed and created again under its id is another session:
// the old fork shows its parent removed, and the new parent lists no forks (status, sessions
// --parent, lineage).
func TestParentCreatedAgain(t *testing.T) {
	te := testnats.Start(t, store.Config{Partitions: 2})
	c, err := client.New(te.NC)
	if err != nil {
		t.Fatal(err)
	}
	seed := int64(0)
	for _, h := range []session.Header{{ID: "p", CreatedAt: 1785000000000}, {ID: "p-fork", ParentSession: "p", SeedLength: &seed, CreatedAt: 1785000000001}} {
		if err := te.Store.CreateSession(ctx(t), h); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := c.Status(ctx(t), "p-fork"); err != nil || s.ParentRemoved {
		t.Fatalf("fork of a live parent: %+v %v", s, err)
	}
	if _, err := c.Remove(ctx(t), "p"); err != nil {
		t.Fatal(err)
	}
	if err := te.Store.CreateSession(ctx(t), session.Header{ID: "p", CreatedAt: 1785000000002}); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Status(ctx(t), "p-fork"); err != nil || !s.ParentRemoved {
		t.Fatalf("fork of a removed parent, its id created again: %+v %v", s, err)
	}
	if s, err := c.Status(ctx(t), "p"); err != nil || len(s.Children) != 0 {
		t.Fatalf("the new p: %+v %v", s, err)
	}
	var forks []string
	if _, err := c.Sessions(ctx(t), client.SessionsQuery{Parent: "p"}, func(s client.SessionInfo) error { forks = append(forks, s.ID); return nil }); err != nil || len(forks) != 0 {
		t.Fatalf("sessions --parent p: %v %v", forks, err)
	}
	if l, err := c.Lineage(ctx(t), "p"); err != nil || tree(l.Root) != "p" {
		t.Fatalf("lineage of the new p: %v %v", l, err)
	}
}
