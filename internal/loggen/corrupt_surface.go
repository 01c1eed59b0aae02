package loggen

import (
	"fmt"
	"strconv"
)

// Surface rules: the refusals listed in ARCHITECTURE.md, "Surface rules".

// surfaceOpMissing drops the surfaceOp of a surface event.
func (c *ctx) surfaceOpMissing() bool {
	i := c.pickSurface()
	if i < 0 {
		return false
	}
	c.variant("removed")
	c.log.Events[i].SurfaceOp = nil
	c.refuse(i)
	return true
}

// surfaceOpOnNonSurface gives a non-surface event a surfaceOp.
func (c *ctx) surfaceOpOnNonSurface() bool {
	i := c.pickNonSurfaceType()
	if i < 0 {
		return false
	}
	switch c.variant("append", "replace") {
	case "append":
		c.log.Events[i].SurfaceOp = "append"
	default:
		c.log.Events[i].SurfaceOp = replaceOp(int64(0), int64(0))
	}
	c.refuse(i)
	return true
}

// sourcesOnNonSurface gives a non-surface event sourceEventSeqs.
func (c *ctx) sourcesOnNonSurface() bool {
	i := c.pickNonSurfaceType()
	if i < 0 {
		return false
	}
	e := &c.log.Events[i]
	e.HasSources = true
	switch c.variant("empty", "earlier") {
	case "empty":
		e.Sources = []int64{}
	default:
		e.Sources = []int64{int64(c.r.IntN(i + 1))}
	}
	c.refuse(i)
	return true
}

// surfaceOpInvalid writes a surfaceOp that is neither "append" nor exactly {op:"replace",start,end}.
func (c *ctx) surfaceOpInvalid() bool {
	i := c.pickSurface()
	if i < 0 {
		return false
	}
	n := int64(c.r.IntN(i + 1))
	ops := map[string]any{
		"prepend":     "prepend",
		"Append":      "Append",
		"number":      int64(1),
		"array":       Arr{"append"},
		"null":        nil,
		"extra-key":   append(replaceOp(n, n), KV{"x", int64(1)}),
		"op-case":     Obj{{"op", "Replace"}, {"start", n}, {"end", n}},
		"start-str":   replaceOp(strconv.FormatInt(n, 10), n),
		"start-neg":   replaceOp(int64(-1), n),
		"start-frac":  replaceOp(Raw("1.5"), n),
		"end-missing": Obj{{"op", "replace"}, {"start", n}},
		"end-unsafe":  replaceOp(n, Raw("9007199254740992")),
	}
	v := c.variant("prepend", "Append", "number", "array", "null", "extra-key", "op-case", "start-str", "start-neg", "start-frac", "end-missing", "end-unsafe")
	c.setField(i, "surfaceOp", ops[v])
	c.refuse(i)
	return true
}

// replaceStartNotNode and replaceEndNotNode write a replace whose start (end) is not a current node.
func (c *ctx) replaceStartNotNode() bool { return c.replaceNotNode(true) }

func (c *ctx) replaceEndNotNode() bool { return c.replaceNotNode(false) }

// replaceNotNode writes a replace whose start (or end) is not a current surface node.
func (c *ctx) replaceNotNode(start bool) bool {
	i := c.pickOverNodes("", 1)
	if i < 0 {
		return false
	}
	nodes := c.nodesBefore(i)
	good := nodes[c.r.IntN(len(nodes))]
	var bad int64
	var notNodes []int64
	for s := int64(0); s < int64(i); s++ {
		if indexOf(nodes, s) < 0 {
			notNodes = append(notNodes, s)
		}
	}
	switch c.variant("earlier-non-node", "self", "later", "huge") {
	case "earlier-non-node":
		if len(notNodes) == 0 {
			return false
		}
		bad = notNodes[c.r.IntN(len(notNodes))]
	case "self":
		bad = int64(i)
	case "later":
		bad = int64(i + 1 + c.r.IntN(50))
	default:
		bad = 9007199254740991
	}
	e := &c.log.Events[i]
	if start {
		e.SurfaceOp = replaceOp(bad, good)
	} else {
		e.SurfaceOp = replaceOp(good, bad)
	}
	e.Sources, e.HasSources = []int64{good}, true
	c.refuse(i)
	return true
}

// replaceStartAfterEnd writes a replace whose start comes after its end in surface order.
func (c *ctx) replaceStartAfterEnd() bool {
	i := c.pickOverNodes("", 2)
	if i < 0 {
		return false
	}
	nodes := c.nodesBefore(i)
	a := c.r.IntN(len(nodes) - 1)
	b := a + 1 + c.r.IntN(len(nodes)-a-1)
	e := &c.log.Events[i]
	c.variant("swapped")
	e.SurfaceOp = replaceOp(nodes[b], nodes[a])
	e.Sources, e.HasSources = append([]int64{}, nodes[a:b+1]...), true
	c.refuse(i)
	return true
}

// sourcesNotArray writes sourceEventSeqs that is not an array.
func (c *ctx) sourcesNotArray() bool {
	i := c.pickSurface()
	if i < 0 {
		return false
	}
	vals := map[string]any{"number": int64(0), "string": "0", "object": Obj{{"0", int64(0)}}, "null": nil, "bool": true}
	v := c.variant("number", "string", "object", "null", "bool")
	c.setField(i, "sourceEventSeqs", vals[v])
	c.refuse(i)
	return true
}

// sourcesEmpty writes sourceEventSeqs [] on a surface event other than assistant/message.
func (c *ctx) sourcesEmpty() bool {
	i := c.pick(func(_ int, e Ev) bool { return isSurface(e) && e.Type != "assistant/message" })
	if i < 0 {
		return false
	}
	c.variant(c.log.Events[i].Type)
	c.log.Events[i].Sources, c.log.Events[i].HasSources = []int64{}, true
	c.refuse(i)
	return true
}

// sourcesDuplicate repeats a value of sourceEventSeqs (or spells it again as 3.0, 3e0).
func (c *ctx) sourcesDuplicate() bool {
	i := c.pick(func(i int, e Ev) bool { return isSurface(e) && i > 0 })
	if i < 0 {
		return false
	}
	e := &c.log.Events[i]
	if !e.HasSources || len(e.Sources) == 0 {
		e.Sources, e.HasSources = []int64{int64(c.r.IntN(i))}, true
	}
	d := e.Sources[c.r.IntN(len(e.Sources))]
	at := c.r.IntN(len(e.Sources) + 1)
	if c.variant("repeat", "spelled-repeat") == "spelled-repeat" {
		// 3 and 3.0 are the same number to the reference
		elems := make(Arr, 0, len(e.Sources)+1)
		for k, s := range e.Sources {
			if k == at {
				elems = append(elems, Raw(fmt.Sprintf("%d.0", d)))
			}
			elems = append(elems, s)
		}
		if at == len(e.Sources) {
			elems = append(elems, Raw(fmt.Sprintf("%de0", d)))
		}
		c.setField(i, "sourceEventSeqs", elems)
		c.refuse(i)
		return true
	}
	e.Sources = append(e.Sources[:at:at], append([]int64{d}, e.Sources[at:]...)...)
	c.refuse(i)
	return true
}

// sourcesNotEarlier adds a sourceEventSeqs value that is not an earlier seq.
func (c *ctx) sourcesNotEarlier() bool {
	i := c.pickSurface()
	if i < 0 {
		return false
	}
	e := c.log.Events[i]
	var elems []any
	for _, s := range e.Sources {
		elems = append(elems, s)
	}
	vals := map[string]any{
		"self": int64(i), "later": int64(i + 1 + c.r.IntN(100)), "negative": int64(-1),
		"fraction": Raw("0.5"), "string": "0", "null": nil, "unsafe": Raw("9007199254740993"),
	}
	v := c.variant("self", "later", "negative", "fraction", "string", "null", "unsafe")
	at := c.r.IntN(len(elems) + 1)
	elems = append(elems[:at:at], append([]any{vals[v]}, elems[at:]...)...)
	c.setField(i, "sourceEventSeqs", Arr(elems))
	c.refuse(i)
	return true
}

// replaceMissingShadowed writes a replace whose sourceEventSeqs miss a node it shadows.
func (c *ctx) replaceMissingShadowed() bool {
	i := c.pickOverNodes("", 1)
	if i < 0 {
		return false
	}
	nodes := c.nodesBefore(i)
	a := c.r.IntN(len(nodes))
	b := a + c.r.IntN(min(5, len(nodes)-a))
	if c.log.Events[i].Type == "tool/result" {
		b = a // keep the tool/result rule out of the way
	}
	e := &c.log.Events[i]
	e.SurfaceOp = replaceOp(nodes[a], nodes[b])
	switch c.variant("one-missing", "absent", "other-seqs") {
	case "one-missing":
		drop := a + c.r.IntN(b-a+1)
		src := append(append([]int64{}, nodes[a:drop]...), nodes[drop+1:b+1]...)
		if len(src) == 0 {
			src = []int64{int64(c.r.IntN(i))}
			if src[0] == nodes[drop] {
				e.HasSources = false
				break
			}
		}
		e.Sources, e.HasSources = src, true
	case "absent":
		e.HasSources = false
	default:
		var src []int64
		for s := int64(0); s < int64(i) && len(src) < 3; s++ {
			if indexOf(nodes[a:b+1], s) < 0 {
				src = append(src, s)
			}
		}
		if len(src) == 0 {
			e.HasSources = false
		} else {
			e.Sources, e.HasSources = src, true
		}
	}
	c.refuse(i)
	return true
}
