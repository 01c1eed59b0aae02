package publisher

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/session"
)

const realDataDir = "../../shared/data/dsh-sessions"

type realSession struct {
	name   string
	events []session.Event
}

// acceptedRealSessions loads every recorded session that the oracle accepts (X.expected.json ok).
func acceptedRealSessions(t *testing.T) []realSession {
	t.Helper()
	files := sessiontest.RecordedLogs(t, realDataDir)
	var out []realSession
	for _, f := range files {
		base := f.Name
		exp, err := os.ReadFile(f.Expected)
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		var oracle struct {
			OK bool `json:"ok"`
		}
		if err := json.Unmarshal(exp, &oracle); err != nil {
			t.Fatalf("%s.expected.json: %v", base, err)
		}
		if !oracle.OK {
			continue
		}
		_, events := sessiontest.ReadLog(t, f.Path, base)
		out = append(out, realSession{name: base, events: events})
	}
	return out
}

// TestRealSessionsRoundTrip appends every accepted recorded session through a Writer and reads it
// back: same events, data byte for byte.
func TestRealSessionsRoundTrip(t *testing.T) {
	sessions := acceptedRealSessions(t)
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	p := e.publisher(t, "w1", clk)
	for _, s := range sessions {
		w, err := p.Create(ctx, header(s.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range s.events {
			if err := w.Append(x); err != nil {
				t.Fatalf("%s: Append: %v", s.name, err)
			}
		}
		if err := w.Close(ctx); err != nil {
			t.Fatalf("%s: Close: %v", s.name, err)
		}
		got := e.stored(t, s.name)
		if len(got) != len(s.events) {
			t.Fatalf("%s: read back %d events, want %d", s.name, len(got), len(s.events))
		}
		for i := range got {
			if err := sessiontest.SameEvent(got[i], s.events[i]); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
	}
}

// TestRealSessionsResumeAfterCrash cuts each recorded session inside its last turn (right after its
// last tool/call, else after its last turn/start), stores that prefix, and resumes it: the resume
// record must be session.Repair(prefix) followed by session/end-seed.
func TestRealSessionsResumeAfterCrash(t *testing.T) {
	sessions := acceptedRealSessions(t)
	e := newEnv(t)
	clk := newFakeClock()
	ctx := ctxT(t)
	pa := e.publisher(t, "wa", clk)
	pb := e.publisher(t, "wb", clk)
	tested := 0
	for _, s := range sessions {
		cut := -1
		for i := len(s.events) - 1; i >= 0 && cut < 0; i-- {
			if s.events[i].Type == "tool/call" {
				cut = i + 1
			}
		}
		if cut < 0 {
			for i := len(s.events) - 1; i >= 0 && cut < 0; i-- {
				if s.events[i].Type == "turn/start" {
					cut = i + 1
				}
			}
		}
		if cut < 0 {
			continue
		}
		prefix := s.events[:cut]
		loaded, err := session.Load(s.name, prefix)
		if err != nil {
			t.Fatalf("%s: prefix refused: %v", s.name, err)
		}
		if loaded.Surface().OpenTurn == nil {
			continue
		}
		id := s.name + "~crashed"
		w, err := pa.Create(ctx, header(id))
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range prefix {
			if err := w.Append(x); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		before := len(e.records(t, id))
		if _, err := pb.Open(ctx, id); err != nil {
			t.Fatalf("%s: Open: %v", id, err)
		}
		recs := e.records(t, id)
		if len(recs) != before+1 {
			t.Fatalf("%s: Open wrote %d records, want 1", id, len(recs)-before)
		}
		written := recs[len(recs)-1].events
		want := session.Repair(prefix)
		if len(want) == 0 {
			t.Fatalf("%s: open turn but session.Repair gives no closers", id)
		}
		if len(written) != len(want)+1 {
			t.Fatalf("%s: resume record has %d events, want %d closers + end-seed", id, len(written), len(want))
		}
		for i := range want {
			if err := sessiontest.SameEvent(written[i], want[i]); err != nil {
				t.Fatalf("%s: closer %d: %v", id, i, err)
			}
		}
		if m := written[len(want)]; m.Type != "session/end-seed" || m.Seq != int64(cut+len(want)) {
			t.Fatalf("%s: last resume event %s at %d, want session/end-seed at %d", id, m.Type, m.Seq, cut+len(want))
		}
		tested++
	}
	if tested == 0 {
		t.Fatal("no recorded session could be cut inside an open turn")
	}
	t.Logf("resumed %d crashed sessions", tested)
}
