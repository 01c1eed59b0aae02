package wire

import (
	"bytes"
	"fmt"
	"net/textproto"
	"strconv"

	"github.com/agentlog/agentlog/session"
)

// Header is a message's headers as nats.go holds them (nats.Header is map[string][]string, so
// either converts to the other). Keys are case-sensitive; a key may have several values.
type Header = map[string][]string

// headerGet is the first value of key ("" when none), as nats.Header.Get.
func headerGet(h Header, key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Record headers. A record is one JetStream message holding 1..K consecutive events
// of one session, one compact JSON event per line (lines joined by "\n", no trailing newline).
const (
	HeaderSession  = "Agentlog-Session"   // the session's subject token (see Token)
	HeaderFirstSeq = "Agentlog-First-Seq" // seq of the record's first event (decimal, ≥ 0)
	HeaderCount    = "Agentlog-Count"     // number of events in the record (decimal, ≥ 1)
	HeaderFormat   = "Agentlog-Format"    // record format version: RecordFormat
	RecordFormat   = "1"
)

// EncodeRecord encodes events as a record: headers (first seq, count, session id) and body (one
// JSON event per line).
//
// The events must be non-empty and have consecutive seqs (≥ 0); each is written as compact JSON
// (no HTML escaping, no insignificant whitespace), so a line never contains a newline. The headers
// are exactly Agentlog-Session (Token(id)), Agentlog-First-Seq, Agentlog-Count and
// Agentlog-Format: 1; never any Nats-* header (a fork must not copy control headers).
// Errors are *session.Error naming the session, the seq and the rule (RuleRecord*), or Token's
// error for a bad id.
func EncodeRecord(id string, events []session.Event) (Header, []byte, error) {
	tok, err := Token(id)
	if err != nil {
		return nil, nil, err
	}
	_, body, err := EncodeLines(id, events, false)
	if err != nil {
		return nil, nil, err
	}
	return RecordHeader(tok, events[0].Seq, len(events)), body, nil
}

// DecodeRecord decodes a record's headers and body, checking the count and seq headers.
//
// It checks Agentlog-Format, that Agentlog-Session is a canonical token, that Agentlog-First-Seq
// and Agentlog-Count are single decimal values (≥ 0 and ≥ 1), that the body has exactly Count
// lines, that each line is a JSON event object (type, seq, time and data present) and that the seqs
// run from First-Seq without gaps. Other headers (Nats-* added by the server) are ignored. Errors
// are *session.Error naming the session, the seq and the rule (RuleRecord*).
//
// A record of format 2 that holds offloaded events (HeaderBlob) is refused here (rule record-blob):
// read it with store.Store.DecodeRecord, which fetches them.
func DecodeRecord(h Header, body []byte) ([]session.Event, error) {
	rec, err := DecodeRecordAt(h, body, 0)
	if err == nil && len(rec.Blobs) > 0 {
		return nil, RecordError(rec.ID, rec.Blobs[0].Ref.Seq, 0, session.RuleRecordBlob,
			"the record holds %d offloaded events (Agentlog-Format %s): read it through a Store (Store.DecodeRecord), which fetches them from %s", len(rec.Blobs), h[HeaderFormat][0], BlobStream)
	}
	return rec.Events, err
}

// RecordError builds a codec error: a *session.Error naming session id, seq (-1: none) and rule,
// the reason formatted from format and args. streamSeq 0 means "not stored yet / unknown";
// another value is named ("record at stream seq N: ...").
func RecordError(id string, seq int64, streamSeq uint64, rule session.Rule, format string, args ...any) *session.Error {
	why := fmt.Sprintf(format, args...)
	if streamSeq > 0 {
		why = fmt.Sprintf("record at stream seq %d: %s", streamSeq, why)
	}
	return session.NewError(id, seq, 0, rule, why)
}

// EncodeLines checks that events are non-empty and consecutive and encodes each once, as one
// compact JSON line, into body (the lines joined by "\n"); lines are the lines, aliasing body.
// With trusted, the events' raw JSON fields are known valid (the caller validated them with
// session.Surface.Apply) and compact ones are copied without being scanned again; otherwise every
// field is validated (session.Event.MarshalJSON).
func EncodeLines(id string, events []session.Event, trusted bool) (lines [][]byte, body []byte, err error) {
	if len(events) == 0 {
		return nil, nil, RecordError(id, -1, 0, session.RuleRecordEmpty, "no events to encode")
	}
	size := 0
	for i := range events {
		ev := &events[i]
		size += 96 + len(ev.Type) + len(ev.Time) + len(ev.Data) + len(ev.SurfaceOp) + len(ev.SourceEventSeqs)
	}
	body = make([]byte, 0, size)
	ends := make([]int, len(events))
	for i := range events {
		ev := &events[i]
		if ev.Seq < 0 {
			return nil, nil, RecordError(id, ev.Seq, 0, session.RuleRecordSeq, "seq is negative")
		}
		if i > 0 && ev.Seq != events[i-1].Seq+1 {
			return nil, nil, RecordError(id, ev.Seq, 0, session.RuleRecordSeq, "follows seq %d in the same record; seqs must be consecutive", events[i-1].Seq)
		}
		if ev.Type == "" {
			return nil, nil, RecordError(id, ev.Seq, 0, session.RuleRecordEvent, "event has an empty type")
		}
		if i > 0 {
			body = append(body, '\n')
		}
		// Both write compact JSON without HTML escaping; AppendJSON skips re-validating data that
		// Surface.Apply already validated (the record encoder is on the publisher's hot path).
		if trusted {
			body, err = ev.AppendJSON(body)
		} else {
			var line []byte
			if line, err = ev.MarshalJSON(); err == nil {
				body = append(body, line...)
			}
		}
		if err != nil {
			return nil, nil, RecordError(id, ev.Seq, 0, session.RuleRecordEvent, "cannot encode event: %v", err)
		}
		ends[i] = len(body)
	}
	lines = make([][]byte, len(events))
	start := 0
	for i, end := range ends {
		lines[i] = body[start:end:end]
		start = end + 1
	}
	return lines, body, nil
}

// RecordHeader returns the headers of a record of count events from firstSeq of the session whose
// token is token (Agentlog-Session, -First-Seq, -Count, -Format 1), in a map with room for the two
// an append adds (the guard and the msg id) without growing.
func RecordHeader(token string, firstSeq int64, count int) Header {
	h := make(Header, 6)
	h[HeaderSession] = []string{token}
	h[HeaderFirstSeq] = []string{strconv.FormatInt(firstSeq, 10)}
	h[HeaderCount] = []string{strconv.Itoa(count)}
	h[HeaderFormat] = []string{RecordFormat}
	return h
}

// RecordLastSeq is the seq of a record's last event, from its headers (Agentlog-First-Seq +
// Agentlog-Count - 1), for a reader of headers only; ok is false when they are malformed.
func RecordLastSeq(h Header) (last int64, ok bool) {
	first, err1 := strconv.ParseInt(headerGet(h, HeaderFirstSeq), 10, 64)
	count, err2 := strconv.ParseInt(headerGet(h, HeaderCount), 10, 64)
	if err1 != nil || err2 != nil || first < 0 || count < 1 {
		return 0, false
	}
	return first + count - 1, true
}

// HeaderWireSize is the number of bytes nats.go writes for h (mirrors nats.Msg.headerSize): the
// stream's max message size and the server's max payload count headers plus body.
func HeaderWireSize(h Header) int {
	if len(h) == 0 {
		return 0
	}
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(textproto.TrimString(v)) + 4
		}
	}
	return n
}

// singleHeader returns the only value of key, or an error naming the rule.
func singleHeader(h Header, key, id string, streamSeq uint64) (string, error) {
	vs := h[key]
	switch len(vs) {
	case 0:
		return "", RecordError(id, -1, streamSeq, session.RuleRecordHeader, "header %s is missing", key)
	case 1:
		return vs[0], nil
	default:
		return "", RecordError(id, -1, streamSeq, session.RuleRecordHeader, "header %s has %d values, want 1", key, len(vs))
	}
}

// Record is a decoded record.
type Record struct {
	ID     string          // the session, from the Agentlog-Session header
	Events []session.Event // its events; an offloaded one holds only its Seq
	Body   []byte          // the copy of the body the events alias (offloaded events' lines are empty)
	Blobs  []BlobLine      // the offloaded events of a format 2 record, in seq order
}

// DecodeRecordAt is DecodeRecord for a record stored at stream seq streamSeq (0 when unknown),
// which errors name. A format 2 record is decoded too: its offloaded events are left with only
// their seq and listed in Record.Blobs, for the caller to fetch (store.Store.DecodeRecord does).
func DecodeRecordAt(h Header, body []byte, streamSeq uint64) (Record, error) {
	// The events alias a copy of body, not the caller's buffer.
	d, err := decodeRecord(h, append([]byte(nil), body...), streamSeq, false)
	return Record{ID: d.id, Events: d.events, Body: d.body, Blobs: d.blobs}, err
}

// ScannedRecord is a record decoded into the shared form (ScanRecord).
type ScannedRecord struct {
	ID     string            // the session, from the Agentlog-Session header
	Events []session.Scanned // its events; an offloaded one holds only its Seq
	Blobs  []BlobLine        // the offloaded events of a format 2 record, in seq order
}

// ScanRecord is DecodeRecordAt (stream seq unknown) giving the events in the shared form: each
// line is decoded and its data validated and located in one pass (session.LineScanner), so that
// the rules and the projection units read the data without parsing it again. The events alias
// body (not a copy of it): the caller must not change body while it uses them.
func ScanRecord(h Header, body []byte) (ScannedRecord, error) { return ScanRecordAt(h, body, 0) }

// ScanRecordAt is ScanRecord for a record stored at stream seq streamSeq (0 when unknown), which
// errors name.
func ScanRecordAt(h Header, body []byte, streamSeq uint64) (ScannedRecord, error) {
	d, err := decodeRecord(h, body, streamSeq, true)
	return ScannedRecord{ID: d.id, Events: d.scanned, Blobs: d.blobs}, err
}

// decoded is what decodeRecord returns: events, or with scan the scanned ones.
type decoded struct {
	id      string
	events  []session.Event
	scanned []session.Scanned
	body    []byte
	blobs   []BlobLine
}

// decodeRecord decodes a record whose events alias body (DecodeRecordAt, ScanRecord).
func decodeRecord(h Header, body []byte, streamSeq uint64, scan bool) (decoded, error) {
	id := "?"
	tok, err := singleHeader(h, HeaderSession, id, streamSeq)
	if err != nil {
		return decoded{}, err
	}
	if id, err = IDFromToken(tok); err != nil {
		return decoded{}, RecordError(tok, -1, streamSeq, session.RuleRecordSession, "header %s: %v", HeaderSession, err)
	}
	d := decoded{id: id}
	format, err := singleHeader(h, HeaderFormat, id, streamSeq)
	if err != nil {
		return decoded{id: id}, err
	}
	if format != RecordFormat && format != RecordFormatBlobs && format != RecordFormatChunks {
		return decoded{id: id}, RecordError(id, -1, streamSeq, session.RuleRecordFormat, "header %s is %q, this code reads %q, %q and %q", HeaderFormat, format, RecordFormat, RecordFormatBlobs, RecordFormatChunks)
	}
	fs, err := singleHeader(h, HeaderFirstSeq, id, streamSeq)
	if err != nil {
		return decoded{id: id}, err
	}
	first, perr := strconv.ParseInt(fs, 10, 64)
	if perr != nil || first < 0 || strconv.FormatInt(first, 10) != fs {
		return decoded{id: id}, RecordError(id, -1, streamSeq, session.RuleRecordHeader, "header %s is %q, want a decimal integer ≥ 0", HeaderFirstSeq, fs)
	}
	cs, err := singleHeader(h, HeaderCount, id, streamSeq)
	if err != nil {
		return decoded{id: id}, err
	}
	count, perr := strconv.Atoi(cs)
	if perr != nil || count < 1 || strconv.Itoa(count) != cs {
		return decoded{id: id}, RecordError(id, first, streamSeq, session.RuleRecordHeader, "header %s is %q, want a decimal integer ≥ 1", HeaderCount, cs)
	}
	blobs, err := recordBlobLines(h, id, format, first, count, streamSeq)
	if err != nil {
		return decoded{id: id}, err
	}
	// The lines are counted as they are split (below); only a mismatch counts them all.
	// The lines are counted as they are split (below); a refusal counts them all, since a wrong
	// count is reported before any line.
	countErr := func() error {
		nlines := 0
		if len(body) > 0 || len(blobs) > 0 { // a format 2 record of one offloaded event has an empty body
			nlines = bytes.Count(body, []byte{'\n'}) + 1
		}
		if nlines == count {
			return nil
		}
		return RecordError(id, first, streamSeq, session.RuleRecordCount, "header %s is %d but the body has %d lines", HeaderCount, count, nlines)
	}
	fail := func(err error) (decoded, error) {
		if cerr := countErr(); cerr != nil {
			err = cerr
		}
		return decoded{id: id}, err
	}
	if len(body) == 0 && len(blobs) == 0 || count > len(body)+1 {
		return fail(nil)
	}
	var ls session.LineScanner
	if scan {
		d.scanned = make([]session.Scanned, 0, count)
		ls.Grow(count)
	} else {
		d.events = make([]session.Event, 0, count)
	}
	rest := body
	next := 0 // the next of blobs
	for i := 0; i < count; i++ {
		want := first + int64(i)
		line := rest
		if j := bytes.IndexByte(rest, '\n'); j >= 0 {
			if i == count-1 {
				return fail(nil) // more lines than Count
			}
			line, rest = rest[:j], rest[j+1:]
		} else if i < count-1 {
			return fail(nil) // fewer lines than Count
		}
		if len(line) == 0 && next < len(blobs) && blobs[next].Ref.Seq == want {
			blobs[next].Index = i
			next++
			if scan {
				d.scanned = append(d.scanned, session.Scanned{Event: session.Event{Seq: want}})
			} else {
				d.events = append(d.events, session.Event{Seq: want})
			}
			continue
		}
		// One pass per line: the envelope is built, data/surfaceOp/sourceEventSeqs are validated
		// and kept as raw bytes aliasing body (with scan, data's values are located too).
		var ev session.Event
		var sc session.Scanned
		if scan {
			sc, err = ls.Scan(line, id)
			ev = sc.Event
		} else {
			ev, err = session.DecodeEventLine(line, id)
		}
		if err != nil {
			why := err.Error()
			if se, ok := err.(*session.Error); ok { // it names the session and seq we name: say them once
				why = "(" + string(se.Rule) + ") " + se.Reason
			}
			return fail(RecordError(id, want, streamSeq, session.RuleRecordEvent, "line %d is not an event %s", i+1, why))
		}
		if ev.Type == "" || ev.Time == "" {
			return fail(RecordError(id, want, streamSeq, session.RuleRecordEvent, "line %d lacks one of type, seq, time, data", i+1))
		}
		if ev.Seq != want {
			return fail(RecordError(id, want, streamSeq, session.RuleRecordSeq, "line %d has seq %d, want %d (first seq %d)", i+1, ev.Seq, want, first))
		}
		if scan {
			d.scanned = append(d.scanned, sc)
		} else {
			d.events = append(d.events, ev)
		}
	}
	if next != len(blobs) {
		return fail(RecordError(id, blobs[next].Ref.Seq, streamSeq, session.RuleRecordBlob, "header %s names seq %d, but its line is not empty", HeaderBlob, blobs[next].Ref.Seq))
	}
	d.body, d.blobs = body, blobs
	return d, nil
}

// recordBlobLines parses the HeaderBlob values of a record (formats 2 and 3 only; a format 1
// record may have none): canonical, in ascending seq order, each within the record's seqs.
func recordBlobLines(h Header, id, format string, first int64, count int, streamSeq uint64) ([]BlobLine, error) {
	vs := h[HeaderBlob]
	if len(vs) == 0 {
		if format != RecordFormat {
			return nil, RecordError(id, -1, streamSeq, session.RuleRecordFormat, "header %s is %q but the record names no %s (format %q holds offloaded events)", HeaderFormat, format, HeaderBlob, format)
		}
		return nil, nil
	}
	if format == RecordFormat {
		return nil, RecordError(id, -1, streamSeq, session.RuleRecordFormat, "header %s is present in a record of format %q (offloaded events need format %q)", HeaderBlob, format, RecordFormatChunks)
	}
	shape := "<seq> <size> <sha256 hex> <id> <chunks>"
	if format == RecordFormatBlobs {
		shape = "<seq> <size> <sha256 hex> <id>"
	}
	blobs := make([]BlobLine, len(vs))
	for i, v := range vs {
		ref, ok := parseBlobRef(v, format)
		if !ok {
			return nil, RecordError(id, first, streamSeq, session.RuleRecordHeader, "header %s value %q, want %q (format %s)", HeaderBlob, v, shape, format)
		}
		if ref.Seq < first || ref.Seq >= first+int64(count) || (i > 0 && ref.Seq <= blobs[i-1].Ref.Seq) {
			return nil, RecordError(id, ref.Seq, streamSeq, session.RuleRecordHeader, "header %s names seq %d, out of order or outside the record's seqs %d..%d", HeaderBlob, ref.Seq, first, first+int64(count)-1)
		}
		blobs[i] = BlobLine{Index: -1, Ref: ref}
	}
	return blobs, nil
}
