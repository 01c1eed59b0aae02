package loggen

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Options tunes Generate. Zero values pick the defaults.
type Options struct {
	// MaxTurns bounds the turns per log (default 4).
	MaxTurns int
	// MaxSteps bounds the steps per turn (default 4).
	MaxSteps int
	// MaxEvents stops the generator after about this many events (default 300; a turn in
	// progress is finished first).
	MaxEvents int
	// Steady writes exactly MaxTurns turns (or stops at MaxEvents), with no crash cut and no
	// simulated crash: a long, well-formed session for benchmarks.
	Steady bool
	// NoReplace leaves out compaction replaces and tool-result prunes (the surface only grows).
	NoReplace bool
}

func (o Options) withDefaults() Options {
	if o.MaxTurns <= 0 {
		o.MaxTurns = 4
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = 4
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = 300
	}
	return o
}

// NewRand returns the generator's random source for seed: math/rand/v2 with a PCG source.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// LogSeed derives the seed of the i-th log of a run from the run seed (a SplitMix64 step), so that
// one log can be regenerated alone.
func LogSeed(runSeed uint64, i int) uint64 {
	z := runSeed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Generate returns a random, valid session log that looks like real agent work (see GenerateWith).
func Generate(seed uint64) *Log { return GenerateWith(seed, Options{}) }

// GenerateWith returns a random session log, deterministic in seed: an optional header line;
// turns (turn/start … turn/end with a random reason) of steps (step/start … step/end); user
// messages; request/header + request/context; streamed assistant/chunk events (block-start,
// text-delta, reasoning-delta and tool-call-delta runs, block-end, usage, finish); assistant
// messages with tool calls, some with empty content; tool/call + tool/result pairs (some calls or
// results missing); todo/write, session/title, llm/retry, agent/inbox/spliced and unknown
// x-plugin/... events, with and without ignorable; session/end-seed markers (at the start, between
// turns, after a simulated crash repaired by the reference's closers, and at the end); compaction
// brackets whose user/message or assistant/message replaces a random span of current surface
// nodes, citing every shadowed node; tool-result prunes (a tool/result replace of one tool/result
// node changing only the inner result content); and, sometimes, a crash cut inside the last turn
// (Log.Cut). The reference (oracle) accepts every log this returns.
func GenerateWith(seed uint64, opts Options) *Log {
	opts = opts.withDefaults()
	g := &gen{r: NewRand(seed), log: &Log{Seed: seed}, opts: opts}
	g.run()
	return g.log
}

type gen struct {
	r    *rand.Rand
	log  *Log
	opts Options

	nodes []int64 // current surface nodes
	now   int64   // ms
	turn  int64
	ids   int

	zeroChunkTimes bool
	provider       string
	model          string
}

func (g *gen) p(prob float64) bool { return g.r.Float64() < prob }

func (g *gen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

func (g *gen) tick() int64 {
	switch {
	case g.p(0.03):
		g.now -= int64(g.r.IntN(1500)) // clocks can go backwards
	case g.p(0.02):
		g.now += int64(g.r.IntN(600_000))
	default:
		g.now += int64(g.r.IntN(40))
	}
	return g.now
}

func (g *gen) uuid() string {
	g.ids++
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", g.r.Uint32(), g.r.IntN(1<<16), g.r.IntN(1<<12), 0x8000|g.r.IntN(1<<14), g.r.Uint64()&(1<<48-1))
}

func (g *gen) seq() int64 { return int64(len(g.log.Events)) }

// emit appends a non-surface event and returns its seq.
func (g *gen) emit(typ string, data any) int64 {
	s := g.seq()
	g.log.Events = append(g.log.Events, Ev{Type: typ, Seq: s, Time: g.tick(), Data: data})
	return s
}

func (g *gen) emitIgnorable(typ string, data any) int64 {
	s := g.emit(typ, data)
	g.log.Events[s].Ignorable = true
	return s
}

// appendNode appends a surface event with surfaceOp "append".
func (g *gen) appendNode(typ string, data any, sources []int64, hasSources bool) int64 {
	s := g.seq()
	g.log.Events = append(g.log.Events, Ev{Type: typ, Seq: s, Time: g.tick(), Data: data, SurfaceOp: "append", Sources: sources, HasSources: hasSources})
	g.nodes = append(g.nodes, s)
	return s
}

// replaceNodes appends a surface event replacing nodes[i..j] (inclusive).
func (g *gen) replaceNodes(typ string, data any, i, j int, sources []int64) int64 {
	s := g.seq()
	op := Obj{{"op", "replace"}, {"start", g.nodes[i]}, {"end", g.nodes[j]}}
	g.log.Events = append(g.log.Events, Ev{Type: typ, Seq: s, Time: g.tick(), Data: data, SurfaceOp: op, Sources: sources, HasSources: true})
	nodes := append([]int64{}, g.nodes[:i]...)
	nodes = append(nodes, s)
	g.nodes = append(nodes, g.nodes[j+1:]...)
	return s
}

var words = []string{
	"the", "file", "test", "build", "read", "write", "agent", "session", "log", "event", "stream",
	"fix", "error", "retry", "tool", "result", "check", "go", "node", "surface", "seq", "ok", "done",
	"please", "run", "list", "directory", "parse", "JSON", "value", "compaction", "summary",
	"ünïcødé", "日本語", "🙂", "naïve", "Ω", "\"quoted\"", "back\\slash", "tab\tseparated",
	"line\nbreak", "\u2028sep", "ctl\u0001", "<html>&amp;", "\u00a0nbsp", "e\u0301",
}

func (g *gen) text(maxWords int) string {
	n := 1 + g.r.IntN(maxWords)
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.r.IntN(len(words))])
	}
	return b.String()
}

// split cuts s into n>=1 pieces at byte positions on rune boundaries (some may be empty).
func (g *gen) split(s string, n int) []string {
	runes := []rune(s)
	cuts := make([]int, 0, n-1)
	for i := 0; i < n-1; i++ {
		cuts = append(cuts, g.r.IntN(len(runes)+1))
	}
	sortInts(cuts)
	out := make([]string, 0, n)
	prev := 0
	for _, c := range cuts {
		out = append(out, string(runes[prev:c]))
		prev = c
	}
	return append(out, string(runes[prev:]))
}

func sortInts(xs []int) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

func (g *gen) shuffle(xs []int64) {
	g.r.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
}

var sessionIDs = []string{
	"parent", "{{sessionId}}", `we"ird`, `back\slash`, "ünï ｃｏｄｅ", "a b", "", "session", "child",
	"s.with.dots", "*", ">", "日本", "emoji🙂",
}

func (g *gen) header() {
	l := g.log
	l.ID = "session"
	if g.p(0.12) {
		return // no header line
	}
	id := fmt.Sprintf("s-%x", g.r.Uint32())
	if g.p(0.3) {
		id = g.pick(sessionIDs...)
	}
	h := Obj{{"type", "session"}, {"version", 0}, {"id", id}, {"createdAt", g.now - int64(g.r.IntN(100000))}}
	l.ID = id
	switch {
	case g.p(0.04):
		h = h.Set("id", 42) // a non-string id: the session is called "session"
		l.ID = "session"
	case g.p(0.03):
		h = h.Del("id")
		l.ID = "session"
	}
	if g.p(0.5) {
		h = append(h, KV{"cwd", "/work/" + g.pick("repo", "app", "x y")})
	}
	if g.p(0.5) {
		h = append(h, KV{"delegationDepth", int64(g.r.IntN(3))})
	}
	if g.p(0.2) {
		h = append(h, KV{"parentSession", "parent"}, KV{"seedLength", int64(g.r.IntN(20))})
	}
	if g.p(0.1) {
		h = append(h, KV{"origin", "subagent"}, KV{"agentPreset", "explore"})
	}
	if g.p(0.05) {
		h = append(h, KV{"x-extra", Obj{{"k", "v"}}})
	}
	l.Header = h
}

func (g *gen) run() {
	g.now = 1_785_000_000_000 + int64(g.r.IntN(1_000_000_000))
	g.provider = g.pick("deepseek-official", "openai-compatible", "anthropic")
	g.model = g.pick("deepseek-v4-flash", "deepseek-v4", "m-1")
	g.zeroChunkTimes = g.p(0.2)
	g.log.Pack = g.p(0.7)
	g.header()

	if g.p(0.06) {
		g.emit("session/end-seed", Obj{}) // a fork of an empty session
	}
	turns := 1 + g.r.IntN(g.opts.MaxTurns)
	if g.opts.Steady {
		turns = g.opts.MaxTurns
	} else if g.p(0.04) {
		turns = 0
		for i := g.r.IntN(4); i > 0; i-- {
			g.pluginEvent()
		}
	}
	type span struct{ start, end int }
	var spans []span
	for t := 0; t < turns && len(g.log.Events) < g.opts.MaxEvents; t++ {
		if t > 0 && g.p(0.12) {
			g.emit("session/end-seed", Obj{}) // resumed: a new lifecycle begins
		}
		start := len(g.log.Events)
		crashed := g.doTurn()
		if crashed {
			// Resume after a crash: the reference's closers, then the end-seed marker.
			for _, c := range closers(g.log.Events) {
				if c.SurfaceOp != nil {
					g.nodes = append(g.nodes, c.Seq)
				}
				g.log.Events = append(g.log.Events, c)
			}
			g.emit("session/end-seed", Obj{})
			continue
		}
		spans = append(spans, span{start, len(g.log.Events) - 1})
	}
	if len(g.log.Events) > 0 && g.log.Events[len(g.log.Events)-1].Type != "session/end-seed" && g.p(0.08) {
		g.emit("session/end-seed", Obj{})
	}
	// Crash cut: the log ends inside the last turn.
	if len(spans) > 0 && !g.opts.Steady && g.p(0.3) {
		last := spans[len(spans)-1]
		if g.log.Events[last.end].Type == "turn/end" && last.end == len(g.log.Events)-1 {
			cut := last.start + 1 + g.r.IntN(last.end-last.start)
			// Half the time cut right after a tool call was requested or recorded, so that
			// the crash-repair closers include synthetic tool results.
			var hot []int
			for i := last.start; i < last.end; i++ {
				if t := g.log.Events[i].Type; t == "tool/call" || (t == "assistant/message" && strings.Contains(string(JSON(g.log.Events[i].Data)), `"tool-call"`)) {
					hot = append(hot, i+1)
				}
			}
			if len(hot) > 0 && g.p(0.5) {
				cut = hot[g.r.IntN(len(hot))]
			}
			g.log.Events = g.log.Events[:cut]
			g.log.Cut = true
		}
	}
}

// doTurn writes one turn; it returns true when the turn "crashed" (it stops in the middle, with no
// turn/end).
func (g *gen) doTurn() (crashed bool) {
	g.turn++
	crashAt := -1
	if !g.opts.Steady && g.p(0.07) {
		crashAt = 1 + g.r.IntN(12)
	}
	points := 0
	crash := func() bool { points++; return points == crashAt }

	if g.p(0.3) {
		g.emit("agent/inbox/spliced", Obj{{"target", "next-turn"}, {"start", 0}, {"inserted", Arr{}}})
	}
	g.emit("turn/start", Obj{{"turn", g.turn}})
	steps := 1 + g.r.IntN(g.opts.MaxSteps)
	for step := int64(1); step <= int64(steps); step++ {
		g.emit("step/start", Obj{{"turn", g.turn}, {"step", step}})
		if crash() {
			return true
		}
		if step == 1 {
			g.userMessage()
			if g.turn == 1 && g.p(0.6) {
				g.emit("session/title", Obj{{"title", g.text(4)}, {"messageSeqs", []int64{g.seq() - 1}}, {"source", Obj{{"kind", "fallback"}}}})
			}
			if g.turn == 1 || g.p(0.2) {
				g.requestHeader()
			}
			if crash() {
				return true
			}
		}
		for k := g.r.IntN(3); k > 0; k-- {
			if g.p(0.4) {
				g.pluginEvent()
			}
		}
		if g.p(0.12) && !g.opts.NoReplace {
			g.compaction()
		}
		if g.p(0.1) && !g.opts.NoReplace {
			g.prune()
		}
		if crash() {
			return true
		}
		calls, stop := g.modelCall(step, step == int64(steps), crash)
		if stop {
			return true
		}
		for _, c := range calls {
			callSeq := int64(-1)
			if g.p(0.93) {
				callSeq = g.emit("tool/call", Obj{{"turn", g.turn}, {"step", step}, {"callId", c.id}, {"name", c.name}, {"arguments", c.args}})
			}
			if crash() {
				return true
			}
			if g.p(0.9) {
				g.toolResult(step, c, callSeq)
			}
			if crash() {
				return true
			}
		}
		if g.p(0.15) {
			g.todoWrite()
		}
		g.emit("step/end", Obj{{"turn", g.turn}, {"step", step}})
		if len(calls) == 0 && g.p(0.7) {
			break
		}
	}
	if crash() {
		return true
	}
	g.emit("turn/end", Obj{{"turn", g.turn}, {"reason", g.endReason()}})
	return false
}

func (g *gen) endReason() Obj {
	switch x := g.r.IntN(20); {
	case x < 14:
		return Obj{{"kind", "completed"}}
	case x < 16:
		r := Obj{{"kind", g.pick("user", "parent", "disposed")}}
		if g.p(0.3) {
			r = Obj{{"kind", "hook"}, {"reason", "stop hook"}}
		}
		return Obj{{"kind", "aborted"}, {"reason", r}}
	case x < 17:
		return Obj{{"kind", "blocked"}}
	case x < 19:
		e := Obj{{"message", "provider failed: " + g.text(3)}, {"code", g.pick("RATE_LIMIT", "SERVER", "TIMEOUT")}}
		if g.p(0.5) {
			e = append(e, KV{"status", int64(500 + g.r.IntN(4))}, KV{"providerRetryAfterMs", int64(g.r.IntN(5000))})
		}
		return Obj{{"kind", "error"}, {"error", e}}
	default:
		return Obj{{"kind", "max-tokens"}}
	}
}

func (g *gen) userMessage() {
	content := Arr{Obj{{"type", "text"}, {"text", g.text(12)}}}
	if g.p(0.1) {
		content = append(content, Obj{{"type", "image"}, {"attachment", Obj{{"id", g.uuid()}, {"mediaType", "image/png"}}}})
	}
	source := Obj{{"kind", "user"}}
	if g.p(0.1) {
		source = Obj{{"kind", "plugin"}, {"plugin", "inbox"}}
	}
	var data Obj
	if g.p(0.5) {
		data = Obj{{"content", content}, {"source", source}, {"role", "user"}, {"id", g.uuid()}}
	} else {
		data = Obj{{"id", g.uuid()}, {"role", "user"}, {"content", content}, {"source", source}}
	}
	g.appendNode("user/message", data, nil, false)
}

func (g *gen) requestHeader() {
	config := Obj{{"provider", g.provider}, {"model", g.model}}
	header := Obj{{"config", config}}
	if g.p(0.3) {
		config = append(config, KV{"reasoningEffort", "high"})
		header = Obj{{"config", config}, {"adapterDefaults", Obj{{"reasoningEffort", true}}}}
	}
	if g.p(0.7) {
		header = append(header, KV{"system", "You are an agent. " + g.text(6)})
	}
	if g.p(0.6) {
		header = append(header, KV{"tools", Arr{Obj{{"name", "bash"}, {"description", "run a command"}, {"inputSchema", Obj{{"type", "object"}}}}}})
	}
	reason := "initial"
	if g.turn > 1 {
		reason = g.pick("resume", "change")
	}
	g.emit("request/header", Obj{{"header", header}, {"reason", reason}})
	ctx := Obj{{"provider", g.provider}, {"model", g.model}}
	if g.p(0.6) {
		ctx = append(ctx, KV{"contextWindow", int64(128000)})
	}
	g.emit("request/context", ctx)
}

func (g *gen) todoWrite() {
	var todos Arr
	for i := g.r.IntN(4); i >= 0; i-- {
		todos = append(todos, Obj{{"content", g.text(4)}, {"status", g.pick("pending", "in_progress", "completed")}})
	}
	g.emit("todo/write", Obj{{"todos", todos}})
}

func (g *gen) pluginEvent() {
	switch g.r.IntN(7) {
	case 0:
		data := Obj{{"retryId", g.uuid()}, {"turn", g.turn}, {"provider", g.provider}, {"retry", int64(1)}, {"maxRetries", int64(2)}, {"delayMs", int64(g.r.IntN(100))},
			{"failure", Obj{{"message", "model returned a completed response with no content"}, {"code", "EMPTY_RESPONSE"}}}}
		if g.p(0.5) {
			g.emitIgnorable("llm/retry", data)
		} else {
			g.emit("llm/retry", data)
		}
	case 1:
		g.emit("approval/asked", Obj{{"id", g.uuid()}, {"tool", "bash"}})
	case 2:
		g.emit("hook/invoked", Obj{{"hook", "PreToolUse"}, {"turn", g.turn}})
	case 3, 4:
		// an unknown plugin type: with ignorable it can be skipped; without, only the
		// reference's stricter readers refuse it (its append path keeps it)
		typ := "x-plugin/" + g.pick("metrics", "trace", "note")
		if g.p(0.75) {
			g.emitIgnorable(typ, Obj{{"v", int64(g.r.IntN(1000))}, {"note", g.text(3)}})
		} else {
			g.emit(typ, Obj{{"v", int64(g.r.IntN(1000))}})
		}
	case 5:
		g.emit("agent/inbox/spliced", Obj{{"target", "next-turn"}, {"start", 0}, {"removedCount", int64(1)}, {"inserted", Arr{}}})
	default:
		g.emitIgnorable("compaction/"+g.pick("metrics", "probe"), Obj{{"tokens", int64(g.r.IntN(100000))}})
	}
}

type call struct{ id, name, args string }

// chunk emits one assistant/chunk event.
func (g *gen) chunk(step int64, c Obj) int64 {
	s := g.emit("assistant/chunk", Obj{{"turn", g.turn}, {"step", step}, {"chunk", c}})
	if g.zeroChunkTimes {
		g.log.Events[s].Time = 0
	}
	return s
}

// modelCall streams one model response and writes its assistant/message. It returns the tool
// calls requested; stop is true when the turn crashed in the middle of the stream.
func (g *gen) modelCall(step int64, last bool, crash func() bool) (calls []call, stop bool) {
	var chunkSeqs []int64
	var content Arr
	idx := int64(0)
	emptyMsg := g.p(0.07)
	addChunk := func(c Obj) { chunkSeqs = append(chunkSeqs, g.chunk(step, c)) }
	streamBlock := func(blockType, deltaType, text string) {
		addChunk(Obj{{"type", "block-start"}, {"index", idx}, {"blockType", blockType}})
		n := 1 + g.r.IntN(6)
		if g.p(0.25) {
			n = 3 + g.r.IntN(12)
		}
		for _, piece := range g.split(text, n) {
			addChunk(Obj{{"type", deltaType}, {"index", idx}, {"text", piece}})
		}
		addChunk(Obj{{"type", "block-end"}, {"index", idx}, {"block", Obj{{"type", blockType}, {"text", text}}}})
		content = append(content, Obj{{"type", blockType}, {"text", text}})
		idx++
	}
	if !emptyMsg {
		if g.p(0.4) {
			streamBlock("reasoning", "reasoning-delta", g.text(15))
		}
		ncalls := 0
		if !last && g.p(0.6) {
			ncalls = 1 + g.r.IntN(3)
		}
		if ncalls == 0 || g.p(0.5) {
			streamBlock("text", "text-delta", g.text(20))
		}
		for k := 0; k < ncalls; k++ {
			g.ids++
			c := call{id: fmt.Sprintf("call_%02d_%x", g.ids, g.r.Uint32()), name: g.pick("bash", "read", "write", "grep")}
			c.args = string(JSON(Obj{{"command", g.text(5)}, {"description", g.text(3)}}))
			addChunk(Obj{{"type", "block-start"}, {"index", idx}, {"blockType", "tool-call"}})
			nameMode := g.r.IntN(3) // 0: name on the first delta only, 1: on every delta, 2: never
			n := 1 + g.r.IntN(7)
			for i, piece := range g.split(c.args, n) {
				d := Obj{{"type", "tool-call-delta"}, {"index", idx}, {"id", c.id}}
				if nameMode == 1 || (nameMode == 0 && i == 0) {
					d = append(d, KV{"name", c.name})
				}
				addChunk(append(d, KV{"argumentsDelta", piece}))
			}
			addChunk(Obj{{"type", "block-end"}, {"index", idx}, {"block", Obj{{"type", "tool-call"}, {"id", c.id}, {"name", c.name}, {"arguments", c.args}}}})
			content = append(content, Obj{{"type", "tool-call"}, {"id", c.id}, {"name", c.name}, {"arguments", c.args}})
			calls = append(calls, c)
			idx++
		}
		if crash() {
			return nil, true
		}
	}
	usage := Obj{{"inputTokens", int64(g.r.IntN(5000))}, {"outputTokens", int64(g.r.IntN(500))}}
	addChunk(Obj{{"type", "usage"}, {"usage", usage}})
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool-calls"
	}
	addChunk(Obj{{"type", "finish"}, {"reason", Obj{{"kind", finish}}}})
	if content == nil {
		content = Arr{}
	}
	msg := Obj{{"role", "assistant"}, {"content", content}, {"source", Obj{{"kind", "model"}, {"provider", g.provider}, {"model", g.model}}}, {"id", g.uuid()}}
	data := Obj{{"turn", g.turn}, {"step", step}, {"message", msg}, {"usage", usage}}
	if g.p(0.03) {
		data = append(data, KV{"interrupted", true})
	}
	switch {
	case g.p(0.1):
		g.appendNode("assistant/message", data, nil, false)
	case g.p(0.1):
		g.appendNode("assistant/message", data, []int64{}, true)
	default:
		g.appendNode("assistant/message", data, chunkSeqs, true)
	}
	// Sometimes the model is asked again in the same step (an empty-response retry) and repeats a
	// call id; the reference's crash repair keeps the first position of a repeated id.
	if len(calls) > 1 && g.p(0.05) {
		again := []call{calls[1], calls[0]}
		var content2 Arr
		for _, c := range again {
			content2 = append(content2, Obj{{"type", "tool-call"}, {"id", c.id}, {"name", c.name}, {"arguments", c.args}})
		}
		msg2 := Obj{{"role", "assistant"}, {"content", content2}, {"source", Obj{{"kind", "model"}, {"provider", g.provider}, {"model", g.model}}}, {"id", g.uuid()}}
		g.appendNode("assistant/message", Obj{{"turn", g.turn}, {"step", step}, {"message", msg2}}, []int64{}, true)
		calls = again
	}
	return calls, false
}

func (g *gen) toolResult(step int64, c call, callSeq int64) {
	inner := Arr{Obj{{"type", "text"}, {"text", g.text(25)}}}
	if g.p(0.05) {
		inner = Arr{}
	}
	block := Obj{{"type", "tool-result"}, {"toolCallId", c.id}, {"content", inner}}
	isErr := g.p(0.15)
	if g.p(0.8) {
		block = append(block, KV{"isError", isErr})
	}
	msg := Obj{{"source", Obj{{"kind", "tool"}, {"callId", c.id}}}, {"content", Arr{block}}, {"role", "user"}, {"id", g.uuid()}}
	data := Obj{{"turn", g.turn}, {"step", step}, {"message", msg}}
	if isErr && g.p(0.5) {
		data = append(data, KV{"error", Obj{{"name", "ToolError"}, {"code", "EXIT_NONZERO"}}})
	}
	if g.p(0.3) {
		data = append(data, KV{"meta", Obj{{"durationMs", int64(g.r.IntN(3000))}}})
	}
	switch {
	case callSeq >= 0:
		g.appendNode("tool/result", data, []int64{callSeq}, true)
	case g.p(0.5):
		g.appendNode("tool/result", data, nil, false)
	default:
		g.appendNode("tool/result", data, []int64{g.seq() - 1}, true)
	}
}

// compaction writes a compaction bracket; most of the time its summary replaces a random span of
// current surface nodes.
func (g *gen) compaction() {
	if len(g.nodes) == 0 {
		return
	}
	cid := g.uuid()
	startSeq := g.emit("compaction/start", Obj{{"compactionId", cid}, {"turn", g.turn}})
	if g.p(0.1) {
		g.emit("compaction/end", Obj{{"compactionId", cid}, {"turn", g.turn}, {"error", Obj{{"message", "summary failed"}, {"code", "SUMMARY_FAILED"}}}})
		return
	}
	i := g.r.IntN(len(g.nodes))
	if g.p(0.5) {
		i = 0 // compaction usually condenses the oldest span
	}
	j := i + g.r.IntN(min(6, len(g.nodes)-i))
	shadowed := append([]int64{}, g.nodes[i:j+1]...)
	summary := g.text(10)
	sumSeq := g.emit("compaction/summary", Obj{{"compactionId", cid}, {"summary", Arr{Obj{{"type", "text"}, {"text", summary}}}},
		{"shadowedRange", Obj{{"start", g.nodes[i]}, {"end", g.nodes[j]}}}, {"shadowedSeqs", shadowed},
		{"shadowedTokenCount", int64(g.r.IntN(10000))}, {"provider", g.provider}, {"model", g.model}})
	sources := append([]int64{}, shadowed...)
	if g.p(0.7) {
		sources = append([]int64{sumSeq}, sources...)
	}
	if g.p(0.4) {
		sources = append([]int64{startSeq}, sources...)
	}
	if g.p(0.5) {
		g.shuffle(sources)
	}
	if g.p(0.85) {
		data := Obj{{"content", Arr{
			Obj{{"type", "text"}, {"text", "<compacted-summary>"}},
			Obj{{"type", "text"}, {"text", summary}},
			Obj{{"type", "text"}, {"text", "</compacted-summary>"}},
		}}, {"source", Obj{{"kind", "plugin"}, {"plugin", "compact"}, {"compactionId", cid}}}, {"role", "user"}, {"id", g.uuid()}}
		g.replaceNodes("user/message", data, i, j, sources)
	} else {
		content := Arr{Obj{{"type", "text"}, {"text", summary}}}
		if g.p(0.2) {
			content = Arr{} // an empty-content replacement derives no message
		}
		msg := Obj{{"role", "assistant"}, {"content", content}, {"source", Obj{{"kind", "model"}, {"provider", g.provider}, {"model", g.model}}}, {"id", g.uuid()}}
		g.replaceNodes("assistant/message", Obj{{"turn", g.turn}, {"step", int64(1)}, {"message", msg}}, i, j, sources)
	}
	g.emit("compaction/end", Obj{{"compactionId", cid}, {"turn", g.turn}})
}

// prune replaces one current tool/result node with a copy whose inner result content is shortened.
func (g *gen) prune() {
	var targets []int
	for i, s := range g.nodes {
		if g.log.Events[s].Type == "tool/result" {
			targets = append(targets, i)
		}
	}
	if len(targets) == 0 {
		return
	}
	i := targets[g.r.IntN(len(targets))]
	t := g.nodes[i]
	sources := []int64{t}
	if g.p(0.5) {
		p := g.emit("compaction/prune", Obj{{"prunedSeqs", []int64{t}}})
		sources = []int64{p, t}
	}
	data := Clone(g.log.Events[t].Data).(Obj)
	msg := mustGet(data, "message").(Obj)
	block := mustGet(msg, "content").(Arr)[0].(Obj)
	block.Set("content", Arr{Obj{{"type", "text"}, {"text", fmt.Sprintf("[pruned: %d bytes]", g.r.IntN(9000))}}})
	g.replaceNodes("tool/result", data, i, i, sources)
}
