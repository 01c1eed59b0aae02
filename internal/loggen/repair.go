package loggen

import "fmt"

// closers ports the reference's interruptedTurnClosers for generated (well-formed) logs: the
// synthetic tool results (TOOL_NOT_STARTED / TOOL_OUTCOME_UNKNOWN) for calls left without a result,
// then step/end when a step is open, then turn/end {kind:"interrupted"}; seqs continue the log and
// times reuse the last event's time. The generator uses it to write logs that were resumed after a
// crash, as the reference harness writes them.
func closers(evs []Ev) []Ev {
	type pending struct {
		step    any
		callSeq int64
		started bool
	}
	var (
		openTurn any
		openStep any
		order    []string
		calls    = map[string]*pending{}
	)
	reset := func() { order, calls = nil, map[string]*pending{} }
	for _, e := range evs {
		d, _ := e.Data.(Obj)
		switch e.Type {
		case "turn/start":
			openTurn, openStep = mustGet(d, "turn"), nil
			reset()
		case "turn/end":
			openTurn, openStep = nil, nil
			reset()
		case "step/start":
			openStep = mustGet(d, "step")
		case "step/end":
			reset()
			openStep = nil
		case "assistant/message":
			msg, _ := mustGet(d, "message").(Obj)
			content, _ := mustGet(msg, "content").(Arr)
			for _, b := range content {
				bo, _ := b.(Obj)
				if mustGet(bo, "type") != "tool-call" {
					continue
				}
				id, _ := mustGet(bo, "id").(string)
				if _, ok := calls[id]; !ok {
					order = append(order, id) // Map.set keeps an existing key's position
				}
				calls[id] = &pending{step: mustGet(d, "step")}
			}
		case "tool/call":
			id, _ := mustGet(d, "callId").(string)
			if p, ok := calls[id]; ok {
				p.callSeq, p.started = e.Seq, true
			}
		case "tool/result":
			msg, _ := mustGet(d, "message").(Obj)
			src, _ := mustGet(msg, "source").(Obj)
			id, _ := mustGet(src, "callId").(string)
			if _, ok := calls[id]; ok {
				delete(calls, id)
				for i, x := range order {
					if x == id {
						order = append(order[:i:i], order[i+1:]...)
						break
					}
				}
			}
		}
	}
	if openTurn == nil || len(evs) == 0 {
		return nil
	}
	last := evs[len(evs)-1]
	seq, time := last.Seq+1, last.Time
	var out []Ev
	for _, id := range order {
		p := calls[id]
		text := "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
		errObj := Obj{{"name", "ToolNotStartedError"}, {"code", "TOOL_NOT_STARTED"}}
		if p.started {
			text = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly."
			errObj = Obj{{"name", "ToolOutcomeUnknownError"}, {"code", "TOOL_OUTCOME_UNKNOWN"}}
		}
		msg := Obj{
			{"id", fmt.Sprintf("interrupted-tool-result-%s-%d", id, seq)},
			{"role", "user"},
			{"source", Obj{{"kind", "tool"}, {"callId", id}}},
			{"content", Arr{Obj{{"type", "tool-result"}, {"toolCallId", id}, {"isError", true}, {"content", Arr{Obj{{"type", "text"}, {"text", text}}}}}}},
		}
		ev := Ev{Type: "tool/result", Seq: seq, Time: time, Data: Obj{{"turn", openTurn}, {"step", p.step}, {"message", msg}, {"error", errObj}}, SurfaceOp: "append"}
		if p.started {
			ev.Sources, ev.HasSources = []int64{p.callSeq}, true
		}
		out = append(out, ev)
		seq++
	}
	if openStep != nil {
		out = append(out, Ev{Type: "step/end", Seq: seq, Time: time, Data: Obj{{"turn", openTurn}, {"step", openStep}}})
		seq++
	}
	return append(out, Ev{Type: "turn/end", Seq: seq, Time: time, Data: Obj{{"turn", openTurn}, {"reason", Obj{{"kind", "interrupted"}}}}})
}

// foldNodes returns the current surface nodes after evs (a valid generated prefix).
func foldNodes(evs []Ev) []int64 {
	var nodes []int64
	for _, e := range evs {
		switch op := e.SurfaceOp.(type) {
		case string:
			nodes = append(nodes, e.Seq)
		case Obj:
			s, _ := mustGet(op, "start").(int64)
			t, _ := mustGet(op, "end").(int64)
			i, j := indexOf(nodes, s), indexOf(nodes, t)
			if i < 0 || j < i {
				continue
			}
			out := append(append([]int64{}, nodes[:i]...), e.Seq)
			nodes = append(out, nodes[j+1:]...)
		}
	}
	return nodes
}

func indexOf(xs []int64, x int64) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
