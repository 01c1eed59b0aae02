package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/devstack"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

// startUIOn starts an inspector with o on a free loopback port, on s's connection, and returns
// its base URL (without the token); it stops at cleanup.
func startUIOn(t *testing.T, ctx context.Context, s *devstack.Stack, o devstack.UIOptions) string {
	t.Helper()
	o.Listen = "127.0.0.1:0"
	u, err := devstack.StartUI(ctx, s.Conn(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("ui: %v", err)
		}
	})
	base, _, _ := strings.Cut(u.URL(), "/?")
	return strings.TrimSuffix(base, "/")
}

// TestDevUI: `dev --ui` and `ui` serve the inspector, print its URL and stop cleanly; a
// non-loopback address without a token is a usage error before anything starts.
func TestDevUI(t *testing.T) {
	var errb strings.Builder
	if code := run(context.Background(), []string{"dev", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--ui", "0.0.0.0:0"},
		strings.NewReader(""), io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "--ui-token") {
		t.Errorf("dev --ui 0.0.0.0:0 without a token: exit %d, %s", code, errb.String())
	}
	out, _ := runCmd(t, "dev", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--ui", "127.0.0.1:0")
	natsURL := waitOutput(t, out, `export AGENTLOG_NATS_URL=(\S+)`)
	devUI := waitOutput(t, out, `agentlog ui: (http://\S+/) \(read-only\)`)
	uiOut, _ := runCmd(t, "--nats", natsURL, "ui", "--listen", "127.0.0.1:0", "--ui-token", "t0k", "--allow-admin")
	ui := waitOutput(t, uiOut, `agentlog ui: (http://\S+) \(operator actions allowed\)`)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar} // the ?token= login sets a cookie, then redirects
	for _, u := range []string{devUI, ui} {
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `id="sessions"`) {
			t.Errorf("GET %s: %d %.300s", u, resp.StatusCode, body)
		}
	}
}

// TestUIDownloadsAreTheCLIOutput: the inspector's messages.json is what `agentlog messages`
// prints, and its raw log download what `agentlog events` prints, byte for byte.
func TestUIDownloadsAreTheCLIOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	base := startUIOn(t, ctx, s, devstack.UIOptions{})
	const id = "alpha <&>"
	if err := s.Store().CreateSession(ctx, session.Header{ID: id, CreatedAt: 1785000000000, Cwd: "/work/<repo>"}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), id).Append(ctx, 0, opsEvents()); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return resp, string(b)
	}
	const esc = "/sessions/alpha%20%3C&%3E"
	code, cliMsgs, errOut := runCLI(ctx, s.URL(), "messages", id)
	if code != 0 {
		t.Fatalf("agentlog messages: %d %s", code, errOut)
	}
	if _, mj := get(esc + "/messages.json"); mj != cliMsgs || !strings.Contains(mj, `"hello"`) {
		t.Errorf("messages.json differs from agentlog messages:\n%s\n%s", mj, cliMsgs)
	}
	code, cliEvents, errOut := runCLI(ctx, s.URL(), "events", id)
	if code != 0 {
		t.Fatalf("agentlog events: %d %s", code, errOut)
	}
	resp, raw := get(esc + "/events.jsonl")
	if raw != cliEvents || strings.Count(raw, "\n") != 5 || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
		t.Errorf("raw log download differs from agentlog events (%d vs %d bytes, %q):\n%s\n%s", len(raw), len(cliEvents), resp.Header.Get("Content-Disposition"), raw, cliEvents)
	}
}
