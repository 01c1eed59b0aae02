package loggen

import "fmt"

// Tool/result replaces (prunes): refused and accepted rewrites.

// toolResultReplaceMulti writes a tool/result replace shadowing more than one node.
func (c *ctx) toolResultReplaceMulti() bool {
	i := c.pickOverNodes("tool/result", 2)
	if i < 0 {
		return false
	}
	nodes := c.nodesBefore(i)
	a := c.r.IntN(len(nodes) - 1)
	b := a + 1 + c.r.IntN(min(4, len(nodes)-a-1))
	e := &c.log.Events[i]
	c.variant(fmt.Sprintf("%d-nodes", b-a+1))
	e.SurfaceOp = replaceOp(nodes[a], nodes[b])
	e.Sources, e.HasSources = append([]int64{}, nodes[a:b+1]...), true
	c.refuse(i)
	return true
}

// toolResultReplaceTarget writes a tool/result replace of a node that is not a tool/result.
func (c *ctx) toolResultReplaceTarget() bool {
	i, t := c.pickPrune(isNotToolResult)
	if i < 0 {
		return false
	}
	c.variant(c.log.Events[t].Type)
	c.prune(i, t)
	c.refuse(i)
	return true
}

// toolResultReplaceMore writes a tool/result replace that changes more than the inner content.
func (c *ctx) toolResultReplaceMore() bool {
	i, t := c.pickPrune(isToolResult)
	if i < 0 {
		return false
	}
	data, msg, block := prunedData(c.log.Events[t].Data)
	switch c.variant("message-id", "is-error", "turn", "meta", "tool-call-id", "block-key", "role", "error") {
	case "message-id":
		msg.Set("id", "pruned-"+fmt.Sprint(mustGet(msg, "id")))
	case "is-error":
		if v, ok := block.Get("isError"); ok {
			block.Set("isError", v != true)
		} else {
			msg.Set("content", Arr{append(block, KV{"isError", false})})
		}
	case "turn":
		data.Set("turn", int64(99))
	case "meta":
		data = setChanged(data, c.log.Events[t].Data.(Obj), "meta", Obj{{"pruned", true}, {"n", int64(c.r.IntN(9))}}, Obj{{"pruned", "twice"}})
	case "tool-call-id":
		block.Set("toolCallId", "other-call")
	case "block-key":
		msg.Set("content", Arr{append(block, KV{"pruned", true})})
	case "role":
		msg.Set("role", "tool")
	default:
		data = setChanged(data, c.log.Events[t].Data.(Obj), "error", Obj{{"name", "Pruned"}, {"code", "PRUNED"}}, Obj{{"name", "Pruned2"}})
	}
	c.log.Events[i].Data = data
	c.prune(i, t)
	c.refuse(i)
	return true
}

// pruneQuirk writes a tool/result replace that the reference's rewrite check
// (assertToolResultRewrite) accepts: it compares the data as JavaScript values, and only the first
// block of the message content.
func (c *ctx) pruneQuirk() bool {
	i, t := c.pickPrune(isToolResult)
	if i < 0 {
		return false
	}
	orig := c.log.Events[t].Data.(Obj)
	data, msg, block := prunedData(orig)
	switch c.variant("original-two-blocks", "replacement-two-blocks", "block-content-missing", "key-order", "number-spelling", "duplicate-key", "unicode-escape") {
	case "original-two-blocks":
		om := mustGet(orig, "message").(Obj)
		ob := mustGet(om, "content").(Arr)
		om.Set("content", append(Clone(ob).(Arr), Obj{{"type", "text"}, {"text", "second block"}}))
	case "replacement-two-blocks":
		msg.Set("content", Arr{block, Obj{{"type", "text"}, {"text", "extra"}}})
	case "block-content-missing":
		msg.Set("content", Arr{block.Del("content")})
	case "key-order":
		data = reversed(data)
	case "number-spelling":
		data.Set("turn", Raw(fmt.Sprintf("%d.0", mustGet(data, "turn"))))
		data.Set("step", Raw(fmt.Sprintf("%de0", mustGet(data, "step"))))
	case "duplicate-key":
		data = append(Obj{{"turn", int64(999)}}, data...)
	default:
		id, _ := mustGet(msg, "id").(string)
		if id == "" {
			return false
		}
		msg.Set("id", Raw(fmt.Sprintf(`"\u%04x%s"`, id[0], escapeRest(id[1:]))))
	}
	c.log.Events[i].Data = data
	c.prune(i, t)
	// Later events may build on the surface this event no longer makes: the log ends here.
	c.log.Events = c.log.Events[:i+1]
	c.accept(i)
	return true
}

// setChanged sets key k of data to v, or to alt when orig already holds v there.
func setChanged(data, orig Obj, k string, v, alt any) Obj {
	data = data.Set(k, v)
	if old, ok := orig.Get(k); ok && string(JSON(old)) == string(JSON(mustGet(data, k))) {
		data.Set(k, alt)
	}
	return data
}

func isToolResult(e Ev) bool { return e.Type == "tool/result" }

func isNotToolResult(e Ev) bool { return e.Type != "tool/result" }

// escapeRest returns s as the inside of a JSON string literal.
func escapeRest(s string) string {
	q := JSON(s)
	return string(q[1 : len(q)-1])
}
