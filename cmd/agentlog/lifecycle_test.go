package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
)

// readsOf runs every read of session id and returns their outputs by command: events with each
// flag, messages, status --json and its sessions --json row (the state fields taken out, which
// are the only ones an archive changes).
func readsOf(ctx context.Context, t *testing.T, url, id string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, args := range [][]string{
		{"events", id}, {"events", id, "--packed"}, {"events", id, "--no-header"}, {"events", id, "--from-seq", "3"},
		{"events", id, "--tail", "5"}, {"messages", id}, {"status", id, "--json"},
	} {
		code, o, e := runCLI(ctx, url, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		if args[0] == "status" {
			var m map[string]any
			if err := json.Unmarshal([]byte(o), &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "state")
			b, _ := json.Marshal(m)
			o = string(b)
		}
		out[strings.Join(args, " ")] = o
	}
	code, o, e := runCLI(ctx, url, "sessions", "--sort", "id", "--prefix", id, "--json")
	if code != 0 {
		t.Fatalf("sessions: %s", e)
	}
	for _, line := range strings.Split(strings.TrimSpace(o), "\n") {
		var si client.SessionInfo
		if json.Unmarshal([]byte(line), &si) == nil && si.ID == id {
			si.State = ""
			b, _ := json.Marshal(si)
			out["sessions"] = string(b)
		}
	}
	return out
}

// TestArchiveTransparent archives sessions (recorded ones when ../shared is there, and a small
// one) and checks that every read answers byte for byte as before; that a fork of an archived
// session is whole; that the publisher's Open restores it; that holds refuse archive and rm; and
// that rm then a re-create of an archived id gives an empty session.
func TestArchiveTransparent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := startTestStack(ctx, t)
	url := s.URL()
	ids := []string{"small"}
	if err := s.Store().CreateSession(ctx, session.Header{ID: "small", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	small, err := s.Store().Session("small")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Append(ctx, 0, opsEvents()); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../../../shared/data/dsh-sessions/*.jsonl")
	for _, f := range files {
		if len(ids) == 4 {
			break
		}
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), `"assistant/chunk"`) {
			continue
		}
		id := "rec-" + strings.TrimSuffix(filepath.Base(f), ".jsonl")
		if code, _, _ := runCLI(ctx, url, "import", f, "--session", id); code == 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 1 {
		t.Log("../shared/data/dsh-sessions is absent: only a small session is archived")
	}
	before := map[string]map[string]string{}
	for _, id := range ids {
		before[id] = readsOf(ctx, t, url, id) // messages waits for the projection of the last seq
	}
	for _, id := range ids {
		code, out, e := runCLI(ctx, url, "archive", id, "--json")
		if code != 0 {
			t.Fatalf("archive %s: %d %s", id, code, e)
		}
		var res struct{ Archived bool }
		if json.Unmarshal([]byte(out), &res) != nil || !res.Archived {
			t.Fatalf("archive %s: %s", id, out)
		}
		if code, out, _ := runCLI(ctx, url, "status", id, "--json"); code != 0 || !strings.Contains(out, `"state":"archived"`) {
			t.Fatalf("status of archived %s: %s", id, out)
		}
		after := readsOf(ctx, t, url, id)
		for k, v := range before[id] {
			if after[k] != v {
				t.Fatalf("%s of archived %s:\n%s\nwant\n%s", k, id, after[k], v)
			}
		}
	}
	if code, out, _ := runCLI(ctx, url, "sessions", "--state", "archived"); code != 0 || !strings.Contains(out, "small") || !strings.Contains(out, "archived") {
		t.Fatalf("sessions --state archived: %s", out)
	}
	if code, out, _ := runCLI(ctx, url, "sessions", "--state", "active"); code != 0 || strings.Contains(out, "small") {
		t.Fatalf("sessions --state active: %s", out)
	}
	if loc, err := small.Locate(ctx); err != nil || loc.Hot.LastStreamSeq != 0 {
		t.Fatalf("the hot stream still holds small: %+v %v", loc, err)
	}

	// A fork of an archived session is created hot, whole; the source stays archived.
	if code, _, e := runCLI(ctx, url, "fork", "small", "--child", "small-child"); code != 0 {
		t.Fatalf("fork of archived: %s", e)
	}
	_, childEvents, _ := runCLI(ctx, url, "events", "small-child", "--no-header")
	if !strings.HasPrefix(childEvents, before["small"]["events small --no-header"]) || !strings.Contains(childEvents, "session/end-seed") {
		t.Fatalf("child of an archived session:\n%s", childEvents)
	}
	if code, out, _ := runCLI(ctx, url, "status", "small", "--json"); code != 0 || !strings.Contains(out, `"state":"archived"`) || !strings.Contains(out, `"children":["small-child"]`) {
		t.Fatalf("a read restored the source, or lost its child: %s", out)
	}

	// Holds: archive and rm refuse; release lets rm go.
	if code, _, e := runCLI(ctx, url, "hold", "small-child", "--reason", "case 42"); code != 0 {
		t.Fatal(e)
	}
	if code, _, e := runCLI(ctx, url, "archive", "small-child"); code != 1 || !strings.Contains(e, "legal hold") {
		t.Fatalf("archive of a held session: %d %s", code, e)
	}
	if code, _, e := runCLI(ctx, url, "rm", "small-child"); code != 1 || !strings.Contains(e, "legal hold") {
		t.Fatalf("rm of a held session: %d %s", code, e)
	}
	if code, out, _ := runCLI(ctx, url, "status", "small-child", "--json"); code != 0 || !strings.Contains(out, `"hold":true`) || !strings.Contains(out, `"holdReason":"case 42"`) {
		t.Fatalf("status of a held session: %s", out)
	}
	if code, out, _ := runCLI(ctx, url, "sessions", "--state", "held", "--json"); code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"held":true`) {
		t.Fatalf("sessions --state held: %s", out)
	}
	if code, _, e := runCLI(ctx, url, "hold", "--release", "small-child"); code != 0 {
		t.Fatal(e)
	}

	// The publisher's Open restores, then repairs and writes its end-seed as always.
	pub, err := publisher.New(s.Store(), s.Conn(), publisher.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pub.Open(ctx, "small")
	if err != nil {
		t.Fatalf("Open of an archived session: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(ctx, url, "status", "small", "--json"); code != 0 || !strings.Contains(out, `"state":"active"`) || !strings.Contains(out, `"lastSeq":4`) {
		t.Fatalf("status after Open: %s", out)
	}
	_, evs, _ := runCLI(ctx, url, "events", "small", "--no-header")
	if !strings.HasPrefix(evs, before["small"]["events small --no-header"]) || strings.Count(evs, "\n") != 5 {
		t.Fatalf("events after the restore:\n%s", evs)
	}

	// rm of an archived session, then a re-create of its id: nothing of the old one is served.
	id := ids[len(ids)-1]
	if id == "small" {
		if code, _, e := runCLI(ctx, url, "archive", "small"); code != 0 {
			t.Fatal(e)
		}
	}
	if code, _, e := runCLI(ctx, url, "rm", id); code != 0 {
		t.Fatalf("rm of archived %s: %s", id, e)
	}
	if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runCLI(ctx, url, "events", id, "--no-header"); code != 0 || out != "" {
		t.Fatalf("events of the re-created %s: %d %q", id, code, out)
	}
	if code, out, _ := runCLI(ctx, url, "status", id, "--json"); code != 0 || !strings.Contains(out, `"lastSeq":-1`) || !strings.Contains(out, `"state":"active"`) {
		t.Fatalf("status of the re-created %s: %s", id, out)
	}
}
