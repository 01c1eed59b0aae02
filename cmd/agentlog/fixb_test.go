package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

// The CLI's exit statuses: a blank id is a usage error (2) for every command that takes one; a
// fork refusal, INVALID_SEED included, is "CODE: text" with exit 1; a wait for an unknown session
// is refused at once.
func TestCLIBlankIDsSeedCodeAndUnknownWait(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)

	for _, args := range [][]string{
		{"events", ""}, {"events", " "}, {"rm", ""}, {"fork", ""}, {"messages", ""}, {"status", ""},
		{"fork", "k9", "--child", ""}, {"import", "x.jsonl", "--session", ""},
	} {
		if code, _, errOut := runCLI(ctx, s.URL(), args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errOut)
		}
	}

	// A seed whose user/message has no valid source: INVALID_SEED, with its code.
	evs := []session.Event{
		opsEv(0, "turn/start", `{"turn":1}`),
		opsEv(1, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":""}}`),
		opsEv(2, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
	}
	if err := s.Store().CreateSession(ctx, session.Header{ID: "k9", CreatedAt: 1785000000000}); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), "k9").Append(ctx, 0, evs); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(ctx, s.URL(), "fork", "k9", "--child", "live1", "--at", "2")
	if code != 1 || !strings.Contains(errOut, "INVALID_SEED: seed user/message at index 1 message has invalid source") {
		t.Fatalf("fork with an invalid seed: exit %d, stderr %q", code, errOut)
	}

	start := time.Now()
	code, _, errOut = runCLI(ctx, s.URL(), "messages", "nosuch", "--min-seq", "3")
	if code != 1 || !strings.Contains(errOut, "nosuch") || time.Since(start) > 10*time.Second {
		t.Fatalf("messages nosuch --min-seq 3: exit %d after %s, stderr %q", code, time.Since(start), errOut)
	}

	// inspect of an empty log: the reference oracle accepts it (ok, 0 events), and so does inspect.
	var out strings.Builder
	if code := run(ctx, []string{"inspect"}, strings.NewReader(""), &out, io.Discard); code != 0 {
		t.Fatalf("inspect of empty input: exit %d", code)
	}
	var res struct {
		OK     bool `json:"ok"`
		Events int  `json:"events"`
	}
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil || !res.OK || res.Events != 0 {
		t.Fatalf("inspect of empty input: %s %v", out.String(), err)
	}
}
