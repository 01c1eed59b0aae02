package loggen

import "math/rand/v2"

// ctx is one corruption in progress: a copy of the log, its lines once rendered, and the fault.
type ctx struct {
	r     *rand.Rand
	log   *Log
	lines []Line // set by render
	out   []byte // final bytes, when a kind edits below the line level
	f     Fault
}

// render renders c.log into c.lines.
func (c *ctx) render() { c.lines = c.log.Render() }

// lineOf returns the index in c.lines of the line holding the event at position pos, -1 when none.
func (c *ctx) lineOf(pos int64) int {
	for i, ln := range c.lines {
		if ln.Count > 0 && pos >= int64(ln.Index) && pos < int64(ln.Index+ln.Count) {
			return i
		}
	}
	return -1
}

// lineFor renders the log with event i on its own line and returns that line's index.
func (c *ctx) lineFor(i int) int {
	c.log.Events[i].NoPack = true
	c.render()
	for k, ln := range c.lines {
		if ln.Count == 1 && ln.Index == i && ln.Bytes == nil {
			return k
		}
	}
	panic("loggen: event line not found")
}

// eventLine renders event i on its own line and returns that line's index and fields.
func (c *ctx) eventLine(i int) (int, Obj) {
	k := c.lineFor(i)
	return k, c.lines[k].Fields
}

// setField renders event i on its own line and sets the envelope key k of that line to v.
func (c *ctx) setField(i int, k string, v any) {
	at := c.lineFor(i)
	c.lines[at].Fields = c.lines[at].Fields.Set(k, v)
}

// anyEvent returns the index of a random event, -1 when the log has none.
func (c *ctx) anyEvent() int {
	if len(c.log.Events) == 0 {
		return -1
	}
	return c.r.IntN(len(c.log.Events))
}

// p reports true with probability prob.
func (c *ctx) p(prob float64) bool { return c.r.Float64() < prob }

// pick returns the index of a random event satisfying pred, -1 when none does.
func (c *ctx) pick(pred func(i int, e Ev) bool) int {
	var idx []int
	for i, e := range c.log.Events {
		if pred(i, e) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return -1
	}
	return idx[c.r.IntN(len(idx))]
}

// pickType returns the index of a random event of type typ, -1 when none.
func (c *ctx) pickType(typ string) int {
	return c.pick(func(_ int, e Ev) bool { return e.Type == typ })
}

// pickSurface returns the index of a random surface event, -1 when none.
func (c *ctx) pickSurface() int { return c.pick(func(_ int, e Ev) bool { return isSurface(e) }) }

// pickReplace returns the index of a random replace event, -1 when none.
func (c *ctx) pickReplace() int { return c.pick(func(_ int, e Ev) bool { return isReplace(e) }) }

// pickNonSurfaceType returns the index of a random event of a non-surface type, -1 when none.
func (c *ctx) pickNonSurfaceType() int {
	return c.pick(func(_ int, e Ev) bool { return !isSurfaceType(e.Type) })
}

// pickOverNodes returns the index of a random surface event (of type typ, when not "") with at
// least n current surface nodes before it, -1 when none.
func (c *ctx) pickOverNodes(typ string, n int) int {
	return c.pick(func(i int, e Ev) bool {
		return (typ == "" || e.Type == typ) && isSurface(e) && len(c.nodesBefore(i)) >= n
	})
}

// pickPrune returns a random surface tool/result event i and a random current node t before it
// whose event satisfies target; i is -1 when none.
func (c *ctx) pickPrune(target func(Ev) bool) (i int, t int64) {
	i = c.pick(func(i int, e Ev) bool {
		if e.Type != "tool/result" || !isSurface(e) {
			return false
		}
		for _, n := range c.nodesBefore(i) {
			if target(c.log.Events[n]) {
				return true
			}
		}
		return false
	})
	if i < 0 {
		return -1, 0
	}
	var targets []int64
	for _, n := range c.nodesBefore(i) {
		if target(c.log.Events[n]) {
			targets = append(targets, n)
		}
	}
	return i, targets[c.r.IntN(len(targets))]
}

// pickRow renders the log and returns the line index k of a random packed chunk row, its fields,
// its data and its payload key ("texts" or "args"); k is -1 when there is no row.
func (c *ctx) pickRow() (k int, f, d Obj, payload string) {
	c.render()
	var rows []int
	for k, ln := range c.lines {
		if ln.Count > 1 {
			rows = append(rows, k)
		}
	}
	if len(rows) == 0 {
		return -1, nil, nil, ""
	}
	k = rows[c.r.IntN(len(rows))]
	f = c.lines[k].Fields
	d = mustGet(f, "data").(Obj)
	payload = "texts"
	if _, ok := d.Get("args"); ok {
		payload = "args"
	}
	return k, f, d, payload
}

// variant picks one of vs as the fault's variant and returns it.
func (c *ctx) variant(vs ...string) string {
	v := vs[c.r.IntN(len(vs))]
	c.f.Variant = v
	return v
}

// refuse records a refusal at event i (acceptedEvents i).
func (c *ctx) refuse(i int) {
	c.f.Seq, c.f.Expect, c.f.Accepted = int64(i), Refused, i
}

// refuseLine records a refusal at line k (0-based) before any event (acceptedEvents 0).
func (c *ctx) refuseLine(k int) {
	c.f.Line, c.f.Expect, c.f.Accepted = k+1, Refused, 0
}

// refuseAll records a refusal at event i after every event was accepted: the reference's
// crash-repair scan trips over event i.
func (c *ctx) refuseAll(i int) {
	c.f.Seq, c.f.Expect, c.f.Accepted = int64(i), Refused, len(c.log.Events)
}

// unknown records a fault at event i whose outcome is not predicted.
func (c *ctx) unknown(i int) { c.f.Seq, c.f.Expect = int64(i), Unknown }

// accept records that the reference accepts the log, with the fault at event i.
func (c *ctx) accept(i int) {
	c.f.Seq, c.f.Expect = int64(i), Accepted
}

// acceptData is accept for a fault that changed the data of event i outside its message content:
// when event i is a tool/result replace (a prune), or a later prune rewrites event i, the
// reference now refuses that replace ("may change only content").
func (c *ctx) acceptData(i int) {
	c.accept(i)
	if c.log.Events[i].Type != "tool/result" {
		return
	}
	if _, ok := c.log.Events[i].SurfaceOp.(Obj); ok {
		c.refuse(i) // the event is itself a prune: it now changes more than the content
		return
	}
	for r := i + 1; r < len(c.log.Events); r++ {
		e := c.log.Events[r]
		if op, ok := e.SurfaceOp.(Obj); ok && e.Type == "tool/result" && mustGet(op, "start") == int64(i) {
			c.f.Expect, c.f.Accepted = Refused, r
			return
		}
	}
}

// isSurface reports whether e has a surfaceOp.
func isSurface(e Ev) bool { return e.SurfaceOp != nil }

// isReplace reports whether e's surfaceOp is a replace.
func isReplace(e Ev) bool { _, ok := e.SurfaceOp.(Obj); return ok }

// isSurfaceType reports whether t is a type that takes a surfaceOp.
func isSurfaceType(t string) bool {
	return t == "user/message" || t == "assistant/message" || t == "tool/result"
}

// nodesBefore returns the current surface nodes before event i.
func (c *ctx) nodesBefore(i int) []int64 { return foldNodes(c.log.Events[:i]) }

// replaceOp returns {op:"replace",start,end}.
func replaceOp(start, end any) Obj { return Obj{{"op", "replace"}, {"start", start}, {"end", end}} }

// prune makes event i a replace of node t alone (sourceEventSeqs [t]).
func (c *ctx) prune(i int, t int64) {
	e := &c.log.Events[i]
	e.SurfaceOp = replaceOp(t, t)
	e.Sources, e.HasSources = []int64{t}, true
}

// prunedData returns a copy of a tool/result's data and the copy's message and first block, the
// block's content replaced by a "[pruned]" text.
func prunedData(data any) (d, msg, block Obj) {
	d = Clone(data).(Obj)
	msg = mustGet(d, "message").(Obj)
	block = mustGet(msg, "content").(Arr)[0].(Obj)
	block.Set("content", Arr{Obj{{"type", "text"}, {"text", "[pruned]"}}})
	return d, msg, block
}

// reversed returns a copy of o with its keys in the opposite order.
func reversed(o Obj) Obj {
	rev := make(Obj, len(o))
	for k := range o {
		rev[len(o)-1-k] = o[k]
	}
	return rev
}

// addDataKey adds a key to the line's data object (false when data is not an object).
func addDataKey(f Obj, k string, v any) bool {
	d, ok := mustGet(f, "data").(Obj)
	if !ok {
		return false
	}
	f.Set("data", append(d, KV{k, v}))
	return true
}
