package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

func TestCreateAndGetSession(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	seed := int64(5)
	h := session.Header{Version: 0, ID: "child.1 é", CreatedAt: 1785000000000, Cwd: "/w", ParentSession: "parent", SeedLength: &seed}
	if _, err := headerOf(sessionOf(s, h.ID).Info(ctx)); !errors.Is(err, ErrSessionNotFound) || !strings.Contains(err.Error(), `"child.1 é"`) {
		t.Fatalf("GetSession before create: %v, want ErrSessionNotFound naming the id", err)
	}
	if err := s.CreateSession(ctx, h); err != nil {
		t.Fatal(err)
	}
	err := s.CreateSession(ctx, session.Header{ID: h.ID, CreatedAt: 1})
	if !errors.Is(err, ErrSessionExists) || !strings.Contains(err.Error(), `"child.1 é"`) {
		t.Fatalf("second CreateSession: %v, want ErrSessionExists naming the id", err)
	}
	got, err := headerOf(sessionOf(s, h.ID).Info(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != h.ID || got.CreatedAt != h.CreatedAt || got.Cwd != "/w" || got.ParentSession != "parent" || got.SeedLength == nil || *got.SeedLength != 5 {
		t.Fatalf("GetSession = %+v", got)
	}
	if len(got.Raw) == 0 {
		t.Errorf("GetSession leaves Raw empty")
	}
	// The stored value is compact JSON under the token key; the first create won.
	e, err := s.sessions.Get(ctx, "child_2E1_20_C3_A9")
	if err != nil || !strings.Contains(string(e.Value()), `"createdAt":1785000000000`) {
		t.Fatalf("stored value %q, %v", e.Value(), err)
	}
	// Create writes no event.
	if evs, last, err := readAll(ctx, sessionOf(s, h.ID)); err != nil || len(evs) != 0 || last != 0 {
		t.Fatalf("Read after create: %d events, %v", len(evs), err)
	}
	if err := s.CreateSession(ctx, session.Header{ID: ""}); err == nil {
		t.Fatal("CreateSession with an empty id accepted")
	}
}

func TestTokensAreKVKeys(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	for _, id := range []string{"plain", "a.b", "x_y", "sp ace", "*>", "日本", "-lead", strings.Repeat("é", 128)} {
		tok, err := wire.Token(id)
		if err != nil {
			t.Fatal(err)
		}
		key := "surface." + tok
		if _, err := s.projections.Put(ctx, key, []byte(`{}`)); err != nil {
			t.Errorf("id %q: key %q refused by KV: %v", id, key, err)
		}
		if _, err := s.sessions.Create(ctx, tok, []byte(`{}`)); err != nil {
			t.Errorf("id %q: key %q refused by KV: %v", id, tok, err)
		}
	}
}
