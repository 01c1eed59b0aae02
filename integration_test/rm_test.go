package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// userLine is a user/message event line with text.
func userLine(seq int, text string) string {
	return fmt.Sprintf(`{"type":"user/message","seq":%d,"time":1,"data":{"id":"m%d","role":"user","content":[{"type":"text","text":%q}],"source":{"kind":"user"}},"surfaceOp":"append"}`, seq, seq, text)
}

// writeLog writes lines as a JSONL file in dir.
func writeLog(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	body := strings.Join(lines, "\n")
	if len(lines) > 0 {
		body += "\n"
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// oldAndNew are the two logs of the re-create tests: three messages, then (after rm) a note and
// four other messages, so that a projection left over from the old log (nodes 0..2) cannot give
// the new history by chance.
func oldAndNew(t *testing.T) (oldLog, newLog string, newTexts []string) {
	dir := t.TempDir()
	oldLog = writeLog(t, dir, "old.jsonl", userLine(0, "old 0"), userLine(1, "old 1"), userLine(2, "old 2"))
	lines := []string{`{"type":"test/note","seq":0,"time":1,"data":{},"ignorable":true}`}
	for i := 1; i <= 4; i++ {
		newTexts = append(newTexts, fmt.Sprintf("new %d", i))
		lines = append(lines, userLine(i, newTexts[i-1]))
	}
	return oldLog, writeLog(t, dir, "new.jsonl", lines...), newTexts
}

// messageTexts returns the text of each message `agentlog messages` printed.
func messageTexts(t *testing.T, out string) []string {
	t.Helper()
	var msgs []struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal([]byte(out), &msgs); err != nil {
		t.Fatalf("messages output %q: %v", out, err)
	}
	texts := []string{}
	for _, m := range msgs {
		var b strings.Builder
		for _, c := range m.Content {
			b.WriteString(c.Text)
		}
		texts = append(texts, b.String())
	}
	return texts
}

// TestRmThenRecreate: rm removes a session whose projector has folded it (records, metadata,
// projections), a fork made before stays, and the id re-created shows only its new messages.
func TestRmThenRecreate(t *testing.T) {
	run := runTag(t)
	id, child := "it/"+run+"rm me", "it/"+run+"rm-child"
	oldLog, newLog, newTexts := oldAndNew(t)
	mustAgentlog(t, nil, "import", oldLog, "--session", id)
	if got := messageTexts(t, mustAgentlog(t, nil, "messages", id)); !slices.Equal(got, []string{"old 0", "old 1", "old 2"}) {
		t.Fatalf("messages before rm: %q", got)
	}
	mustAgentlog(t, nil, "fork", id, "--child", child)

	var rm store.Removed
	if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "rm", id, "--json")), &rm); err != nil {
		t.Fatal(err)
	}
	if rm.Session != id || !rm.Metadata || rm.Records != 1 || rm.Events != 3 || rm.Incarnation == "" || !slices.Contains(rm.Projections, "messages."+mustToken(t, id)) {
		t.Fatalf("rm --json: %+v", rm)
	}
	if r := agentlog(t, nil, "events", id); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("events after rm: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := agentlog(t, nil, "rm", id); r.code != 1 || !strings.Contains(r.stderr, `"`+id+`"`) || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("second rm: exit %d, stderr %q; want 1 naming the session", r.code, r.stderr)
	}
	if got := messageTexts(t, mustAgentlog(t, nil, "messages", child)); !slices.Equal(got, []string{"old 0", "old 1", "old 2"}) {
		t.Fatalf("the child forked before rm: messages %q", got)
	}

	mustAgentlog(t, nil, "import", newLog, "--session", id)
	if got := messageTexts(t, mustAgentlog(t, nil, "messages", id)); !slices.Equal(got, newTexts) {
		t.Fatalf("messages of the re-created session: %q, want %q", got, newTexts)
	}
	out := mustAgentlog(t, nil, "rm", id)
	for _, want := range []string{`removed session "` + id + `"`, "log:           5 events (1 record)", "metadata:      removed", "writer lease:  none", "error reports: 0"} {
		if !strings.Contains(out, want) {
			t.Fatalf("rm output lacks %q:\n%s", want, out)
		}
	}
	if r := agentlog(t, nil, "rm"); r.code != 2 {
		t.Fatalf("rm without ID: exit %d, want 2", r.code)
	}
}

func mustToken(t *testing.T, id string) string {
	tok, err := wire.Token(id)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestRmFencesLiveWriter: rm of a session with a live writer names the writer's lease, and the
// writer's next write fails fenced without writing into the removed id; the same holds for a
// writer that has not written its first record yet.
func TestRmFencesLiveWriter(t *testing.T) {
	run := runTag(t)
	nc, st := connectStore(t, devURL, nil)
	p := newPublisher(t, st, nc, publisher.Options{WriterID: "it-rm"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := chunkEvents("rm", 0, 6)
	for _, written := range []bool{true, false} {
		id := fmt.Sprintf("it/%srm-live-%v", run, written)
		w, err := p.Create(ctx, session.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		if written {
			for ; next < 3; next++ {
				if err := w.Append(events[next]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var rm store.Removed
		if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "rm", id, "--json")), &rm); err != nil {
			t.Fatal(err)
		}
		if rm.Lease == nil || rm.Lease.Writer != "it-rm" {
			t.Fatalf("rm --json of a live session: lease %+v, want writer it-rm", rm.Lease)
		}
		if err := w.Append(events[next]); err != nil && !errors.Is(err, publisher.ErrFenced) {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err == nil || !errors.Is(err, publisher.ErrConflict) && !errors.Is(err, publisher.ErrFenced) {
			t.Fatalf("written %v: write after rm: %v, want a conflict or fenced error", written, err)
		}
		if tail, err := storetest.Session(st, id).TailFromLeader(ctx); err != nil || tail.LastStreamSeq != 0 {
			t.Fatalf("written %v: the removed session's log after the fenced write: %+v, %v", written, tail, err)
		}
		_ = w.Close(ctx)
	}
}

// TestRmRecreateAcrossRestart is TestRmThenRecreate's core with the server (agentlog dev)
// restarted between rm and re-create.
func TestRmRecreateAcrossRestart(t *testing.T) {
	dev := startOwnDev(t)
	id := "it/rm-restart"
	oldLog, newLog, newTexts := oldAndNew(t)
	dev.must(t, "import", oldLog, "--session", id)
	if got := messageTexts(t, dev.must(t, "messages", id)); len(got) != 3 {
		t.Fatalf("messages before rm: %q", got)
	}
	dev.must(t, "rm", id)
	dev.restart(t)
	if r := dev.run(t, "events", id); r.code != 1 {
		t.Fatalf("events after rm and restart: exit %d\n%s", r.code, r.stdout)
	}
	dev.must(t, "import", newLog, "--session", id)
	if got := messageTexts(t, dev.must(t, "messages", id)); !slices.Equal(got, newTexts) {
		t.Fatalf("messages of the re-created session after a restart: %q, want %q", got, newTexts)
	}
}

// TestImportEmptyLogRefused: a log without events (empty file, or a header only) is refused with
// rule empty-log, and nothing is stored: the id stays free.
func TestImportEmptyLogRefused(t *testing.T) {
	run := runTag(t)
	dir := t.TempDir()
	id := "it/" + run + "empty"
	headerOnly := writeLog(t, dir, "header.jsonl", `{"type":"session","version":0,"id":"`+id+`","createdAt":1}`)
	for _, args := range [][]string{
		{"import", writeLog(t, dir, "empty.jsonl"), "--session", id},
		{"import", headerOnly},
	} {
		r := agentlog(t, nil, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "[rule empty-log]") || !strings.Contains(r.stderr, `session "`+id+`"`) {
			t.Fatalf("agentlog %v: exit %d, stderr %q; want 1 naming the session and rule empty-log", args, r.code, r.stderr)
		}
	}
	_, st := connectStore(t, devURL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := storetest.Header(storetest.Session(st, id).Info(ctx)); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("metadata after a refused empty import: %v", err)
	}
	mustAgentlog(t, nil, "import", writeLog(t, dir, "one.jsonl", userLine(0, "hi")), "--session", id)
}

// ownDev is an `agentlog dev` of one test, with its own data directory and port, restartable.
type ownDev struct {
	data, listen, url string
	cmd               *exec.Cmd
}

func startOwnDev(t *testing.T) *ownDev {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	d := &ownDev{data: t.TempDir(), listen: fmt.Sprintf("127.0.0.1:%d", port)}
	d.start(t)
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *ownDev) start(t *testing.T) {
	t.Helper()
	// The port and the data lock may take a moment to be released: try again for a while.
	checkfor.Check(t, 30*time.Second, 100*time.Millisecond, func() error {
		cmd := exec.Command(binPath, "dev", "--data", d.data, "--listen", d.listen)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		found := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if i := strings.Index(sc.Text(), "listening on "); i >= 0 {
					if f := strings.Fields(sc.Text()[i+len("listening on "):]); len(f) > 0 {
						found <- f[0]
					}
				}
			}
			close(found)
		}()
		select {
		case url, ok := <-found:
			if ok {
				d.url, d.cmd = url, cmd
				return nil
			}
			_ = cmd.Wait()
			return fmt.Errorf("agentlog dev exited: %s", stderr.String())
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("agentlog dev printed no URL within 60s")
		}
		return nil
	})
}

func (d *ownDev) stop(t *testing.T) {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Error("agentlog dev did not stop within 60s of SIGINT")
	}
	d.cmd = nil
}

func (d *ownDev) restart(t *testing.T) {
	t.Helper()
	d.stop(t)
	d.start(t)
}

func (d *ownDev) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--nats", d.url}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentlog %v: %v", args, err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (d *ownDev) must(t *testing.T, args ...string) string {
	t.Helper()
	r := d.run(t, args...)
	if r.code != 0 {
		t.Fatalf("agentlog %v: exit %d\nstderr: %s", args, r.code, r.stderr)
	}
	return r.stdout
}
