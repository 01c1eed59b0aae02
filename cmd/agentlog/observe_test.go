package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/obs"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// runCmd runs the CLI until the test ends (its context is cancelled, and it is waited for).
func runCmd(t *testing.T, args ...string) (stdout *lockedBuffer, done <-chan int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &lockedBuffer{}, &lockedBuffer{}
	ch := make(chan int, 1)
	go func() { ch <- run(ctx, args, strings.NewReader(""), out, errOut) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-ch:
			if code != 0 {
				t.Errorf("%v exited %d: %s", args, code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%v did not stop", args)
		}
	})
	return out, ch
}

// waitOutput waits for re to match the command's output and returns its first group.
func waitOutput(t *testing.T, out *lockedBuffer, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	checkfor.Check(t, 30*time.Second, 20*time.Millisecond, func() error {
		if m = rx.FindStringSubmatch(out.String()); m == nil {
			return fmt.Errorf("output does not match %s:\n%s", re, out.String())
		}
		return nil
	})
	return m[1]
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls url until it answers code, and returns the body.
func waitStatus(t *testing.T, url string, code int) string {
	t.Helper()
	var body string
	checkfor.Check(t, 30*time.Second, 50*time.Millisecond, func() error {
		var got int
		if got, body = get(t, url); got != code {
			return fmt.Errorf("GET %s: %d %s, want %d", url, got, body, code)
		}
		return nil
	})
	return body
}

// TestDevIsObservable: dev with --http, --metrics-addr and the system account.
func TestDevIsObservable(t *testing.T) {
	dir := t.TempDir()
	out, _ := runCmd(t, "dev", "--data", dir, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0",
		"--projectors", "2", "--forkers", "2")
	url := waitOutput(t, out, `export AGENTLOG_NATS_URL=(\S+)`)
	pw := waitOutput(t, out, `--user sys --password (\S+) server ls`)
	mon := waitOutput(t, out, `monitoring: http://(\S+)/varz`)
	metrics := waitOutput(t, out, `metrics: http://(\S+)/metrics`)

	if b, err := readFile(dir + "/" + SystemAccountFile); err != nil || !strings.Contains(b, pw) {
		t.Fatalf("%s: %q %v", SystemAccountFile, b, err)
	}
	sys, err := nats.Connect(url, nats.UserInfo("sys", pw))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if _, err := sys.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second); err != nil {
		t.Fatalf("$SYS.REQ.SERVER.PING as the system user: %v", err)
	}
	if code, body := get(t, "http://"+mon+"/varz"); code != 200 || !strings.Contains(body, `"server_name": "agentlog-dev"`) {
		t.Fatalf("/varz: %d %.200s", code, body)
	}
	waitStatus(t, "http://"+metrics+"/readyz", 200)
	if code, body := get(t, "http://"+metrics+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	fams, err := obs.Scrape(context.Background(), metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"agentlog_projector_partitions_owned", "agentlog_forker_fork_duration_seconds", "go_goroutines"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	for _, l := range []map[string]string{{"projector": "dev-projector-1"}, {"projector": "dev-projector-2"}} {
		if _, ok := fams.Value("agentlog_projector_partitions_owned", l); !ok {
			t.Errorf("/metrics has no agentlog_projector_partitions_owned%v", l)
		}
	}
	for _, l := range []map[string]string{{"forker": "1"}, {"forker": "2"}} {
		if _, ok := fams.Value("agentlog_forker_fork_duration_seconds", l); !ok {
			t.Errorf("/metrics has no agentlog_forker_fork_duration_seconds%v", l)
		}
	}
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

func note(seq int64) session.Event {
	return session.Event{Type: "test/note", Seq: seq, Time: "1785000000000", Data: json.RawMessage(`{}`)}
}

// TestProjectorReadiness: a projector's /readyz is 503 with the reason before its server is up
// and while it is down, 200 while it serves; its counters move as it folds.
func TestProjectorReadiness(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	url := "nats://" + addr.String()
	out, _ := runCmd(t, "--nats", url, "projector", "--name", "ready-1", "--metrics-addr", "127.0.0.1:0")
	metrics := waitOutput(t, out, `metrics: http://(\S+)/metrics`)
	if body := waitStatus(t, "http://"+metrics+"/readyz", 503); !strings.Contains(body, "connecting to NATS at "+url) {
		t.Fatalf("/readyz before the server is up: %q", body)
	}

	dir := t.TempDir()
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir, Host: addr.IP.String(), Port: addr.Port})
	if err != nil {
		t.Fatal(err)
	}
	nc, js, err := natsdev.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := store.Provision(ctx, js, store.Config{}); err != nil {
		t.Fatal(err)
	}
	nc.Close()

	waitOutput(t, out, `(running) on`)
	waitStatus(t, "http://"+metrics+"/readyz", 200)

	nc, js, err = natsdev.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := store.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(st, "counted").Append(ctx, 0, []session.Event{note(0), note(1)}); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 20*time.Second, 20*time.Millisecond, func() error {
		fams, err := obs.Scrape(ctx, metrics)
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := fams.Value("agentlog_projector_events_folded_total", map[string]string{"projector": "ready-1"}); v != 2 {
			return fmt.Errorf("events folded %v, want 2", v)
		}
		return nil
	})

	srv.Shutdown()
	srv.WaitForShutdown()
	checkfor.Check(t, 20*time.Second, 50*time.Millisecond, func() error {
		if code, body := get(t, "http://"+metrics+"/readyz"); code != 503 || !strings.Contains(body, "not connected to NATS") {
			return fmt.Errorf("/readyz with the server down: %d %q, want 503 not connected to NATS", code, body)
		}
		return nil
	})
	srv, err = natsdev.RunServer(natsdev.ServerOptions{DataDir: dir, Host: addr.IP.String(), Port: addr.Port})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	waitStatus(t, "http://"+metrics+"/readyz", 200)
}
