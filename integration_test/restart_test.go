package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// proc is an agentlog subprocess of a test (dev, projector), its output collected.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer // stdout and stderr
	done chan struct{}
}

// startProc starts the binary with args; it is killed at cleanup if still running.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binPath, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitOutput waits up to d for substr in the output; it fails the test when the process exits
// first or d passes.
func (p *proc) waitOutput(t *testing.T, substr string, d time.Duration) {
	t.Helper()
	p.waitOutputFrom(t, 0, substr, d)
}

// waitOutputFrom is waitOutput in the output from byte offset from on.
func (p *proc) waitOutputFrom(t *testing.T, from int, substr string, d time.Duration) {
	t.Helper()
	checkfor.Check(t, d, 20*time.Millisecond, func() error {
		if out := p.out.String(); strings.Contains(out[from:], substr) {
			return nil
		}
		if p.exited() {
			t.Fatalf("%v exited before printing %q:\n%s", p.cmd.Args, substr, p.out.String())
		}
		return fmt.Errorf("%v did not print %q:\n%s", p.cmd.Args, substr, p.out.String())
	})
}

// interrupt sends SIGINT and waits for the exit.
func (p *proc) interrupt(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not stop within 60 s of SIGINT", p.cmd.Args)
	}
}

// kill9 kills the process (SIGKILL) and reaps it.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// devAt starts `agentlog dev` on data and port with n projectors and waits until it serves.
func devAt(t *testing.T, data string, port, n int) *proc {
	t.Helper()
	p := startProc(t, "dev", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--projectors", fmt.Sprint(n))
	p.waitOutput(t, "listening on", 60*time.Second)
	return p
}

// runAt runs the CLI against url.
func runAt(t *testing.T, url string, stdin []byte, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--nats", url}, args...)...)
	var out, errb bytes.Buffer
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("agentlog %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func mustAt(t *testing.T, url string, stdin []byte, args ...string) string {
	t.Helper()
	r := runAt(t, url, stdin, args...)
	if r.code != 0 {
		t.Fatalf("agentlog %v: exit %d\nstderr: %s", args, r.code, r.stderr)
	}
	return r.stdout
}

// userLines is a dsh JSONL log (no header) of n user messages "<tag> <seq>", from seq from.
func userLines(tag string, from, n int) []byte {
	var b bytes.Buffer
	for seq := from; seq < from+n; seq++ {
		fmt.Fprintf(&b, `{"type":"user/message","seq":%d,"time":1,"data":{"id":"m%d","role":"user","content":[{"type":"text","text":"%s %d"}],"source":{"kind":"user"}},"surfaceOp":"append"}`+"\n", seq, seq, tag, seq)
	}
	return b.Bytes()
}

// userEvents is userLines as events.
func userEvents(tag string, from, n int) []session.Event {
	var out []session.Event
	for seq := from; seq < from+n; seq++ {
		out = append(out, session.Event{Type: "user/message", Seq: int64(seq), Time: "1", SurfaceOp: []byte(`"append"`),
			Data: []byte(fmt.Sprintf(`{"id":"m%d","role":"user","content":[{"type":"text","text":"%s %d"}],"source":{"kind":"user"}}`, seq, tag, seq))})
	}
	return out
}

// importAt writes log to a file and imports it as session id.
func importAt(t *testing.T, url, id string, log []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(p, log, 0o644); err != nil {
		t.Fatal(err)
	}
	mustAt(t, url, nil, "import", p, "--session", id)
}

// freshFold is the messages of a fresh fold of what the log holds now: agentlog events ID |
// agentlog inspect.
func freshFold(t *testing.T, url, id string) []byte {
	t.Helper()
	events := mustAt(t, url, nil, "events", id)
	var out struct {
		OK       bool            `json:"ok"`
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal([]byte(mustAt(t, url, []byte(events), "inspect")), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) == 0 || string(out.Messages) == "null" {
		return []byte("[]")
	}
	return out.Messages
}

// sameAsFreshFold checks that `agentlog messages ID` (extra flags) equals a fresh fold of the log.
func sameAsFreshFold(t *testing.T, url, id string, extra ...string) []byte {
	t.Helper()
	want := freshFold(t, url, id)
	r := runAt(t, url, nil, append([]string{"--timeout", "15s", "messages", id}, extra...)...)
	if r.code != 0 {
		t.Fatalf("agentlog messages %s %v: exit %d: %s", id, extra, r.code, r.stderr)
	}
	if !sessiontest.JSONEqual(t, []byte(r.stdout), want) {
		t.Fatalf("agentlog messages %s %v:\n got %s\nwant (a fresh fold of the log) %s", id, extra, r.stdout, want)
	}
	return want
}

// countMessages is the length of a JSON array.
func countMessages(t *testing.T, b []byte) int {
	t.Helper()
	var a []json.RawMessage
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return len(a)
}

// TestSeparateProjectorSurvivesServerRestart: `agentlog dev --projectors 0` with a separate
// `agentlog projector`; dev is stopped and started again on the same data: the projector serves
// messages of a session imported after the restart within a bounded wait, without a warning loop.
func TestSeparateProjectorSurvivesServerRestart(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	data, url := t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", port)
	dev := devAt(t, data, port, 0)
	px := startProc(t, "--nats", url, "projector", "--name", "px")
	px.waitOutput(t, "running on", 60*time.Second)
	importAt(t, url, "before", userLines("before", 0, 3))
	sameAsFreshFold(t, url, "before")

	dev.interrupt(t)
	// A sleep, not a condition: the projector logs nothing when it sees the server gone, and the
	// server must stay down long enough for it to.
	time.Sleep(time.Second)
	restartAt := len(px.out.String())
	dev = devAt(t, data, port, 0)
	back := time.Now()
	importAt(t, url, "after", userLines("after", 0, 4))
	checkfor.Check(t, 20*time.Second, 50*time.Millisecond, func() error {
		r := runAt(t, url, nil, "--timeout", "3s", "messages", "after")
		if r.code != 0 {
			return fmt.Errorf("no messages after the server came back: %s\nprojector:\n%s", r.stderr, px.out.String())
		}
		if n := countMessages(t, []byte(r.stdout)); n != 4 {
			t.Fatalf("after the restart: %d messages, want 4", n)
		}
		return nil
	})
	t.Logf("messages served %s after the server came back", time.Since(back).Round(time.Millisecond))
	sameAsFreshFold(t, url, "before")
	quiet(t, px, restartAt)

	// State the server lost (a restart of a cluster on memory, an operator): the members bucket
	// and the partition consumers are deleted under the running projector. A projector creates
	// neither (deploy/SECURITY.md): `agentlog provision` does, and the projector resumes.
	lostAt := len(px.out.String())
	func() {
		nc, st := connectStore(t, url, nil)
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := st.JetStream().DeleteKeyValue(ctx, "agentlog_projector_members"); err != nil {
			t.Fatal(err)
		}
		for p := 0; p < st.Partitions(); p++ {
			if err := st.JetStream().DeleteConsumer(ctx, wire.StreamName, fmt.Sprintf("agentlog-projector-%d", p)); err != nil {
				t.Fatal(err)
			}
		}
	}()
	if r := runAt(t, url, nil, "provision"); r.code != 0 {
		t.Fatalf("agentlog provision: %s", r.stderr)
	}
	lost := time.Now()
	importAt(t, url, "lost", userLines("lost", 0, 2))
	checkfor.Check(t, 20*time.Second, 50*time.Millisecond, func() error {
		if r := runAt(t, url, nil, "--timeout", "3s", "messages", "lost"); r.code != 0 {
			return fmt.Errorf("no messages after the projector's bucket and consumers were deleted: %s\nprojector:\n%s", r.stderr, px.out.String())
		}
		return nil
	})
	t.Logf("messages served %s after the bucket and consumers were deleted", time.Since(lost).Round(time.Millisecond))
	sameAsFreshFold(t, url, "lost")
	quiet(t, px, lostAt)
	dev.interrupt(t)
}

// quiet checks that the projector px logs no warning for 2 s, a few seconds after an incident
// whose output starts at offset from (a failure is logged once per change of state, not in a
// loop), and still runs.
func quiet(t *testing.T, px *proc, from int) {
	t.Helper()
	// Sleeps, not conditions: no warning over a window is what this checks.
	time.Sleep(3 * time.Second)
	mark := len(px.out.String())
	time.Sleep(2 * time.Second)
	out := px.out.String()
	if strings.Contains(out[mark:], "level=WARN") {
		t.Fatalf("the projector still logs warnings seconds after the incident:\n%s", out[from:])
	}
	if px.exited() {
		t.Fatalf("the projector exited:\n%s", out)
	}
	t.Logf("%d warnings logged for the incident", strings.Count(out[from:], "level=WARN"))
}

// TestProjectorWaitsForTheServer: a projector and a forker started before the server wait for it,
// say so, and serve once it is up.
func TestProjectorWaitsForTheServer(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	data, url := t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", port)
	px := startProc(t, "--nats", url, "projector", "--name", "early")
	fk := startProc(t, "--nats", url, "forker")
	px.waitOutput(t, "waiting for NATS", 30*time.Second)
	fk.waitOutput(t, "waiting for NATS", 30*time.Second)
	dev := devAt(t, data, port, 0)
	px.waitOutput(t, "running on", 30*time.Second)
	fk.waitOutput(t, "running on", 30*time.Second)
	importAt(t, url, "s", userLines("s", 0, 2))
	sameAsFreshFold(t, url, "s")
	dev.interrupt(t)
}

// TestProjectorRestartedUnderItsName: a projector killed with SIGKILL and restarted at once under
// the same --name comes up (it takes its own lease back) and serves.
func TestProjectorRestartedUnderItsName(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	data, url := t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", port)
	dev := devAt(t, data, port, 0)
	px := startProc(t, "--nats", url, "projector", "--name", "px")
	px.waitOutput(t, "running on", 60*time.Second)
	px.kill9()
	start := time.Now()
	px = startProc(t, "--nats", url, "projector", "--name", "px")
	px.waitOutput(t, "running on", 10*time.Second)
	if !strings.Contains(px.out.String(), "took over the lease of a dead process") {
		t.Fatalf("the restarted projector did not say it took its lease back:\n%s", px.out.String())
	}
	t.Logf("restarted in %s", time.Since(start).Round(time.Millisecond))
	importAt(t, url, "s", userLines("s", 0, 3))
	sameAsFreshFold(t, url, "s")
	dev.interrupt(t)
}

// lastBlock is the newest message block file of the AGENTLOG stream under a dev data dir.
func lastBlock(t *testing.T, data string) string {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(data, "jetstream", "*", "streams", wire.StreamName, "msgs", "*.blk"))
	if err != nil || len(blks) == 0 {
		t.Fatalf("no block files of stream %s under %s (%v)", wire.StreamName, data, err)
	}
	sort.Slice(blks, func(i, j int) bool {
		var a, b int
		fmt.Sscanf(filepath.Base(blks[i]), "%d.blk", &a)
		fmt.Sscanf(filepath.Base(blks[j]), "%d.blk", &b)
		return a < b
	})
	return blks[len(blks)-1]
}

// TestLostAckedRecordsAreRefolded: the server is killed (SIGKILL) and the last file-store block of
// AGENTLOG truncated partway, so records the projector had folded (and that were acked) are gone.
// After the restart, messages says so (424, naming the seqs lost), and with --allow-data-loss
// equal a fresh fold of what the log holds, and new appends are folded: with the projector in the
// dev process (it restarts too, and loads its states from KV) and with a separate projector that
// keeps running (its states in memory).
func TestLostAckedRecordsAreRefolded(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate=%v", separate), func(t *testing.T) { lostAckedRecords(t, separate) })
	}
}

func lostAckedRecords(t *testing.T, separate bool) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	data, url := t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", port)
	inDev := 1
	if separate {
		inDev = 0
	}
	dev := devAt(t, data, port, inDev)
	logs := dev
	if separate {
		logs = startProc(t, "--nats", url, "projector", "--name", "px")
		logs.waitOutput(t, "running on", 60*time.Second)
	}
	const id = "lossy"
	importAt(t, url, id, userLines("first", 0, 3))
	appendUsers := func(tag string, records, n int) {
		nc, st := connectStore(t, url, nil)
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := 0; i < records; i++ {
			tail, err := storetest.Session(st, id).Tail(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := storetest.Session(st, id).Append(ctx, tail.LastStreamSeq, userEvents(fmt.Sprintf("%s%d", tag, i), int(tail.NextSeq), n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendUsers("rec", 4, 3)
	if n := countMessages(t, sameAsFreshFold(t, url, id)); n != 15 {
		t.Fatalf("%d messages before the loss, want 15", n)
	}
	// A sleep, not a condition: the file store writes its block in its own time (no fsync needed: the
	// OS keeps it), and nothing outside it says when.
	time.Sleep(200 * time.Millisecond)
	dev.kill9()
	blk := lastBlock(t, data)
	fi, err := os.Stat(blk)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(blk, fi.Size()*55/100); err != nil {
		t.Fatal(err)
	}
	dev = devAt(t, data, port, inDev)
	if !separate {
		logs = dev
	}
	if separate {
		// The projector holds the session in memory; the first thing it sees is a new record.
		appendUsers("new", 1, 2)
		checkfor.Check(t, 20*time.Second, 20*time.Millisecond, func() error {
			if !strings.Contains(logs.out.String(), "where=delivery") {
				return fmt.Errorf("the running projector did not refold on delivery:\n%s", logs.out.String())
			}
			return nil
		})
	}
	if r := runAt(t, url, nil, "--timeout", "15s", "messages", id); r.code != 1 || !strings.Contains(r.stderr, `session "lossy" lost acknowledged records`) {
		t.Fatalf("messages after the loss: exit %d, stdout %s, stderr %s; want the loss reported", r.code, r.stdout, r.stderr)
	}
	got := sameAsFreshFold(t, url, id, "--allow-data-loss")
	n := countMessages(t, got)
	if n >= 15 {
		t.Fatalf("%d messages after truncating the block: nothing was lost (the test truncated too little)", n)
	}
	t.Logf("%d messages in the log after the loss", n)
	sameAsFreshFold(t, url, id, "--min-seq", "-1", "--allow-data-loss")
	// New appends continue the log as it is now, and are folded.
	appendUsers("more", 1, 2)
	if m := countMessages(t, sameAsFreshFold(t, url, id, "--allow-data-loss")); m != n+2 {
		t.Fatalf("%d messages after appending 2 to %d", m, n)
	}
	if !strings.Contains(logs.out.String(), "does not match the session's log") {
		t.Fatalf("no warning names the refold:\n%s", logs.out.String())
	}
	for _, l := range strings.Split(logs.out.String(), "\n") {
		if strings.Contains(l, "does not match the session's log") {
			t.Log(l)
		}
	}
	dev.interrupt(t)
}

// recreate purges session id's subject through the JetStream API and deletes its metadata, as an
// operator (or a future `agentlog rm`) would; the caller imports it again.
func recreate(t *testing.T, url, id string) {
	t.Helper()
	nc, st := connectStore(t, url, nil)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject, err := wire.SessionSubject(id, st.Partitions())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Stream().Purge(ctx, natsjs.WithPurgeSubject(subject)); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token(id)
	if err := storetest.SessionsKV(st).Delete(ctx, tok); err != nil {
		t.Fatal(err)
	}
}

// TestPurgedAndRecreatedSession: a session purged and created again under its id, with and without
// a server restart in between: the projector never shows the old incarnation's history.
func TestPurgedAndRecreatedSession(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			data, url := t.TempDir(), fmt.Sprintf("nats://127.0.0.1:%d", port)
			dev := devAt(t, data, port, 1)
			const id = "again"
			importAt(t, url, id, userLines("old", 0, 3))
			if n := countMessages(t, sameAsFreshFold(t, url, id)); n != 3 {
				t.Fatalf("%d messages, want 3", n)
			}
			recreate(t, url, id)
			// Purged, without metadata: the session is not found (no old message, and not an
			// existing empty session either).
			if r := runAt(t, url, nil, "messages", id, "--min-seq", "-1"); r.code != 1 || !strings.Contains(r.stderr, "(code 404)") || strings.Contains(r.stdout+r.stderr, "old ") {
				t.Fatalf("messages of the purged session: exit %d, %s%s; want not found (404)", r.code, r.stdout, r.stderr)
			}
			if restart {
				dev.interrupt(t)
				dev = devAt(t, data, port, 1)
			}
			importAt(t, url, id, userLines("new", 0, 4))
			// At once, before the projector may have folded the new record, and after.
			for _, extra := range [][]string{{"--min-seq", "-1"}, nil} {
				got := runAt(t, url, nil, append([]string{"messages", id}, extra...)...)
				if got.code != 0 {
					t.Fatalf("messages %v: %s", extra, got.stderr)
				}
				if strings.Contains(got.stdout, "old ") {
					t.Fatalf("messages %v shows the old incarnation: %s", extra, got.stdout)
				}
			}
			if n := countMessages(t, sameAsFreshFold(t, url, id)); n != 4 {
				t.Fatalf("%d messages, want 4", n)
			}
			// New appends are folded on top of the new incarnation.
			nc, st := connectStore(t, url, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			tail, err := storetest.Session(st, id).Tail(ctx)
			if err == nil {
				_, err = storetest.Session(st, id).Append(ctx, tail.LastStreamSeq, userEvents("more", int(tail.NextSeq), 1))
			}
			cancel()
			nc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if n := countMessages(t, sameAsFreshFold(t, url, id)); n != 5 {
				t.Fatalf("%d messages, want 5", n)
			}
			dev.interrupt(t)
		})
	}
}
