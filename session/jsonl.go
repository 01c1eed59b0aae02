package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// MaxLineBytes is the longest JSONL line (64 MiB, without its newline) that ReadJSONL and Inspect
// accept; a longer line is refused with rule "line-length" so that memory stays bounded. The
// longest line in the recorded sessions is about 62 KiB.
const MaxLineBytes = 64 << 20

// lineReader splits a stream on '\n' like the oracle's input.split('\n'), skipping lines that
// String.prototype.trim() would empty. Line numbers are 1-based and count every line.
type lineReader struct {
	r    *bufio.Reader
	line int
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{r: bufio.NewReaderSize(r, 64<<10)} }

// next returns the next non-blank line (a fresh copy) and its number, io.EOF at the end, or an
// *Error (rule line-length) for an over-long line.
func (lr *lineReader) next(session string) ([]byte, int, error) {
	for {
		var buf []byte
		tooLong := false
		for {
			chunk, err := lr.r.ReadSlice('\n')
			if !tooLong {
				if len(buf)+len(chunk) > MaxLineBytes+1 { // +1: the newline itself
					tooLong = true
					buf = nil
				} else {
					buf = append(buf, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && err != io.EOF {
				return nil, lr.line + 1, err
			}
			if err == io.EOF && len(chunk) == 0 && len(buf) == 0 && !tooLong {
				return nil, lr.line, io.EOF
			}
			break
		}
		lr.line++
		if tooLong {
			return nil, lr.line, newError(session, -1, lr.line, RuleLineLength,
				fmt.Sprintf("line is longer than %d bytes", MaxLineBytes))
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		if jsvalue.IsBlank(buf) {
			continue
		}
		return buf, lr.line, nil
	}
}

// item is one decoded event of a JSONL stream, or the error that stops it at that position.
type item struct {
	line int
	ev   Event
	p    parsedEvent
	err  *Error // the line cannot become an event (not an object, bad envelope, no data)
}

// jsonlDoc is a fully read JSONL stream.
type jsonlDoc struct {
	header     *jsvalue.Value // nil when the first line is not {"type":"session",...}
	headerLine int
	id         string // the header's id when it is a string, else the caller's default
	items      []item
}

// inspectMaxJSONDepth is the nesting limit for Inspect, which never re-encodes event data; the
// public path allows jsvalue.MaxDepth (see DEPARTURES.md).
const inspectMaxJSONDepth = 100000

// readJSONLDoc reads a whole stream the way the oracle does: every line is parsed first, then the
// header is dropped, then packed rows are validated and expanded. A line that is not JSON, an
// over-long line, or a malformed row is fatal (the oracle fails before appending anything); a line
// that parses but is not a usable event becomes an item carrying its error.
//
// anyType (Inspect) keeps events whose type is not a string (see decodeEvent) and allows nesting
// up to inspectMaxJSONDepth.
func readJSONLDoc(r io.Reader, defaultID string, anyType bool) (*jsonlDoc, *Error) {
	doc := &jsonlDoc{id: defaultID}
	sc := newJSONLScanner(r, defaultID, anyType)
	for {
		it, ok, fatal := sc.next()
		doc.header, doc.headerLine, doc.id = sc.header, sc.headerLine, sc.id
		if fatal != nil || !ok {
			return doc, fatal
		}
		doc.items = append(doc.items, it)
	}
}

// jsonlScanner reads a JSONL stream one item at a time, as readJSONLDoc does: the header on the
// first non-blank line, packed rows expanded to their events. It holds one line (and one row's
// events) at a time.
type jsonlScanner struct {
	lr         *lineReader
	anyType    bool
	first      bool
	header     *jsvalue.Value // nil when the first line is not {"type":"session",...}
	headerLine int
	id         string // the header's id when it is a string, else the default
	queue      []item // the rest of an expanded row
}

func newJSONLScanner(r io.Reader, defaultID string, anyType bool) *jsonlScanner {
	return &jsonlScanner{lr: newLineReader(r), anyType: anyType, first: true, id: defaultID}
}

// next returns the next item (ok), the end of the stream (!ok, nil), or a fatal error.
func (sc *jsonlScanner) next() (it item, ok bool, fatal *Error) {
	for len(sc.queue) == 0 {
		line, n, err := sc.lr.next(sc.id)
		if err == io.EOF {
			return item{}, false, nil
		}
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				return item{}, false, e
			}
			return item{}, false, newError(sc.id, -1, n, RuleJSON, "read failed: "+err.Error())
		}
		maxDepth := jsvalue.MaxDepth
		if sc.anyType {
			maxDepth = inspectMaxJSONDepth
		}
		v, perr := jsvalue.ParseDepth(line, maxDepth)
		if perr != nil {
			return item{}, false, newError(sc.id, -1, n, RuleJSON, perr.Error())
		}
		if sc.first {
			sc.first = false
			if jsvalue.IsPlainObject(v) && jsvalue.IsString(v.Field("type"), "session") {
				sc.header, sc.headerLine = v, n
				if id := v.Field("id"); id != nil && id.Kind() == jsvalue.String {
					sc.id = id.Str()
				}
				continue
			}
		}
		if jsvalue.IsObjectLike(v) {
			if t := v.Field("type"); t != nil && t.Kind() == jsvalue.String && isChunkRowTag(t.Str()) {
				seq := int64(-1)
				if s0 := v.Field("seq0"); s0 != nil && s0.Kind() == jsvalue.Number && jsvalue.IsSafeInteger(s0.Num()) && s0.Num() >= 0 {
					seq = int64(s0.Num())
				}
				evs, why := expandChunkRow(v, t.Str())
				if why != "" {
					return item{}, false, newError(sc.id, seq, n, RuleChunkRow, why)
				}
				for _, ev := range evs {
					it := item{line: n, ev: ev}
					var perr *Error
					if it.p, perr = parseEvent(sc.id, &it.ev); perr != nil {
						it.err = perr.withLine(n)
					}
					sc.queue = append(sc.queue, it)
				}
				continue
			}
		}
		ev, p, derr := decodeEvent(v, sc.id, sc.anyType)
		return item{line: n, ev: ev, p: p, err: derr.withLine(n)}, true, nil
	}
	it = sc.queue[0]
	sc.queue = sc.queue[1:]
	return it, true, nil
}

// JSONLReader reads a dsh JSONL stream one event at a time, with ReadJSONL's rules and errors, so
// that a long log is read in memory bounded by its longest line (or packed row): it does not
// validate session rules (Surface.Apply or Session.Append do). Next returns the events in order
// and io.EOF at the end; the first error ends the stream, as ReadJSONL's would.
type JSONLReader struct {
	sc      *jsonlScanner
	peeked  *item
	done    bool
	err     error
	started bool
}

// NewJSONLReader returns a JSONLReader on r; sessionID names the session in errors when the
// stream has no header with a string id.
func NewJSONLReader(r io.Reader, sessionID string) *JSONLReader {
	return &JSONLReader{sc: newJSONLScanner(r, sessionID, false)}
}

// Header returns the stream's header line, nil when its first non-blank line is not one. It reads
// that line when Next has not been called yet; a read error there is Next's.
func (jr *JSONLReader) Header() *Header {
	if !jr.started {
		jr.started = true
		if it, err := jr.read(); err == nil {
			jr.peeked = &it
		} else {
			jr.done, jr.err = true, err
		}
	}
	if jr.sc.header == nil {
		return nil
	}
	return headerFromValue(jr.sc.header)
}

// Next returns the next event, io.EOF after the last one, or the *Error that ends the stream.
func (jr *JSONLReader) Next() (Event, error) {
	jr.started = true
	if jr.peeked != nil {
		it := *jr.peeked
		jr.peeked = nil
		return it.ev, nil
	}
	if jr.done {
		return Event{}, jr.err
	}
	it, err := jr.read()
	if err != nil {
		jr.done, jr.err = true, err
		return Event{}, err
	}
	return it.ev, nil
}

func (jr *JSONLReader) read() (item, error) {
	it, ok, fatal := jr.sc.next()
	switch {
	case fatal != nil:
		return item{}, fatal
	case !ok:
		return item{}, io.EOF
	case it.err != nil:
		return item{}, it.err
	}
	return it, nil
}

// ReadJSONL reads a dsh JSONL stream: an optional header line ({"type":"session",...} on the
// first non-blank line), then events and packed chunk rows, expanded to events. Blank lines are
// skipped as the oracle skips them. It does not validate session rules (use Session.Append or
// Load for that), only that each line is one JSON value of a recognised shape: an event object with
// a string type, a non-negative safe-integer seq and data, or a well-formed packed row. Lines are
// at most MaxLineBytes long.
//
// Errors are *Error naming the line (rules json, line-length, chunk-row, record, envelope, data);
// on an error ReadJSONL returns the header and the events before the bad line.
// sessionID names the session in errors when the file has no header with a string id.
// Event.Time is empty for an event whose time is not a JSON number; Data, SurfaceOp and
// SourceEventSeqs keep the exact bytes of the line.
func ReadJSONL(r io.Reader, sessionID string) (*Header, []Event, error) {
	doc, fatal := readJSONLDoc(r, sessionID, false)
	var h *Header
	if doc.header != nil {
		h = headerFromValue(doc.header)
	}
	events := make([]Event, 0, len(doc.items))
	for _, it := range doc.items {
		if it.err != nil {
			return h, events, it.err
		}
		events = append(events, it.ev)
	}
	if fatal != nil {
		return h, events, fatal
	}
	return h, events, nil
}

// headerFromValue fills a Header from a parsed header line, taking each known field only when it
// has the right JSON type (the oracle reads nothing but a string id from it). Raw keeps the line.
func headerFromValue(v *jsvalue.Value) *Header {
	h := &Header{Raw: json.RawMessage(v.Raw())}
	intField := func(key string) (int64, bool) {
		x := v.Field(key)
		if x == nil || x.Kind() != jsvalue.Number || !jsvalue.IsSafeInteger(x.Num()) {
			return 0, false
		}
		return int64(x.Num()), true
	}
	strField := func(key string) string {
		if x := v.Field(key); x != nil && x.Kind() == jsvalue.String {
			return x.Str()
		}
		return ""
	}
	if n, ok := intField("version"); ok && n >= -1<<31 && n < 1<<31 {
		h.Version = int(n)
	}
	h.ID = strField("id")
	if n, ok := intField("createdAt"); ok {
		h.CreatedAt = n
	}
	h.Cwd = strField("cwd")
	h.ParentSession = strField("parentSession")
	if n, ok := intField("seedLength"); ok {
		h.SeedLength = &n
	}
	h.Origin = strField("origin")
	if n, ok := intField("delegationDepth"); ok {
		h.DelegationDepth = &n
	}
	h.AgentPreset = strField("agentPreset")
	return h
}

// headerLine returns the JSONL header line for h: Raw (compacted) when set, which must be a JSON
// object whose type is "session"; otherwise {"type":"session"} followed by the fields in the
// reference's order (version, id, createdAt, cwd?, parentSession?, seedLength?, origin?,
// delegationDepth?, agentPreset?).
func headerLine(h *Header) ([]byte, error) {
	if len(h.Raw) > 0 {
		v, err := jsvalue.Parse(h.Raw)
		if err != nil {
			return nil, fmt.Errorf("session header: Raw is not JSON: %w", err)
		}
		if !jsvalue.IsPlainObject(v) || !jsvalue.IsString(v.Field("type"), "session") {
			return nil, errors.New(`session header: Raw must be a JSON object with "type":"session"`)
		}
		return appendCompact(nil, h.Raw)
	}
	b := []byte(`{"type":"session","version":`)
	b = strconv.AppendInt(b, int64(h.Version), 10)
	b = append(b, `,"id":`...)
	b = jsvalue.AppendQuote(b, h.ID)
	b = append(b, `,"createdAt":`...)
	b = strconv.AppendInt(b, h.CreatedAt, 10)
	str := func(key, val string) {
		if val != "" {
			b = append(b, `,"`+key+`":`...)
			b = jsvalue.AppendQuote(b, val)
		}
	}
	num := func(key string, val *int64) {
		if val != nil {
			b = append(b, `,"`+key+`":`...)
			b = strconv.AppendInt(b, *val, 10)
		}
	}
	str("cwd", h.Cwd)
	str("parentSession", h.ParentSession)
	num("seedLength", h.SeedLength)
	str("origin", h.Origin)
	num("delegationDepth", h.DelegationDepth)
	str("agentPreset", h.AgentPreset)
	return append(b, '}'), nil
}

// WriteJSONL writes the header (when non-nil) and the events as dsh JSONL, one line each, each
// line ending in '\n'. With opts.Pack, every run of three or more consecutive delta chunks of one
// block (the reference's packChunkRuns) is written as one packed chunk row; ReadJSONL expands it
// back to the same events, byte for byte. It validates every line before writing anything, so an
// error (an event without data or with a time that is not a number, a bad header Raw) writes
// nothing; the output is handed to w in one Write call. JSONLWriter writes the same lines as a
// stream.
func WriteJSONL(w io.Writer, h *Header, events []Event, opts WriteOptions) error {
	var out bytes.Buffer
	jw := NewJSONLWriter(&out, opts)
	if h != nil {
		if err := jw.WriteHeader(h); err != nil {
			return err
		}
	}
	if err := jw.Write(events...); err != nil {
		return err
	}
	if err := jw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(out.Bytes())
	return err
}

// JSONLWriter writes a session as dsh JSONL the way WriteJSONL does, a batch of events at a time,
// so that a long session is written without holding it: it buffers only what is not written yet
// (with Pack, the chunk run being built). Lines go to the writer through a bufio.Writer; call
// Flush at the end. An error leaves what was written before it written.
type JSONLWriter struct {
	bw     *bufio.Writer
	pack   bool
	packer chunkPacker
	line   []byte
}

// NewJSONLWriter returns a JSONLWriter writing to w.
func NewJSONLWriter(w io.Writer, opts WriteOptions) *JSONLWriter {
	jw := &JSONLWriter{bw: bufio.NewWriterSize(w, 64<<10), pack: opts.Pack}
	jw.packer.emit = jw.writeLine
	return jw
}

func (jw *JSONLWriter) writeLine(line []byte) error {
	if _, err := jw.bw.Write(line); err != nil {
		return err
	}
	return jw.bw.WriteByte('\n')
}

// WriteHeader writes h's header line.
func (jw *JSONLWriter) WriteHeader(h *Header) error {
	line, err := headerLine(h)
	if err != nil {
		return err
	}
	return jw.writeLine(line)
}

// Write writes events, in order, after those written before.
func (jw *JSONLWriter) Write(events ...Event) error {
	for i := range events {
		if jw.pack {
			if err := jw.packer.add(&events[i]); err != nil {
				return err
			}
			continue
		}
		var err error
		if jw.line, err = appendEventJSON(jw.line[:0], &events[i], false); err != nil {
			return err
		}
		if err := jw.writeLine(jw.line); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes what is buffered: the chunk run being built (with Pack) and the buffered lines.
func (jw *JSONLWriter) Flush() error {
	if err := jw.packer.flush(); err != nil {
		return err
	}
	return jw.bw.Flush()
}

// WriteOptions controls WriteJSONL. Pack writes runs of 3+ streaming deltas as packed chunk rows.
type WriteOptions struct{ Pack bool }
