package loggen

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
)

// TestDeriveIncremental: after every Session.Append of a generated log (compaction replaces and
// tool-result prunes included), the cached DeriveMessages equals a from-scratch
// session.DeriveMessages(surface.Nodes, ...).
func TestDeriveIncremental(t *testing.T) {
	n := 150
	if testing.Short() || raceEnabled {
		n = 30
	}
	replaces := 0
	for i := 0; i < n; i++ {
		l := Generate(LogSeed(4, i))
		s := session.New("derive")
		for k, ev := range l.sessionEvents() {
			if err := s.Append(ev); err != nil {
				t.Fatalf("log seed %d: Append seq %d: %v", l.Seed, k, err)
			}
			cached := s.DeriveMessages()
			surf := s.Surface()
			events := s.Events()
			fresh, err := session.DeriveMessages(surf.Nodes, func(seq int64) (session.Event, error) {
				if seq < 0 || seq >= int64(len(events)) {
					return session.Event{}, fmt.Errorf("no event %d", seq)
				}
				return events[seq], nil
			})
			if err != nil {
				t.Fatalf("log seed %d after seq %d: DeriveMessages: %v", l.Seed, k, err)
			}
			if len(cached) != len(fresh) {
				t.Fatalf("log seed %d after seq %d: cached DeriveMessages has %d messages, from scratch %d", l.Seed, k, len(cached), len(fresh))
			}
			for m := range fresh {
				if d := jsonDiff(string(fresh[m]), string(cached[m])); d != "" {
					t.Fatalf("log seed %d after seq %d: message %d differs: %s", l.Seed, k, m, d)
				}
			}
		}
		replaces += int(s.Surface().ReplaceGeneration)
	}
	if replaces == 0 {
		t.Fatal("the generated logs had no replace: the cache rebuild path was not exercised")
	}
}

var (
	longOnce sync.Map // size → []session.Event
)

// longSession returns a well-formed session of at least size events with a growing surface
// (no replaces), from concatenated steady generated logs renumbered into one session.
func longSession(size int) []session.Event {
	if v, ok := longOnce.Load(size); ok {
		return v.([]session.Event)
	}
	var out []session.Event
	for i := 0; len(out) < size; i++ {
		l := GenerateWith(LogSeed(5, i), Options{MaxTurns: 50, MaxEvents: 5000, Steady: true, NoReplace: true})
		base := int64(len(out))
		for _, e := range l.Events {
			e.Seq += base
			// re-number surface sources to the concatenated seqs
			for j := range e.Sources {
				e.Sources[j] += base
			}
			out = append(out, e.event())
		}
	}
	longOnce.Store(size, out)
	return out
}

// BenchmarkDeriveAfterAppend measures one Session.Append plus DeriveMessages on a session that
// already holds 1,000 or 100,000 events (a growing surface, no replaces). The per-op cost should
// stay flat: compare ns/op of the two sizes.
func BenchmarkDeriveAfterAppend(b *testing.B) { benchAppend(b, true) }

// BenchmarkAppend is BenchmarkDeriveAfterAppend without DeriveMessages: it separates the cost of
// the append path from the cost of the derived-message snapshot.
func BenchmarkAppend(b *testing.B) { benchAppend(b, false) }

// BenchmarkDeriveFlatness runs BenchmarkDeriveAfterAppend's loop at 1,000 and at 100,000 events
// in the same run (7 interleaved rounds of 20,000 appends each) and reports the medians and the
// ratio of their per-append costs (issue 3: at most 1.2):
//
//	go test -run '^$' -bench DeriveFlatness ./internal/loggen
func BenchmarkDeriveFlatness(b *testing.B) {
	const appends, rounds = 20_000, 7
	evSmall, evLarge := longSession(1_000+appends), longSession(100_000+appends)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Interleaved rounds, medians: this shared machine's noise hits both sizes alike.
		var small, large []time.Duration
		for r := 0; r < rounds; r++ {
			small = append(small, appendCost(b, evSmall, 1_000, appends))
			large = append(large, appendCost(b, evLarge, 100_000, appends))
		}
		slices.Sort(small)
		slices.Sort(large)
		ms, ml := small[rounds/2], large[rounds/2]
		b.ReportMetric(float64(ms.Nanoseconds())/appends, "ns/append@1k")
		b.ReportMetric(float64(ml.Nanoseconds())/appends, "ns/append@100k")
		b.ReportMetric(float64(ml)/float64(ms), "ratio_100k/1k")
	}
}

// appendCost loads evs[:size], then times n appends each followed by DeriveMessages.
func appendCost(b *testing.B, evs []session.Event, size, n int) time.Duration {
	s, err := session.Load("bench", evs[:size])
	if err != nil {
		b.Fatal(err)
	}
	s.DeriveMessages()
	start := time.Now()
	for _, ev := range evs[size : size+n] {
		if err := s.Append(ev); err != nil {
			b.Fatal(err)
		}
		_ = s.DeriveMessages()
	}
	return time.Since(start)
}

func benchAppend(b *testing.B, derive bool) {
	for _, size := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("events=%d", size), func(b *testing.B) { benchAppendSize(b, size, derive) })
	}
}

// benchAppendSize appends one event (and derives, with derive) per op to a session holding size events.
func benchAppendSize(b *testing.B, size int, derive bool) {
	{
		{
			// Append at most size/10 events before reloading, so the session stays near size.
			extra := max(100, size/10)
			evs := longSession(size + extra)
			var s *session.Session
			next := 0
			reset := func() {
				b.StopTimer()
				var err error
				if s, err = session.Load("bench", evs[:size]); err != nil {
					b.Fatal(err)
				}
				s.DeriveMessages()
				next = size
				b.StartTimer()
			}
			reset()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if next == size+extra {
					reset()
				}
				if err := s.Append(evs[next]); err != nil {
					b.Fatal(err)
				}
				next++
				if derive {
					_ = s.DeriveMessages()
				}
			}
		}
	}
}

// TestLongSessionValid checks the benchmark's input: the concatenated session loads without a
// refusal and its JSONL is accepted by Inspect.
func TestLongSessionValid(t *testing.T) {
	evs := longSession(3000)
	s, err := session.Load("long", evs)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := s.NextSeq(); got != int64(len(evs)) {
		t.Fatalf("NextSeq %d, want %d", got, len(evs))
	}
	var buf bytes.Buffer
	if err := session.WriteJSONL(&buf, nil, evs, session.WriteOptions{Pack: true}); err != nil {
		t.Fatal(err)
	}
	if res := session.Inspect(&buf, false); !res.OK {
		t.Fatalf("Inspect refused the long session: %s", res.Error)
	}
}
