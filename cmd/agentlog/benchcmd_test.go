package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// jsonKeys returns the top-level keys of one JSON object, in order.
func jsonKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %q (%v)", line, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// optionalBenchFields are the omitempty fields of the bench reports.
var optionalBenchFields = map[string]bool{"rate_includes_start": true, "lag_first_error": true, "lag_first_write_error": true}

// TestBenchCommandsJSON runs `agentlog bench append`, `fork` and `project` small: each prints one
// JSON line with the fields (in the order) the commands printed when they lived in package main,
// and its text form prints the ratio; bad flags are usage errors.
func TestBenchCommandsJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, c := range []struct {
		args []string
		keys []string
	}{
		{[]string{"bench", "append", "--sessions", "4", "--events", "20"},
			[]string{"sessions", "events_per_session", "event_bytes", "window_ms", "sync_always", "gomaxprocs", "events_per_sec", "baseline_events_per_sec", "ratio", "flush_p50_ms", "flush_p99_ms", "flush_max_ms", "elapsed_ms", "baseline_elapsed_ms", "create_ms", "records", "events_per_record", "stored_bytes", "baseline_stored_bytes", "idle_heap_per_session_bytes", "peak_heap_per_session_bytes", "rounds_events_per_sec", "rounds_baseline_events_per_sec"}},
		{[]string{"bench", "fork", "--events", "200", "--rounds", "1"},
			[]string{"events", "source", "source_bytes", "source_records", "child_records", "gomaxprocs", "fork_ms", "baseline_ms", "ratio", "fork_cpu_ms", "baseline_cpu_ms", "cpu_ratio", "batch_baseline_ms", "batch_cost", "rounds_fork_ms", "rounds_baseline_ms", "fork_peak_rss_growth_bytes", "baseline_peak_rss_growth_bytes"}},
		{[]string{"bench", "project", "--sessions", "4", "--events", "20", "--partitions", "2", "--rounds", "1", "--lag-load", "0"},
			[]string{"sessions", "events", "records", "events_per_sec", "baseline_events_per_sec", "baseline_decode_events_per_sec", "ratio", "decode_ratio", "baseline_partitioned_events_per_sec", "partitioned_ratio", "fold_cpu_ns_per_event", "baseline_decode_cpu_ns_per_event", "decode_cpu_ratio", "fold_ms", "baseline_ms", "start_ms", "rounds", "rounds_events_per_sec", "rounds_baseline_events_per_sec", "lag_samples", "lag_failures", "lag_p50_ms", "lag_p99_ms", "lag_publisher_max_events_per_sec", "lag_load", "lag_append_events_per_sec", "lag_p999_ms", "lag_turn_p99_ms", "lag_write_failures", "lag_reconnects"}},
		{[]string{"bench", "turn", "--sessions", "3", "--for", "1s", "--max-for", "500ms", "--loads", "0.5", "--partitions", "2"},
			[]string{"sessions", "event_bytes", "partitions", "shared_conn", "gomaxprocs", "max_events_per_sec", "max_write_failures", "phases"}},
	} {
		var out, errb bytes.Buffer
		if code := run(ctx, append(c.args, "--json"), strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("agentlog %v --json: exit %d: %s", c.args, code, errb.String())
		}
		if n := strings.Count(out.String(), "\n"); n != 1 {
			t.Fatalf("agentlog %v --json: %d lines, want 1:\n%s", c.args, n, out.String())
		}
		// Fields marked omitempty (rate_includes_start: the fold was faster than its Start) come
		// and go with the timing; the test checks the fields always printed, in order.
		got := slices.DeleteFunc(jsonKeys(t, out.String()), func(k string) bool { return optionalBenchFields[k] })
		if !slices.Equal(got, c.keys) {
			t.Errorf("agentlog %v --json: fields\n %v\nwant\n %v", c.args, got, c.keys)
		}
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"bench", "fork", "--events", "200", "--rounds", "1"}, strings.NewReader(""), &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "  ratio:     ") || !strings.HasPrefix(out.String(), "agentlog bench fork: 200 events (chunks, ") {
		t.Errorf("agentlog bench fork: exit %d, stdout %q, stderr %s", code, out.String(), errb.String())
	}
	for _, args := range [][]string{{"bench"}, {"bench", "append", "--sessions", "0"}, {"bench", "fork", "--source", "nope"},
		{"bench", "project", "--lag-load", "2"}, {"bench", "turn", "--loads", "1.5"}, {"bench", "scale", "--sessions", "10"}, {"bench", "memory", "--events", "3"}} {
		var errb bytes.Buffer
		if code := run(ctx, args, strings.NewReader(""), io.Discard, &errb); code != 2 {
			t.Errorf("agentlog %v: exit %d, want 2 (usage); stderr %s", args, code, errb.String())
		}
	}
}
