package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/internal/sessiontest"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nuid"
)

// writerEvents are the events of `writer --events m --size size --t0 t0` (./writer: loggen.ChunkTurn
// with salt 0, the generator the writer uses).
func writerEvents(t *testing.T, m, size int, t0 int64) []session.Event {
	t.Helper()
	evs, err := loggen.ChunkTurn(0, m, size, t0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// writerProc is a running writer subprocess (./writer) and what it reported.
type writerProc struct {
	cmd     *exec.Cmd
	lines   chan string
	stderr  *syncBuffer
	durable int
}

func startWriter(t *testing.T, id string, args ...string) *writerProc {
	t.Helper()
	all := append([]string{"--nats", devURL, "--session", id, "--t0", "1785000000000"}, args...)
	cmd := exec.Command(writerPath, all...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	wp := &writerProc{cmd: cmd, lines: make(chan string, 1024), stderr: &syncBuffer{}}
	cmd.Stderr = wp.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			wp.lines <- sc.Text()
		}
		close(wp.lines)
	}()
	return wp
}

// next returns the next line of the writer; ok false when it exited.
func (wp *writerProc) next(t *testing.T) (string, bool) {
	t.Helper()
	select {
	case l, ok := <-wp.lines:
		if ok && strings.HasPrefix(l, "durable ") {
			wp.durable, _ = strconv.Atoi(strings.TrimPrefix(l, "durable "))
		}
		return l, ok
	case <-time.After(60 * time.Second):
		t.Fatalf("the writer process printed nothing for 60 s; stderr: %s", wp.stderr.String())
		return "", false
	}
}

// waitFor reads lines until one starts with prefix, n times.
func (wp *writerProc) waitFor(t *testing.T, prefix string, n int) {
	t.Helper()
	for n > 0 {
		l, ok := wp.next(t)
		if !ok {
			t.Fatalf("the writer process exited before %d more %q lines; stderr: %s", n, prefix, wp.stderr.String())
		}
		if strings.HasPrefix(l, prefix) {
			n--
		}
	}
}

func devStore(t *testing.T) *store.Store {
	t.Helper()
	_, st := connectStore(t, devURL, nil)
	return st
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// oracleRepair runs the reference oracle (node, /tmp/oracle) over the log when it is installed and
// returns its `repair` events; ok false when it is not available.
func oracleRepair(t *testing.T, id string, events []session.Event) ([]json.RawMessage, bool) {
	t.Helper()
	const script = "/tmp/oracle/oracle.mjs"
	if _, err := os.Stat(script); err != nil {
		return nil, false
	}
	if _, err := exec.LookPath("node"); err != nil {
		return nil, false
	}
	var in bytes.Buffer
	if err := session.WriteJSONL(&in, &session.Header{ID: id, CreatedAt: 1785000000000}, events, session.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", script)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	var res struct {
		OK     bool              `json:"ok"`
		Repair []json.RawMessage `json:"repair"`
	}
	if err := json.Unmarshal(out, &res); err != nil || !res.OK {
		t.Fatalf("oracle output %s: %v", out, err)
	}
	return res.Repair, true
}

// TestPublisherKill9MidWindow kills a publisher process with SIGKILL while events sit in an open
// window (and, in one case, while a record is being written), then checks the log — every event
// whose Append and Flush returned is there, nothing twice, seqs contiguous, the rest absent or a
// complete prefix — and resumes the session, whose crash-repair closers must be the oracle's
// `repair` (the turn was left open).
func TestPublisherKill9MidWindow(t *testing.T) {
	st := devStore(t)
	const total, size = 4000, 512
	sent := writerEvents(t, total, size, 1785000000000)
	cases := []struct {
		name string
		args []string
		// flushes to wait for before the kill, and the line to wait for after them
		flushes int
		then    string
		thenN   int
	}{
		{"window open", []string{"--batch", "5", "--flush-every", "3", "--pause", "2ms", "--window", "1s"}, 4, "appended ", 3},
		{"right after a flush", []string{"--batch", "7", "--flush-every", "2", "--pause", "1ms", "--window", "100ms"}, 6, "", 0},
		{"writes in flight", []string{"--batch", "50", "--flush-every", "1000", "--pause", "100us", "--window", "5ms"}, 0, "appended ", 40},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("kill9-%d-%s", i, nuid.Next())
			wp := startWriter(t, id, append([]string{"--events", strconv.Itoa(total), "--size", strconv.Itoa(size), "--writer-id", "k" + strconv.Itoa(i), "--lease-ttl", "1s"}, c.args...)...)
			wp.waitFor(t, "ready ", 1)
			wp.waitFor(t, "durable ", c.flushes)
			if c.then != "" {
				wp.waitFor(t, c.then, c.thenN)
			}
			if err := wp.cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			_ = wp.cmd.Wait()
			for {
				if _, ok := wp.next(t); !ok {
					break
				}
			}
			got := checkLog(t, st, id, sent, wp.durable)
			t.Logf("killed with %d events acknowledged durable; %d stored", wp.durable, len(got))
			if len(got) == 0 {
				t.Log("nothing was stored before the kill: nothing to resume")
				return
			}

			// Resume: the closers, then the end-seed, as one record.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res := session.Inspect(bytes.NewReader(jsonl(t, id, got)), false)
			if !res.OK || len(res.Repair) == 0 {
				t.Fatalf("stored log: ok %v, repair %v: want an open turn to repair", res.OK, res.Repair)
			}
			if want, ok := oracleRepair(t, id, got); ok {
				if len(want) != len(res.Repair) {
					t.Fatalf("oracle repair has %d events, session.Inspect %d", len(want), len(res.Repair))
				}
				for k := range want {
					have, _ := res.Repair[k].MarshalJSON()
					if !sessiontest.JSONEqual(t, want[k], have) {
						t.Fatalf("repair %d: oracle %s, ours %s", k, want[k], have)
					}
				}
			} else {
				t.Log("oracle not installed (/tmp/oracle, node): closers compared with session.Inspect only")
			}
			nc, st2 := connectStore(t, devURL, nil)
			p := newPublisher(t, st2, nc, publisher.Options{WriterID: "resumer", Logger: quietLogger()})
			w, err := openWhenDead(ctx, t, p, id)
			if err != nil {
				t.Fatal(err)
			}
			after, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
			if err != nil {
				t.Fatal(err)
			}
			if len(after) != len(got)+len(res.Repair)+1 || after[len(after)-1].Type != "session/end-seed" {
				t.Fatalf("after resume: %d events (want %d + %d closers + end-seed)", len(after), len(got), len(res.Repair))
			}
			for k, r := range res.Repair {
				if err := sessiontest.SameEvent(after[len(got)+k], r); err != nil {
					t.Fatalf("closer %d: %v", k, err)
				}
			}
			if w.NextSeq() != int64(len(after)) {
				t.Fatalf("resumed writer at seq %d, log has %d events", w.NextSeq(), len(after))
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPublisherOpenFencesLiveWriter opens (resumes) a session while another process is writing
// it: refused (ErrSessionLive), then with Takeover. The guard (or the lost lease) fences the live
// writer, whose process exits with the error. The log stays valid and contiguous.
func TestPublisherOpenFencesLiveWriter(t *testing.T) {
	st := devStore(t)
	const total = 100000
	sent := writerEvents(t, total, 256, 1785000000000)
	id := "live-" + nuid.Next()
	wp := startWriter(t, id, "--events", strconv.Itoa(total), "--size", "256", "--batch", "5", "--flush-every", "1", "--pause", "1ms", "--window", "20ms", "--writer-id", "live")
	wp.waitFor(t, "durable ", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, st2 := connectStore(t, devURL, nil)
	p := newPublisher(t, st2, nc, publisher.Options{WriterID: "taker", Logger: quietLogger()})
	var w *publisher.Writer
	var err error
	if _, err := p.Open(ctx, id); !errors.Is(err, publisher.ErrSessionLive) {
		t.Fatalf("Open while another process writes: %v, want ErrSessionLive", err)
	}
	for try := 0; try < 50; try++ { // the live writer may win the race on the guard: then retry
		if w, err = p.Open(ctx, id, publisher.Takeover()); err == nil || !errors.Is(err, publisher.ErrConflict) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Open while another process writes: %v", err)
	}
	for { // the live writer is fenced at its next write and exits
		if _, ok := wp.next(t); !ok {
			break
		}
	}
	werr := wp.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || !strings.Contains(wp.stderr.String(), "guard conflict") && !strings.Contains(wp.stderr.String(), "fenced") {
		t.Fatalf("live writer: exit %v, stderr %q; want it fenced (by a guard conflict or its lost lease)", werr, wp.stderr.String())
	}
	got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.Load(id, got); err != nil {
		t.Fatalf("log after the takeover is not valid: %v", err)
	}
	n := len(got) - int(w.NextSeq()) // events of ours at the end: none beyond what Open wrote
	if n != 0 || got[len(got)-1].Type != "session/end-seed" {
		t.Fatalf("log ends with %q, writer at %d of %d events", got[len(got)-1].Type, w.NextSeq(), len(got))
	}
	// Before our closers: a prefix of the live writer's events holding all it acknowledged.
	live := 0
	for live < len(got) && live < len(sent) && sessiontest.SameEvent(got[live], sent[live]) == nil {
		live++
	}
	if live < wp.durable {
		t.Fatalf("only %d of the live writer's %d acknowledged events survived the takeover", live, wp.durable)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// openWhenDead opens id, retrying while the killed writer's lease is live (at most a minute).
func openWhenDead(ctx context.Context, t *testing.T, p *publisher.Publisher, id string) (*publisher.Writer, error) {
	t.Helper()
	var w *publisher.Writer
	var err error
	if live := checkfor.Err(time.Minute, 100*time.Millisecond, func() error {
		if w, err = p.Open(ctx, id); errors.Is(err, publisher.ErrSessionLive) && ctx.Err() == nil {
			return err
		}
		return nil
	}); live != nil {
		return nil, live
	}
	return w, err
}

// TestOpenAfterWriterKilled: a writer process killed with SIGKILL leaves its lease behind (TTL
// 10 s, the default). Its pid is dead on this host, so Open takes the lease over at once (no
// waiting out the TTL) and repairs the log. A lease of a live process is still refused, and so is
// one of another host whose pid is dead here: only this host can tell its processes dead.
func TestOpenAfterWriterKilled(t *testing.T) {
	id := "killed-" + nuid.Next()
	wp := startWriter(t, id, "--events", "100000", "--size", "256", "--batch", "5", "--flush-every", "1", "--pause", "1ms",
		"--window", "20ms", "--writer-id", "dead")
	wp.waitFor(t, "durable ", 2)
	if err := wp.cmd.Process.Kill(); err != nil { // SIGKILL: no Close, no lease release
		t.Fatal(err)
	}
	_ = wp.cmd.Wait()
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, st := connectStore(t, devURL, nil)
	if l, _, err := storetest.Session(st, id).Lease(ctx); err != nil || l.Writer != "dead" {
		t.Fatalf("the killed writer's lease: %+v, %v", l, err)
	}
	p := newPublisher(t, st, nc, publisher.Options{WriterID: "after", Logger: quietLogger()})
	w, err := p.Open(ctx, id)
	if err != nil {
		t.Fatalf("Open right after the writer was killed: %v, want its lease taken over at once", err)
	}
	t.Logf("Open returned %s after the kill (lease TTL 10 s)", time.Since(killed).Round(time.Millisecond))
	got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := session.Load(id, got); err != nil || got[len(got)-1].Type != "session/end-seed" || int64(len(got)) != w.NextSeq() {
		t.Fatalf("log after the resume: %d events ending %q (%v), writer at %d", len(got), got[len(got)-1].Type, err, w.NextSeq())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A live writer process: refused.
	id2 := "live-" + nuid.Next()
	live := startWriter(t, id2, "--events", "100000", "--size", "256", "--batch", "5", "--flush-every", "1", "--pause", "1ms",
		"--window", "20ms", "--writer-id", "live")
	live.waitFor(t, "durable ", 2)
	p2 := newPublisher(t, st, nc, publisher.Options{WriterID: "after2", Logger: quietLogger()})
	var le *publisher.LiveError
	if _, err := p2.Open(ctx, id2); !errors.As(err, &le) || le.Session != id2 || le.Writer != "live" {
		t.Fatalf("Open of a session a live process writes: %v, want *LiveError naming writer live", err)
	}
	// A lease of another host, its pid dead here: refused too.
	id3 := "elsewhere-" + nuid.Next()
	dead := store.Lease{Writer: "remote", Host: "another-host", PID: wp.cmd.Process.Pid, Since: time.Now().UnixMilli()}
	if _, err := storetest.Session(st, id3).AcquireLease(ctx, dead, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Create(ctx, session.Header{ID: id3, CreatedAt: 1785000000000}); !errors.As(err, &le) || le.Writer != "remote" {
		t.Fatalf("Create under another host's lease: %v, want *LiveError naming writer remote", err)
	}
}

func jsonl(t *testing.T, id string, events []session.Event) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := session.WriteJSONL(&b, &session.Header{ID: id, CreatedAt: 1785000000000}, events, session.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
