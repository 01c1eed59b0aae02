package main

import (
	"encoding/json"
	"fmt"

	"github.com/agentlog/agentlog/session"
)

// demoSessionID names the built-in scripted session.
const demoSessionID = "demo/agent-1"

// demoScriptStep is one event of the built-in scripted session, before seq and time are assigned.
type demoScriptStep struct {
	typ       string
	data      string
	surfaceOp string // "" (none), "append", or a replace object
	sources   string // sourceEventSeqs JSON, or ""
}

// demoScript is a realistic small agent session: three turns with steps, streamed text and
// tool-call chunks, tool calls and results, a title and a todo list, and a compaction that replaces
// turn 1's messages with a summary (surfaceOp replace). Seqs are implied by position; the comments
// give them.
func demoScript() []demoScriptStep {
	const model = `"source":{"kind":"model","provider":"demo","model":"demo-llm-1"}`
	return []demoScriptStep{
		{typ: "request/header", data: `{"header":{"config":{"provider":"demo","model":"demo-llm-1"},"system":"You are a careful coding agent."},"reason":"initial"}`}, // 0
		{typ: "turn/start", data: `{"turn":1}`}, // 1
		{typ: "user/message", surfaceOp: "append", data: `{"id":"u1","role":"user","content":[{"type":"text","text":"How many Go files are in this repo?"}],"source":{"kind":"user"}}`}, // 2
		{typ: "step/start", data: `{"turn":1,"step":1}`},                                                                                                                                    // 3
		{typ: "assistant/chunk", data: `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Let me "}}`},                                                                      // 4
		{typ: "assistant/chunk", data: `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"look at "}}`},                                                                     // 5
		{typ: "assistant/chunk", data: `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"the tree."}}`},                                                                    // 6
		{typ: "assistant/chunk", data: `{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"call-1","name":"shell","argumentsDelta":"{\"cmd\":"}}`},                        // 7
		{typ: "assistant/chunk", data: `{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"call-1","name":"shell","argumentsDelta":"\"find . -name '*.go' | wc -l\"}"}}`}, // 8
		{typ: "assistant/message", surfaceOp: "append", sources: `[4,5,6,7,8]`, data: `{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"Let me look at the tree."},{"type":"tool-call","id":"call-1","name":"shell","arguments":"{\"cmd\":\"find . -name '*.go' | wc -l\"}"}],` + model + `},"usage":{"inputTokens":812,"outputTokens":41}}`}, // 9
		{typ: "tool/call", data: `{"turn":1,"step":1,"callId":"call-1","name":"shell","arguments":"{\"cmd\":\"find . -name '*.go' | wc -l\"}"}`},                                                                                                                                // 10
		{typ: "tool/result", surfaceOp: "append", sources: `[10]`, data: `{"turn":1,"step":1,"message":{"id":"r1","role":"user","content":[{"type":"tool-result","toolCallId":"call-1","content":[{"type":"text","text":"42"}]}],"source":{"kind":"tool","callId":"call-1"}}}`}, // 11
		{typ: "step/end", data: `{"turn":1,"step":1}`},                                                                    // 12
		{typ: "step/start", data: `{"turn":1,"step":2}`},                                                                  // 13
		{typ: "assistant/chunk", data: `{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"There are "}}`}, // 14
		{typ: "assistant/chunk", data: `{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"42 Go "}}`},     // 15
		{typ: "assistant/chunk", data: `{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"files."}}`},     // 16
		{typ: "assistant/message", surfaceOp: "append", sources: `[14,15,16]`, data: `{"turn":1,"step":2,"message":{"id":"a2","role":"assistant","content":[{"type":"text","text":"There are 42 Go files."}],` + model + `},"usage":{"inputTokens":870,"outputTokens":9}}`}, // 17
		{typ: "step/end", data: `{"turn":1,"step":2}`},                                                 // 18
		{typ: "turn/end", data: `{"turn":1,"reason":{"kind":"completed"}}`},                            // 19
		{typ: "session/title", data: `{"title":"Counting Go files","messageSeqs":[2],"source":"llm"}`}, // 20
		{typ: "turn/start", data: `{"turn":2}`},                                                        // 21
		{typ: "user/message", surfaceOp: "append", data: `{"id":"u2","role":"user","content":[{"type":"text","text":"Plan a refactor of the largest one."}],"source":{"kind":"user"}}`}, // 22
		{typ: "step/start", data: `{"turn":2,"step":1}`}, // 23
		{typ: "todo/write", data: `{"todos":[{"content":"find the largest Go file","status":"in_progress"},{"content":"propose a split","status":"pending"}]}`},                                                          // 24
		{typ: "assistant/message", surfaceOp: "append", data: `{"turn":2,"step":1,"message":{"id":"a3","role":"assistant","content":[{"type":"text","text":"I'll start by finding the largest file."}],` + model + `}}`}, // 25
		{typ: "step/end", data: `{"turn":2,"step":1}`},                      // 26
		{typ: "turn/end", data: `{"turn":2,"reason":{"kind":"completed"}}`}, // 27
		{typ: "turn/start", data: `{"turn":3}`},                             // 28
		{typ: "compaction/start", data: `{"compactionId":"c1","turn":3}`},   // 29
		{typ: "compaction/summary", data: `{"compactionId":"c1","summary":"The user asked how many Go files there are; the agent ran find and answered 42.","shadowedRange":{"start":2,"end":17},"shadowedSeqs":[2,9,11,17],"shadowedTokenCount":1700,"provider":"demo","model":"demo-llm-1"}`}, // 30
		{typ: "user/message", surfaceOp: `{"op":"replace","start":2,"end":17}`, sources: `[2,9,11,17,30]`, data: `{"id":"s1","role":"user","content":[{"type":"text","text":"Summary of earlier conversation: the repo has 42 Go files."}],"source":{"kind":"plugin","plugin":"compaction"}}`},  // 31
		{typ: "compaction/end", data: `{"compactionId":"c1","turn":3}`},                                                                                       // 32
		{typ: "user/message", surfaceOp: "append", data: `{"id":"u3","role":"user","content":[{"type":"text","text":"Go ahead."}],"source":{"kind":"user"}}`}, // 33
		{typ: "step/start", data: `{"turn":3,"step":1}`},                                                                                                      // 34
		{typ: "assistant/message", surfaceOp: "append", data: `{"turn":3,"step":1,"message":{"id":"a4","role":"assistant","content":[{"type":"text","text":"Splitting publisher.go into window.go and write.go."}],` + model + `}}`}, // 35
		{typ: "step/end", data: `{"turn":3,"step":1}`},                      // 36
		{typ: "turn/end", data: `{"turn":3,"reason":{"kind":"completed"}}`}, // 37
	}
}

// demoEvents materialises the scripted session with seqs from 0 and times from startMs, 10 ms apart.
func demoEvents(startMs int64) ([]session.Event, error) {
	steps := demoScript()
	out := make([]session.Event, 0, len(steps))
	for i, st := range steps {
		ev := session.Event{
			Type: st.typ,
			Seq:  int64(i),
			Time: json.Number(fmt.Sprint(startMs + int64(i)*10)),
			Data: json.RawMessage(st.data),
		}
		switch {
		case st.surfaceOp == "append":
			ev.SurfaceOp = json.RawMessage(`"append"`)
		case st.surfaceOp != "":
			ev.SurfaceOp = json.RawMessage(st.surfaceOp)
		}
		if st.sources != "" {
			ev.SourceEventSeqs = json.RawMessage(st.sources)
		}
		if !json.Valid(ev.Data) {
			return nil, fmt.Errorf("demo script: event %d (%s) has invalid JSON data", i, st.typ)
		}
		out = append(out, ev)
	}
	return out, nil
}
