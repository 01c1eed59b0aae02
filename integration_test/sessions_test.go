package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/session"
)

// expected is the part of the oracle's output these tests compare.
type expected struct {
	OK             bool              `json:"ok"`
	AcceptedEvents int               `json:"acceptedEvents"`
	Events         int               `json:"events"`
	Messages       []json.RawMessage `json:"messages"`
}

func readExpected(t *testing.T, logPath string) expected {
	t.Helper()
	b, err := os.ReadFile(strings.TrimSuffix(logPath, ".jsonl") + ".expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRecordedSessionsEndToEnd imports every recorded log through the publisher (agentlog import),
// reads it back (agentlog events), and reads the derived messages through the projector's query
// service (agentlog messages), comparing with the reference's expected output. Logs the reference
// refuses must be refused by import, with nothing written.
func TestRecordedSessionsEndToEnd(t *testing.T) {
	run := runTag(t)
	for _, rec := range sessiontest.RecordedLogs(t, filepath.Join(dataDir, "dsh-sessions")) {
		name, path := rec.Name, rec.Path
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exp := readExpected(t, path)
			id := "it/" + run + name
			r := agentlog(t, nil, "import", path, "--session", id)
			if !exp.OK {
				if r.code != 1 {
					t.Fatalf("import of a log the reference refuses: exit %d, want 1\nstdout: %s", r.code, r.stdout)
				}
				if !strings.Contains(r.stderr, "seq") {
					t.Errorf("refusal does not name the seq: %s", r.stderr)
				}
				if ev := agentlog(t, nil, "events", id); ev.code == 0 {
					t.Errorf("refused import left a session behind:\n%s", ev.stdout)
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("import: exit %d\nstderr: %s", r.code, r.stderr)
			}

			// The events read back equal the events imported, data bytes included.
			_, want := sessiontest.ReadLog(t, path, id)
			out := mustAgentlog(t, nil, "events", id)
			h, got, err := session.ReadJSONL(strings.NewReader(out), id)
			if err != nil {
				t.Fatalf("events output does not parse: %v", err)
			}
			if h == nil || h.ID != id {
				t.Errorf("events header = %+v, want id %q", h, id)
			}
			if len(got) != len(want) || len(got) != exp.Events {
				t.Fatalf("events: got %d, imported %d, reference %d", len(got), len(want), exp.Events)
			}
			for i := range want {
				if !sameImportedEvent(want[i], got[i]) {
					t.Fatalf("event %d differs:\nimported %s\nread     %s", i, mustJSON(want[i]), mustJSON(got[i]))
				}
			}

			// The projector's messages equal the reference's.
			msgs := mustAgentlog(t, nil, "messages", id)
			wantMsgs, _ := json.Marshal(exp.Messages)
			if exp.Messages == nil {
				wantMsgs = []byte("[]")
			}
			if !sessiontest.JSONEqual(t, []byte(msgs), wantMsgs) {
				t.Fatalf("messages differ from the reference:\ngot  %s\nwant %s", clip(msgs), clip(string(wantMsgs)))
			}
		})
	}
}

// sameImportedEvent compares two events field by field, data and surface metadata byte for byte (compacted).
func sameImportedEvent(a, b session.Event) bool {
	return a.Type == b.Type && a.Seq == b.Seq && a.Time == b.Time && a.Ignorable == b.Ignorable &&
		compactEqual(a.Data, b.Data) && compactEqual(a.SurfaceOp, b.SurfaceOp) && compactEqual(a.SourceEventSeqs, b.SourceEventSeqs)
}

func compactEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func clip(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "…"
	}
	return s
}

// TestForkExample runs the seed's fork example through the live services.
func TestForkExample(t *testing.T) {
	path := filepath.Join(dataDir, "examples", "fork-parent.jsonl")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("fork example absent at %s (the shared data sits beside the repository)", path)
	}
	// The header names it "parent"; a repeated run (-count) of this test in the same process
	// imports it under a fresh id, since the dev server keeps its data.
	parent := "parent"
	if run := runTag(t); run != "r1/" {
		parent = "parent-" + strings.TrimSuffix(run, "/")
	}
	mustAgentlog(t, nil, "import", path, "--session", parent)

	type forkOut struct {
		Child         string `json:"child"`
		SeedLength    int    `json:"seedLength"`
		ParentSession string `json:"parentSession"`
	}
	check := func(t *testing.T, args []string, child string, wantEvents, wantSeed, wantMsgs int) {
		t.Helper()
		child = parent + "/" + child
		out := mustAgentlog(t, nil, append([]string{"fork", parent, "--child", child, "--json"}, args...)...)
		var fo forkOut
		if err := json.Unmarshal([]byte(out), &fo); err != nil {
			t.Fatalf("fork output %q: %v", out, err)
		}
		if fo != (forkOut{Child: child, SeedLength: wantSeed, ParentSession: parent}) {
			t.Fatalf("fork = %+v, want child %q seedLength %d parent %q", fo, child, wantSeed, parent)
		}
		_, events, err := session.ReadJSONL(strings.NewReader(mustAgentlog(t, nil, "events", child)), child)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != wantEvents || events[len(events)-1].Type != "session/end-seed" {
			t.Fatalf("child has %d events ending %q, want %d ending session/end-seed", len(events), events[len(events)-1].Type, wantEvents)
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "messages", child)), &msgs); err != nil {
			t.Fatal(err)
		}
		if len(msgs) != wantMsgs {
			t.Fatalf("child has %d messages, want %d", len(msgs), wantMsgs)
		}
	}
	t.Run("default boundary", func(t *testing.T) { check(t, nil, "child-default", 9, 8, 2) })
	t.Run("at 4", func(t *testing.T) { check(t, []string{"--at", "4"}, "child-at-4", 6, 5, 1) })
	t.Run("at 2 inside open turn", func(t *testing.T) {
		r := agentlog(t, nil, "fork", parent, "--at", "2", "--child", parent+"/child-at-2")
		if r.code != 1 {
			t.Fatalf("exit %d, want 1; stdout %s", r.code, r.stdout)
		}
		want := `fork boundary 2 in session "` + parent + `" ends inside open turn 1`
		if !strings.Contains(r.stderr, "OPEN_TURN") || !strings.Contains(r.stderr, want) {
			t.Fatalf("stderr %q, want OPEN_TURN and %q", r.stderr, want)
		}
	})
	t.Run("onto an existing child", func(t *testing.T) {
		r := agentlog(t, nil, "fork", parent, "--child", parent+"/child-default")
		if r.code != 1 || !strings.Contains(r.stderr, "SESSION_ALREADY_EXISTS") ||
			!strings.Contains(r.stderr, `session "`+parent+`/child-default" already exists`) {
			t.Fatalf("exit %d stderr %q, want 1 and SESSION_ALREADY_EXISTS", r.code, r.stderr)
		}
	})
	t.Run("unknown source", func(t *testing.T) {
		r := agentlog(t, nil, "fork", "no-such-session")
		if r.code != 1 || !strings.Contains(r.stderr, "SESSION_NOT_FOUND") {
			t.Fatalf("exit %d stderr %q, want 1 and SESSION_NOT_FOUND", r.code, r.stderr)
		}
	})
}

// TestImportIsAllOrNothing: an import that fails after validation (here: an event larger than the
// stream's max message size) writes nothing and leaves no metadata behind, so the same id can be
// imported again; a log that breaks a rule is refused before anything is created.
func TestImportIsAllOrNothing(t *testing.T) {
	run := runTag(t)
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	user := func(seq int, text string) string {
		return `{"type":"user/message","seq":` + fmt.Sprint(seq) + `,"time":1,"data":{"id":"m` + fmt.Sprint(seq) +
			`","role":"user","content":[{"type":"text","text":"` + text + `"}],"source":{"kind":"user"}},"surfaceOp":"append"}`
	}
	// An event over --max-event-bytes (a larger one than a record is offloaded, and imported).
	huge := write("huge.jsonl", user(0, "small"), user(1, strings.Repeat("x", 2<<20)))
	r := agentlog(t, nil, "import", huge, "--session", "it/"+run+"all-or-nothing", "--max-event-bytes", "1048576")
	if r.code != 1 || !strings.Contains(r.stderr, "nothing was written") {
		t.Fatalf("oversized import: exit %d, stderr %q; want 1 and 'nothing was written'", r.code, r.stderr)
	}
	if ev := agentlog(t, nil, "events", "it/"+run+"all-or-nothing"); ev.code == 0 {
		t.Fatalf("a failed import left the session behind:\n%s", ev.stdout)
	}
	ok := write("ok.jsonl", user(0, "small"), user(1, "also small"))
	mustAgentlog(t, nil, "import", ok, "--session", "it/"+run+"all-or-nothing")
	_, events, err := session.ReadJSONL(strings.NewReader(mustAgentlog(t, nil, "events", "it/"+run+"all-or-nothing")), "x")
	if err != nil || len(events) != 2 {
		t.Fatalf("re-import: %d events, err %v; want 2", len(events), err)
	}

	gap := write("gap.jsonl", user(0, "a"), user(2, "c"))
	r = agentlog(t, nil, "import", gap, "--session", "it/"+run+"gap")
	if r.code != 1 || !strings.Contains(r.stderr, `session "it/`+run+`gap"`) || !strings.Contains(r.stderr, "seq 2") ||
		!strings.Contains(r.stderr, "rule") {
		t.Fatalf("seq gap: exit %d, stderr %q; want 1 naming the session, seq 2 and the rule", r.code, r.stderr)
	}
	if ev := agentlog(t, nil, "events", "it/"+run+"gap"); ev.code == 0 {
		t.Fatalf("a refused import created the session:\n%s", ev.stdout)
	}
}

// runs counts each test's invocations in this process, so that a repeated run (go test -count N)
// against the same dev server uses fresh session ids.
var runs sync.Map // test name -> *atomic.Int64

// runTag returns "r<N>/" for the N-th run of the calling test in this process.
func runTag(t *testing.T) string {
	c, _ := runs.LoadOrStore(t.Name(), new(atomic.Int64))
	return fmt.Sprintf("r%d/", c.(*atomic.Int64).Add(1))
}

// TestMessagesLargerThanOneReply imports a session whose messages take about 2.4 MiB, more than
// one NATS message, and reads them with `agentlog messages`: the projector's query service sends
// them in pages and the CLI prints them all.
func TestMessagesLargerThanOneReply(t *testing.T) {
	id := "it/" + runTag(t) + "large-history"
	var lines []string
	for seq := range 12 {
		lines = append(lines, `{"type":"user/message","seq":`+fmt.Sprint(seq)+`,"time":1,"data":{"id":"m`+fmt.Sprint(seq)+
			`","role":"user","content":[{"type":"text","text":"`+strings.Repeat(string(rune('a'+seq)), 200<<10)+`"}],"source":{"kind":"user"}},"surfaceOp":"append"}`)
	}
	p := filepath.Join(t.TempDir(), "large.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustAgentlog(t, nil, "import", p, "--session", id)
	var msgs []json.RawMessage
	if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "messages", id)), &msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 12 {
		t.Fatalf("agentlog messages: %d messages, want 12", len(msgs))
	}
	for seq, m := range msgs {
		if !strings.Contains(string(m), strings.Repeat(string(rune('a'+seq)), 200<<10)) {
			t.Fatalf("message %d is not the text of seq %d", seq, seq)
		}
	}
}
