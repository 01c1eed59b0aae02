package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/sessionview"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// Tests of the commands of issue 25 (show, forks, append, fork --then, contexts) and of its rough
// edges, through run() against a dev stack (a real embedded server, a projector and a forker).

// writeLog writes a dsh JSONL log (header h, events) to a file in dir and returns its path.
func writeLog(t *testing.T, dir, name string, h *session.Header, events []session.Event) string {
	t.Helper()
	var b bytes.Buffer
	if err := session.WriteJSONL(&b, h, events, session.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// mustCLI runs the CLI and fails unless it exits 0; it returns stdout.
func mustCLI(ctx context.Context, t *testing.T, url string, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(ctx, url, args...)
	if code != 0 {
		t.Fatalf("agentlog %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// importDemo imports the demo script's session (3 turns, chunks, tool calls, a compaction) as id.
func importDemo(ctx context.Context, t *testing.T, s *devstack.Stack, id string) []session.Event {
	t.Helper()
	events, err := demoEvents(1785000000000)
	if err != nil {
		t.Fatal(err)
	}
	f := writeLog(t, t.TempDir(), id+".jsonl", &session.Header{ID: id, CreatedAt: 1785000000000, Cwd: "/work/demo"}, events)
	mustCLI(ctx, t, s.URL(), "import", f)
	return events
}

// TestShowRecordedSession: show of a recorded dsh session folds its 2,000 chunk events into the
// messages they built, gives each step's and turn's duration and usage (the usage unit's figures),
// marks the cwd dsh cannot restore, and is plain in a pipe; --color always colors it, --output
// json is the same view as one object, --full does not cut.
func TestShowRecordedSession(t *testing.T) {
	path := filepath.Join(sharedData, "dsh-sessions", "apps_web__goal-multi-turn-actions_session.jsonl")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("recorded sessions absent at %s (the shared data sits beside the repository): %v", sharedData, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	mustCLI(ctx, t, s.URL(), "import", path, "--session", "goal-1")

	out := mustCLI(ctx, t, s.URL(), "show", "goal-1", "--width", "120")
	for _, want := range []string{
		"session   goal-1",
		"cwd       {{cwd}}/workspace  (not an absolute path: dsh cannot restore this session",
		"log       2098 events (last seq 2097), 2 turns (open: none), 0 compactions, 0 crash repairs",
		"usage     in 10,012 · out 2,384 · cache read 103,040 · reasoning 694 (12 steps)",
		"assistant (251 chunks; reasoning 908 chars; calls bash, get_goal)",
		"step 1 ends · in 7,893 · out 297 · reasoning 213",
		"15.4s   turn 1 ends: completed · in 8,847 · out 1,198",
		"tool bash {\"command\": \"pwd && ls -la\"",
		"28ms        ↳ ok {{cwd}}/workspace total 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q", want)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Error("show colored its output into a pipe")
	}
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if w := displayWidth(l); w > 120 {
			t.Fatalf("line %d is %d columns wide, over --width 120: %q", i, w, l)
		}
	}
	if strings.Count(out, "\n") > 400 {
		t.Errorf("show printed %d lines for 2,098 events: the chunks are not folded", strings.Count(out, "\n"))
	}
	if t.Failed() {
		t.Logf("show:\n%s", out)
	}
	if colored := mustCLI(ctx, t, s.URL(), "show", "goal-1", "--color", "always"); !strings.Contains(colored, "\x1b[") {
		t.Error("--color always: no color")
	}
	full := mustCLI(ctx, t, s.URL(), "show", "goal-1", "--full", "--width", "120")
	if len(full) <= len(out) || !strings.Contains(full, "Continue working toward the objective in this same session.") {
		t.Error("--full did not print the texts whole")
	}

	var v sessionview.View
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "show", "goal-1", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	var turns []*sessionview.Node
	for _, n := range v.Nodes {
		if n.Kind == "turn" {
			turns = append(turns, n)
		}
	}
	if v.Events != 2098 || v.Usage.InputTokens != 10012 || v.Turns.Count != 2 || len(turns) != 2 || v.CwdRestorable {
		t.Fatalf("show -o json: events %d, usage %+v, turns %d/%d, cwdRestorable %v", v.Events, v.Usage, v.Turns.Count, len(turns), v.CwdRestorable)
	}
	t1 := turns[0]
	if t1.Seq != 7 || t1.LastSeq != 1053 || t1.Reason != "completed" || t1.DurationMs == nil || *t1.DurationMs != 15406 || t1.Usage == nil || t1.Usage.Own.InputTokens != 8847 {
		t.Fatalf("turn 1: %+v (usage %+v)", t1, t1.Usage)
	}
	steps := 0
	for _, c := range t1.Children {
		if c.Kind == "step" {
			steps++
		}
	}
	if steps != 6 {
		t.Fatalf("turn 1 has %d steps, want 6", steps)
	}
}

// displayWidth is the width of a line in terminal columns (wide characters count 2).
func displayWidth(s string) int {
	w := 0
	for _, r := range s {
		if r >= 0x1100 && (r <= 0x115f || (r >= 0x2e80 && r <= 0xa4cf) || (r >= 0xac00 && r <= 0xd7a3) || (r >= 0xf900 && r <= 0xfaff) || (r >= 0xfe30 && r <= 0xfe4f) || (r >= 0xff00 && r <= 0xff60) || (r >= 0xffe0 && r <= 0xffe6)) {
			w += 2
		} else {
			w++
		}
	}
	return w
}

// TestShowMarksCompactionsAndRepairs: a compaction (surface replace) and the closers of a crash
// repair (an open turn resumed: a synthetic tool result and an interrupted turn/end) are marked, and
// a fork's inherited events are told from its own.
func TestShowMarksCompactionsAndRepairs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	importDemo(ctx, t, s, "demo")
	out := mustCLI(ctx, t, s.URL(), "show", "demo", "--width", "200")
	if !strings.Contains(out, "[compaction: replaces nodes 2..17]") || !strings.Contains(out, "1 compaction,") {
		t.Fatalf("show lacks the compaction:\n%s", out)
	}
	// An open turn with a tool call that has no result, resumed by append: Open repairs it.
	open := []session.Event{opsEv(0, "turn/start", `{"turn":1}`),
		opsEv(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"list files"}],"source":{"kind":"user"}}`),
		opsEv(2, "step/start", `{"turn":1,"step":1}`),
		opsEv(3, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":{}}],"source":{"kind":"model","provider":"p","model":"m"}}}`),
		opsEv(4, "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"ls","arguments":"{}"}`)}
	mustCLI(ctx, t, s.URL(), "import", writeLog(t, t.TempDir(), "open.jsonl", &session.Header{ID: "crashed", CreatedAt: 1785000000000}, open))
	next := filepath.Join(t.TempDir(), "next.jsonl")
	if err := os.WriteFile(next, []byte(`{"type":"turn/start","data":{"turn":2}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(ctx, t, s.URL(), "append", "crashed", next)
	out = mustCLI(ctx, t, s.URL(), "show", "crashed", "--width", "200")
	for _, want := range []string{"[repair: synthetic result TOOL_OUTCOME_UNKNOWN]", "[repair: closed by crash repair (interrupted)]", "turn 1 ends: interrupted", "2 crash repairs", "[end-seed: this lifecycle's own writes begin]"} {
		if !strings.Contains(out, want) {
			t.Errorf("show of a repaired session lacks %q", want)
		}
	}
	// A fork: its header says what it inherited, and the JSON marks the inherited nodes.
	mustCLI(ctx, t, s.URL(), "fork", "demo", "--child", "demo-kid")
	out = mustCLI(ctx, t, s.URL(), "show", "demo-kid")
	if !strings.Contains(out, "parent    demo, seed length") || !strings.Contains(out, "own: in 0 · out 0; inherited:") {
		t.Errorf("show of a fork lacks its lineage:\n%s", out)
	}
	var v sessionview.View
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "show", "demo-kid", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Nodes) == 0 || !v.Nodes[0].Inherited || v.Nodes[len(v.Nodes)-1].Inherited {
		t.Errorf("show -o json of a fork: the seed is not inherited or the end-seed is: %+v", v.Nodes)
	}
	if t.Failed() {
		t.Logf("show:\n%s", out)
	}
}

// syncBuf is a bytes.Buffer safe for a command writing while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startCLI runs the CLI in the background; stop cancels it (SIGINT) and returns its exit status.
func startCLI(t *testing.T, url string, args ...string) (out, errOut *syncBuf, stop func() int) {
	t.Helper()
	out, errOut = &syncBuf{}, &syncBuf{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"--nats", url}, args...), strings.NewReader(""), out, errOut) }()
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("agentlog %v did not stop on cancel", args)
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return out, errOut, stop
}

// TestFollowWaitsForSession: events --follow, messages --watch and show --follow of a session
// that does not exist yet say so and wait for it (they exited 1), then follow it once created.
func TestFollowWaitsForSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	evOut, evErr, evStop := startCLI(t, s.URL(), "events", "later", "--follow")
	msgOut, msgErr, msgStop := startCLI(t, s.URL(), "messages", "later", "--watch")
	showOut, showErr, showStop := startCLI(t, s.URL(), "show", "later", "--follow")
	for _, e := range []*syncBuf{evErr, msgErr, showErr} {
		checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error {
			if !strings.Contains(e.String(), `session "later" does not exist yet: waiting for it to be created`) {
				return fmt.Errorf("no waiting message: %s", e.String())
			}
			return nil
		})
	}
	if err := s.Store().CreateSession(ctx, session.Header{ID: "later", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), "later").Append(ctx, 0, opsEvents()); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error {
		if n := strings.Count(evOut.String(), "\n"); n != 5 {
			return fmt.Errorf("events --follow printed %d lines, want 5: %s", n, evOut.String())
		}
		return nil
	})
	checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(msgOut.String(), `"hello"`) {
			return fmt.Errorf("messages --watch did not print the history: %s", msgOut.String())
		}
		return nil
	})
	checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(showOut.String(), "turn 1 ends: completed") {
			return fmt.Errorf("show --follow did not print the turn: %s", showOut.String())
		}
		return nil
	})
	for name, stop := range map[string]func() int{"events": evStop, "messages": msgStop, "show": showStop} {
		if code := stop(); code != 0 {
			t.Errorf("%s: exit %d after SIGINT", name, code)
		}
	}
	if !strings.HasPrefix(evOut.String(), `{"type":"session","version":0,"id":"later"`) {
		t.Errorf("events --follow did not print the header first: %s", evOut.String())
	}
}

// TestEventsFollowAll: events --follow --all prints every session's new events as
// {"session","event"} lines; it takes no ID and goes with --follow only.
func TestEventsFollowAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	if code, _, _ := runCLI(ctx, s.URL(), "events", "--all"); code != 2 {
		t.Errorf("events --all without --follow: exit %d, want 2", code)
	}
	if code, _, _ := runCLI(ctx, s.URL(), "events", "x", "--follow", "--all"); code != 2 {
		t.Errorf("events ID --follow --all: exit %d, want 2", code)
	}
	out, _, stop := startCLI(t, s.URL(), "events", "--follow", "--all")
	// Appends until the follower, which starts at the stream's next record, has seen one.
	i := 0
	checkfor.Check(t, 10*time.Second, 50*time.Millisecond, func() error {
		if strings.Contains(out.String(), `"session":"a`) {
			return nil
		}
		id := fmt.Sprintf("a%d", i)
		i++
		if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
			t.Fatal(err)
		}
		if _, err := storetest.Session(s.Store(), id).Append(ctx, 0, opsEvents()); err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("events --follow --all printed nothing after %d sessions: %s", i, out.String())
	})
	if err := s.Store().CreateSession(ctx, session.Header{ID: "b", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), "b").Append(ctx, 0, opsEvents()[:2]); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(out.String(), `{"session":"b","event":{"type":"user/message","seq":1`) {
			return fmt.Errorf("no session b's events: %s", out.String())
		}
		return nil
	})
	if code := stop(); code != 0 {
		t.Errorf("exit %d after SIGINT", code)
	}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var line struct {
			Session string        `json:"session"`
			Event   session.Event `json:"event"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.Session == "" || line.Event.Type == "" {
			t.Fatalf("line %q: %v", l, err)
		}
	}
}

// TestTailZero: --tail 0 prints no event (the header only), as tail -n 0; with --follow only the
// events appended from then on.
func TestTailZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	if err := s.Store().CreateSession(ctx, session.Header{ID: "t0", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	evs := opsEvents()
	r, err := storetest.Session(s.Store(), "t0").Append(ctx, 0, evs[:2])
	if err != nil {
		t.Fatal(err)
	}
	if out := mustCLI(ctx, t, s.URL(), "events", "t0", "--tail", "0"); strings.Count(out, "\n") != 1 || !strings.Contains(out, `"type":"session"`) {
		t.Fatalf("--tail 0: %q, want the header alone", out)
	}
	if out := mustCLI(ctx, t, s.URL(), "events", "t0", "--tail", "0", "--no-header"); out != "" {
		t.Fatalf("--tail 0 --no-header: %q, want nothing", out)
	}
	if out := mustCLI(ctx, t, s.URL(), "events", "t0", "--tail", "1", "--no-header"); !strings.Contains(out, `"seq":1`) || strings.Count(out, "\n") != 1 {
		t.Fatalf("--tail 1: %q", out)
	}
	out, _, stop := startCLI(t, s.URL(), "events", "t0", "--tail", "0", "--follow", "--no-header")
	// A sleep, not a condition: it gives a wrong implementation the time to print the old events
	// (there is nothing to wait for when the right one prints nothing).
	time.Sleep(300 * time.Millisecond)
	if _, err := storetest.Session(s.Store(), "t0").Append(ctx, r.StreamSeq, evs[2:]); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 60*time.Second, 20*time.Millisecond, func() error {
		if n := strings.Count(out.String(), "\n"); n != 2 {
			return fmt.Errorf("%d lines, want the 2 new events: %s", n, out.String())
		}
		return nil
	})
	stop()
	if got := out.String(); strings.Contains(got, `"seq":0`) || strings.Contains(got, `"seq":1,`) || !strings.Contains(got, `"seq":3`) {
		t.Fatalf("--tail 0 --follow printed %q, want seqs 2 and 3 only", got)
	}
}

// TestMessagesMinSeqPastEnd: messages --min-seq beyond the log's last seq is refused at once,
// naming the end, as events --from-seq is (it waited the whole --timeout).
func TestMessagesMinSeqPastEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	if err := s.Store().CreateSession(ctx, session.Header{ID: "m", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), "m").Append(ctx, 0, opsEvents()); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(ctx, s.URL(), "--timeout", "60s", "messages", "m", "--min-seq", "99999")
	if code != 1 || !strings.Contains(errOut, `session "m": --min-seq 99999 is past the end of the log: its last seq is 3`) {
		t.Fatalf("messages --min-seq 99999: exit %d, stderr %q", code, errOut)
	}
	if out := mustCLI(ctx, t, s.URL(), "messages", "m", "--min-seq", "3"); !strings.Contains(out, "hello") {
		t.Fatalf("messages --min-seq 3 (the last seq): %s", out)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "messages", "nosuch", "--min-seq", "5"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("messages nosuch --min-seq 5: exit %d, %s", code, errOut)
	}
}

// TestForkPrintsText: fork prints a sentence by default and the JSON object with --json.
func TestForkPrintsText(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	importDemo(ctx, t, s, "p")
	if out := mustCLI(ctx, t, s.URL(), "fork", "p", "--at", "19", "--child", "c1"); out != "forked session \"p\" at seq 19 into \"c1\" (seed length 20)\n" {
		t.Fatalf("fork: %q", out)
	}
	var res client.ForkResult
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "fork", "p", "--at", "19", "--child", "c2", "--json")), &res); err != nil ||
		res != (client.ForkResult{Child: "c2", SeedLength: 20, ParentSession: "p"}) {
		t.Fatalf("fork --json: %+v %v", res, err)
	}
}

// TestForksCommand: forks lists one line per turn end with the turn's first user message; every
// seq of a listed range forks, every other seq is refused OPEN_TURN (client.ForkBoundaries and the
// forker agree); --json is the library's list.
func TestForksCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	events := importDemo(ctx, t, s, "f")
	out := mustCLI(ctx, t, s.URL(), "forks", "f")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The leading range (the request/header before turn 1), then one line per turn end.
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "SEQ") || !strings.HasPrefix(lines[1], "0    0        -") ||
		!strings.Contains(lines[2], "How many Go files are in this repo?") || !strings.Contains(lines[2], "completed") || !strings.HasPrefix(lines[2], "19   20       1") {
		t.Fatalf("forks:\n%s", out)
	}
	var bs []session.ForkBoundary
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "forks", "f", "--json")), &bs); err != nil || len(bs) != 4 {
		t.Fatalf("forks --json: %v %v", bs, err)
	}
	valid := map[int64]bool{}
	for _, b := range bs {
		for q := b.Seq; q <= b.Through; q++ {
			valid[q] = true
		}
		if b.Turn != 0 && (b.UserSeq < 0 || events[b.UserSeq].Type != "user/message") {
			t.Errorf("boundary %+v: userSeq is not a user/message", b)
		}
	}
	for q := int64(0); q < int64(len(events)); q++ {
		code, _, errOut := runCLI(ctx, s.URL(), "fork", "f", "--at", fmt.Sprint(q), "--child", fmt.Sprintf("f-at-%d", q))
		if valid[q] != (code == 0) || (code != 0 && !strings.Contains(errOut, "OPEN_TURN")) {
			t.Fatalf("fork at %d: exit %d (%s); forks lists it: %v", q, code, errOut, valid[q])
		}
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "forks", "nosuch"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("forks nosuch: exit %d %s", code, errOut)
	}
}

// TestAppendCommand: append resumes the session through publisher.Open (its closers and end-seed
// first), gives events without seq the next seqs after them, refuses an event whose seq is not its
// own and a file that breaks a rule with the seq and the rule, writing nothing of it (not even the
// resume), and reads stdin with -.
func TestAppendCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	open := opsEvents()[:2] // turn 1 open
	mustCLI(ctx, t, s.URL(), "import", writeLog(t, t.TempDir(), "a.jsonl", &session.Header{ID: "ap", CreatedAt: 1785000000000}, open))
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lastSeq := func() int64 {
		t.Helper()
		c, err := client.New(s.Conn())
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.LastSeq(ctx, "ap")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Refused files leave the log as it was: the resume's closers are not written either.
	for name, c := range map[string]struct{ body, says string }{
		"wrong seq": {`{"type":"turn/start","seq":2,"data":{"turn":2}}`, `event seq 2 is not the session's next seq 4 (leave seq out to have the next one assigned) [rule seq-contiguous]`},
		"bad rule":  {`{"type":"turn/start","data":{"turn":2}}` + "\n" + `{"type":"user/message","data":{"id":"u"}}`, `bad.jsonl:2: refused, nothing was written: session "ap" seq 5:`},
		"header":    {`{"type":"session","version":0,"id":"ap","createdAt":1}`, `a session header line, not an event`},
		"no data":   {`{"type":"turn/start"}`, `has no data`},
	} {
		code, _, errOut := runCLI(ctx, s.URL(), "append", "ap", write("bad.jsonl", c.body))
		if code != 1 || !strings.Contains(errOut, c.says) {
			t.Errorf("%s: exit %d, stderr %q, want 1 and %q", name, code, errOut, c.says)
		}
		if n := lastSeq(); n != 1 {
			t.Fatalf("%s: the log's last seq is %d after a refused append, want 1", name, n)
		}
	}
	body := `{"type":"turn/start","data":{"turn":2}}
{"type":"user/message","data":{"id":"u2","role":"user","content":[{"type":"text","text":"again"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"turn/end","seq":6,"time":1785000000999,"data":{"turn":2,"reason":{"kind":"completed"}}}
`
	out := mustCLI(ctx, t, s.URL(), "append", "ap", write("ok.jsonl", body), "--json")
	var res appendResult
	first := int64(2)
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Events != 3 || res.FirstSeq != 4 || res.LastSeq != 6 || res.Resumed != 2 || res.Repaired != 1 || res.ResumedFirstSeq == nil || *res.ResumedFirstSeq != first {
		t.Fatalf("append --json: %s (%+v, %v)", out, res, err)
	}
	_, evs, err := session.ReadJSONL(strings.NewReader(mustCLI(ctx, t, s.URL(), "events", "ap")), "ap")
	if err != nil {
		t.Fatal(err)
	}
	types := []string{}
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if strings.Join(types, " ") != "turn/start user/message turn/end session/end-seed turn/start user/message turn/end" || string(evs[6].Time) != "1785000000999" {
		t.Fatalf("events after append: %v (time of the last %s)", types, evs[6].Time)
	}
	// stdin, and text output.
	code, out, errOut := runCLIStdin(ctx, s.URL(), `{"type":"turn/start","data":{"turn":3}}`+"\n", "append", "ap", "-")
	if code != 0 || out != "resumed session \"ap\": the end-seed marker, from seq 7\nappended 1 event to session \"ap\" (seqs 8..8)\n" {
		t.Fatalf("append -: exit %d %q %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "append", "nosuch", write("x.jsonl", `{"type":"turn/start","data":{"turn":1}}`)); code != 1 || !strings.Contains(errOut, `session "nosuch" not found`) {
		t.Fatalf("append to an unknown session: exit %d %s", code, errOut)
	}
}

// TestForkThen: fork --then writes the then-events into the child after its end-seed, in the same
// record as the seed; a then-event that breaks a rule refuses the whole fork, and no child exists
// after it; without a forker that serves then-requests nothing is created either.
func TestForkThen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	importDemo(ctx, t, s, "src")
	dir := t.TempDir()
	then := filepath.Join(dir, "then.jsonl")
	if err := os.WriteFile(then, []byte(`{"type":"turn/start","data":{"turn":2}}
{"type":"user/message","data":{"id":"edit","role":"user","content":[{"type":"text","text":"count the tests instead"}],"source":{"kind":"user"}},"surfaceOp":"append"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustCLI(ctx, t, s.URL(), "fork", "src", "--at", "19", "--child", "edited", "--then", then)
	if out != "forked session \"src\" at seq 19 into \"edited\" (seed length 20), then 2 --then events (seqs 21..22)\n" {
		t.Fatalf("fork --then: %q", out)
	}
	records := 0
	var got []session.Event
	if _, err := storetest.Session(s.Store(), "edited").Records(ctx, func(r store.Record) error {
		records++
		got = append(got, r.Events...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if records != 1 || len(got) != 23 || got[20].Type != "session/end-seed" || got[22].Type != "user/message" || !strings.Contains(string(got[22].Data), "count the tests instead") {
		t.Fatalf("the child: %d records, %d events", records, len(got))
	}
	if msgs := mustCLI(ctx, t, s.URL(), "messages", "edited"); !strings.Contains(msgs, "count the tests instead") {
		t.Fatalf("the child's messages lack the edit: %s", msgs)
	}
	// A line that is not JSON: refused before the fork, naming the line, the byte and the rule.
	if err := os.WriteFile(then, []byte("{\"type\":\"turn/start\",\"data\":{\"turn\":2}}\n{\"type\":\"user/message\",\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "fork", "src", "--at", "19", "--child", "refused-json", "--then", then); code == 0 ||
		!strings.Contains(errOut, "refused, nothing was written") || !strings.Contains(errOut, "line 2: invalid JSON at byte") || !strings.Contains(errOut, "[rule json]") {
		t.Fatalf("--then with a line that is not JSON: exit %d, stderr %q", code, errOut)
	}
	// Refused whole: a then-event that breaks a rule, or whose seq is not its own.
	for name, body := range map[string]string{
		"rule": `{"type":"user/message","data":{"id":"x"}}`,
		"seq":  `{"type":"turn/start","seq":99,"data":{"turn":2}}`,
	} {
		if err := os.WriteFile(then, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(ctx, s.URL(), "fork", "src", "--at", "19", "--child", "refused-"+name, "--then", then)
		if code != 1 || !strings.Contains(errOut, "then-event 1 of 1 refused, nothing was written") || !strings.Contains(errOut, `session "refused-`+name+`" seq `) {
			t.Fatalf("%s: exit %d, stderr %q", name, code, errOut)
		}
		if code, _, _ := runCLI(ctx, s.URL(), "status", "refused-"+name); code != 1 {
			t.Fatalf("%s: the refused child exists", name)
		}
	}
	// A then-event larger than one message: refused before it is sent, naming it, its seq, its size
	// and the server's limit.
	big := `{"type":"user/message","data":{"id":"big","role":"user","content":[{"type":"text","text":"` + strings.Repeat("x", 9<<20) + `"}],"source":{"kind":"user"}},"surfaceOp":"append"}`
	if err := os.WriteFile(then, []byte("{\"type\":\"turn/start\",\"data\":{\"turn\":2}}\n"+big+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "fork", "src", "--at", "19", "--child", "refused-big", "--then", then); code != 1 ||
		!strings.Contains(errOut, "the largest, then-event 2 of 2 (seq 22), ") || !strings.Contains(errOut, "max_payload") || !strings.Contains(errOut, "[rule event-too-large]") {
		t.Fatalf("--then with a 9 MiB event: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runCLI(ctx, s.URL(), "status", "refused-big"); code != 1 {
		t.Fatal("the refused child exists")
	}
	// A forker that predates then-events does not serve agentlog.fork.then: nothing is created.
	bare, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Projectors: 0, Forkers: 0, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := os.WriteFile(then, []byte(`{"type":"turn/start","data":{"turn":2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(ctx, bare.URL(), "--timeout", "10s", "fork", "x", "--then", then)
	if code != 1 || !strings.Contains(errOut, "no forker serves agentlog.fork.then") {
		t.Fatalf("fork --then without a then-serving forker: exit %d %s", code, errOut)
	}
}

// TestImportDirectory: import DIR imports every *.jsonl file in it, one report line each, goes on
// after a failure and exits 1; --session with a directory is a usage error; --id-from-filename
// names each session after its file.
func TestImportDirectory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	dir := t.TempDir()
	evs := opsEvents()
	writeLog(t, dir, "one.jsonl", &session.Header{ID: "d1", CreatedAt: 1785000000000}, evs)
	writeLog(t, dir, "two.jsonl", &session.Header{ID: "d2", CreatedAt: 1785000000000}, evs)
	writeLog(t, dir, "bad.jsonl", &session.Header{ID: "d3", CreatedAt: 1785000000000}, evs[1:])
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a log"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, s.URL(), "import", dir)
	if code != 1 || !strings.Contains(errOut, "skipping 1 entries that are not *.jsonl files") || !strings.Contains(errOut, "1 of 3 files failed") {
		t.Fatalf("import DIR: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{filepath.Join(dir, "one.jsonl") + `: imported 4 events into session "d1"`, filepath.Join(dir, "two.jsonl") + `: imported 4 events into session "d2"`,
		filepath.Join(dir, "bad.jsonl") + `: failed: refused, nothing written: session "d3" seq 1:`} {
		if !strings.Contains(out, want) {
			t.Errorf("import DIR lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := runCLI(ctx, s.URL(), "import", dir, "--session", "x"); code != 2 {
		t.Errorf("import DIR --session: exit %d, want 2", code)
	}
	code, out, _ = runCLI(ctx, s.URL(), "import", dir, "--id-from-filename", "--json")
	if code != 1 || !strings.Contains(out, `{"file":"`+filepath.Join(dir, "one.jsonl")+`","session":"one","events":4`) || !strings.Contains(out, `"error":"`) {
		t.Fatalf("import DIR --id-from-filename --json: exit %d\n%s", code, out)
	}
}

// TestImportPlaceholderIDAndCwd: a header id that is a template placeholder is refused and needs
// --session; a cwd dsh cannot restore is warned about, --cwd sets it (absolute), and a fork of a
// session with such a cwd leaves it out of the child's header, saying so; a header without its
// type is refused naming the file and line.
func TestImportPlaceholderIDAndCwd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	f := writeLog(t, t.TempDir(), "tpl.jsonl", &session.Header{ID: "{{sessionId}}", CreatedAt: 1785000000000, Cwd: "{{cwd}}/workspace"}, opsEvents())
	code, _, errOut := runCLI(ctx, s.URL(), "import", f)
	if code != 1 || !strings.Contains(errOut, `the header's id "{{sessionId}}" is a template placeholder, not a session id: pass --session ID`) {
		t.Fatalf("import of a placeholder id: exit %d %s", code, errOut)
	}
	if code, _, _ := runCLI(ctx, s.URL(), "status", "{{sessionId}}"); code != 1 {
		t.Fatal("a session named {{sessionId}} was created")
	}
	// The placeholder given as --session is refused too.
	if code, _, errOut := runCLI(ctx, s.URL(), "import", f, "--session", "{{sessionId}}"); code != 2 || !strings.Contains(errOut, `--session "{{sessionId}}" is a template placeholder`) {
		t.Fatalf("import --session {{sessionId}}: exit %d %s", code, errOut)
	}
	if code, _, _ := runCLI(ctx, s.URL(), "status", "{{sessionId}}"); code != 1 {
		t.Fatal("a session named {{sessionId}} was created by --session")
	}
	code, _, errOut = runCLI(ctx, s.URL(), "import", f, "--session", "rel")
	if code != 0 || !strings.Contains(errOut, `session "rel": the header's cwd "{{cwd}}/workspace" is not an absolute path, so dsh cannot restore the session`) {
		t.Fatalf("import of a relative cwd: exit %d, stderr %q", code, errOut)
	}
	c, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(ctx, s.URL(), "fork", "rel", "--child", "rel-kid")
	if h, herr := c.Header(ctx, "rel-kid"); code != 0 || herr != nil || h.Cwd != "" || !strings.Contains(errOut, `the child has no cwd: the source's "{{cwd}}/workspace" is not an absolute path`) {
		t.Fatalf("fork of a relative cwd: exit %d, child cwd %q (%v), stderr %q", code, h.Cwd, herr, errOut)
	}
	code, _, errOut = runCLI(ctx, s.URL(), "import", f, "--session", "abs", "--cwd", "/srv/work")
	if h, herr := c.Header(ctx, "abs"); code != 0 || herr != nil || h.Cwd != "/srv/work" || strings.Contains(errOut, "cwd") {
		t.Fatalf("import --cwd: exit %d, cwd %q (%v), stderr %q", code, h.Cwd, herr, errOut)
	}
	mustCLI(ctx, t, s.URL(), "fork", "abs", "--child", "abs-kid")
	if h, _ := c.Header(ctx, "abs-kid"); h.Cwd != "/srv/work" {
		t.Fatalf("fork of an absolute cwd: child cwd %q", h.Cwd)
	}
	// A header without "type":"session" is read as an event: the refusal names the file and
	// line (no made-up session), and says what a header is.
	untyped := filepath.Join(t.TempDir(), "untyped.jsonl")
	if err := os.WriteFile(untyped, []byte(`{"id":"untyped","version":3,"cwd":"/tmp"}`+"\n"+`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(ctx, s.URL(), "import", untyped)
	if code != 1 || !strings.Contains(errOut, untyped+`: line 1: event type must be a string, got nothing [rule envelope] (a header line is {"type":"session","id":...}; a log without one needs --session ID)`) || strings.Contains(errOut, `session "session"`) {
		t.Fatalf("import of a header without its type: exit %d, stderr %q", code, errOut)
	}
}

// TestRmWordsDryRunAndConfirmation: rm --dry-run says what would go and removes nothing; on a
// terminal rm asks (no removes nothing, yes removes), --yes does not; the report names units, not
// KV keys; a removed parent shows as removed in its fork's status.
func TestRmWordsDryRunAndConfirmation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	importDemo(ctx, t, s, "old")
	mustCLI(ctx, t, s.URL(), "messages", "old") // the projection has folded it
	mustCLI(ctx, t, s.URL(), "fork", "old", "--child", "kid")
	out := mustCLI(ctx, t, s.URL(), "rm", "old", "--dry-run")
	for _, want := range []string{`rm would remove session "old":`, "log:          38 events", "projections:  7 units (messages,", "kept:         its fork children kid"} {
		if !strings.Contains(out, want) {
			t.Errorf("rm --dry-run lacks %q:\n%s", want, out)
		}
	}
	mustCLI(ctx, t, s.URL(), "status", "old") // still there
	askTerminal = func(any) bool { return true }
	defer func() { askTerminal = isTerminal }()
	code, _, errOut := runCLIStdin(ctx, s.URL(), "n\n", "rm", "old")
	if code != 1 || !strings.Contains(errOut, `Remove session "old"? This cannot be undone. [y/N]`) || !strings.Contains(errOut, "not confirmed; nothing was removed") {
		t.Fatalf("rm answered no: exit %d %s", code, errOut)
	}
	mustCLI(ctx, t, s.URL(), "status", "old")
	code, out, errOut = runCLIStdin(ctx, s.URL(), "y\n", "rm", "old")
	if code != 0 || !strings.Contains(out, "projections:   7 units (messages, ") || !strings.Contains(out, "log:           38 events (") ||
		!strings.Contains(out, "kept:          its fork children kid, whose parent link now shows as removed") {
		t.Fatalf("rm answered yes: exit %d\n%s\n%s", code, out, errOut)
	}
	if regexp.MustCompile(`messages\.\w`).MatchString(out) {
		t.Fatalf("rm prints KV keys:\n%s", out)
	}
	if out := mustCLI(ctx, t, s.URL(), "status", "kid"); !strings.Contains(out, "parent     old (removed) (seed length") {
		t.Fatalf("status of the orphaned fork:\n%s", out)
	}
	var st client.Status
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "status", "kid", "--json")), &st); err != nil || !st.ParentRemoved {
		t.Fatalf("status --json: parentRemoved %v (%v)", st.ParentRemoved, err)
	}
	importDemo(ctx, t, s, "quiet")
	if code, _, errOut := runCLIStdin(ctx, s.URL(), "", "rm", "quiet", "--yes"); code != 0 || strings.Contains(errOut, "[y/N]") {
		t.Fatalf("rm --yes asked: exit %d %s", code, errOut)
	}
}

// TestInspectExitStatus: inspect exits 1 on a refused log, with the oracle's JSON on stdout as
// before, and 0 on an accepted one.
func TestInspectExitStatus(t *testing.T) {
	bad := `{"type":"turn/start","seq":1,"time":1,"data":{"turn":1}}` + "\n"
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"inspect"}, strings.NewReader(bad), &out, &errb)
	want, _ := session.Inspect(strings.NewReader(bad), false).MarshalJSON()
	if code != 1 || out.String() != string(want)+"\n" || !strings.HasPrefix(out.String(), `{"ok":false`) || !strings.Contains(errb.String(), "the log is refused: session \"session\" line 1 seq 1") {
		t.Fatalf("inspect of a refused log: exit %d, stdout %q (want %q), stderr %q", code, out.String(), want, errb.String())
	}
	out.Reset()
	good := `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}` + "\n"
	if code := run(context.Background(), []string{"inspect"}, strings.NewReader(good), &out, &errb); code != 0 || !strings.HasPrefix(out.String(), `{"ok":true`) {
		t.Fatalf("inspect of a good log: exit %d %s", code, out.String())
	}
}

// TestContexts: context save stores the flags and environment given (paths absolute) in
// os.UserConfigDir()/agentlog with mode 0600 in 0700 directories; the selected context (or
// --context, or AGENTLOG_CONTEXT) supplies what no flag or environment variable gives; ls and rm.
func TestContexts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	t.Setenv("AGENTLOG_NATS_URL", "")
	t.Setenv("NATS_URL", "")
	t.Setenv(contextEnv, "")
	if err := s.Store().CreateSession(ctx, session.Header{ID: "through-ctx", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, args, strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errOut := ctl("context", "save", "dev", "--nats", s.URL(), "--description", "the test stack"); code != 0 {
		t.Fatalf("context save: %d %s", code, errOut)
	}
	if code, _, errOut := ctl("context", "save", "tls", "--nats", "tls://127.0.0.1:1", "--tls-ca", "ca.pem", "--user", "u", "--password", "pw"); code != 0 {
		t.Fatalf("context save tls: %d %s", code, errOut)
	}
	for _, p := range []string{filepath.Join(cfg, "agentlog"), filepath.Join(cfg, "agentlog", "context")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v %v, want a 0700 directory", p, fi, err)
		}
	}
	fi, err := os.Stat(filepath.Join(cfg, "agentlog", "context", "tls.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("tls.json: %v %v, want 0600", fi, err)
	}
	saved, _ := loadContext("tls")
	wd, _ := os.Getwd()
	if saved.Settings["tls-ca"] != filepath.Join(wd, "ca.pem") || saved.Settings["password"] != "pw" || saved.Settings["nats"] != "tls://127.0.0.1:1" {
		t.Fatalf("saved context tls: %+v", saved)
	}
	// No context selected: the default URL, where nothing listens.
	if code, _, _ := ctl("--timeout", "3s", "status", "through-ctx"); code != 1 {
		t.Fatalf("status without a context: exit %d", code)
	}
	if code, _, errOut := ctl("--context", "dev", "status", "through-ctx"); code != 0 {
		t.Fatalf("status --context dev: %d %s", code, errOut)
	}
	t.Setenv(contextEnv, "dev")
	if code, _, errOut := ctl("status", "through-ctx"); code != 0 {
		t.Fatalf("status with AGENTLOG_CONTEXT=dev: %d %s", code, errOut)
	}
	t.Setenv(contextEnv, "")
	if code, out, _ := ctl("context", "select", "dev"); code != 0 || !strings.Contains(out, `selected context "dev"`) {
		t.Fatalf("context select: %d %s", code, out)
	}
	if code, _, errOut := ctl("status", "through-ctx"); code != 0 {
		t.Fatalf("status through the selected context: %d %s", code, errOut)
	}
	// Flags and the environment win over the context.
	if code, _, errOut := ctl("--timeout", "3s", "--nats", "nats://127.0.0.1:1", "status", "through-ctx"); code != 1 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("--nats over the context: %d %s", code, errOut)
	}
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	if code, _, _ := ctl("--timeout", "3s", "status", "through-ctx"); code != 1 {
		t.Fatalf("NATS_URL over the context: exit %d", code)
	}
	t.Setenv("NATS_URL", "")
	code, out, _ := ctl("context", "ls")
	if code != 0 || !regexp.MustCompile(`dev \*\s+nats://127\.0\.0\.1:\d+\s+none\s+no\s+the test stack`).MatchString(out) || !regexp.MustCompile(`tls\s+tls://127\.0\.0\.1:1\s+user\s+yes`).MatchString(out) {
		t.Fatalf("context ls:\n%s", out)
	}
	if code, _, errOut := ctl("--context", "nosuch", "status", "x"); code != 2 || !strings.Contains(errOut, `context "nosuch" does not exist`) {
		t.Fatalf("--context nosuch: %d %s", code, errOut)
	}
	if code, _, _ := ctl("context", "save", "../evil"); code != 2 {
		t.Fatalf("context save ../evil: exit %d, want 2", code)
	}
	if code, out, _ := ctl("context", "rm", "dev"); code != 0 || !strings.Contains(out, "it was selected") {
		t.Fatalf("context rm dev: %d %s", code, out)
	}
	if sel, _ := selectedContext(); sel != "" {
		t.Fatalf("selected after rm: %q", sel)
	}
}

// TestAppendRestoresArchived: append to an archived session restores it (publisher.Open does)
// and appends after its log, which the check read from the archive.
func TestAppendRestoresArchived(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	mustCLI(ctx, t, s.URL(), "import", writeLog(t, t.TempDir(), "a.jsonl", &session.Header{ID: "cold", CreatedAt: 1785000000000}, opsEvents()))
	mustCLI(ctx, t, s.URL(), "archive", "cold")
	var st client.Status
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "status", "cold", "--json")), &st); err != nil || st.State != "archived" {
		t.Fatalf("status after archive: %+v %v", st, err)
	}
	code, out, errOut := runCLIStdin(ctx, s.URL(), `{"type":"turn/start","data":{"turn":2}}`+"\n", "append", "cold", "-", "--json")
	var res appendResult
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.FirstSeq != 5 || res.ResumedFirstSeq == nil || *res.ResumedFirstSeq != 4 {
		t.Fatalf("append to an archived session: exit %d %s %s", code, out, errOut)
	}
	if err := json.Unmarshal([]byte(mustCLI(ctx, t, s.URL(), "status", "cold", "--json")), &st); err != nil || st.State != "active" || st.LastSeq != 5 {
		t.Fatalf("status after append: %+v %v", st, err)
	}
}
