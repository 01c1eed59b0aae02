package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

const sharedData = "../../../shared/data"

// decodeJSON decodes a JSON text into generic values, failing the test on error.
func decodeJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// TestInspectAllForksMatchesReference runs `agentlog inspect --all-forks` on every recorded log and
// compares its output with the reference's X.expected.json in every field. The text of a refused
// log's `error` may differ (ours names the seq and the rule); fork error texts may not.
func TestInspectAllForksMatchesReference(t *testing.T) {
	logs, _ := filepath.Glob(filepath.Join(sharedData, "dsh-sessions", "*.jsonl"))
	logs = append(logs, filepath.Join(sharedData, "examples", "fork-parent.jsonl"))
	if _, err := os.Stat(logs[len(logs)-1]); err != nil || len(logs) < 2 {
		t.Skipf("recorded sessions absent at %s (the shared data sits beside the repository)", sharedData)
	}
	for _, path := range logs {
		name := strings.TrimSuffix(filepath.Base(path), ".jsonl")
		t.Run(name, func(t *testing.T) {
			in, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			var out, errb bytes.Buffer
			code := run(context.Background(), []string{"inspect", "--all-forks"}, in, &out, &errb)
			wantB, err := os.ReadFile(strings.TrimSuffix(path, ".jsonl") + ".expected.json")
			if err != nil {
				t.Fatal(err)
			}
			got, want := decodeJSON(t, out.Bytes()), decodeJSON(t, wantB)
			// The exit status says whether the log is accepted (the oracle exits 0 either way).
			if wantCode := map[bool]int{true: 0, false: 1}[want["ok"] == true]; code != wantCode {
				t.Fatalf("inspect exit %d, want %d (ok %v): %s", code, wantCode, want["ok"], errb.String())
			}
			if want["ok"] == false {
				if got["ok"] != false {
					t.Fatalf("reference refuses this log (%v); we accept it", want["error"])
				}
				if e, _ := got["error"].(string); !strings.Contains(e, "seq") {
					t.Errorf("our refusal does not name the seq: %q", e)
				}
				delete(got, "error")
				delete(want, "error")
			}
			for k := range want {
				if !reflect.DeepEqual(got[k], want[k]) {
					g, _ := json.Marshal(got[k])
					w, _ := json.Marshal(want[k])
					t.Errorf("field %q differs:\n got  %.1500s\n want %.1500s", k, g, w)
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("extra field %q", k)
				}
			}
		})
	}
}

// TestDemoScriptIsAValidSession checks the built-in demo session against our validator, and against
// the reference oracle when it is installed (ORACLE_DIR, default /tmp/oracle, with node on PATH).
func TestDemoScriptIsAValidSession(t *testing.T) {
	events, err := demoEvents(1785000000000)
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.Load(demoSessionID, events)
	if err != nil {
		t.Fatalf("demo script refused: %v", err)
	}
	if got := len(s.DeriveMessages()); got != 5 {
		t.Errorf("demo derives %d messages, want 5 (summary, u2, a3, u3, a4)", got)
	}
	if s.Surface().ReplaceGeneration != 1 {
		t.Errorf("demo replaceGeneration = %d, want 1", s.Surface().ReplaceGeneration)
	}
	good, bad := demoForkBoundaries(events)
	if good != 27 || bad != 30 {
		t.Errorf("demo fork boundaries = %d, %d; want 27 (turn/end 2), 30 (inside turn 3)", good, bad)
	}
	var buf bytes.Buffer
	if err := session.WriteJSONL(&buf, &session.Header{Version: 0, ID: demoSessionID, CreatedAt: 1785000000000}, events, session.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	oracleDir := os.Getenv("ORACLE_DIR")
	if oracleDir == "" {
		oracleDir = "/tmp/oracle"
	}
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(oracleDir, "node_modules", "@deepseek-ai", "dsh-session")); err != nil || serr != nil {
		t.Skipf("reference oracle not installed in %s (see ../shared/conformance/README.md); checked against our validator only", oracleDir)
	}
	cmd := exec.Command(node, filepath.Join(oracleDir, "oracle.mjs"), "--all-forks")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	ref, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"inspect", "--all-forks"}, bytes.NewReader(buf.Bytes()), &out, &errb); code != 0 {
		t.Fatalf("inspect: %s", errb.String())
	}
	got, want := decodeJSON(t, out.Bytes()), decodeJSON(t, ref)
	if want["ok"] != true {
		t.Fatalf("the reference refuses the demo script: %v", want["error"])
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("inspect of the demo differs from the reference:\n got  %s\n want %s", out.Bytes(), ref)
	}
}
