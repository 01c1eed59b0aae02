package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/forker"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// lifecycleSession imports a generated session (turns of messages, tool calls and streamed
// chunks) under id and returns its events and messages as the CLI prints them.
func lifecycleSession(t *testing.T, id string, seed uint64) (events, messages string) {
	t.Helper()
	l := loggen.GenerateWith(seed, loggen.Options{MaxTurns: 6, MaxEvents: 200, Steady: true})
	f := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(f, l.JSONL(), 0o644); err != nil {
		t.Fatal(err)
	}
	mustAgentlog(t, nil, "import", f, "--session", id)
	return mustAgentlog(t, nil, "events", id), mustAgentlog(t, nil, "messages", id)
}

// runLifecycler runs ./lifecycler and reports whether it killed itself at the step.
func runLifecycler(t *testing.T, args ...string) bool {
	t.Helper()
	cmd := exec.Command(lifecyclerPath, append([]string{"--nats", devURL}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
		t.Fatalf("lifecycler %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	if err != nil {
		t.Fatalf("lifecycler %v: %v", args, err)
	}
	return false
}

// checkServed fails unless events and messages of id are what they were.
func checkServed(t *testing.T, id, events, messages, when string) {
	t.Helper()
	if got := mustAgentlog(t, nil, "events", id); got != events {
		t.Fatalf("%s: events of %s changed:\n%s\nwant\n%s", when, id, got, events)
	}
	if got := mustAgentlog(t, nil, "messages", id); got != messages {
		t.Fatalf("%s: messages of %s changed:\n%s\nwant\n%s", when, id, got, messages)
	}
}

// stateOf is status --json's state of id.
func stateOf(t *testing.T, id string) string {
	t.Helper()
	out := mustAgentlog(t, nil, "status", id, "--json")
	for _, s := range []string{"active", "archived"} {
		if strings.Contains(out, `"state":"`+s+`"`) {
			return s
		}
	}
	t.Fatalf("status of %s has no state: %s", id, out)
	return ""
}

// TestLifecycleKilled kills the archiving, restoring and removing processes (kill -9) at each of
// their steps, and a lifecycle pass at its archives and deletions: after each kill, what is
// served equals what the log held (events and messages byte for byte), and running the operation
// again finishes it.
func TestLifecycleKilled(t *testing.T) {
	for i, step := range []string{"read", "parts", "head", "committed", "projections"} {
		id := fmt.Sprintf("kill-archive-%s", step)
		events, messages := lifecycleSession(t, id, uint64(100+i))
		if !runLifecycler(t, "--op", "archive", "--session", id, "--kill-at", step) {
			t.Fatalf("archive of %s never reached step %s", id, step)
		}
		checkServed(t, id, events, messages, "after a kill at archive step "+step)
		mustAgentlog(t, nil, "archive", id)
		if s := stateOf(t, id); s != "archived" {
			t.Fatalf("%s after archive ran again: %s", id, s)
		}
		checkServed(t, id, events, messages, "archived again after a kill at "+step)
	}
	for i, step := range []string{"read", "written"} {
		id := fmt.Sprintf("kill-restore-%s", step)
		events, messages := lifecycleSession(t, id, uint64(200+i))
		mustAgentlog(t, nil, "archive", id)
		if !runLifecycler(t, "--op", "restore", "--session", id, "--kill-at", step) {
			t.Fatalf("restore of %s never reached step %s", id, step)
		}
		checkServed(t, id, events, messages, "after a kill at restore step "+step)
		mustAgentlog(t, nil, "restore", id)
		if s := stateOf(t, id); s != "active" {
			t.Fatalf("%s after restore ran again: %s", id, s)
		}
		checkServed(t, id, events, messages, "restored again after a kill at "+step)
	}
	for i, step := range []string{"marked", "records", "archive", "projections"} {
		id := fmt.Sprintf("kill-remove-%s", step)
		lifecycleSession(t, id, uint64(300+i))
		mustAgentlog(t, nil, "archive", id)
		if !runLifecycler(t, "--op", "remove", "--session", id, "--kill-at", step) {
			t.Fatalf("removal of %s never reached step %s", id, step)
		}
		if r := agentlog(t, nil, "events", id); r.code != 1 || !strings.Contains(r.stderr, "being removed") {
			t.Fatalf("events of %s killed at removal step %s: %d %q %q (want: being removed)", id, step, r.code, r.stdout, r.stderr)
		}
		mustAgentlog(t, nil, "rm", id)
		if r := agentlog(t, nil, "status", id); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("status of %s after rm finished: %d %q", id, r.code, r.stderr)
		}
		// The id can be created again, and nothing of the old session is served.
		events, messages := lifecycleSession(t, id, uint64(350+i))
		checkServed(t, id, events, messages, "re-created after a removal killed at "+step)
	}
}

// TestLifecyclePassKilledAndRestarted: a lifecycle pass killed at its second archive's commit,
// then one whose server restarts while it runs; a pass run again finishes, and every session
// still reads as it did.
func TestLifecyclePassKilledAndRestarted(t *testing.T) {
	srv := startOwnServer(t)
	nc, st := connectStore(t, srv.URL(), &store.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 40
	want := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("pass-%02d", i)
		l := loggen.GenerateWith(uint64(400+i), loggen.Options{MaxTurns: 4, MaxEvents: 120, Steady: true})
		_, evs, err := session.ReadJSONL(bytes.NewReader(l.JSONL()), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		var last uint64
		for k := 0; k < len(evs); k += 30 {
			r, err := sess(t, st, id).Append(ctx, last, evs[k:min(k+30, len(evs))])
			if err != nil {
				t.Fatal(err)
			}
			last = r.StreamSeq
		}
		want[id] = logText(t, st, id)
	}
	check := func(when string) {
		t.Helper()
		for id, w := range want {
			if got := logText(t, st, id); got != w {
				t.Fatalf("%s: %s reads otherwise:\n%s\nwant\n%s", when, id, got, w)
			}
		}
	}
	cmd := exec.Command(lifecyclerPath, "--nats", srv.URL(), "--op", "pass", "--kill-at", "committed", "--skip", "1")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "killed at committed") {
		t.Fatalf("the pass was not killed: %v %s", err, out)
	}
	check("after the pass was killed")

	// A pass whose server restarts under it, between an archive's head and its commit (the
	// fifth archive of the pass): its errors are per session; the next pass finishes.
	later := time.Now().Add(72 * time.Hour)
	reached, restarted := make(chan struct{}), make(chan struct{})
	var heads atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	var passErr error
	var interrupted store.PassResult
	go func() {
		defer wg.Done()
		interrupted, passErr = st.LifecyclePass(ctx, store.Policy{ArchiveAfter: 24 * time.Hour}, store.PassOptions{Workers: 2, Now: func() time.Time { return later },
			StepHook: func(step string) {
				if step == "head" && heads.Add(1) == 5 {
					close(reached)
					<-restarted
				}
			}})
	}()
	<-reached
	srv.restart()
	close(restarted)
	wg.Wait()
	t.Logf("the pass the restart interrupted: archived %d, %d errors; %v", interrupted.Archived, interrupted.Errors, passErr)
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("the connection is back", func() bool { return nc.IsConnected() }))
	check("after a server restart mid-pass")
	var res store.PassResult
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("a pass completes", func() bool {
		var err error
		res, err = st.LifecyclePass(ctx, store.Policy{ArchiveAfter: 24 * time.Hour}, store.PassOptions{Now: func() time.Time { return later }})
		return err == nil && res.Errors == 0
	}))
	for id := range want {
		if loc, err := sess(t, st, id).Locate(ctx); err != nil || loc.State != store.StateArchived {
			t.Fatalf("%s after the last pass: %+v %v", id, loc, err)
		}
	}
	check("after the last pass")
}

// logText is session id's events as JSON lines.
func logText(t *testing.T, st *store.Store, id string) string {
	t.Helper()
	var evs []session.Event
	_, err := sess(t, st, id).Records(context.Background(), store.Collect(&evs))
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	var b strings.Builder
	for _, e := range evs {
		line, _ := e.MarshalJSON()
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestArchiveRaces races an archive of a session against a writer appending to it (one without a
// lease, as the TypeScript backend with leaseTtlMs 0: a leased writer's session is not archived,
// ErrWriterLive) and a fork of it, then an archive against an Open: every acknowledged record is in
// the log exactly once, in order, the child is a whole prefix of its source, and an Open ends with
// the session hot and whole.
func TestArchiveRaces(t *testing.T) {
	srv := startOwnServer(t)
	nc, st := connectStore(t, srv.URL(), &store.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := forker.New(st, nc, forker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	cl, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, st, nc, publisher.Options{})
	first, err := loggen.ChunkTurn(1, 30, 120, 1785000000000)
	if err != nil {
		t.Fatal(err)
	}
	more := chunkEvents("more", 30, 40) // seqs 30..69: chunks of a turn the race leaves open
	all := append(append([]session.Event{}, first...), more...)

	// A live writer's session is not archived under it.
	w, err := pub.Create(ctx, session.Header{ID: "race-leased", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range first {
		if err := w.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sess(t, st, "race-leased").Archive(ctx); !errors.Is(err, store.ErrWriterLive) {
		t.Fatalf("archive under a live writer: %v, want ErrWriterLive", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}

	raced, fenced := 0, 0
	for round := range 8 {
		id := fmt.Sprintf("race-%d", round)
		if err := st.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		r, err := sess(t, st, id).Append(ctx, 0, first)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var archErr, forkErr error
		var fork client.ForkResult
		var res store.ArchiveResult
		acked := int64(len(first))
		wg.Add(3)
		go func() {
			defer wg.Done()
			res, archErr = sess(t, st, id).Archive(ctx)
		}()
		go func() {
			defer wg.Done()
			b := int64(len(first) - 1)
			fork, forkErr = cl.Fork(ctx, client.ForkRequest{Source: id, Child: id + "-child", Boundary: &b})
		}()
		go func() {
			defer wg.Done()
			guard := r.StreamSeq
			for k := 0; k < len(more); k += 5 {
				a, err := sess(t, st, id).Append(ctx, guard, more[k:k+5])
				if err != nil {
					if !errors.Is(err, store.ErrConflict) {
						t.Errorf("round %d: append: %v", round, err)
					}
					return // fenced: the archive committed over its guard
				}
				guard, acked = a.StreamSeq, acked+5
			}
		}()
		wg.Wait()
		if archErr != nil {
			t.Fatalf("round %d: archive: %v", round, archErr)
		}
		if res.Raced {
			raced++
		} else if acked < int64(len(all)) {
			fenced++
		}
		var got []session.Event
		_, err = sess(t, st, id).Records(ctx, store.Collect(&got))
		if err != nil {
			t.Fatalf("round %d: read: %v", round, err)
		}
		if int64(len(got)) != acked {
			t.Fatalf("round %d: %d events in the log, %d were acknowledged", round, len(got), acked)
		}
		for i, e := range got {
			if e.Type != all[i].Type || !bytes.Equal(e.Data, all[i].Data) {
				t.Fatalf("round %d: event %d is not the one written", round, i)
			}
		}
		if forkErr != nil {
			t.Fatalf("round %d: fork: %v", round, forkErr)
		}
		var child []session.Event
		_, err = sess(t, st, fork.Child).Records(ctx, store.Collect(&child))
		if err != nil || len(child) != len(first)+1 || child[len(child)-1].Type != "session/end-seed" {
			t.Fatalf("round %d: child %d events (seed %d): %v", round, len(child), fork.SeedLength, err)
		}
		for i := range first {
			if !bytes.Equal(child[i].Data, first[i].Data) {
				t.Fatalf("round %d: the child's event %d is not its source's", round, i)
			}
		}

		// An Open racing an archive: whichever comes first, the Open ends with the session hot,
		// its log whole, then its repair and end-seed.
		before := logText(t, st, id)
		var w2 *publisher.Writer
		var openErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, archErr = sess(t, st, id).Archive(ctx)
		}()
		go func() {
			defer wg.Done()
			w2, openErr = pub.Open(ctx, id)
		}()
		wg.Wait()
		if openErr != nil {
			t.Fatalf("round %d: Open racing an archive: %v (archive: %v)", round, openErr, archErr)
		}
		if err := w2.Close(ctx); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		after := logText(t, st, id)
		if !strings.HasPrefix(after, before) || !strings.Contains(after[len(before):], "session/end-seed") {
			t.Fatalf("round %d: the log after Open:\n%s\nbefore:\n%s", round, after, before)
		}
		if loc, err := sess(t, st, id).Locate(ctx); err != nil || loc.State != store.StateActive {
			t.Fatalf("round %d: after Open: %+v %v", round, loc, err)
		}
	}
	t.Logf("8 rounds: the writer kept its records after the archived prefix %d times, was fenced by the commit %d times", raced, fenced)
}

// sess is st.Session(id) for an id the test knows valid.
func sess(t *testing.T, st *store.Store, id string) *store.Session {
	t.Helper()
	ss, err := st.Session(id)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}
