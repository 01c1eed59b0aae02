package loggen

import (
	"fmt"
	"strings"
)

// Faults in the data of core events: message shapes, turn/step/call ids, request/header.

// legacyHeader writes a legacy request/header-delta, or a request/header with reason "fallback".
func (c *ctx) legacyHeader() bool {
	v := c.variant("header-delta-type", "header-delta-event", "fallback-reason")
	var i int
	switch v {
	case "header-delta-type", "fallback-reason":
		i = c.pickType("request/header")
		if i < 0 {
			return false
		}
		if v == "fallback-reason" {
			c.log.Events[i].Data.(Obj).Set("reason", "fallback")
		} else {
			c.log.Events[i].Type = "request/header-delta"
		}
	default:
		i = c.pick(func(_ int, e Ev) bool { return !isSurface(e) })
		if i < 0 {
			return false
		}
		c.log.Events[i].Type = "request/header-delta"
		c.log.Events[i].Data = Obj{{"delta", Obj{{"system", "x"}}}, {"reason", "change"}}
	}
	c.refuse(i)
	return true
}

// messageShape writes message shapes that append accepts and a fork's seed check refuses.
func (c *ctx) messageShape() bool {
	i := c.pickSurface()
	if i < 0 {
		return false
	}
	e := &c.log.Events[i]
	data := e.Data.(Obj)
	msg := data
	if e.Type != "user/message" {
		msg = mustGet(data, "message").(Obj)
	}
	switch c.variant("content-empty-string", "content-object", "content-null-block", "tool-call-without-id", "no-id", "empty-id", "id-number", "wrong-role", "no-source", "source-kind-empty", "content-string", "model-source-kind", "provider-empty", "tool-call-id-mismatch", "tool-two-blocks", "tool-block-content-string", "tool-callid-empty") {
	case "content-empty-string", "content-object", "content-null-block", "tool-call-without-id":
		if e.Type != "assistant/message" {
			return false
		}
		switch c.f.Variant {
		case "content-empty-string":
			msg.Set("content", "") // "".length === 0: derives no message
			c.accept(i)
		case "content-object":
			msg.Set("content", Obj{}) // derives; the crash-repair scan cannot iterate it
			c.unknown(i)
		case "content-null-block":
			// the crash-repair scan reads block.type of every assistant/message block
			msg.Set("content", append(Arr{nil}, mustGet(msg, "content").(Arr)...))
			c.refuseAll(i)
		default:
			found := false
			content := mustGet(msg, "content").(Arr)
			for k, b := range content {
				if bo := b.(Obj); mustGet(bo, "type") == "tool-call" {
					content[k] = bo.Del("id")
					found = true
					break
				}
			}
			if !found {
				return false
			}
			c.accept(i)
		}
		e.Data = data.Set("message", msg)
		return true
	case "id-number":
		msg.Set("id", int64(1))
	case "provider-empty":
		if e.Type != "assistant/message" {
			return false
		}
		msg.Set("source", Obj{{"kind", "model"}, {"provider", ""}, {"model", "m"}})
	case "tool-two-blocks":
		if e.Type != "tool/result" {
			return false
		}
		msg.Set("content", append(mustGet(msg, "content").(Arr), Obj{{"type", "text"}, {"text", "x"}}))
	case "tool-block-content-string":
		if e.Type != "tool/result" {
			return false
		}
		mustGet(msg, "content").(Arr)[0].(Obj).Set("content", "plain")
	case "tool-callid-empty":
		if e.Type != "tool/result" {
			return false
		}
		msg.Set("source", Obj{{"kind", "tool"}, {"callId", ""}})
	case "no-id":
		msg = msg.Del("id")
	case "empty-id":
		msg.Set("id", "")
	case "wrong-role":
		msg.Set("role", "system")
	case "no-source":
		msg = msg.Del("source")
	case "source-kind-empty":
		msg.Set("source", Obj{{"kind", ""}})
	case "content-string":
		msg.Set("content", "text")
	case "model-source-kind":
		if e.Type != "assistant/message" {
			return false
		}
		msg.Set("source", Obj{{"kind", "user"}})
	default:
		if e.Type != "tool/result" {
			return false
		}
		mustGet(msg, "content").(Arr)[0].(Obj).Set("toolCallId", "other")
	}
	if e.Type == "user/message" {
		e.Data = msg
	} else {
		e.Data = data.Set("message", msg)
	}
	if e.Type == "tool/result" || (e.Type == "assistant/message" && c.f.Variant == "content-string") {
		// a later prune of this tool/result, or the crash-repair scan, may trip over it
		c.unknown(i)
		return true
	}
	c.accept(i)
	return true
}

// legacyShape writes an assistant/message or tool/result without data.message (or its content).
func (c *ctx) legacyShape() bool {
	i := c.pick(func(_ int, e Ev) bool { return e.Type == "assistant/message" || e.Type == "tool/result" })
	if i < 0 {
		return false
	}
	e := &c.log.Events[i]
	switch c.variant("no-message", "message-null", "content-missing") {
	case "no-message":
		e.Data = e.Data.(Obj).Del("message")
	case "message-null":
		e.Data = e.Data.(Obj).Set("message", nil)
	default:
		msg := mustGet(e.Data.(Obj), "message").(Obj)
		e.Data = e.Data.(Obj).Set("message", msg.Del("content"))
	}
	c.unknown(i)
	return true
}

// turnOdd writes turn and step numbers and call ids of unexpected types.
func (c *ctx) turnOdd() bool {
	// Turn, step and call-id values of other JSON types: they show in openTurn, in the fork
	// texts ("open turn <String(turn)>") and in the crash-repair closers (message id
	// "interrupted-tool-result-<String(callId)>-<seq>"; pending calls are a Map keyed by
	// SameValueZero, objects by identity).
	v := c.variant("turn-missing", "turn-string", "turn-null", "turn-fraction", "turn-negative",
		"turn-object", "turn-array", "turn-nested-array", "turn-bool", "turn-tiny", "turn-exp", "turn-neg-fraction",
		"step-missing", "step-string", "step-null", "step-object",
		"call-id-number", "call-id-number-started", "call-id-string-vs-number", "call-id-object", "call-id-null", "call-id-float", "call-id-array", "call-id-big")
	// Prefer the last turn: its values show in openTurn, the fork texts and the repair.
	lastStart := 0
	for i, e := range c.log.Events {
		if e.Type == "turn/start" {
			lastStart = i
		}
	}
	pred := map[string]func(int, Ev) bool{
		"turn": func(_ int, e Ev) bool { return e.Type == "turn/start" },
		"step": func(_ int, e Ev) bool { return e.Type == "step/start" },
		"call": func(_ int, e Ev) bool {
			return e.Type == "assistant/message" && strings.Contains(string(JSON(e.Data)), `"tool-call"`)
		},
	}[strings.SplitN(v, "-", 2)[0]]
	i := c.pick(func(i int, e Ev) bool { return i >= lastStart && pred(i, e) })
	if i < 0 {
		if i = c.pick(pred); i < 0 {
			return false
		}
	}
	d := c.log.Events[i].Data.(Obj)
	turnVals := map[string]any{
		"turn-null": nil, "turn-fraction": Raw("1.5"), "turn-negative": int64(-1), "turn-object": Obj{{"n", int64(1)}},
		"turn-array": Arr{int64(1), int64(2)}, "turn-nested-array": Arr{Arr{int64(1), Arr{"a", nil}}, Arr{}}, "turn-bool": true,
		"turn-tiny": Raw("1e-7"), "turn-exp": Raw("123e-20"), "turn-neg-fraction": Raw("-0.5"),
	}
	switch v {
	case "turn-missing":
		c.log.Events[i].Data = d.Del("turn")
	case "turn-string":
		d.Set("turn", fmt.Sprint(mustGet(d, "turn")))
	case "step-missing":
		c.log.Events[i].Data = d.Del("step")
	case "step-string":
		d.Set("step", fmt.Sprint(mustGet(d, "step")))
	case "step-null":
		d.Set("step", nil)
	case "step-object":
		d.Set("step", Obj{})
	default:
		if tv, ok := turnVals[v]; ok {
			d.Set("turn", tv)
			break
		}
		ids := map[string]any{
			"call-id-number": int64(7), "call-id-number-started": int64(7), "call-id-string-vs-number": int64(7),
			"call-id-object": Obj{}, "call-id-null": nil, "call-id-float": Raw("1.5"),
			"call-id-array": Arr{"a", int64(1)}, "call-id-big": Raw("1e21"),
		}
		var old string
		for _, b := range mustGet(mustGet(d, "message").(Obj), "content").(Arr) {
			if bo := b.(Obj); mustGet(bo, "type") == "tool-call" {
				old, _ = mustGet(bo, "id").(string)
				bo.Set("id", ids[v])
				break
			}
		}
		// make the matching tool/call carry the number 7 (matches) or "7" (does not)
		if v == "call-id-number-started" || v == "call-id-string-vs-number" {
			j := c.pick(func(j int, e Ev) bool {
				return j > i && e.Type == "tool/call" && mustGet(e.Data.(Obj), "callId") == old
			})
			if j < 0 {
				return false
			}
			if v == "call-id-number-started" {
				c.log.Events[j].Data.(Obj).Set("callId", int64(7))
			} else {
				c.log.Events[j].Data.(Obj).Set("callId", "7")
			}
		}
	}
	c.accept(i)
	return true
}

// coreDataOdd writes null or odd data on a core event.
func (c *ctx) coreDataOdd() bool {
	// data of a core event that the reference reads only when deriving, folding the open
	// turn or scanning for crash repair.
	v := c.variant("turn-start-null", "step-start-null", "tool-call-null", "turn-end-null", "step-end-null", "chunk-null", "tool-call-empty",
		"user-data-null", "user-data-zero", "user-data-empty-string", "user-data-false", "user-data-string", "user-data-array")
	typ := map[string]string{
		"turn-start-null": "turn/start", "step-start-null": "step/start", "tool-call-null": "tool/call", "turn-end-null": "turn/end",
		"step-end-null": "step/end", "chunk-null": "assistant/chunk", "tool-call-empty": "tool/call",
	}[v]
	if typ == "" {
		typ = "user/message"
	}
	i := c.pick(func(_ int, e Ev) bool { return e.Type == typ })
	if i < 0 {
		return false
	}
	vals := map[string]any{
		"user-data-null": nil, "user-data-zero": int64(0), "user-data-empty-string": "", "user-data-false": false,
		"user-data-string": "hello", "user-data-array": Arr{"a"}, "tool-call-empty": Obj{},
	}
	c.log.Events[i].Data = vals[v] // nil for the *-null variants
	switch v {
	case "turn-start-null", "step-start-null", "tool-call-null":
		// the crash-repair scan reads data.turn / data.step / data.callId of every such event
		c.refuseAll(i)
	default:
		c.accept(i)
	}
	return true
}

// headerShape writes request/header data only a fork's seed check refuses.
func (c *ctx) headerShape() bool {
	i := c.pickType("request/header")
	if i < 0 {
		return false
	}
	d := c.log.Events[i].Data.(Obj)
	h := mustGet(d, "header").(Obj)
	config := mustGet(h, "config").(Obj)
	switch c.variant("no-config", "config-array", "provider-empty", "model-number", "effort-empty", "effort-number", "adapter-array", "adapter-unknown-key", "adapter-false", "adapter-without-config", "header-string", "data-array") {
	case "no-config":
		d.Set("header", h.Del("config"))
	case "config-array":
		h.Set("config", Arr{})
	case "provider-empty":
		config.Set("provider", "")
	case "model-number":
		config.Set("model", int64(4))
	case "effort-empty":
		h.Set("config", append(config.Del("reasoningEffort"), KV{"reasoningEffort", ""}))
	case "effort-number":
		h.Set("config", append(config.Del("reasoningEffort"), KV{"reasoningEffort", int64(2)}))
	case "adapter-array":
		d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Arr{}))
	case "adapter-unknown-key":
		d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Obj{{"temperature", true}}))
	case "adapter-false":
		d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Obj{{"maxTokens", false}}))
	case "adapter-without-config":
		h.Set("config", config.Del("maxTokens"))
		d.Set("header", h.Del("adapterDefaults").Set("adapterDefaults", Obj{{"maxTokens", true}}))
	case "header-string":
		d.Set("header", "h")
	default:
		c.log.Events[i].Data = Arr{}
	}
	c.accept(i)
	return true
}
