package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

const opsLog = `{"type":"session","version":0,"id":"x","createdAt":1785000000000}
{"type":"turn/start","seq":0,"time":1785000000000,"data":{"turn":1}}
{"type":"user/message","seq":1,"time":1785000000001,"data":{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"assistant/message","seq":2,"time":1785000000002,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append"}
{"type":"turn/end","seq":3,"time":1785000000003,"data":{"turn":1,"reason":{"kind":"completed"}}}
`

// streamCmd starts the binary with args and returns its stdout lines and its handle.
func streamCmd(t *testing.T, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"--nats", devURL}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

func nextLine(t *testing.T, lines <-chan string, what string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("%s: output ended", what)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no line within 30s", what)
	}
	return ""
}

// interrupt sends SIGINT and wants exit 0.
func interrupt(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v after SIGINT: %v", cmd.Args[3:], err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not stop on SIGINT", cmd.Args[3:])
	}
}

// TestFollowWatchSessionsStatus imports a session, follows its events and watches its messages
// while more events are appended, and lists it with sessions and status.
func TestFollowWatchSessionsStatus(t *testing.T) {
	id := "it/" + runTag(t) + "ops-follow"
	f := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(f, []byte(opsLog), 0o644); err != nil {
		t.Fatal(err)
	}
	mustAgentlog(t, nil, "import", f, "--session", id)
	mustAgentlog(t, nil, "messages", id) // the projection is there

	follow, evLines := streamCmd(t, "events", id, "--follow", "--from-seq", "3", "--no-header")
	watch, msgLines := streamCmd(t, "messages", id, "--watch")
	var e session.Event
	if err := json.Unmarshal([]byte(nextLine(t, evLines, "follow")), &e); err != nil || e.Seq != 3 {
		t.Fatalf("first followed event: %+v %v", e, err)
	}
	var hist []json.RawMessage
	if err := json.Unmarshal([]byte(nextLine(t, msgLines, "watch")), &hist); err != nil || len(hist) != 2 {
		t.Fatalf("first history: %v %v", hist, err)
	}

	_, st := connectStore(t, devURL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tail, err := storetest.Session(st, id).Tail(ctx)
	if err != nil {
		t.Fatal(err)
	}
	more := []session.Event{
		{Type: "turn/start", Seq: 4, Time: "1785000000004", Data: json.RawMessage(`{"turn":2}`)},
		{Type: "user/message", Seq: 5, Time: "1785000000005", SurfaceOp: json.RawMessage(`"append"`),
			Data: json.RawMessage(`{"id":"m2","role":"user","content":[{"type":"text","text":"more"}],"source":{"kind":"user"}}`)},
	}
	if _, err := storetest.Session(st, id).Append(ctx, tail.LastStreamSeq, more); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{4, 5} {
		if err := json.Unmarshal([]byte(nextLine(t, evLines, "follow")), &e); err != nil || e.Seq != want {
			t.Fatalf("followed event: %+v %v, want seq %d", e, err, want)
		}
	}
	if err := json.Unmarshal([]byte(nextLine(t, msgLines, "watch")), &hist); err != nil || len(hist) != 3 {
		t.Fatalf("second history: %d %v", len(hist), err)
	}
	interrupt(t, follow)
	interrupt(t, watch)

	out := mustAgentlog(t, nil, "sessions", "--prefix", id, "--json")
	var si struct {
		ID      string `json:"id"`
		LastSeq int64  `json:"lastSeq"`
		Events  int64  `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &si); err != nil || si.ID != id || si.LastSeq != 5 || si.Events != 6 {
		t.Fatalf("sessions: %q %v", out, err)
	}
	mustAgentlog(t, nil, "messages", id, "--min-seq", "5")
	out = mustAgentlog(t, nil, "status", id, "--json")
	var s struct {
		LastSeq  int64  `json:"lastSeq"`
		OpenTurn *int64 `json:"openTurn"`
		Units    []struct {
			Unit string `json:"unit"`
			Lag  int64  `json:"lag"`
		} `json:"units"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.LastSeq != 5 || s.OpenTurn == nil || *s.OpenTurn != 2 || len(s.Units) == 0 {
		t.Fatalf("status: %q %v", out, err)
	}
	if r := agentlog(t, nil, "status", ""); r.code != 2 {
		t.Fatalf("blank id: exit %d", r.code)
	}
	if out := mustAgentlog(t, nil, "version"); !strings.Contains(out, "nats-server") {
		t.Fatalf("version: %q", out)
	}
}
