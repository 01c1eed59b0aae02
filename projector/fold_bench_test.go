package projector

import (
	"testing"

	"github.com/agentlog/agentlog/internal/loggen"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// benchRecords encodes sessions sessions of events ChunkTurn events (about size bytes) each, in
// records of batch events, as bench project writes them.
func benchRecords(b *testing.B, sessions, events, size, batch int) (hs []wire.Header, bodies [][]byte, n int) {
	b.Helper()
	for s := range sessions {
		evs, err := loggen.ChunkTurn(uint64(s), events, size, 1_700_000_000_000)
		if err != nil {
			b.Fatal(err)
		}
		for len(evs) > 0 {
			k := min(batch, len(evs))
			h, body, err := wire.EncodeRecord("bench-"+string(rune('a'+s%26))+string(rune('a'+s/26)), evs[:k])
			if err != nil {
				b.Fatal(err)
			}
			hs, bodies, n, evs = append(hs, h), append(bodies, body), n+k, evs[k:]
		}
	}
	return hs, bodies, n
}

// BenchmarkDecodeRecords is the decode-only reader of bench project (its decode_ratio's
// baseline) without the server: every record decoded (wire.DecodeRecord). ns/op is per event.
func BenchmarkDecodeRecords(b *testing.B) {
	hs, bodies, n := benchRecords(b, 8, 1000, 512, 10)
	b.SetBytes(int64(len(bodies[len(bodies)/2]) / 10))
	b.ResetTimer()
	for i := 0; i < b.N; {
		for r := range hs {
			evs, err := wire.DecodeRecord(hs[r], bodies[r])
			if err != nil {
				b.Fatal(err)
			}
			i += len(evs)
		}
	}
	_ = n
}

// BenchmarkFoldRecords is the projector's fold of the same records without the server: each
// record decoded as the partition worker decodes it and folded into every built-in unit (the
// states stay in memory; checkpoints are not written). ns/op is per event.
func BenchmarkFoldRecords(b *testing.B) {
	hs, bodies, _ := benchRecords(b, 8, 1000, 512, 10)
	reg, err := NewRegistry()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(bodies[len(bodies)/2]) / 10))
	b.ResetTimer()
	for i := 0; i < b.N; {
		states := map[string]*sessState{}
		for r := range hs {
			rec, err := wire.ScanRecord(hs[r], bodies[r])
			if err != nil {
				b.Fatal(err)
			}
			ss := states[rec.ID]
			if ss == nil {
				ss = newSessState(reg.list(), "", session.Header{ID: rec.ID})
				states[rec.ID] = ss
			}
			if err := ss.apply(rec.Events, &logLookup{id: rec.ID, batch: rec.Events}); err != nil {
				b.Fatal(err)
			}
			if ss.stopped() {
				b.Fatalf("stopped: %+v", ss.gate().err)
			}
			i += len(rec.Events)
		}
	}
}
