package loggen

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/session"
)

// ChunkTurn returns the m events of one bench session (the benchmarks, the fault tests' writer
// process and tests that need many well-formed events): a closed turn of streamed assistant chunks
// (turn/start, step/start, assistant/chunk…, step/end, turn/end; only chunks when m < 4).
// Every assistant/chunk is padded so that its encoded JSON line is size bytes (when size leaves
// room for the envelope; the four turn/step events are ~60–90 bytes). The padding text is
// pseudo-random letters seeded by salt, so S2 compression sees realistic, not trivially
// repetitive, data. Times start at t0 (Unix ms) and advance 1 ms per event.
func ChunkTurn(salt uint64, m, size int, t0 int64) ([]session.Event, error) {
	evs := make([]session.Event, 0, m)
	x := salt*0x9E3779B97F4A7C15 + 1
	rnd := func() byte {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[x%63]
	}
	turn := m >= 4
	for seq := 0; seq < m; seq++ {
		ev := session.Event{Seq: int64(seq), Time: json.Number(strconv.FormatInt(t0+int64(seq), 10))}
		switch {
		case turn && seq == 0:
			ev.Type, ev.Data = "turn/start", json.RawMessage(`{"turn":1}`)
		case turn && seq == 1:
			ev.Type, ev.Data = "step/start", json.RawMessage(`{"turn":1,"step":1}`)
		case turn && seq == m-2:
			ev.Type, ev.Data = "step/end", json.RawMessage(`{"turn":1,"step":1}`)
		case turn && seq == m-1:
			ev.Type, ev.Data = "turn/end", json.RawMessage(`{"turn":1,"reason":{"kind":"completed"}}`)
		default:
			ev.Type = "assistant/chunk"
			prefix := `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"`
			const suffix = `"}}`
			ev.Data = json.RawMessage(prefix + suffix)
			line, err := json.Marshal(ev)
			if err != nil {
				return nil, fmt.Errorf("bench event seq %d: %w", seq, err)
			}
			pad := max(size-len(line), 1)
			text := make([]byte, 0, len(prefix)+pad+len(suffix))
			text = append(text, prefix...)
			for range pad {
				text = append(text, rnd())
			}
			text = append(text, suffix...)
			ev.Data = json.RawMessage(text)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
