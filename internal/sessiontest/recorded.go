package sessiontest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// Recorded is one recorded session: its name (the file name without .jsonl), the path of its
// JSONL log and the path of the reference's output for it (X.expected.json).
type Recorded struct{ Name, Path, Expected string }

// RecordedLogs returns the recorded sessions (*.jsonl) in dir; it skips the test when there are
// none (the shared data sits beside the repository and is absent on a bare clone).
func RecordedLogs(t testing.TB, dir string) []Recorded {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Skipf("no recorded sessions at %s (the shared data sits beside the repository; absent on a bare clone)", dir)
	}
	out := make([]Recorded, len(files))
	for i, f := range files {
		base := strings.TrimSuffix(f, ".jsonl")
		out[i] = Recorded{Name: filepath.Base(base), Path: f, Expected: base + ".expected.json"}
	}
	return out
}

// ReadLog reads the JSONL log at path as session id; it fails the test when the log does not load.
func ReadLog(t testing.TB, path, id string) (*session.Header, []session.Event) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, events, err := session.ReadJSONL(f, id)
	if err != nil {
		t.Fatalf("%s: ReadJSONL: %v", filepath.Base(path), err)
	}
	return h, events
}
