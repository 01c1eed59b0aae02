package loggen

import "fmt"

// Faults in packed chunk rows.

// malformedChunkRow breaks a packed chunk row so that the reference refuses it.
func (c *ctx) malformedChunkRow() bool {
	k, f, d, payload := c.pickRow()
	if k < 0 {
		return false
	}
	switch c.variant("dt-short", "payload-empty", "payload-number", "extra-envelope-key", "seq0-negative", "time0-fraction", "turn-string", "extra-data-key", "dt-fraction", "data-array") {
	case "dt-short":
		dt := mustGet(d, "dt").([]int64)
		d.Set("dt", dt[:len(dt)-1])
	case "payload-empty":
		d.Set(payload, Arr{})
		d.Set("dt", Arr{})
	case "payload-number":
		p := mustGet(d, payload).(Arr)
		p[0] = int64(5)
	case "extra-envelope-key":
		c.lines[k].Fields = append(f, KV{"seq", mustGet(f, "seq0")})
	case "seq0-negative":
		f.Set("seq0", int64(-1))
	case "time0-fraction":
		f.Set("time0", Raw("1.5"))
	case "turn-string":
		d.Set("turn", "1")
	case "extra-data-key":
		f.Set("data", append(d, KV{"x", int64(1)}))
	case "dt-fraction":
		dt := mustGet(d, "dt").([]int64)
		parts := make(Arr, len(dt))
		for j, x := range dt {
			parts[j] = x
		}
		parts[0] = Raw("0.5")
		d.Set("dt", parts)
	default:
		f.Set("data", Arr{})
	}
	c.refuseLine(k)
	c.f.Seq = c.lines[k].FirstSeq
	return true
}

// rowQuirk writes a packed row the reference decodes though no writer makes it.
func (c *ctx) rowQuirk() bool {
	k, f, d, payload := c.pickRow()
	if k < 0 {
		return false
	}
	switch c.variant("index-fraction", "turn-negative", "turn-huge", "dt-negative", "time0-negative", "seq0-spelled", "empty-members", "name-empty", "single-member", "key-order", "dt-spelled") {
	case "index-fraction":
		d.Set("index", Raw("0.5"))
	case "turn-negative":
		d.Set("turn", int64(-3))
	case "turn-huge":
		d.Set("turn", Raw("1e21"))
	case "dt-negative":
		dt := mustGet(d, "dt").([]int64)
		dt[0] = -dt[0] - 17
	case "time0-negative":
		f.Set("time0", int64(-1000))
	case "seq0-spelled":
		f.Set("seq0", Raw(fmt.Sprintf("%d.0", mustGet(f, "seq0"))))
	case "empty-members":
		p := mustGet(d, payload).(Arr)
		for j := range p {
			if j%2 == 0 {
				p[j] = ""
			}
		}
	case "name-empty":
		if payload != "args" {
			return false
		}
		if _, ok := d.Get("name"); ok {
			d.Set("name", "")
		} else {
			return false
		}
	case "single-member":
		// split the row: a one-member row followed by the rest as plain events
		first := c.lines[k]
		p := mustGet(d, payload).(Arr)
		one := Clone(first.Fields).(Obj)
		od := mustGet(one, "data").(Obj)
		od.Set(payload, Arr{p[0]})
		od.Set("dt", []int64{})
		rest := make([]Line, 0, first.Count-1)
		for m := 1; m < first.Count; m++ {
			rest = append(rest, Line{Fields: c.log.Events[first.Index+m].Envelope(), FirstSeq: first.FirstSeq + int64(m), Count: 1, Index: first.Index + m})
		}
		c.lines[k] = Line{Fields: one, FirstSeq: first.FirstSeq, Count: 1, Index: first.Index}
		c.lines = append(c.lines[:k+1:k+1], append(rest, c.lines[k+1:]...)...)
	case "key-order":
		f.Set("data", reversed(d))
		c.lines[k].Fields = Obj{f[3], f[2], f[1], f[0]}
	default:
		dt := mustGet(d, "dt").([]int64)
		parts := make(Arr, len(dt))
		for j, x := range dt {
			parts[j] = Raw(fmt.Sprintf("%d.0", x))
		}
		d.Set("dt", parts)
	}
	c.f.Line, c.f.Seq, c.f.Expect = k+1, c.lines[k].FirstSeq, Accepted
	return true
}
