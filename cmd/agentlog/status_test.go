package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

// TestStatusOpenTurnAsOf: status says which seq its open turn is as of, the messages unit's
// asOfSeq, and that it lags when the log has moved on without the projector.
func TestStatusOpenTurnAsOf(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	log := `{"type":"session","version":0,"id":"st","createdAt":1785000000000}
{"type":"turn/start","seq":0,"time":1785000000001,"data":{"turn":1,"trigger":{"kind":"message"}}}
{"type":"user/message","seq":1,"time":1785000000002,"data":{"id":"m1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
`
	if code, _, errOut := runCLIStdin(ctx, s.URL(), log, "import", "-"); code != 0 {
		t.Fatalf("import: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(ctx, s.URL(), "messages", "st"); code != 0 { // waits until seq 1 is folded
		t.Fatalf("messages: exit %d: %s", code, errOut)
	}
	openTurn := func() string {
		t.Helper()
		code, out, errOut := runCLI(ctx, s.URL(), "status", "st")
		if code != 0 {
			t.Fatalf("status: exit %d: %s", code, errOut)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "open turn") {
				return strings.Join(strings.Fields(l)[2:], " ")
			}
		}
		t.Fatalf("status has no open turn line:\n%s", out)
		return ""
	}
	if got, want := openTurn(), "1 (as of seq 1, the last)"; got != want {
		t.Fatalf("open turn %q, want %q", got, want)
	}
	// The turn ends while no projector runs: the stored open turn is behind the log, and says so.
	for _, p := range s.Projectors() {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	tail, err := storetest.Session(s.Store(), "st").TailFromLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end, err := session.DecodeEventLine([]byte(`{"type":"turn/end","seq":2,"time":1785000000003,"data":{"turn":1,"reason":{"kind":"completed"}}}`), "st")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s.Store(), "st").Append(ctx, tail.LastStreamSeq, []session.Event{end}); err != nil {
		t.Fatal(err)
	}
	if got, want := openTurn(), "1 (as of seq 1 of 2: the projection lags)"; got != want {
		t.Fatalf("open turn with the projection behind: %q, want %q", got, want)
	}
}
