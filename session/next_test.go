package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestForkBoundariesMatchForkSeed: on every recorded session and a few small logs, a seq is in a
// range BoundaryScan lists exactly when ForkSeed accepts a fork there, and each range starts at a
// turn/end (or is the head before the first turn) whose turn's first user message it names.
func TestForkBoundariesMatchForkSeed(t *testing.T) {
	logs := map[string][]Event{
		"empty":     nil,
		"open only": {mk(0, "turn/start", `{"turn":1}`), mk(1, "user/message", userMsg("u", "hi"), appendOp)},
		"head then turn": {mk(0, "request/header", `{}`), mk(1, "turn/start", `{"turn":1}`), mk(2, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
			mk(3, "session/end-seed", `{}`)},
	}
	paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl"))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		_, evs, err := ReadJSONL(f, "s")
		f.Close()
		if err == nil {
			logs[filepath.Base(p)] = evs
		}
	}
	if len(paths) == 0 {
		t.Logf("recorded sessions absent at %s: only the small logs are checked", recordedDir)
	}
	for name, evs := range logs {
		bs := ForkBoundaries(evs)
		valid := map[int64]bool{}
		for i, b := range bs {
			if b.Through < b.Seq || (i > 0 && b.Seq <= bs[i-1].Through) {
				t.Fatalf("%s: ranges out of order: %+v", name, bs)
			}
			if b.Turn != 0 && evs[b.Seq].Type != "turn/end" {
				t.Fatalf("%s: range %+v does not start at a turn/end", name, b)
			}
			if b.UserSeq >= 0 && (evs[b.UserSeq].Type != "user/message" || !strings.HasPrefix(MessageText(evs[b.UserSeq].Data), strings.TrimSuffix(b.UserText, "…"))) {
				t.Fatalf("%s: range %+v: user message %d does not match", name, b, b.UserSeq)
			}
			for q := b.Seq; q <= b.Through; q++ {
				valid[q] = true
			}
		}
		for q := range int64(len(evs)) {
			_, ferr := ForkSeed("s", evs, &q)
			if ok := ferr == nil || ferr.Code == ""; ok != valid[q] {
				t.Fatalf("%s: seq %d: ForkSeed %v, listed %v", name, q, ferr, valid[q])
			}
		}
	}
	if bs := ForkBoundaries(logs["head then turn"]); len(bs) != 2 || bs[0] != (ForkBoundary{Seq: 0, Through: 0, Time: 1000, UserSeq: -1}) || bs[1].Seq != 2 || bs[1].Through != 3 || bs[1].Turn != 1 || bs[1].Reason != "completed" {
		t.Fatalf("head then turn: %+v", bs)
	}
}

// TestDecodeNextEvent: seq and time may be left out (the next seq, the given time), a seq other
// than the next is refused seq-contiguous, and a header or a time that is not a number is refused.
func TestDecodeNextEvent(t *testing.T) {
	e, err := DecodeNextEvent([]byte(` {"type":"turn/start","data":{"turn":2}} `), "s", 7, 1234)
	if err != nil || e.Seq != 7 || e.Time != "1234" || string(e.Data) != `{"turn":2}` {
		t.Fatalf("without seq and time: %+v %v", e, err)
	}
	if e, err := DecodeNextEvent([]byte(`{"seq":7,"time":99,"type":"x","data":1,"ignorable":true}`), "s", 7, 1234); err != nil || e.Time != "99" || !e.Ignorable {
		t.Fatalf("with seq and time: %+v %v", e, err)
	}
	if e, err := DecodeNextEvent([]byte(`{}`), "s", 0, 1); err == nil || !strings.Contains(err.Error(), "[rule envelope]") {
		t.Fatalf("{}: %+v %v", e, err)
	}
	for line, rule := range map[string]Rule{
		`{"type":"x","seq":6,"data":{}}`:          RuleSeqContiguous,
		`{"type":"x","time":"soon","data":{}}`:    RuleEnvelopeTime,
		`{"type":"session","version":0,"id":"s"}`: RuleRecord,
		`{"type":"x"}`: RuleData,
		`not json`:     RuleJSON,
		`{"type":"text-chunks","seq0":7,"time0":1,"data":{}}`: RuleRecord,
	} {
		_, err := DecodeNextEvent([]byte(line), "s", 7, 1)
		var se *Error
		if !errors.As(err, &se) || se.Rule != rule || se.Session != "s" {
			t.Errorf("%s: %v, want rule %s naming the session", line, err, rule)
		}
	}
}

// TestContinuation: the events a resume appends are the crash-repair closers then an end-seed,
// no end-seed after one, and nothing to repair in a closed log but the end-seed.
func TestContinuation(t *testing.T) {
	open := []Event{mk(0, "turn/start", `{"turn":1}`), mk(1, "step/start", `{"turn":1,"step":1}`)}
	s, err := Load("s", open)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Continuation(5)
	if len(c) != 3 || c[0].Type != "step/end" || c[1].Type != "turn/end" || c[2].Type != "session/end-seed" || c[2].Seq != 4 || c[2].Time != "5" || c[0].Seq != 2 {
		t.Fatalf("continuation of an open turn: %+v", c)
	}
	for _, e := range c {
		if err := s.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	if c := s.Continuation(6); len(c) != 0 {
		t.Fatalf("continuation after an end-seed: %+v", c)
	}
	empty, _ := Load("e", nil)
	if c := empty.Continuation(1); len(c) != 1 || c[0].Seq != 0 {
		t.Fatalf("continuation of an empty log: %+v", c)
	}
}

// TestCwdRestorable follows dsh's rule (node:path isAbsolute on POSIX).
func TestCwdRestorable(t *testing.T) {
	for cwd, want := range map[string]bool{"": true, "/srv/x": true, "{{cwd}}/workspace": false, "rel": false, "./x": false} {
		if CwdRestorable(cwd) != want {
			t.Errorf("CwdRestorable(%q) = %v", cwd, !want)
		}
	}
}
