package loggen

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// sameEvent reports how got differs from want ("" when equal): type, seq, time (as a number),
// data / surfaceOp / sourceEventSeqs (as JSON values), ignorable.
func sameEvent(want, got session.Event) string {
	switch {
	case want.Type != got.Type:
		return "type " + want.Type + " vs " + got.Type
	case want.Seq != got.Seq:
		return "seq"
	case want.Ignorable != got.Ignorable:
		return "ignorable"
	}
	if d := jsonDiff(string(want.Time), string(got.Time)); d != "" {
		return "time: " + d
	}
	for _, f := range []struct {
		name   string
		ra, rb json.RawMessage
	}{{"data", want.Data, got.Data}, {"surfaceOp", want.SurfaceOp, got.SurfaceOp}, {"sourceEventSeqs", want.SourceEventSeqs, got.SourceEventSeqs}} {
		if (len(f.ra) == 0) != (len(f.rb) == 0) {
			return f.name + " present on one side only"
		}
		if len(f.ra) == 0 {
			continue
		}
		if d := jsonDiff(string(f.ra), string(f.rb)); d != "" {
			return f.name + ": " + d
		}
	}
	return ""
}

// jsonDiff compares two JSON texts as values ("" when equal).
func jsonDiff(a, b string) string {
	wrap := func(s string) []byte { return []byte(`{"ok":true,"v":` + s + `}`) }
	diffs, err := CompareInspect(wrap(a), wrap(b), CompareOptions{})
	if err != nil {
		return err.Error()
	}
	if len(diffs) > 0 {
		return diffs[0].String()
	}
	return ""
}

// packedRows counts the packed chunk rows packChunkRuns would write for l's events.
func packedRows(l *Log) (rows, lines int) {
	for i := 0; i < len(l.Events); {
		if n := runLength(l.Events, i); n >= 3 {
			rows++
			lines++
			i += n
			continue
		}
		lines++
		i++
	}
	return rows, lines
}

// TestRoundTrip: generated log → session.ReadJSONL → WriteJSONL (plain and Pack) → ReadJSONL gives
// the same events (byte-identical raw fields after the first read), Pack writes one row per run of
// 3+ deltas, and Inspect of the re-written log equals Inspect of the original.
func TestRoundTrip(t *testing.T) {
	n := 300
	if testing.Short() || raceEnabled {
		n = 60
	}
	for i := 0; i < n; i++ {
		l := Generate(LogSeed(3, i))
		src := l.JSONL()
		h, evs, err := session.ReadJSONL(bytes.NewReader(src), "session")
		if err != nil {
			t.Fatalf("log seed %d: ReadJSONL: %v", l.Seed, err)
		}
		want := l.sessionEvents()
		if len(evs) != len(want) {
			t.Fatalf("log seed %d: ReadJSONL gave %d events, want %d", l.Seed, len(evs), len(want))
		}
		for k := range want {
			if d := sameEvent(want[k], evs[k]); d != "" {
				t.Fatalf("log seed %d: ReadJSONL event %d: %s", l.Seed, k, d)
			}
		}
		if (h == nil) != (l.Header == nil) {
			t.Fatalf("log seed %d: header read %v, generated %v", l.Seed, h != nil, l.Header != nil)
		}
		orig, panicked := inspectJSON(src)
		if panicked != "" {
			t.Fatalf("log seed %d: Inspect: %s", l.Seed, panicked)
		}
		for _, pack := range []bool{false, true} {
			var buf bytes.Buffer
			if err := session.WriteJSONL(&buf, h, evs, session.WriteOptions{Pack: pack}); err != nil {
				t.Fatalf("log seed %d: WriteJSONL(pack %v): %v", l.Seed, pack, err)
			}
			written := buf.Bytes()
			wantLines := len(evs)
			if pack {
				_, wantLines = packedRows(l)
			}
			if h != nil {
				wantLines++
			}
			if got := bytes.Count(written, []byte("\n")); got != wantLines {
				t.Errorf("log seed %d: WriteJSONL(pack %v) wrote %d lines, want %d", l.Seed, pack, got, wantLines)
			}
			h2, evs2, err := session.ReadJSONL(bytes.NewReader(written), "session")
			if err != nil {
				t.Fatalf("log seed %d: ReadJSONL of WriteJSONL(pack %v): %v", l.Seed, pack, err)
			}
			if (h2 == nil) != (h == nil) || (h != nil && (h2.ID != h.ID || jsonDiff(string(h.Raw), string(h2.Raw)) != "")) {
				t.Errorf("log seed %d: header changed in the round trip (pack %v)", l.Seed, pack)
			}
			if len(evs2) != len(evs) {
				t.Fatalf("log seed %d: round trip (pack %v) gave %d events, want %d", l.Seed, pack, len(evs2), len(evs))
			}
			for k := range evs {
				a, b := evs[k], evs2[k]
				if a.Type != b.Type || a.Seq != b.Seq || a.Time != b.Time || a.Ignorable != b.Ignorable ||
					!bytes.Equal(a.Data, b.Data) || !bytes.Equal(a.SurfaceOp, b.SurfaceOp) || !bytes.Equal(a.SourceEventSeqs, b.SourceEventSeqs) {
					t.Fatalf("log seed %d: round trip (pack %v) changed event %d:\n  %s\n  %s", l.Seed, pack, k, mustJSON(a), mustJSON(b))
				}
			}
			again, panicked := inspectJSON(written)
			if panicked != "" {
				t.Fatalf("log seed %d: Inspect of the re-written log: %s", l.Seed, panicked)
			}
			diffs, err := CompareInspect(orig, again, CompareOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Errorf("log seed %d: Inspect of the re-written log (pack %v) differs: %s", l.Seed, pack, d)
			}
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
