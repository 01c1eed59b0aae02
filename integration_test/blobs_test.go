package integration_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestLargeEventsEndToEnd: a session with 20 events larger than one record (1 MiB), imported with
// the binary: `events` prints exactly the imported lines, `messages` derives them (each larger
// than a reply), a fork copies them so that removing the source leaves the child whole, rm leaves
// no blob behind, and --max-event-bytes refuses the same file naming the seq and the rule.
func TestLargeEventsEndToEnd(t *testing.T) {
	run := runTag(t)
	id, kid := "it/"+run+"large", "it/"+run+"large-kid"
	var lines, texts []string
	for i := 0; i < 20; i++ {
		text := fmt.Sprintf("%d:", i) + strings.Repeat(string(rune('a'+i)), 1<<20+4096*i)
		texts = append(texts, text)
		lines = append(lines, userLine(2*i, text), fmt.Sprintf(`{"type":"test/note","seq":%d,"time":1,"data":{"i":%d},"ignorable":true}`, 2*i+1, i))
	}
	file := writeLog(t, t.TempDir(), "large.jsonl", lines...)
	want := strings.Join(lines, "\n") + "\n"

	refused := agentlog(t, nil, "import", file, "--session", id, "--max-event-bytes", "1000000")
	// import checks the largest event (seq 38) before it writes anything.
	if refused.code != 1 || !strings.Contains(refused.stderr, "seq 38") || !strings.Contains(refused.stderr, "event-too-large") ||
		!strings.Contains(refused.stderr, "nothing was written") {
		t.Fatalf("import over --max-event-bytes: exit %d, stderr %s", refused.code, refused.stderr)
	}
	mustAgentlog(t, nil, "import", file, "--session", id)
	if got := mustAgentlog(t, nil, "events", id, "--no-header"); got != want {
		t.Fatalf("events differ from the imported file (%d bytes, want %d)", len(got), len(want))
	}
	if got := messageTexts(t, mustAgentlog(t, nil, "messages", id)); len(got) != 20 || got[19] != texts[19] || got[0] != texts[0] {
		t.Fatalf("messages: %d, want the 20 imported texts", len(got))
	}
	var fork struct{ Child string }
	if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "fork", id, "--child", kid, "--json")), &fork); err != nil || fork.Child != kid {
		t.Fatalf("fork: %+v, %v", fork, err)
	}
	var rm struct{ Blobs int }
	if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "rm", id, "--json")), &rm); err != nil || rm.Blobs != 20 {
		t.Fatalf("rm of the source: %+v, %v", rm, err)
	}
	got := mustAgentlog(t, nil, "events", kid, "--no-header")
	if !strings.HasPrefix(got, want) || !strings.Contains(got[len(want):], `"type":"session/end-seed","seq":40`) {
		t.Fatalf("the child after rm of its source: %d bytes, want the source's %d plus its end-seed", len(got), len(want))
	}
	if err := json.Unmarshal([]byte(mustAgentlog(t, nil, "rm", kid, "--json")), &rm); err != nil || rm.Blobs != 20 {
		t.Fatalf("rm of the child: %+v, %v", rm, err)
	}
	// gc refuses a grace that could take the blob of an append in progress.
	if r := agentlog(t, nil, "gc", "--grace", "1m"); r.code != 2 || !strings.Contains(r.stderr, "--grace 1m0s is below 10m0s") {
		t.Fatalf("gc --grace 1m: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := agentlog(t, nil, "gc", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"removed":[]`) {
		t.Fatalf("gc: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
}
