package integration_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/jetstream"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestRmWhileFolding: rm of a big session that the projector is still folding (records delivered
// after the purge, checkpoints over purged keys) leaves no projection key behind once the
// projector settles, and the session answers not found, not as an existing empty one.
func TestRmWhileFolding(t *testing.T) {
	run := runTag(t)
	dir := t.TempDir()
	pad := strings.Repeat("x", 700)
	_, st := connectStore(t, devURL, nil)
	for try := range 3 {
		id := fmt.Sprintf("it/%sleak%d", run, try)
		lines := make([]string, 6000)
		for i := range lines {
			lines[i] = userLine(i, fmt.Sprintf("%d %s", i, pad))
		}
		log := writeLog(t, dir, filepath.Base(id)+".jsonl", lines...)
		mustAgentlog(t, nil, "import", log, "--session", id)
		mustAgentlog(t, nil, "rm", id)
		tok := mustToken(t, id)

		var keys []string
		var msgs result
		deadline := time.Now().Add(20 * time.Second)
		for settled := 0; settled < 3; {
			if time.Now().After(deadline) {
				t.Fatalf("try %d: 20s after rm: keys %v, messages exit %d stdout %q stderr %q", try, keys, msgs.code, msgs.stdout, msgs.stderr)
			}
			time.Sleep(time.Second)
			keys = projectionKeys(t, st, tok)
			msgs = agentlog(t, nil, "messages", id)
			if len(keys) == 0 && msgs.code != 0 && strings.Contains(msgs.stderr, "(code 404)") {
				settled++
			} else {
				settled = 0
			}
		}
		if r := agentlog(t, nil, "rm", id); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("try %d: rm again: exit %d, stdout %q, stderr %q; want not found", try, r.code, r.stdout, r.stderr)
		}
	}
}

// projectionKeys lists the agentlog_projections keys of token tok.
func projectionKeys(t *testing.T, st *jetstream.Store, tok string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := st.Projections.ListKeysFiltered(ctx, "*."+tok)
	if errors.Is(err, natsjs.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}
