package integration_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/store"
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
		// Settled: three checks in a row, a second apart, find it gone.
		settled := 0
		checkfor.Check(t, 20*time.Second, time.Second, func() error {
			keys = projectionKeys(t, st, tok)
			msgs = agentlog(t, nil, "messages", id)
			if len(keys) == 0 && msgs.code != 0 && strings.Contains(msgs.stderr, "(code 404)") {
				settled++
			} else {
				settled = 0
			}
			if settled < 3 {
				return fmt.Errorf("try %d after rm (%d checks settled): keys %v, messages exit %d stdout %q stderr %q", try, settled, keys, msgs.code, msgs.stdout, msgs.stderr)
			}
			return nil
		})
		if r := agentlog(t, nil, "rm", id); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("try %d: rm again: exit %d, stdout %q, stderr %q; want not found", try, r.code, r.stdout, r.stderr)
		}
	}
}

// projectionKeys lists the agentlog_projections keys of token tok.
func projectionKeys(t *testing.T, st *store.Store, tok string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := storetest.ProjectionsKV(st).ListKeysFiltered(ctx, "*."+tok)
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

// TestImportOntoOrphanRecords: an import onto an id that holds records but no metadata is refused
// before anything is written, naming the session and `agentlog rm`; after rm the import succeeds.
func TestImportOntoOrphanRecords(t *testing.T) {
	id := "it/" + runTag(t) + "rawnometa"
	_, st := connectStore(t, devURL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := storetest.Session(st, id).Append(ctx, 0, userEvents("raw", 0, 1)); err != nil {
		t.Fatal(err)
	}
	log := writeLog(t, t.TempDir(), "x.jsonl", userLine(0, "imported"))
	r := agentlog(t, nil, "import", log, "--session", id)
	if r.code != 1 || !strings.Contains(r.stderr, `session "`+id+`"`) || !strings.Contains(r.stderr, "without metadata") ||
		!strings.Contains(r.stderr, "agentlog rm "+id) || strings.Contains(r.stderr, "wrong last sequence") {
		t.Fatalf("import onto orphan records: exit %d, stderr %q; want 1 naming the session, the missing metadata and agentlog rm", r.code, r.stderr)
	}
	if _, err := storetest.Header(storetest.Session(st, id).Info(ctx)); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("metadata after the refused import: %v (want none)", err)
	}
	if tail, err := storetest.Session(st, id).TailFromLeader(ctx); err != nil || tail.NextSeq != 1 {
		t.Fatalf("log after the refused import: %+v, %v (want the one raw record)", tail, err)
	}
	mustAgentlog(t, nil, "rm", id)
	mustAgentlog(t, nil, "import", log, "--session", id)
	if got := messageTexts(t, mustAgentlog(t, nil, "messages", id)); len(got) != 1 || got[0] != "imported" {
		t.Fatalf("messages after rm and import: %q", got)
	}
}
