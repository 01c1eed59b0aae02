package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
)

// TestExitCodesAndStreams runs the commands against one stack: 0 ok, 1 refused or failed, 2 a
// usage error, for every command that talks to NATS and the offline ones; import - reads stdin,
// inspect FILE reads the file, and import, rebuild and rm print JSON with --json.
func TestExitCodesAndStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s := startTestStack(ctx, t)
	events, err := demoEvents(1785000000000)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := session.WriteJSONL(&log, &session.Header{ID: "x1", CreatedAt: 1785000000000}, events, session.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "x1.jsonl")
	if err := os.WriteFile(file, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"type":"turn/start","seq":1,"time":1,"data":{"turn":1}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(stdin string, args ...string) (int, string, string) {
		return runCLIStdin(ctx, s.URL(), stdin, args...)
	}

	// import - reads stdin, and --json prints the result.
	code, out, errOut := cli(log.String(), "import", "-", "--session", "x1", "--json")
	if code != 0 {
		t.Fatalf("import -: exit %d: %s", code, errOut)
	}
	var imp importResult
	if err := json.Unmarshal([]byte(out), &imp); err != nil || imp != (importResult{Session: "x1", Events: int64(len(events)), LastSeq: int64(len(events) - 1)}) {
		t.Fatalf("import --json: %q (%v)", out, err)
	}
	if strings.Contains(errOut, "\r") || strings.Contains(errOut, "%") {
		t.Errorf("progress frames on a non-terminal stderr: %q", errOut)
	}
	// The events read back are the file's.
	if code, out, _ = cli("", "events", "x1"); code != 0 || out != log.String() {
		t.Fatalf("events x1: exit %d, output differs from the imported log:\n%s", code, out)
	}
	// inspect FILE is inspect < FILE.
	_, fromFile, _ := cli("", "inspect", file)
	_, fromStdin, _ := cli(log.String(), "inspect")
	if fromFile == "" || fromFile != fromStdin || !strings.HasPrefix(fromFile, `{"ok":true`) {
		t.Fatalf("inspect FILE %q != inspect < FILE %q", fromFile, fromStdin)
	}

	for _, c := range []struct {
		args  []string
		stdin string
		want  int
		says  string
	}{
		// usage errors
		{args: []string{"nosuch"}, want: 2},
		{args: []string{"events"}, want: 2},
		{args: []string{"events", "x1", "--bogus"}, want: 2},
		{args: []string{"messages", " "}, want: 2, says: "blank"},
		{args: []string{"fork"}, want: 2},
		{args: []string{"rm"}, want: 2},
		{args: []string{"status"}, want: 2},
		{args: []string{"import"}, want: 2},
		{args: []string{"import", file, "--session", ""}, want: 2},
		{args: []string{"inspect", "a", "b"}, want: 2},
		{args: []string{"rebuild"}, want: 2},
		{args: []string{"rebuild", "nounit"}, want: 2, says: "nounit"},
		{args: []string{"sessions", "--limit", "x"}, want: 2},
		{args: []string{"--timeout", "0s", "sessions"}, want: 2},
		{args: []string{"bench", "memory", "--events", "1"}, want: 2},
		{args: []string{"completion", "badshell"}, want: 2, says: `unknown shell "badshell": want one of bash, fish, powershell, zsh`},
		{args: []string{"completion"}, want: 2, says: "takes a shell"},
		// refusals and failures
		{args: []string{"events", "nosuch"}, want: 1, says: "not found"},
		{args: []string{"messages", "nosuch"}, want: 1},
		{args: []string{"events", "nosuch", "--follow"}, want: 1, says: "not found"}, // refused at once, not followed until it appears
		{args: []string{"messages", "nosuch", "--watch"}, want: 1, says: "not found"},
		{args: []string{"status", "nosuch"}, want: 1},
		{args: []string{"fork", "nosuch"}, want: 1, says: "SESSION_NOT_FOUND"},
		{args: []string{"fork", "x1", "--at", "100000"}, want: 1, says: `(fork of session "x1")`}, // INVALID_BOUNDARY: the reference's text does not name it
		{args: []string{"rm", "nosuch"}, want: 1, says: "not found"},
		{args: []string{"rebuild", "title", "--session", "nosuch"}, want: 1, says: `"nosuch" not found`},
		{args: []string{"import", file, "--session", "x1"}, want: 1, says: fmt.Sprintf(`publisher: create session "x1": session already exists: it holds %d events (last seq %d) (this log has %d); nothing was written. If an earlier import of it stopped part-way, `+"`agentlog rm x1`"+` then a new import replaces it`, len(events), len(events)-1, len(events))},
		{args: []string{"import", bad, "--session", "x2"}, want: 1, says: "seq"},
		{args: []string{"import", filepath.Join(t.TempDir(), "missing.jsonl")}, want: 1},
		{args: []string{"import", t.TempDir()}, want: 1, says: "is a directory: import takes one dsh JSONL file"},
		{args: []string{"inspect", filepath.Join(t.TempDir(), "missing.jsonl")}, want: 1},
		// ok
		{args: []string{"sessions"}, want: 0, says: ""},
		{args: []string{"status", "x1"}, want: 0},
		{args: []string{"messages", "x1"}, want: 0},
		{args: []string{"version"}, want: 0},
		{args: []string{"completion", "bash"}, want: 0},
		{args: []string{"completion", "zsh"}, want: 0},
		{args: []string{"completion", "fish"}, want: 0},
		{args: []string{"completion", "powershell"}, want: 0},
		{args: []string{"inspect"}, stdin: "", want: 0},
	} {
		code, _, errOut := cli(c.stdin, c.args...)
		if code != c.want || !strings.Contains(errOut, c.says) {
			t.Errorf("agentlog %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(c.args, " "), code, errOut, c.want, c.says)
		}
	}
	// Ill-formed UTF-8 becomes U+FFFD: a warning with the count and the first seq, and --json counts it.
	cut := strings.Join([]string{
		`{"type":"session","version":0,"id":"u8","createdAt":1785000000000}`,
		`{"type":"turn/start","seq":0,"time":1785000000001,"data":{"turn":1,"trigger":{"kind":"message"}}}`,
		"{\"type\":\"user/message\",\"seq\":1,\"time\":1785000000002,\"data\":{\"id\":\"m1\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"cut \xf0\x9f\x98\"},{\"type\":\"text\",\"text\":\"bad \xff\"}],\"source\":{\"kind\":\"user\"}},\"surfaceOp\":\"append\"}",
	}, "\n") + "\n"
	code, out, errOut = cli(cut, "import", "-", "--json")
	if code != 0 || !strings.Contains(errOut, `agentlog: warning: session "u8": ill-formed UTF-8 in 2 strings of event data became U+FFFD, the first at seq 1`) {
		t.Errorf("import of ill-formed UTF-8: exit %d, stderr %q", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &imp); err != nil || imp.RepairedStrings != 2 || imp.FirstRepairedSeq == nil || *imp.FirstRepairedSeq != 1 {
		t.Errorf("import --json of ill-formed UTF-8: %q (%v)", out, err)
	}
	// --from-seq past the end: refused, naming the session, N and the last seq, nothing printed.
	if code, out, errOut := cli("", "events", "x1", "--from-seq", "100000"); code != 1 || out != "" ||
		!strings.Contains(errOut, fmt.Sprintf(`session "x1": --from-seq 100000 is past the end of the log: its last seq is %d`, len(events)-1)) {
		t.Errorf("events x1 --from-seq 100000: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := cli("", "events", "x1", "--from-seq", strconv.Itoa(len(events)-1), "--no-header"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("events x1 --from-seq LAST: exit %d, stdout %q", code, out)
	}
	// rm of an unknown id names it once.
	if code, _, errOut := cli("", "rm", "nosuch"); code != 1 || strings.TrimSpace(errOut) != `agentlog: remove: session "nosuch" not found (nothing is stored under it)` {
		t.Errorf("rm nosuch: exit %d, stderr %q", code, errOut)
	}
	// A refused import wrote nothing.
	if code, _, _ := cli("", "events", "x2"); code != 1 {
		t.Errorf("a refused import left session x2 behind")
	}

	// rebuild and rm with --json.
	code, out, errOut = cli("", "rebuild", "title", "--session", "x1", "--json")
	var rb rebuildResult
	if code != 0 || json.Unmarshal([]byte(out), &rb) != nil || rb.Unit != "title" || rb.Sessions != 1 {
		t.Fatalf("rebuild --json: exit %d, %q, %s", code, out, errOut)
	}
	code, out, errOut = cli("", "rm", "x1", "--json")
	var rm struct {
		Session string `json:"session"`
		Events  int64  `json:"events"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rm) != nil || rm.Session != "x1" || rm.Events != int64(len(events)) {
		t.Fatalf("rm --json: exit %d, %q, %s", code, out, errOut)
	}
}
