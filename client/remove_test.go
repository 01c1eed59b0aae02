package client_test

import (
	"errors"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// TestRemove: Remove deletes a session's records and metadata, says what it removed, and then
// answers not found; an invalid id is a bad request.
func TestRemove(t *testing.T) {
	te := testnats.Start(t, store.Config{Partitions: 2})
	if err := te.Store.CreateSession(ctx(t), session.Header{ID: "gone", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(te.Store, "gone").Append(ctx(t), 0, events()); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(te.NC)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := c.Remove(ctx(t), "gone")
	if err != nil {
		t.Fatal(err)
	}
	if rm.Session != "gone" || !rm.Metadata || rm.Records != 1 || rm.Events != int64(len(events())) {
		t.Fatalf("Removed %+v: want the session's metadata, 1 record, %d events", rm, len(events()))
	}
	if _, err := storetest.Header(storetest.Session(te.Store, "gone").Info(ctx(t))); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("metadata after Remove: %v", err)
	}
	if _, err := c.Remove(ctx(t), "gone"); !errors.Is(err, client.ErrNotFound) || !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("second Remove: %v, want not found", err)
	}
	if _, err := c.Remove(ctx(t), ""); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("Remove of an empty id: %v, want a bad request", err)
	}
}
