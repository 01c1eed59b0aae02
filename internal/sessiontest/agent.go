package sessiontest

import (
	"encoding/json"
	"fmt"

	"github.com/agentlog/agentlog/session"
)

// AgentTurns returns at least n events of closed turns as an agent writes them: a user message, a step
// of streamed text ending in an assistant message with a tool call, the call and its result, and
// a second streamed step, about 40 events a turn.
func AgentTurns(n int) []session.Event {
	var evs []session.Event
	add := func(typ, data string) {
		seq := int64(len(evs))
		e := session.Event{Type: typ, Seq: seq, Time: json.Number(fmt.Sprint(1785000000000 + seq)), Data: json.RawMessage(data)}
		if session.SurfaceEligible(typ) {
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		evs = append(evs, e)
	}
	for turn := 1; len(evs) < n; turn++ {
		add("turn/start", fmt.Sprintf(`{"turn":%d}`, turn))
		add("user/message", fmt.Sprintf(`{"id":"u%d","role":"user","content":[{"type":"text","text":"Please look at file %d and fix the failing test in it."}],"source":{"kind":"user"}}`, turn, turn))
		for step := 1; step <= 2; step++ {
			add("step/start", fmt.Sprintf(`{"turn":%d,"step":%d}`, turn, step))
			for k := 0; k < 15; k++ {
				add("assistant/chunk", fmt.Sprintf(`{"turn":%d,"step":%d,"chunk":{"type":"text-delta","index":0,"text":"word%d "}}`, turn, step, k))
			}
			if step == 1 {
				add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":1,"message":{"id":"a%d","role":"assistant","content":[{"type":"text","text":"I will read the file first."},{"type":"tool-call","id":"c%d","name":"read","arguments":"{\"path\":\"f%d.go\"}"}],"source":{"kind":"model","provider":"p","model":"m"}}}`, turn, turn, turn, turn))
				add("tool/call", fmt.Sprintf(`{"turn":%d,"step":1,"callId":"c%d","name":"read","arguments":"{\"path\":\"f%d.go\"}"}`, turn, turn, turn))
				add("tool/result", fmt.Sprintf(`{"turn":%d,"step":1,"message":{"id":"r%d","role":"user","content":[{"type":"tool-result","toolCallId":"c%d","content":[{"type":"text","text":"package f\n\nfunc F() int { return %d }\n"}]}],"source":{"kind":"tool","callId":"c%d"}}}`, turn, turn, turn, turn, turn))
			} else {
				add("assistant/message", fmt.Sprintf(`{"turn":%d,"step":2,"message":{"id":"b%d","role":"assistant","content":[{"type":"text","text":"Fixed: F now returns the right value."}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":1200,"outputTokens":80,"cacheReadTokens":0,"cacheWriteTokens":0,"reasoningTokens":0}}`, turn, turn))
			}
			add("step/end", fmt.Sprintf(`{"turn":%d,"step":%d}`, turn, step))
		}
		add("turn/end", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, turn))
	}
	return evs
}
