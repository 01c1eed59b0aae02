package session

// Packed chunk rows: the reference's lossless storage packing of assistant/chunk delta runs
// (chunk-rows.js: packChunkRuns, validateRow, expandRow, decodeStorageRecord). A row is a storage
// record, never a session event: it expands to its member assistant/chunk events on read.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// minChunkRun is the reference's MIN_RUN: runs shorter than this are stored verbatim.
const minChunkRun = 3

func isChunkRowTag(t string) bool {
	return t == "text-chunks" || t == "reasoning-chunks" || t == "tool-call-chunks"
}

// malformedRow is the reference's uniform diagnostic `malformed <tag> storage row: <why>`.
func malformedRow(tag, why string) string { return "malformed " + tag + " storage row: " + why }

// expandChunkRow validates a row-tagged object exactly as validateRow does and expands it into
// its member events (expandRow). The error string is the reference's text.
func expandChunkRow(row *jsvalue.Value, tag string) ([]Event, string) {
	if !jsvalue.HasExactKeys(row, "type", "seq0", "time0", "data") {
		return nil, malformedRow(tag, "envelope must be exactly {type, seq0, time0, data}")
	}
	seq0, time0 := row.Field("seq0"), row.Field("time0")
	if seq0.Kind() != jsvalue.Number || !jsvalue.IsSafeInteger(seq0.Num()) || seq0.Num() < 0 {
		return nil, malformedRow(tag, "seq0 must be a non-negative safe integer")
	}
	if time0.Kind() != jsvalue.Number || !jsvalue.IsSafeInteger(time0.Num()) {
		return nil, malformedRow(tag, "time0 must be a safe integer")
	}
	data := row.Field("data")
	if !jsvalue.IsObjectLike(data) {
		return nil, malformedRow(tag, "data must be an object")
	}
	payloadKey := "texts"
	withName := false
	if tag == "tool-call-chunks" {
		payloadKey = "args"
		withName = jsvalue.HasExactKeys(data, "turn", "step", "index", "id", "name", "dt", "args")
		if !withName && !jsvalue.HasExactKeys(data, "turn", "step", "index", "id", "dt", "args") {
			return nil, malformedRow(tag, "data must be exactly {turn, step, index, id, name?, dt, args}")
		}
		if id := data.Field("id"); id == nil || id.Kind() != jsvalue.String || (withName && data.Field("name").Kind() != jsvalue.String) {
			return nil, malformedRow(tag, "id (and name when present) must be strings")
		}
	} else if !jsvalue.HasExactKeys(data, "turn", "step", "index", "dt", "texts") {
		return nil, malformedRow(tag, "data must be exactly {turn, step, index, dt, texts}")
	}
	turn, step, index := data.Field("turn"), data.Field("step"), data.Field("index")
	if turn.Kind() != jsvalue.Number || step.Kind() != jsvalue.Number || index.Kind() != jsvalue.Number {
		return nil, malformedRow(tag, "turn/step/index must be numbers")
	}
	payload := data.Field(payloadKey)
	if payload.Kind() != jsvalue.Array || len(payload.Elems()) == 0 {
		return nil, malformedRow(tag, payloadKey+" must be a non-empty string array")
	}
	for _, e := range payload.Elems() {
		if e.Kind() != jsvalue.String {
			return nil, malformedRow(tag, payloadKey+" must be a non-empty string array")
		}
	}
	dt := data.Field("dt")
	if dt.Kind() != jsvalue.Array {
		return nil, malformedRow(tag, "dt must be an array of safe integers")
	}
	for _, g := range dt.Elems() {
		if g.Kind() != jsvalue.Number || !jsvalue.IsSafeInteger(g.Num()) {
			return nil, malformedRow(tag, "dt must be an array of safe integers")
		}
	}
	if len(dt.Elems()) != len(payload.Elems())-1 {
		return nil, malformedRow(tag, fmt.Sprintf("dt length %d does not match %d members", len(dt.Elems()), len(payload.Elems())))
	}
	// Evaluated as JavaScript does, left to right in float64: (seq0 + length) - 1.
	if last := seq0.Num() + float64(len(payload.Elems())); !jsvalue.IsSafeInteger(last - 1) {
		return nil, malformedRow(tag, "member seqs must stay safe integers")
	}
	t := time0.Num()
	for _, g := range dt.Elems() {
		t += g.Num()
		if !jsvalue.IsSafeInteger(t) {
			return nil, malformedRow(tag, "member times must stay safe integers")
		}
	}

	// expandRow
	var chunkType string
	switch tag {
	case "text-chunks":
		chunkType = "text-delta"
	case "reasoning-chunks":
		chunkType = "reasoning-delta"
	default:
		chunkType = "tool-call-delta"
	}
	var name *jsvalue.Value
	if withName {
		name = data.Field("name")
	}
	events := make([]Event, len(payload.Elems()))
	tm := int64(time0.Num())
	for k, member := range payload.Elems() {
		if k > 0 {
			tm += int64(dt.Elems()[k-1].Num())
		}
		events[k] = Event{
			Type: "assistant/chunk",
			Seq:  int64(seq0.Num()) + int64(k),
			Time: json.Number(strconv.FormatInt(tm, 10)),
			Data: chunkData(turn.Raw(), step.Raw(), chunkType, index.Raw(), rawOrNil(data.Field("id"), tag), rawOf(name), member.Raw()),
		}
	}
	return events, ""
}

func rawOf(v *jsvalue.Value) []byte {
	if v == nil {
		return nil
	}
	return v.Raw()
}

func rawOrNil(v *jsvalue.Value, tag string) []byte {
	if tag != "tool-call-chunks" {
		return nil
	}
	return rawOf(v)
}

// chunkData builds an assistant/chunk payload from raw JSON pieces, in the reference's key order:
// {turn, step, chunk: {type, index, text}} or {turn, step, chunk: {type, index, id, name?,
// argumentsDelta}}. id is nil for text and reasoning deltas.
func chunkData(turn, step []byte, chunkType string, index, id, name, member []byte) json.RawMessage {
	b := make([]byte, 0, 64+len(member)+len(id)+len(name))
	b = append(b, `{"turn":`...)
	b = append(b, turn...)
	b = append(b, `,"step":`...)
	b = append(b, step...)
	b = append(b, `,"chunk":{"type":"`...)
	b = append(b, chunkType...)
	b = append(b, `","index":`...)
	b = append(b, index...)
	if id != nil {
		b = append(b, `,"id":`...)
		b = append(b, id...)
		if name != nil {
			b = append(b, `,"name":`...)
			b = append(b, name...)
		}
		b = append(b, `,"argumentsDelta":`...)
	} else {
		b = append(b, `,"text":`...)
	}
	b = append(b, member...)
	b = append(b, `}}`...)
	return b
}

// packable is one classified delta chunk event (the reference's classify) with the raw pieces a
// row needs.
type packable struct {
	kind                  string // text-delta, reasoning-delta, tool-call-delta
	seq, time             int64
	turn, step, index, id []byte
	name                  []byte // nil when the chunk has no name
	hasName               bool
	member                []byte // text or argumentsDelta, raw
}

// classifyChunk is the reference's classify, plus one condition of ours: the event's bytes must be
// exactly what expanding a row reproduces, so that packing never changes a byte on read-back.
func classifyChunk(ev *Event) (*packable, bool) {
	if ev.Type != "assistant/chunk" || ev.SurfaceOp != nil || ev.SourceEventSeqs != nil || ev.Ignorable {
		return nil, false
	}
	if ev.Seq < 0 || ev.Seq > jsvalue.MaxSafeInteger {
		return nil, false
	}
	tf, ok := timeValue(ev.Time)
	if !ok || !jsvalue.IsSafeInteger(tf) || string(ev.Time) != strconv.FormatInt(int64(tf), 10) {
		return nil, false
	}
	data, err := jsvalue.Parse(ev.Data)
	if err != nil || !jsvalue.IsObjectLike(data) || !jsvalue.HasExactKeys(data, "turn", "step", "chunk") {
		return nil, false
	}
	turn, step, chunk := data.Field("turn"), data.Field("step"), data.Field("chunk")
	if turn.Kind() != jsvalue.Number || step.Kind() != jsvalue.Number || !jsvalue.IsObjectLike(chunk) {
		return nil, false
	}
	index := chunk.Field("index")
	if index == nil || index.Kind() != jsvalue.Number {
		return nil, false
	}
	p := &packable{seq: ev.Seq, time: int64(tf), turn: turn.Raw(), step: step.Raw(), index: index.Raw()}
	ct := chunk.Field("type")
	if ct == nil || ct.Kind() != jsvalue.String {
		return nil, false
	}
	switch ct.Str() {
	case "text-delta", "reasoning-delta":
		text := chunk.Field("text")
		if !jsvalue.HasExactKeys(chunk, "type", "index", "text") || text.Kind() != jsvalue.String {
			return nil, false
		}
		p.kind, p.member = ct.Str(), text.Raw()
	case "tool-call-delta":
		id, args, name := chunk.Field("id"), chunk.Field("argumentsDelta"), chunk.Field("name")
		exact := jsvalue.HasExactKeys(chunk, "type", "index", "id", "argumentsDelta") ||
			(jsvalue.HasExactKeys(chunk, "type", "index", "id", "name", "argumentsDelta") && name.Kind() == jsvalue.String)
		if !exact || id.Kind() != jsvalue.String || args.Kind() != jsvalue.String {
			return nil, false
		}
		p.kind, p.id, p.member = ct.Str(), id.Raw(), args.Raw()
		if name != nil {
			p.name, p.hasName = name.Raw(), true
		}
	default:
		return nil, false
	}
	var idRaw []byte
	if p.kind == "tool-call-delta" {
		idRaw = p.id
	}
	if !bytes.Equal(chunkData(p.turn, p.step, p.kind, p.index, idRaw, p.name, p.member), ev.Data) {
		return nil, false
	}
	return p, true
}

// continuesRun is the reference's continues, comparing raw bytes where it compares values (so a
// row expands back to the same bytes).
func continuesRun(prev, next *packable) bool {
	if next.seq != prev.seq+1 {
		return false
	}
	if d := next.time - prev.time; d > jsvalue.MaxSafeInteger || d < -jsvalue.MaxSafeInteger {
		return false
	}
	if !bytes.Equal(next.turn, prev.turn) || !bytes.Equal(next.step, prev.step) || !bytes.Equal(next.index, prev.index) {
		return false
	}
	if next.kind != "tool-call-delta" {
		return true
	}
	return bytes.Equal(prev.id, next.id) && prev.hasName == next.hasName && bytes.Equal(prev.name, next.name)
}

// buildChunkRow writes the row for a run (len(run) >= minChunkRun), as buildRow does.
func buildChunkRow(run []*packable) []byte {
	first := run[0]
	tag := "text-chunks"
	switch first.kind {
	case "reasoning-delta":
		tag = "reasoning-chunks"
	case "tool-call-delta":
		tag = "tool-call-chunks"
	}
	b := []byte(`{"type":"` + tag + `","seq0":`)
	b = strconv.AppendInt(b, first.seq, 10)
	b = append(b, `,"time0":`...)
	b = strconv.AppendInt(b, first.time, 10)
	b = append(b, `,"data":{"turn":`...)
	b = append(b, first.turn...)
	b = append(b, `,"step":`...)
	b = append(b, first.step...)
	b = append(b, `,"index":`...)
	b = append(b, first.index...)
	b = append(b, `,"dt":[`...)
	for i := 1; i < len(run); i++ {
		if i > 1 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, run[i].time-run[i-1].time, 10)
	}
	b = append(b, ']')
	key := "texts"
	if tag == "tool-call-chunks" {
		b = append(b, `,"id":`...)
		b = append(b, first.id...)
		if first.hasName {
			b = append(b, `,"name":`...)
			b = append(b, first.name...)
		}
		key = "args"
	}
	b = append(b, `,"`+key+`":[`...)
	for i, m := range run {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.member...)
	}
	return append(b, `]}}`...)
}

// chunkPacker packs a stream of events into storage lines as the reference's packChunkRuns
// does: every run of at least three consecutive same-kind, same-block delta chunks becomes one
// row; every other event is written verbatim. It holds only the run being built.
type chunkPacker struct {
	run       []*packable
	runEvents []Event
	emit      func(line []byte) error
}

// add takes the next event; emit gets each finished line.
func (k *chunkPacker) add(ev *Event) error {
	p, ok := classifyChunk(ev)
	if !ok {
		if err := k.flush(); err != nil {
			return err
		}
		return k.emitEvent(ev)
	}
	if len(k.run) == 0 || k.run[0].kind != p.kind || !continuesRun(k.run[len(k.run)-1], p) {
		if err := k.flush(); err != nil {
			return err
		}
	}
	k.run = append(k.run, p)
	k.runEvents = append(k.runEvents, *ev)
	return nil
}

func (k *chunkPacker) emitEvent(ev *Event) error {
	line, err := ev.MarshalJSON()
	if err != nil {
		return err
	}
	return k.emit(line)
}

// flush writes the run being built (a row, or its events verbatim when shorter than three).
func (k *chunkPacker) flush() error {
	defer func() { k.run, k.runEvents = k.run[:0], k.runEvents[:0] }()
	if len(k.run) >= minChunkRun {
		return k.emit(buildChunkRow(k.run))
	}
	for i := range k.runEvents {
		if err := k.emitEvent(&k.runEvents[i]); err != nil {
			return err
		}
	}
	return nil
}
