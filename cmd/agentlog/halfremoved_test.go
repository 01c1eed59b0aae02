package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/inspector"
	"github.com/agentlog/agentlog/internal/testnats"
	"github.com/agentlog/agentlog/session"
)

// TestHalfRemovedSession: a session whose rm was killed after marking its metadata
// (ARCHITECTURE.md, "Deleting a session") is not found by every read, which says so, and is left
// out of the listing; rm run again finishes it.
func TestHalfRemovedSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	// "hr" is also a prefix of "hr-kept": a marked id must not resolve to the other one.
	for _, id := range []string{"hr", "hr-kept"} {
		log := `{"type":"session","version":0,"id":"` + id + `","createdAt":1785000000000}
{"type":"turn/start","seq":0,"time":1785000000001,"data":{"turn":1,"trigger":{"kind":"message"}}}
{"type":"user/message","seq":1,"time":1785000000002,"data":{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
`
		if code, _, errOut := runCLIStdin(ctx, s.URL(), log, "import", "-"); code != 0 {
			t.Fatalf("import %s: exit %d: %s", id, code, errOut)
		}
		if code, _, errOut := runCLI(ctx, s.URL(), "messages", id); code != 0 { // its projection is stored
			t.Fatalf("messages %s: exit %d: %s", id, code, errOut)
		}
	}
	testnats.MarkRemoving(t, s.Store(), "hr")
	const want = `session "hr" is being removed (an earlier removal stopped part-way)`
	const hint = "; run `agentlog rm hr` to finish\n"

	// The CLI: each read fails (exit 1), prints nothing on stdout and says why on stderr, with
	// the command that finishes the removal.
	for _, args := range [][]string{
		{"status", "hr"}, {"events", "hr"}, {"events", "hr", "--tail", "1"}, {"events", "hr", "--no-header"},
		{"messages", "hr"}, {"messages", "hr", "--min-seq", "-1"}, {"messages", "hr", "--watch"},
	} {
		code, out, errOut := runCLI(ctx, s.URL(), args...)
		if code != 1 || out != "" || !strings.Contains(errOut, want) || !strings.HasSuffix(errOut, hint) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1, %q and %q", args, code, out, errOut, want, hint)
		}
	}
	code, out, errOut := runCLI(ctx, s.URL(), "sessions")
	if code != 0 || strings.Contains(out, `"hr"`) || !strings.Contains(out, "hr-kept") {
		t.Errorf("sessions: exit %d: %s%s; want hr-kept listed and hr left out", code, out, errOut)
	}

	// The client: every read of it is ErrNotFound and ErrRemoving (code 410), naming it, with the
	// same text and no CLI hint.
	c, err := client.New(s.Conn())
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.Is(err, client.ErrNotFound) || !errors.Is(err, client.ErrRemoving) || !strings.Contains(err.Error(), want) ||
			!errors.As(err, &ce) || ce.Code != client.CodeRemoving || ce.Session != "hr" || strings.Contains(err.Error(), "agentlog rm") {
			t.Errorf("%s: %v; want ErrNotFound, ErrRemoving (code %s, session hr) and %q, without a hint", what, err, client.CodeRemoving, want)
		}
	}
	_, err = c.Status(ctx, "hr")
	check("Status", err)
	_, err = c.Header(ctx, "hr")
	check("Header", err)
	check("Events", c.Events(ctx, "hr", client.EventsQuery{}, func(session.Event) error { return errors.New("an event was read") }))
	_, err = c.Messages(ctx, "hr")
	check("Messages", err)
	_, err = c.Messages(ctx, "hr", client.MinSeq(1))
	check("Messages MinSeq", err)
	_, err = c.Surface(ctx, "hr")
	check("Surface", err)
	_, err = c.Projection(ctx, "hr", "messages")
	check("Projection", err)
	_, err = c.Snapshot(ctx, "hr")
	check("Snapshot", err)
	_, err = c.Lineage(ctx, "hr")
	check("Lineage", err)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	check("WatchMessages", c.WatchMessages(wctx, "hr", func(client.MessagesReply) error { return errors.New("messages were given") }))
	wcancel()
	if id, err := c.Resolve(ctx, "hr"); err != nil || id != "hr" {
		t.Errorf("Resolve(hr) = %q, %v; want hr itself", id, err)
	}
	if ids, err := c.SessionIDs(ctx, "", 0); err != nil || strings.Join(ids, ",") != "hr-kept" {
		t.Errorf("SessionIDs = %v, %v; want [hr-kept]", ids, err)
	}
	// A plain not-found is not ErrRemoving.
	if _, err := c.Status(ctx, "never"); !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrRemoving) {
		t.Errorf("Status(never): %v; want ErrNotFound, not ErrRemoving", err)
	}

	// The inspector's pages answer 404 with the same text.
	ins, err := inspector.New(s.Conn(), inspector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ins.Close)
	hs := httptest.NewServer(ins.Handler())
	t.Cleanup(hs.Close)
	for _, path := range []string{"/sessions/hr", "/sessions/hr/events.jsonl", "/sessions/hr/events/0", "/sessions/hr/messages.json"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "is being removed (an earlier removal stopped part-way)") {
			t.Errorf("GET %s: %d %.300s; want 404 saying it is being removed", path, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(hs.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), `/sessions/hr"`) || !strings.Contains(string(body), "hr-kept") {
		t.Errorf("GET /: the list shows hr, or not hr-kept:\n%.2000s", body)
	}

	// rm finishes the removal; then it is a plain not-found.
	if code, out, errOut := runCLI(ctx, s.URL(), "rm", "hr"); code != 0 {
		t.Fatalf("rm: exit %d: %s%s", code, out, errOut)
	}
	// (The CLI would now resolve "hr" as a prefix of hr-kept.)
	if _, err := c.Status(ctx, "hr"); !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrRemoving) {
		t.Errorf("Status after rm: %v; want a plain ErrNotFound", err)
	}
}
