package session

import (
	"path/filepath"
	"reflect"
	"testing"
)

// TestDecodeEventLineRecorded: every event of the recorded sessions, encoded as a record line,
// decodes back to itself with the shallow decoder.
func TestDecodeEventLineRecorded(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl"))
	if len(paths) == 0 {
		t.Skipf("no recorded sessions at %s (the shared data sits beside the repository)", recordedDir)
	}
	n := 0
	for _, p := range paths {
		_, evs := readLog(t, p)
		for i := range evs {
			line, err := evs[i].AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeEventLine(line, "x")
			if err != nil {
				t.Fatalf("%s seq %d: %v", filepath.Base(p), evs[i].Seq, err)
			}
			if !reflect.DeepEqual(got, evs[i]) {
				t.Fatalf("%s seq %d: decoded %+v, want %+v", filepath.Base(p), evs[i].Seq, got, evs[i])
			}
			n++
		}
	}
	t.Logf("%d events round-trip through AppendJSON and DecodeEventLine", n)
}
