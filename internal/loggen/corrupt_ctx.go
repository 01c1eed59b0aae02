package loggen

import "math/rand/v2"

type ctx struct {
	r     *rand.Rand
	log   *Log
	lines []Line // set by render
	out   []byte // final bytes, when a kind edits below the line level
	f     Fault
}

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

func (c *ctx) variant(vs ...string) string {
	v := vs[c.r.IntN(len(vs))]
	c.f.Variant = v
	return v
}

// refuse records a refusal at event i (acceptedEvents i).
func (c *ctx) refuse(i int) {
	c.f.Seq, c.f.Expect, c.f.Accepted = int64(i), Refused, i
}

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

func isSurface(e Ev) bool { return e.SurfaceOp != nil }

func isSurfaceType(t string) bool {
	return t == "user/message" || t == "assistant/message" || t == "tool/result"
}

// nodesBefore returns the current surface nodes before event i.
func (c *ctx) nodesBefore(i int) []int64 { return foldNodes(c.log.Events[:i]) }

func replaceOp(start, end any) Obj { return Obj{{"op", "replace"}, {"start", start}, {"end", end}} }

// addDataKey adds a key to the line's data object (false when data is not an object).
func addDataKey(f Obj, k string, v any) bool {
	d, ok := mustGet(f, "data").(Obj)
	if !ok {
		return false
	}
	f.Set("data", append(d, KV{k, v}))
	return true
}
