package loggen

import (
	"bytes"
	"strings"
)

// Faults in the JSON text: values JSON.parse refuses or reads its own way, bytes, lines.

// nonJSON makes a line something JSON.parse refuses.
func (c *ctx) nonJSON() bool {
	c.render()
	if len(c.lines) == 0 {
		return false
	}
	k := c.r.IntN(len(c.lines))
	ln := c.lines[k].Text()
	var bad []byte
	switch v := c.variant("NaN", "Infinity", "-Infinity", "undefined", "bare-word", "whole-line-word", "single-quotes", "trailing-comma", "two-values", "comment", "hex", "leading-plus", "unquoted-key", "leading-nbsp"); v {
	case "NaN", "Infinity", "-Infinity", "undefined", "bare-word":
		word := v
		if v == "bare-word" {
			word = "hello"
		}
		bad = replaceFirstValue(ln, word)
	case "whole-line-word":
		bad = []byte("garbage")
	case "single-quotes":
		bad = bytes.Replace(ln, []byte(`"type"`), []byte(`'type'`), 1)
	case "trailing-comma":
		bad = append(append([]byte{}, ln[:len(ln)-1]...), ",}"...)
	case "two-values":
		bad = append(append(append([]byte{}, ln...), ' '), ln...)
	case "comment":
		bad = append([]byte("// note\t"), ln...)
	case "hex":
		bad = replaceFirstValue(ln, "0x10")
	case "leading-plus":
		bad = replaceFirstValue(ln, "+1")
	case "unquoted-key":
		bad = bytes.Replace(ln, []byte(`"type"`), []byte(`type`), 1)
	default:
		bad = append([]byte("\u00a0"), ln...)
	}
	c.lines[k].Bytes = bad
	c.refuseLine(k)
	return true
}

// duplicateKey writes a key twice (JSON.parse keeps the last).
func (c *ctx) duplicateKey() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	v := c.variant("seq-wrong-first", "seq-wrong-last", "data-key", "surfaceop-first-bad", "type-first-other", "header-id", "replace-start-twice")
	switch v {
	case "surfaceop-first-bad":
		if i = c.pickSurface(); i < 0 {
			return false
		}
	case "replace-start-twice":
		if i = c.pickReplace(); i < 0 {
			return false
		}
	}
	if v == "header-id" && c.log.Header == nil {
		return false
	}
	k, f := c.eventLine(i)
	switch v {
	case "seq-wrong-first":
		c.lines[k].Fields = append(Obj{{"seq", int64(i + 7)}}, f...)
		c.accept(i)
	case "seq-wrong-last":
		c.lines[k].Fields = append(f, KV{"seq", int64(i + 7)})
		c.refuse(i)
	case "data-key":
		d, ok := mustGet(f, "data").(Obj)
		if !ok || len(d) == 0 {
			return false
		}
		j := c.r.IntN(len(d))
		nd := append(append(Obj{}, d[:j]...), KV{d[j].K, "shadowed-duplicate"})
		nd = append(nd, d[j:]...)
		f.Set("data", nd)
		c.accept(i)
	case "surfaceop-first-bad":
		c.lines[k].Fields = append(Obj{{"surfaceOp", "bogus"}}, f...)
		c.accept(i)
	case "type-first-other":
		c.lines[k].Fields = append(Obj{{"type", "turn/start"}}, f...)
		c.accept(i)
	case "replace-start-twice":
		// {"op","start":bogus,"end","start":real}: JSON.parse keeps 3 keys, the last start
		op := mustGet(f, "surfaceOp").(Obj)
		f.Set("surfaceOp", Obj{{"op", "replace"}, {"start", "bogus"}, {"end", mustGet(op, "end")}, {"start", mustGet(op, "start")}})
		c.accept(i)
	default:
		c.lines[0].Fields = append(Obj{{"id", "shadowed-id"}}, c.lines[0].Fields...)
		c.accept(i)
		c.f.Seq, c.f.Line = -1, 1
	}
	return true
}

// numberTooLarge writes numbers beyond float64 (refused) or not exact in it (accepted).
func (c *ctx) numberTooLarge() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	v := c.variant("data-1e400", "data-neg-1e400", "data-1e309", "data-inexact-int", "data-2^53+1", "data-max-float-overflow", "time-inexact-int", "seq-1e400", "user-text-1e400")
	if v == "user-text-1e400" {
		if i = c.pickType("user/message"); i < 0 {
			return false
		}
	}
	_, f := c.eventLine(i)
	num := map[string]string{
		"data-1e400": "1e400", "data-neg-1e400": "-1e400", "data-1e309": "1e309",
		"data-inexact-int": "123456789012345678901", "data-2^53+1": "9007199254740993",
		"data-max-float-overflow": "1.7976931348623159e308", "time-inexact-int": "123456789012345678901",
		"seq-1e400": "1e400", "user-text-1e400": "1e400",
	}[v]
	switch v {
	case "time-inexact-int":
		f.Set("time", Raw(num))
		c.accept(i)
		return true
	case "seq-1e400":
		f.Set("seq", Raw(num))
		c.refuse(i)
		return true
	}
	if !addDataKey(f, "n", Raw(num)) {
		return false
	}
	switch v {
	case "data-inexact-int", "data-2^53+1":
		c.acceptData(i)
	default:
		c.refuse(i)
	}
	return true
}

// negativeZero writes -0 and spellings of it.
func (c *ctx) negativeZero() bool {
	i := c.anyEvent()
	if i < 0 {
		return false
	}
	v := c.variant("data--0", "data--0.0", "data--0e3", "data--1e-400", "time--0", "seq--0", "sources--0", "start--0")
	switch v {
	case "seq--0":
		i = 0
	case "sources--0", "start--0":
		if i = c.pick(func(i int, e Ev) bool { return isSurface(e) && i > 0 }); i < 0 {
			return false
		}
	}
	k, f := c.eventLine(i)
	switch v {
	case "time--0":
		f.Set("time", Raw("-0"))
		c.accept(i)
	case "seq--0":
		f.Set("seq", Raw("-0"))
		c.accept(i)
	case "sources--0":
		f = f.Set("sourceEventSeqs", Raw("[-0]"))
		c.lines[k].Fields = f
		c.refuse(i)
	case "start--0":
		f.Set("surfaceOp", Obj{{"op", "replace"}, {"start", Raw("-0")}, {"end", int64(0)}})
		c.refuse(i)
	default:
		if !addDataKey(f, "z", Raw(v[len("data-"):])) {
			return false
		}
		c.refuse(i)
	}
	return true
}

// invalidUTF8 writes invalid UTF-8 bytes (read as U+FFFD) or lone surrogate escapes.
func (c *ctx) invalidUTF8() bool {
	if len(c.log.Events) == 0 {
		return false
	}
	seqs := map[string]string{
		"ff": "\xff", "overlong": "\xc0\x80", "truncated-3": "\xe2\x82", "surrogate-bytes": "\xed\xa0\x80",
		"above-max": "\xf4\x90\x80\x80", "truncated-4": "\xf0\x9f\x98", "continuation": "\x80",
		"lone-surrogate-escape": `\ud800`, "low-surrogate-escape": `\udc00x`, "reversed-pair-escape": `\udc00\ud800`,
	}
	v := c.variant("ff", "overlong", "truncated-3", "surrogate-bytes", "above-max", "truncated-4", "continuation", "lone-surrogate-escape", "low-surrogate-escape", "reversed-pair-escape", "header-id", "in-key")
	if v == "in-key" {
		i := c.pickType("user/message")
		if i < 0 {
			return false
		}
		d := c.log.Events[i].Data.(Obj)
		// one key with invalid bytes, one with a lone surrogate escape
		raw := JSON(d)
		c.log.Events[i].Data = Raw(append(raw[:len(raw)-1:len(raw)-1], ",\"k\xff\xfe\":1,\"s\\ud800\":2}"...))
		c.accept(i)
		return true
	}
	if v == "header-id" {
		if c.log.Header == nil {
			return false
		}
		c.render()
		c.lines[0].Fields.Set("id", Raw(`"bad`+"\xff\xfe"+`id"`))
		c.f.Line, c.f.Expect = 1, Accepted
		return true
	}
	s := Raw(`"a` + seqs[v] + `b"`)
	i := c.pickType("user/message")
	if i < 0 || c.p(0.3) {
		i = c.anyEvent()
	}
	_, f := c.eventLine(i)
	if d, ok := mustGet(f, "data").(Obj); ok && c.log.Events[i].Type == "user/message" {
		if content, ok := mustGet(d, "content").(Arr); ok && len(content) > 0 {
			if b, ok := content[0].(Obj); ok {
				b.Set("text", s)
				c.accept(i)
				return true
			}
		}
	}
	if !addDataKey(f, "note", s) {
		return false
	}
	c.acceptData(i)
	return true
}

// blankLines adds an empty or whitespace-only line, or changes the line ends.
func (c *ctx) blankLines() bool {
	c.render()
	v := c.variant("empty", "spaces-tabs", "cr-only-line", "crlf", "no-final-newline", "nbsp", "bom-line", "line-separator", "ideographic-space", "vt-ff", "cr-separators", "nel", "nul")
	var buf bytes.Buffer
	blank := map[string]string{
		"empty": "", "spaces-tabs": " \t  ", "cr-only-line": "\r", "nbsp": "\u00a0",
		"bom-line": "\ufeff", "line-separator": "\u2028", "ideographic-space": "\u3000", "vt-ff": "\v\f",
		// U+0085 is not whitespace to JavaScript's trim() (Go's unicode.IsSpace says it is),
		// and NUL is whitespace to neither: the reference parses these lines and fails.
		"nel": "\u0085", "nul": "\x00",
	}[v]
	switch v {
	case "crlf":
		for _, ln := range c.lines {
			buf.Write(ln.Text())
			buf.WriteString("\r\n")
		}
	case "no-final-newline":
		buf.Write(Join(c.lines))
		if buf.Len() == 0 {
			return false
		}
		buf.Truncate(buf.Len() - 1)
	case "cr-separators":
		if len(c.lines) < 2 {
			return false
		}
		for _, ln := range c.lines {
			buf.Write(ln.Text())
			buf.WriteString("\r")
		}
		c.f.Expect, c.f.Accepted = Refused, 0
		c.out = buf.Bytes()
		return true
	default:
		at := c.r.IntN(len(c.lines) + 1)
		for k, ln := range c.lines {
			if k == at {
				buf.WriteString(blank + "\n")
			}
			buf.Write(ln.Text())
			buf.WriteByte('\n')
		}
		if at == len(c.lines) {
			buf.WriteString(blank + "\n")
		}
		c.f.Line = at + 1
		if v == "nel" || v == "nul" {
			c.f.Expect, c.f.Accepted = Refused, 0
			c.out = buf.Bytes()
			return true
		}
	}
	c.f.Expect = Accepted
	c.out = buf.Bytes()
	return true
}

// truncatedLastLine cuts the last line short, as a crash mid-write does.
func (c *ctx) truncatedLastLine() bool {
	c.render()
	if len(c.lines) == 0 {
		return false
	}
	k := len(c.lines) - 1
	ln := c.lines[k].Text()
	c.lines[k].Bytes = ln[:1+c.r.IntN(len(ln)-1)]
	c.variant("cut")
	out := Join(c.lines)
	if c.p(0.5) {
		out = out[:len(out)-1] // the crash also lost the newline
	}
	c.out = out
	c.refuseLine(k)
	return true
}

// bom starts the log with a UTF-8 byte order mark.
func (c *ctx) bom() bool {
	c.render()
	if len(c.lines) == 0 {
		return false
	}
	c.variant("utf8-bom")
	c.out = append([]byte("\ufeff"), Join(c.lines)...)
	c.f.Line, c.f.Expect, c.f.Accepted = 1, Refused, 0
	return true
}

// deepNesting adds deeply nested arrays to an event's data.
func (c *ctx) deepNesting() bool {
	v := c.variant("plugin-1000", "plugin-5000", "plugin-20000", "message-800")
	depth := map[string]int{"plugin-1000": 1000, "plugin-5000": 5000, "plugin-20000": 20000, "message-800": 800}[v]
	deep := Raw(strings.Repeat("[", depth) + strings.Repeat("]", depth))
	var i int
	if v == "message-800" {
		// deeper than ~2000 levels inside a message crashes the oracle's own JSON.stringify
		i = c.pickType("user/message")
	} else {
		i = c.pick(func(_ int, e Ev) bool { return !isSurfaceType(e.Type) && e.Type != "assistant/chunk" })
	}
	if i < 0 {
		return false
	}
	c.log.Events[i].Data = append(c.log.Events[i].Data.(Obj), KV{"deep", deep})
	c.accept(i)
	return true
}

// replaceFirstValue replaces the value of the line's "seq" or "seq0" (or its first number) with a
// bare token.
func replaceFirstValue(ln []byte, token string) []byte {
	for _, key := range []string{`"seq":`, `"seq0":`, `"version":`} {
		if at := bytes.Index(ln, []byte(key)); at >= 0 {
			start := at + len(key)
			end := start
			for end < len(ln) && (ln[end] == '-' || ln[end] >= '0' && ln[end] <= '9') {
				end++
			}
			out := append([]byte{}, ln[:start]...)
			out = append(out, token...)
			return append(out, ln[end:]...)
		}
	}
	return append([]byte(token+" "), ln...)
}
