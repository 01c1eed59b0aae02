package session

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const (
	recordedDir = "../../shared/data/dsh-sessions"
	examplesDir = "../../shared/data/examples"
)

// expectedPairs lists X.jsonl files with their X.expected.json in dir, skipping the test when the
// shared data is absent.
func expectedPairs(t *testing.T, dir string) []string {
	t.Helper()
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("shared data not available at %s (%v): the recorded sessions live beside the repository in ../shared", dir, err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if _, err := os.Stat(strings.TrimSuffix(n, ".jsonl") + ".expected.json"); err == nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Skipf("no X.jsonl with X.expected.json in %s", dir)
	}
	return out
}

// inspectAgainstOracle compares Inspect(allForks) with the oracle's output as JSON values: every
// field must be equal, except the error text of a refused log (ok and acceptedEvents must match;
// fork error texts must match exactly). It also reports whether the bytes are identical.
func inspectAgainstOracle(t *testing.T, path string) (identical bool) {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	wantRaw, err := os.ReadFile(strings.TrimSuffix(path, ".jsonl") + ".expected.json")
	if err != nil {
		t.Fatal(err)
	}
	res := Inspect(bytes.NewReader(in), true)
	gotRaw, err := res.MarshalJSON()
	if err != nil {
		t.Fatalf("%s: MarshalJSON: %v", path, err)
	}
	var got, want map[string]any
	if err := json.Unmarshal(gotRaw, &got); err != nil {
		t.Fatalf("%s: our output is not JSON: %v\n%s", path, err, gotRaw)
	}
	if err := json.Unmarshal(wantRaw, &want); err != nil {
		t.Fatalf("%s: expected output is not JSON: %v", path, err)
	}
	if want["ok"] == false {
		if got["ok"] != false {
			t.Errorf("%s: ok = %v, oracle refuses: %v", filepath.Base(path), got["ok"], want["error"])
			return false
		}
		if _, has := got["error"].(string); !has {
			t.Errorf("%s: refused without an error text", filepath.Base(path))
		}
		t.Logf("%s: refused as the oracle does; ours: %v; oracle: %v", filepath.Base(path), got["error"], want["error"])
		delete(got, "error")
		delete(want, "error")
	}
	for k := range want {
		if !reflect.DeepEqual(got[k], want[k]) {
			g, _ := json.Marshal(got[k])
			w, _ := json.Marshal(want[k])
			if len(g) > 600 {
				g = append(g[:600], "..."...)
			}
			if len(w) > 600 {
				w = append(w[:600], "..."...)
			}
			t.Errorf("%s: field %q differs\n got: %s\nwant: %s", filepath.Base(path), k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: extra field %q", filepath.Base(path), k)
		}
	}
	return bytes.Equal(append(gotRaw, '\n'), wantRaw)
}

func TestInspectRecordedSessions(t *testing.T) {
	paths := expectedPairs(t, recordedDir)
	identical := 0
	for _, p := range paths {
		if inspectAgainstOracle(t, p) {
			identical++
		}
	}
	t.Logf("compared %d recorded logs with the oracle's output; %d byte-identical", len(paths), identical)
}

func TestInspectForkExample(t *testing.T) {
	for _, p := range expectedPairs(t, examplesDir) {
		if !inspectAgainstOracle(t, p) {
			t.Errorf("%s: not byte-identical to the oracle's output", p)
		}
	}
}

// TestInspectOracleEdgeCases compares Inspect with the oracle on hand-made edge cases
// (testdata/oracle-edge: X.jsonl written by gen.py, X.expected.json written one file at a time by
// `node oracle.mjs --all-forks < X.jsonl > X.expected.json`; --dir leaks a mocked Date.now between
// files, see DEPARTURES.md).
func TestInspectOracleEdgeCases(t *testing.T) {
	paths, err := filepath.Glob("testdata/oracle-edge/*.jsonl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no edge cases found: %v", err)
	}
	// Known departures (DEPARTURES.md) would be listed here: file -> the rule we refuse with.
	departures := map[string]string{}
	identical := 0
	for _, p := range paths {
		if rule, ok := departures[filepath.Base(p)]; ok {
			in, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			res := Inspect(bytes.NewReader(in), true)
			if res.OK || !strings.Contains(res.Error, "[rule "+rule+"]") {
				t.Errorf("%s: want a refusal with rule %s, got ok=%v error=%q", p, rule, res.OK, res.Error)
			}
			continue
		}
		if inspectAgainstOracle(t, p) {
			identical++
		}
	}
	t.Logf("compared %d edge cases with the oracle's output; %d byte-identical", len(paths), identical)
}
