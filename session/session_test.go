package session

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestSessionMatchesOracle loads every recorded log through the strict public path (ReadJSONL +
// Load) and compares nodes, replaceGeneration, messages, transcript, openTurn and repair with the
// oracle's output. The four logs the reference cannot derive are refused at their first
// underivable event (rule event-shape), never with a panic.
func TestSessionMatchesOracle(t *testing.T) {
	paths := expectedPairs(t, recordedDir)
	accepted, refused := 0, 0
	for _, p := range paths {
		raw, err := os.ReadFile(strings.TrimSuffix(p, ".jsonl") + ".expected.json")
		if err != nil {
			t.Fatal(err)
		}
		var want struct {
			OK                bool              `json:"ok"`
			AcceptedEvents    int               `json:"acceptedEvents"`
			Events            int               `json:"events"`
			Nodes             []int64           `json:"nodes"`
			ReplaceGeneration int64             `json:"replaceGeneration"`
			Messages          []json.RawMessage `json:"messages"`
			Transcript        []int64           `json:"transcript"`
			OpenTurn          *int64            `json:"openTurn"`
			Repair            []json.RawMessage `json:"repair"`
		}
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		h, evs := readLog(t, p)
		id := "session"
		if h != nil && h.ID != "" {
			id = h.ID
		}
		s, err := Load(id, evs)
		name := filepath.Base(p)
		if !want.OK {
			refused++
			var e *Error
			if !errors.As(err, &e) || e.Rule != RuleEventShape || e.Seq < 0 || e.Seq >= int64(want.AcceptedEvents) || e.Session != id {
				t.Errorf("%s: want an event-shape refusal, got %v", name, err)
				continue
			}
			if s.NextSeq() != e.Seq {
				t.Errorf("%s: Load kept %d events, refusal at seq %d", name, s.NextSeq(), e.Seq)
			}
			t.Logf("%s: %s", name, e.Error())
			continue
		}
		accepted++
		if err != nil {
			t.Errorf("%s: Load: %v", name, err)
			continue
		}
		sf := s.Surface()
		if int(s.NextSeq()) != want.Events || !reflect.DeepEqual(sf.Nodes, want.Nodes) || sf.ReplaceGeneration != want.ReplaceGeneration ||
			!reflect.DeepEqual(sf.Transcript, want.Transcript) || !reflect.DeepEqual(sf.OpenTurn, want.OpenTurn) {
			t.Errorf("%s: surface %+v, want nodes %v gen %d transcript %v open %v", name, sf, want.Nodes, want.ReplaceGeneration, want.Transcript, want.OpenTurn)
		}
		msgs := s.DeriveMessages()
		if len(msgs) != len(want.Messages) {
			t.Errorf("%s: %d messages, want %d", name, len(msgs), len(want.Messages))
			continue
		}
		for i := range msgs {
			if !jsonEqual(t, msgs[i], want.Messages[i]) {
				t.Errorf("%s: message %d differs", name, i)
			}
		}
		rep := s.Repair()
		if len(rep) != len(want.Repair) {
			t.Errorf("%s: %d closers, want %d", name, len(rep), len(want.Repair))
		}
	}
	t.Logf("%d recorded logs load and match the oracle; %d are refused with rule event-shape", accepted, refused)
}

// TestDeriveIncrementalEqualsScratch appends every recorded log event by event; after each append
// the cached Session.DeriveMessages must equal a from-scratch DeriveMessages over the surface.
func TestDeriveIncrementalEqualsScratch(t *testing.T) {
	paths := expectedPairs(t, recordedDir)
	checked := 0
	for _, p := range paths {
		h, evs := readLog(t, p)
		id := "session"
		if h != nil && h.ID != "" {
			id = h.ID
		}
		s := New(id)
		lookup := func(seq int64) (Event, error) {
			if seq < 0 || seq >= s.NextSeq() {
				return Event{}, errors.New("out of range")
			}
			return s.Events()[seq], nil
		}
		for _, ev := range evs {
			if err := s.Append(ev); err != nil {
				break // the older-format logs stop here
			}
			if !isSurfaceType(ev.Type) && ev.Seq != evs[len(evs)-1].Seq {
				continue // only surface events change the derivation
			}
			got := s.DeriveMessages()
			want, err := DeriveMessages(s.Surface().Nodes, lookup)
			if err != nil {
				t.Fatalf("%s: DeriveMessages: %v", filepath.Base(p), err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s after seq %d: cached derivation differs from scratch", filepath.Base(p), ev.Seq)
			}
			checked++
		}
	}
	// A replace rebuilds the cache: shadowed messages leave it.
	s := mustLoad(t, "r", []Event{
		mk(0, "user/message", userMsg("a", "one"), appendOp),
		mk(1, "user/message", userMsg("b", "two"), appendOp),
	})
	if len(s.DeriveMessages()) != 2 {
		t.Fatal("want 2 messages")
	}
	if err := s.Append(mk(2, "user/message", userMsg("c", "summary"), replaceOp(0, 1), src(`[0,1]`))); err != nil {
		t.Fatal(err)
	}
	if m := s.DeriveMessages(); len(m) != 1 || !strings.Contains(string(m[0]), "summary") {
		t.Fatalf("after replace: %s", m)
	}
	t.Logf("checked the cached derivation after %d appends", checked)
}

func TestDeriveMessagesErrors(t *testing.T) {
	evs := map[int64]Event{
		0: mk(0, "assistant/message", `{"turn":1,"step":1,"content":[]}`, appendOp),
		1: mk(1, "user/message", `{`, appendOp),
	}
	get := func(seq int64) (Event, error) {
		ev, ok := evs[seq]
		if !ok {
			return Event{}, errors.New("missing")
		}
		return ev, nil
	}
	for seq, rule := range map[int64]Rule{0: RuleEventShape, 1: RuleJSON, 7: RuleLookup} {
		_, err := DeriveMessages([]int64{seq}, get)
		wantRule(t, err, "", seq, rule)
	}
	if _, err := RepairChecked([]Event{evs[0]}); err == nil {
		t.Fatal("RepairChecked accepted an underivable assistant/message")
	}
	if Repair([]Event{evs[0]}) != nil {
		t.Fatal("Repair returned closers for an unreadable log")
	}
}

func TestLoadKeepsPrefix(t *testing.T) {
	s, err := Load("p", []Event{mk(0, "turn/start", `{"turn":1}`), mk(1, "turn/end", `{"turn":1}`), mk(3, "x", `{}`), mk(2, "x", `{}`)})
	wantRule(t, err, "p", 3, RuleSeqContiguous)
	if s.NextSeq() != 2 || s.ID() != "p" || len(s.Events()) != 2 {
		t.Fatalf("prefix %d", s.NextSeq())
	}
}

// BenchmarkLoadRecorded measures Load (strict validation, surface fold, derive cache, repair
// state) over the recorded logs the reference accepts.
func BenchmarkLoadRecorded(b *testing.B) {
	t := &testing.T{}
	paths := expectedPairs(t, recordedDir)
	var logs [][]Event
	n := 0
	for _, p := range paths {
		in, err := os.ReadFile(p)
		if err != nil {
			b.Skip(err)
		}
		_, evs, err := ReadJSONL(strings.NewReader(string(in)), "b")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Load("b", evs); err == nil {
			logs = append(logs, evs)
			n += len(evs)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, evs := range logs {
			if _, err := Load("b", evs); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
}
