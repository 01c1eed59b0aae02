package session

// Packed chunk rows: the reference's lossless storage packing of assistant/chunk delta runs
// (chunk-rows.js: packChunkRuns, validateRow, expandRow, decodeStorageRecord). A row is a storage
// record, never a session event: it expands to its member assistant/chunk events on read.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
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
func expandChunkRow(row *jval, tag string) ([]Event, string) {
	if !hasExactKeys(row, "type", "seq0", "time0", "data") {
		return nil, malformedRow(tag, "envelope must be exactly {type, seq0, time0, data}")
	}
	seq0, time0 := row.field("seq0"), row.field("time0")
	if seq0.kind != jNum || !isSafeInteger(seq0.n) || seq0.n < 0 {
		return nil, malformedRow(tag, "seq0 must be a non-negative safe integer")
	}
	if time0.kind != jNum || !isSafeInteger(time0.n) {
		return nil, malformedRow(tag, "time0 must be a safe integer")
	}
	data := row.field("data")
	if !isObjectLike(data) {
		return nil, malformedRow(tag, "data must be an object")
	}
	payloadKey := "texts"
	withName := false
	if tag == "tool-call-chunks" {
		payloadKey = "args"
		withName = hasExactKeys(data, "turn", "step", "index", "id", "name", "dt", "args")
		if !withName && !hasExactKeys(data, "turn", "step", "index", "id", "dt", "args") {
			return nil, malformedRow(tag, "data must be exactly {turn, step, index, id, name?, dt, args}")
		}
		if id := data.field("id"); id == nil || id.kind != jStr || (withName && data.field("name").kind != jStr) {
			return nil, malformedRow(tag, "id (and name when present) must be strings")
		}
	} else if !hasExactKeys(data, "turn", "step", "index", "dt", "texts") {
		return nil, malformedRow(tag, "data must be exactly {turn, step, index, dt, texts}")
	}
	turn, step, index := data.field("turn"), data.field("step"), data.field("index")
	if turn.kind != jNum || step.kind != jNum || index.kind != jNum {
		return nil, malformedRow(tag, "turn/step/index must be numbers")
	}
	payload := data.field(payloadKey)
	if payload.kind != jArr || len(payload.arr) == 0 {
		return nil, malformedRow(tag, payloadKey+" must be a non-empty string array")
	}
	for _, e := range payload.arr {
		if e.kind != jStr {
			return nil, malformedRow(tag, payloadKey+" must be a non-empty string array")
		}
	}
	dt := data.field("dt")
	if dt.kind != jArr {
		return nil, malformedRow(tag, "dt must be an array of safe integers")
	}
	for _, g := range dt.arr {
		if g.kind != jNum || !isSafeInteger(g.n) {
			return nil, malformedRow(tag, "dt must be an array of safe integers")
		}
	}
	if len(dt.arr) != len(payload.arr)-1 {
		return nil, malformedRow(tag, fmt.Sprintf("dt length %d does not match %d members", len(dt.arr), len(payload.arr)))
	}
	// Evaluated as JavaScript does, left to right in float64: (seq0 + length) - 1.
	if last := seq0.n + float64(len(payload.arr)); !isSafeInteger(last - 1) {
		return nil, malformedRow(tag, "member seqs must stay safe integers")
	}
	t := time0.n
	for _, g := range dt.arr {
		t += g.n
		if !isSafeInteger(t) {
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
	var name *jval
	if withName {
		name = data.field("name")
	}
	events := make([]Event, len(payload.arr))
	tm := int64(time0.n)
	for k, member := range payload.arr {
		if k > 0 {
			tm += int64(dt.arr[k-1].n)
		}
		events[k] = Event{
			Type: "assistant/chunk",
			Seq:  int64(seq0.n) + int64(k),
			Time: json.Number(strconv.FormatInt(tm, 10)),
			Data: chunkData(turn.raw, step.raw, chunkType, index.raw, rawOrNil(data.field("id"), tag), rawOf(name), member.raw),
		}
	}
	return events, ""
}

func rawOf(v *jval) []byte {
	if v == nil {
		return nil
	}
	return v.raw
}

func rawOrNil(v *jval, tag string) []byte {
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
	if ev.Seq < 0 || ev.Seq > maxSafeInteger {
		return nil, false
	}
	tf, ok := timeValue(ev.Time)
	if !ok || !isSafeInteger(tf) || string(ev.Time) != strconv.FormatInt(int64(tf), 10) {
		return nil, false
	}
	data, err := parseJSON(ev.Data)
	if err != nil || !isObjectLike(data) || !hasExactKeys(data, "turn", "step", "chunk") {
		return nil, false
	}
	turn, step, chunk := data.field("turn"), data.field("step"), data.field("chunk")
	if turn.kind != jNum || step.kind != jNum || !isObjectLike(chunk) {
		return nil, false
	}
	index := chunk.field("index")
	if index == nil || index.kind != jNum {
		return nil, false
	}
	p := &packable{seq: ev.Seq, time: int64(tf), turn: turn.raw, step: step.raw, index: index.raw}
	ct := chunk.field("type")
	if ct == nil || ct.kind != jStr {
		return nil, false
	}
	switch ct.s {
	case "text-delta", "reasoning-delta":
		text := chunk.field("text")
		if !hasExactKeys(chunk, "type", "index", "text") || text.kind != jStr {
			return nil, false
		}
		p.kind, p.member = ct.s, text.raw
	case "tool-call-delta":
		id, args, name := chunk.field("id"), chunk.field("argumentsDelta"), chunk.field("name")
		exact := hasExactKeys(chunk, "type", "index", "id", "argumentsDelta") ||
			(hasExactKeys(chunk, "type", "index", "id", "name", "argumentsDelta") && name.kind == jStr)
		if !exact || id.kind != jStr || args.kind != jStr {
			return nil, false
		}
		p.kind, p.id, p.member = ct.s, id.raw, args.raw
		if name != nil {
			p.name, p.hasName = name.raw, true
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
	if d := next.time - prev.time; d > maxSafeInteger || d < -maxSafeInteger {
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

// packChunkRuns returns the storage lines for events: every run of at least three consecutive
// same-kind, same-block delta chunks becomes one row; every other event is written verbatim.
func packChunkRuns(events []Event) ([][]byte, error) {
	var out [][]byte
	var run []*packable
	var runEvents []int
	flush := func() error {
		if len(run) >= minChunkRun {
			out = append(out, buildChunkRow(run))
		} else {
			for _, i := range runEvents {
				line, err := events[i].MarshalJSON()
				if err != nil {
					return err
				}
				out = append(out, line)
			}
		}
		run, runEvents = run[:0], runEvents[:0]
		return nil
	}
	for i := range events {
		p, ok := classifyChunk(&events[i])
		if !ok {
			if err := flush(); err != nil {
				return nil, err
			}
			line, err := events[i].MarshalJSON()
			if err != nil {
				return nil, err
			}
			out = append(out, line)
			continue
		}
		if len(run) > 0 && run[0].kind == p.kind && continuesRun(run[len(run)-1], p) {
			run = append(run, p)
			runEvents = append(runEvents, i)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		run = append(run, p)
		runEvents = append(runEvents, i)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}
