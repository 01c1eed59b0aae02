package session

import (
	"encoding/json"
	"fmt"
	"iter"
	"unsafe"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// Scanned is an event together with what the one scan of its line found: that Data, SurfaceOp and
// SourceEventSeqs are valid JSON, whether each holds a number JSON cannot carry losslessly, and
// where the values of Data are (down to four levels). Surface.ApplyScanned, the projector's
// built-in units and SeedValidator.AddScanned read it instead of parsing the data again. Get one
// from a LineScanner (what the record decoder uses), or wrap an event with Scan, which defers the
// scan to the first read.
//
// The scan describes the embedded Event's Data as it was scanned: replacing Data discards it
// (the next reader scans again); changing Data's bytes in place is not allowed.
type Scanned struct {
	Event
	flags  scanFlags
	dataAt *byte // Data's first byte and length when scanned (a replaced Data is scanned again)
	dataN  int
	index  jsvalue.Index
}

type scanFlags uint8

const (
	scanChecked   scanFlags = 1 << iota // Data is valid JSON and scanDataLossy says whether it is lossy
	scanIndexed                         // index locates Data's values
	scanDataLossy                       // Data holds a number JSON cannot carry losslessly
)

// Scan levels and bounds: the decoder records up to scanNodes values of an event's data, down to
// scanLevels (data.message.content[0].type is level 4, the deepest a built-in reader needs); an
// event with more is indexed on demand, up to lazyScanNodes values (beyond that, reads scan).
const (
	scanLevels    = 4
	scanNodes     = 64
	lazyScanNodes = 4096
)

// Scan returns ev in the shared form without scanning it: the first reader of its data scans it
// once (validating it and locating its values), and later readers use that scan.
func Scan(ev Event) Scanned { return Scanned{Event: ev} }

// current reports whether the scan still describes Data.
func (ev *Scanned) current() bool {
	if ev.flags == 0 || len(ev.Data) != ev.dataN {
		return false
	}
	return len(ev.Data) == 0 || &ev.Data[0] == ev.dataAt
}

// scanData scans Data once (BuildIndex), when no scan describes it: false when it is not valid
// JSON (the caller then reports it with parseEvent's error).
func (ev *Scanned) scanData() bool {
	if ev.current() && ev.flags&scanIndexed != 0 {
		return true
	}
	if len(ev.Data) == 0 {
		return false
	}
	x, lossy, err := jsvalue.BuildIndex(ev.Data, scanLevels, lazyScanNodes)
	if err != nil {
		return false
	}
	ev.flags = scanChecked | scanIndexed
	if lossy {
		ev.flags |= scanDataLossy
	}
	ev.dataAt, ev.dataN, ev.index = &ev.Data[0], len(ev.Data), x
	return true
}

// data is the root of Data's values (undefined when Data is not valid JSON).
func (ev *Scanned) data() jsvalue.Node {
	if !ev.scanData() {
		return jsvalue.Node{}
	}
	return ev.index.Root()
}

// Field returns the value at path in the event's data (path[0] a member of data, path[1] a
// member of that, ...; no path: data itself), located by the event's scan. As in JSON.parse, the
// last of repeated names wins and names compare unescaped. A missing value, or one below a value
// that is not an object, is a Field that does not Exist.
func (ev *Scanned) Field(path ...string) Field { return Field{ev.data().Path(path...)} }

// Lookup is Field(path...).Raw(): the raw JSON at path, aliasing Data; ok is false when there is
// none.
func (ev *Scanned) Lookup(path ...string) (json.RawMessage, bool) {
	f := ev.Field(path...)
	return f.Raw(), f.Exists()
}

// Field is one value of a Scanned event's data.
type Field struct{ n jsvalue.Node }

// Exists reports whether the value is there (not undefined).
func (f Field) Exists() bool { return f.n.Kind() != jsvalue.Undefined }

// Raw is the value's JSON text, aliasing the event's Data (nil when it does not exist).
func (f Field) Raw() json.RawMessage { return f.n.Raw() }

// Get is the member name of the object f (a Field that does not exist when f is not an object or
// has no such member; the last of repeated names wins).
func (f Field) Get(name string) Field { return Field{f.n.Get(name)} }

// Elems yields the elements of the array f (nothing when f is not an array).
func (f Field) Elems() iter.Seq[Field] {
	return func(yield func(Field) bool) {
		for n := range f.n.Elems() {
			if !yield(Field{n}) {
				return
			}
		}
	}
}

// IsString reports whether f is a JSON string equal to s (escapes decoded).
func (f Field) IsString(s string) bool { return f.n.IsString(s) }

// IsObject, IsArray, IsNull and IsBool report f's JSON kind.
func (f Field) IsObject() bool { return f.n.Kind() == jsvalue.Object }
func (f Field) IsArray() bool  { return f.n.Kind() == jsvalue.Array }
func (f Field) IsNull() bool   { return f.n.Kind() == jsvalue.Null }
func (f Field) IsBool() bool   { return f.n.Kind() == jsvalue.Bool }

// IsTrue reports whether f is the JSON literal true.
func (f Field) IsTrue() bool { return string(f.n.Raw()) == "true" }

// parsed returns the parsed parts the rules read, from the scan where it has them: a data whose
// fields no rule reads is the scan's placeholder (kind, bytes, lossiness), not parsed again; the
// rest is parsed as parseEvent does. Errors are parseEvent's.
func (ev *Scanned) parsed(sessionID string) (parsedEvent, *Error) {
	if dataIsRead(ev.Type) || !(ev.current() && ev.flags&scanChecked != 0 || ev.scanData()) {
		return parseEvent(sessionID, &ev.Event)
	}
	var p parsedEvent
	p.data = jsvalue.Unread(ev.flags&scanDataLossy != 0) // no rule reads this type's data (dataIsRead)
	if ev.SurfaceOp == nil && ev.SourceEventSeqs == nil {
		return p, nil
	}
	// surfaceOp and sourceEventSeqs are small and read by the rules: parse them.
	var err error
	if ev.SurfaceOp != nil {
		if p.op, err = jsvalue.Parse(ev.SurfaceOp); err != nil {
			return p, newError(sessionID, ev.Seq, 0, RuleJSON, "session event \""+ev.Type+"\" surfaceOp: "+err.Error())
		}
	}
	if ev.SourceEventSeqs != nil {
		if p.srcs, err = jsvalue.Parse(ev.SourceEventSeqs); err != nil {
			return p, newError(sessionID, ev.Seq, 0, RuleJSON, "session event \""+ev.Type+"\" sourceEventSeqs: "+err.Error())
		}
	}
	return p, nil
}

// ApplyScanned is Apply for an event in the shared form: the same checks and the same result, with
// ev's data scanned at most once (by its decoder, or here for one wrapped by Scan).
func (s *Surface) ApplyScanned(sessionID string, ev *Scanned, lookup Lookup) error {
	if ev.Seq != s.AsOfSeq+1 { // before the data's errors, as in Apply
		return newError(sessionID, ev.Seq, 0, RuleSeqContiguous,
			fmt.Sprintf("session event seq %d is not contiguous; expected %d", ev.Seq, s.AsOfSeq+1))
	}
	p, perr := ev.parsed(sessionID)
	if perr != nil {
		return perr
	}
	v, err := s.validateNext(sessionID, &ev.Event, &p, true, surfaceLookup(lookup))
	if err != nil {
		return err
	}
	s.commit(&ev.Event, &v)
	return nil
}

// LineScanner decodes event lines into the shared form. The values it locates are kept in one
// buffer shared by the events it returns, which saves an allocation per event; the zero value is
// ready to use, and it is not safe for concurrent use.
type LineScanner struct {
	nodes []jsvalue.IndexNode
	strs  []byte // the bytes of the strings handed out (str): appended to, never changed
}

// str returns b as a string cut from the scanner's arena: one allocation per arena, not per
// string. The arena is only ever appended to (a full one is replaced, not reused), so the bytes
// under a string handed out never change.
func (ls *LineScanner) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(ls.strs)+len(b) > cap(ls.strs) {
		ls.strs = make([]byte, 0, max(512, 2*len(b)))
	}
	start := len(ls.strs)
	ls.strs = append(ls.strs, b...)
	return unsafe.String(&ls.strs[start], len(b))
}

// Grow makes room for the values of about n more events.
func (ls *LineScanner) Grow(n int) {
	if need := len(ls.nodes) + 8*n; need > cap(ls.nodes) {
		ls.nodes = append(make([]jsvalue.IndexNode, 0, need), ls.nodes...)
	}
}

// Scan decodes one event line as DecodeEventLine does (the same result and the same refusals) and
// returns it with what its scan found, in the same single pass over the line.
func (ls *LineScanner) Scan(line []byte, session string) (Scanned, error) {
	sc, ok := scanEventLineFast(line, ls)
	if ok {
		return sc, nil
	}
	ev, p, err := decodeEventLineParsed(line, session)
	if err != nil {
		return Scanned{}, err
	}
	sc = Scanned{Event: ev, flags: scanChecked, dataAt: &ev.Data[0], dataN: len(ev.Data)}
	if p.data.Lossy() {
		sc.flags |= scanDataLossy
	}
	return sc, nil
}

// ScanEventLine is LineScanner.Scan with a scanner of its own.
func ScanEventLine(line []byte, session string) (Scanned, error) {
	var ls LineScanner
	return ls.Scan(line, session)
}
