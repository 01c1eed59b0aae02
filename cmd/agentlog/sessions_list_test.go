package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func opsEv(seq int64, typ, data string) session.Event {
	e := session.Event{Type: typ, Seq: seq, Time: "1785000000000", Data: json.RawMessage(data)}
	if typ == "user/message" || typ == "assistant/message" {
		e.SurfaceOp = json.RawMessage(`"append"`)
	}
	return e
}

func opsEvents() []session.Event {
	return []session.Event{
		opsEv(0, "turn/start", `{"turn":1}`),
		opsEv(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}`),
		opsEv(2, "assistant/message", `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"p","model":"m"}}}`),
		opsEv(3, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
	}
}

// runCLI runs the CLI in process and returns its exit status, stdout and stderr.
func runCLI(ctx context.Context, url string, args ...string) (int, string, string) {
	return runCLIStdin(ctx, url, "", args...)
}

// runCLIStdin is runCLI with stdin.
func runCLIStdin(ctx context.Context, url, stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"--nats", url}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestSessionsStatusCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	for _, id := range []string{"job-1", "job-2", "solo"} {
		if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1785000000000}); err != nil {
			t.Fatal(err)
		}
		if _, err := storetest.Session(s.Store(), id).Append(ctx, 0, opsEvents()); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := runCLI(ctx, s.URL(), "fork", "sol", "--child", "solo-fork"); code != 0 {
		t.Fatalf("fork by prefix: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runCLI(ctx, s.URL(), "sessions", "--sort", "id", "--json")
	if code != 0 {
		t.Fatalf("sessions: %d %s", code, errOut)
	}
	var got []client.SessionInfo
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var si client.SessionInfo
		if err := json.Unmarshal([]byte(line), &si); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, si)
	}
	if len(got) != 4 || got[2].ID != "solo" || got[2].Children[0] != "solo-fork" || got[3].ParentSession != "solo" || got[0].LastSeq != 3 {
		t.Fatalf("sessions --json: %s", out)
	}
	code, out, errOut = runCLI(ctx, s.URL(), "sessions", "--sort", "id", "--limit", "1", "--prefix", "job")
	if code != 0 || !strings.Contains(out, "job-1") || strings.Contains(out, "job-2") || !strings.Contains(errOut, "next: --after job-1") {
		t.Fatalf("sessions --limit 1: %d %q %q", code, out, errOut)
	}
	// The default order is newest first (by creation), and its cursor continues it.
	code, out, errOut = runCLI(ctx, s.URL(), "sessions", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "solo-fork ") || !strings.HasPrefix(lines[2], "solo ") || !strings.Contains(lines[0], "STATE") ||
		!strings.Contains(lines[1], " active ") || !strings.HasPrefix(errOut, "next: --after c:") {
		t.Fatalf("sessions --limit 2: %d %q %q", code, out, errOut)
	}
	cursor := strings.TrimSpace(strings.TrimPrefix(errOut, "next: --after "))
	code, out, errOut = runCLI(ctx, s.URL(), "sessions", "--after", cursor)
	if code != 0 || !strings.Contains(out, "job-2") || !strings.Contains(out, "job-1") || strings.Contains(out, "solo") || errOut != "" {
		t.Fatalf("sessions --after %s: %d %q %q", cursor, code, out, errOut)
	}
	if code, out, _ := runCLI(ctx, s.URL(), "sessions", "--parent", "solo", "--json"); code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"id":"solo-fork"`) {
		t.Fatalf("sessions --parent solo: %d %q", code, out)
	}
	qc, _ := client.New(s.Conn())
	if _, err := qc.Messages(ctx, "solo-fork", client.MinSeq(4)); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(ctx, s.URL(), "status", "solo-f", "--json")
	var st client.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}
	if st.ID != "solo-fork" || st.LastSeq != 4 || st.ParentSession == nil || *st.ParentSession != "solo" || st.SeedLength == nil || *st.SeedLength != 4 || len(st.Units) < 7 {
		t.Fatalf("status: %s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"status", "job"}, 1, "\"job-1\"\n  \"job-2\""},
		{[]string{"status", " "}, 2, "blank"},
		{[]string{"status", "nobody"}, 1, `"nobody" not found`},
		{[]string{"events", "job"}, 1, "ambiguous"},
		{[]string{"sessions", "--limit", "-1"}, 2, "--limit"},
		{[]string{"events", "job-1", "--tail", "-1"}, 2, "--tail"},
	} {
		if code, _, errOut := runCLI(ctx, s.URL(), tc.args...); code != tc.code || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: exit %d %q, want %d %q", tc.args, code, errOut, tc.code, tc.err)
		}
	}
	code, out, _ = runCLI(ctx, s.URL(), "events", "job-2", "--tail", "1", "--no-header")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"turn/end"`) {
		t.Fatalf("events --tail 1: %d %q", code, out)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "rm", "job-2"); code != 0 {
		t.Fatalf("rm: %s", errOut)
	}
	if code, out, _ := runCLI(ctx, s.URL(), "sessions", "--prefix", "job", "--json"); code != 0 || strings.Contains(out, "job-2") || !strings.Contains(out, "job-1") {
		t.Fatalf("sessions after rm: %q", out)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "status", "job"); code != 0 || !strings.Contains(errOut, `no session is named "job"; using "job-1"`) {
		t.Fatalf("status by the prefix left unique (it must say which id it read): %d %s", code, errOut)
	}
	if _, _, errOut := runCLI(ctx, s.URL(), "status", "job-1"); strings.Contains(errOut, "no session is named") {
		t.Fatalf("status by the exact id notes a prefix: %s", errOut)
	}
	code, out, _ = runCLI(ctx, s.URL(), "__complete", "status", "jo")
	if code != 0 || !strings.Contains(out, "job-1\n") || strings.Contains(out, "job-2") {
		t.Fatalf("complete: %d %q", code, out)
	}
	code, out, _ = runCLI(ctx, s.URL(), "__complete", "rebuild", "tu")
	if code != 0 || !strings.HasPrefix(out, "turns\n") {
		t.Fatalf("complete units: %d %q", code, out)
	}
	code, out, _ = runCLI(ctx, s.URL(), "version", "--json")
	var v versionInfo
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.NATSServer == "" || v.RecordFormat != "1" || !strings.HasPrefix(v.Go, "go") {
		t.Fatalf("version: %d %q", code, out)
	}
}

// TestSessionsScale creates AGENTLOG_SESSIONS_N sessions (e.g. 100000; one record of 4 events
// each, every 10th a fork child of the one before) and times `agentlog sessions`.
func TestSessionsScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AGENTLOG_SESSIONS_N"))
	if n <= 0 {
		t.Skip("set AGENTLOG_SESSIONS_N=100000 to run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Projectors: 0,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url, nc, store := s.URL(), s.Conn(), s.Store()
	if u := os.Getenv("AGENTLOG_SESSIONS_URL"); u != "" { // fill that server instead (to time a separate process)
		g := &globals{natsURL: u}
		if nc, store, err = g.connect(ctx, "scale"); err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		url = u
	}
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		if os.Getenv("AGENTLOG_SESSIONS_NOFILL") != "" {
			break // AGENTLOG_SESSIONS_URL holds them already
		}
		id := fmt.Sprintf("sess-%07d", i)
		h := session.Header{ID: id, CreatedAt: 1785000000000 + int64(i)}
		if i%10 == 1 {
			seed := int64(3)
			h.ParentSession, h.SeedLength = fmt.Sprintf("sess-%07d", i-1), &seed
		}
		hv := map[string]any{"type": "session", "version": 0, "id": id, "createdAt": h.CreatedAt}
		if h.ParentSession != "" {
			hv["parentSession"], hv["seedLength"] = h.ParentSession, h.SeedLength
		}
		val, err := json.Marshal(hv)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := wire.Token(id)
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: "$KV." + wire.SessionsBucket + "." + tok, Data: val,
			Header: nats.Header{wire.IncarnationHeader: []string{wire.NewIncarnation()}}}, natsjs.WithStallWait(time.Minute)); err != nil {
			t.Fatal(err)
		}
		hdr, body, err := wire.EncodeRecord(id, opsEvents())
		if err != nil {
			t.Fatal(err)
		}
		subj, _ := wire.SessionSubject(id, store.Partitions())
		if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Header: hdr, Data: body}, natsjs.WithStallWait(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("publishing did not complete")
	}
	t.Logf("created %d sessions in %s", n, time.Since(start).Round(time.Millisecond))

	timeIt := func(args ...string) (time.Duration, string) {
		var times []time.Duration
		var out string
		for range 3 {
			t0 := time.Now()
			code, o, errOut := runCLI(ctx, url, args...)
			times = append(times, time.Since(t0))
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
			out = o
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		t.Logf("agentlog %s: median %s (runs %v)", strings.Join(args, " "), times[1].Round(time.Millisecond), times)
		return times[1], out
	}
	_, out := timeIt("sessions", "--limit", "50")
	if lines := strings.Count(out, "\n"); lines != 51 || !strings.Contains(out, "sess-0000001  ") {
		t.Fatalf("--limit 50: %d lines\n%s", lines, out)
	}
	_, out = timeIt("sessions")
	if lines := strings.Count(out, "\n"); lines != n+1 {
		t.Fatalf("full listing: %d lines", lines)
	}
	_, out = timeIt("sessions", "--json")
	if lines := strings.Count(out, "\n"); lines != n {
		t.Fatalf("full json listing: %d lines", lines)
	}
	timeIt("sessions", "--limit", "50", "--after", fmt.Sprintf("sess-%07d", n/2))
	timeIt("status", "sess-0000000", "--json")

	// The web inspector's list page and a session page (its fork tree reads every header too).
	if os.Getenv("AGENTLOG_SESSIONS_URL") == "" {
		base := startUIOn(t, ctx, s, devstack.UIOptions{})
		for _, path := range []string{"/", "/?prefix=sess-00500", fmt.Sprintf("/?after=sess-%07d", n/2), "/sessions/sess-0000001"} {
			var times []time.Duration
			for range 3 {
				t0 := time.Now()
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				times = append(times, time.Since(t0))
				if resp.StatusCode != 200 || !strings.Contains(string(b), `data-id="sess-00`) || strings.Contains(string(b), `class="banner bad"`) {
					t.Fatalf("GET %s: %d", path, resp.StatusCode)
				}
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			t.Logf("inspector GET %s: median %s (runs %v)", path, times[1].Round(time.Millisecond), times)
		}
	}
}

// TestTermSafe: an id with a control character or an escape sequence is printed quoted, so it
// cannot drive the terminal; a printable one (dots, spaces, non-ASCII) is printed as is.
func TestTermSafe(t *testing.T) {
	for id, want := range map[string]string{
		"apps/web.1":            "apps/web.1",
		"é ü":                   "é ü",
		"esc\x1b[31mRED\x1b[0m": `"esc\x1b[31mRED\x1b[0m"`,
		"nul\x01ctl":            `"nul\x01ctl"`,
		"tab\there":             `"tab\there"`,
	} {
		if got := termSafe(id); got != want {
			t.Errorf("termSafe(%q) = %s, want %s", id, got, want)
		}
	}
}

// startTestStack starts a dev stack (embedded server, one projector, one forker, logs discarded)
// in a temporary directory, closed when the test ends.
func startTestStack(ctx context.Context, t *testing.T) *devstack.Stack {
	t.Helper()
	s, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Projectors: 1, Forkers: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
