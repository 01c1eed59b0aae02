package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestReadJSONLShapes(t *testing.T) {
	in := "\n  \n" + `{"type":"session","version":0,"id":"s1","createdAt":5,"cwd":"/w","seedLength":3,"extra":{"k":1}}` + "\n" +
		`{"type":"turn/start","seq":0,"time":7,"data":{"turn":1},"extra":1,"ignorable":"yes"}` + "\r\n" +
		`{"type":"x/y","seq":1,"time":"late","data":{"a" : 1},"surfaceOp":null,"ignorable":true}` + "\n" +
		`{"type":"text-chunks","seq0":2,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[1,2],"texts":["a","b\u00e9","c"]}}` + "\n" +
		`{"type":"tool-call-chunks","seq0":5,"time0":20,"data":{"turn":1,"step":1,"index":1,"id":"c1","name":"bash","dt":[0],"args":["{","}"]}}`
	h, evs, err := ReadJSONL(strings.NewReader(in), "default")
	if err != nil {
		t.Fatal(err)
	}
	if h == nil || h.ID != "s1" || h.CreatedAt != 5 || h.Cwd != "/w" || h.SeedLength == nil || *h.SeedLength != 3 || !strings.Contains(string(h.Raw), `"extra"`) {
		t.Fatalf("header %+v", h)
	}
	if len(evs) != 7 {
		t.Fatalf("%d events", len(evs))
	}
	if evs[0].Time != "7" || evs[0].Ignorable || evs[1].Time != "" || !evs[1].Ignorable || string(evs[1].SurfaceOp) != "null" {
		t.Fatalf("envelopes %+v %+v", evs[0], evs[1])
	}
	if string(evs[1].Data) != `{"a" : 1}` {
		t.Fatalf("data bytes changed: %s", evs[1].Data)
	}
	if evs[3].Seq != 3 || evs[3].Time != "11" || string(evs[3].Data) != `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"b\u00e9"}}` {
		t.Fatalf("text member %+v %s", evs[3], evs[3].Data)
	}
	if evs[6].Seq != 6 || evs[6].Time != "20" || string(evs[6].Data) != `{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"c1","name":"bash","argumentsDelta":"}"}}` {
		t.Fatalf("tool member %+v %s", evs[6], evs[6].Data)
	}
}

func TestReadJSONLErrors(t *testing.T) {
	cases := []struct {
		in   string
		rule Rule
		line int
		seq  int64
		n    int // events returned before the error
		text string
	}{
		{`{"type":"a","seq":0,"time":1,"data":{}}` + "\n" + `{"type":`, RuleJSON, 2, -1, 1, "invalid JSON"},
		{`{"type":"a","seq":0,"time":1,"data":{}}` + "\n" + `[1]`, RuleRecord, 2, -1, 1, "not an event object"},
		{`null`, RuleRecord, 1, -1, 0, "line is null"},
		{`{"seq":0,"time":1,"data":{}}`, RuleEnvelope, 1, 0, 0, "event type must be a string"},
		{`{"type":"a","seq":"0","time":1,"data":{}}`, RuleEnvelope, 1, -1, 0, "seq must be a non-negative safe integer"},
		{`{"type":"a","seq":0,"time":1}`, RuleData, 1, 0, 0, "has no data"},
		{`{"type":"text-chunks","seq0":4,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}`, RuleChunkRow, 1, 4, 0, "malformed text-chunks storage row: texts must be a non-empty string array"},
		{"\ufeff" + `{"type":"session","id":"x"}`, RuleJSON, 1, -1, 0, "invalid JSON"},
	}
	for _, c := range cases {
		_, evs, err := ReadJSONL(strings.NewReader(c.in), "dflt")
		var e *Error
		if !errors.As(err, &e) || e.Rule != c.rule || e.Line != c.line || e.Seq != c.seq || len(evs) != c.n || !strings.Contains(e.Error(), c.text) {
			t.Errorf("%q: got %d events, %v (%+v); want rule %s line %d seq %d %q", c.in, len(evs), err, e, c.rule, c.line, c.seq, c.text)
		}
		if e != nil && !strings.Contains(e.Error(), `"dflt"`) {
			t.Errorf("%q: error does not name the session: %s", c.in, e.Error())
		}
	}
}

func TestReadJSONLLineLimit(t *testing.T) {
	// A line of MaxLineBytes+1 bytes is refused without holding it in memory.
	r := bufio.NewReader(io.MultiReader(strings.NewReader(`{"type":"a","seq":0,"time":1,"data":{}}`+"\n"+`{"x":"`), repeatReader('a', MaxLineBytes), strings.NewReader(`"}`+"\n")))
	_, evs, err := ReadJSONL(r, "big")
	var e *Error
	if !errors.As(err, &e) || e.Rule != RuleLineLength || e.Line != 2 || len(evs) != 1 {
		t.Fatalf("got %d events, %v", len(evs), err)
	}
}

// TestWriteJSONLRoundTrip: pack then read gives back the same events, byte for byte, and the
// packed layout is the reference's (rows only for runs of 3+ of one block).
func TestWriteJSONLRoundTrip(t *testing.T) {
	chunk := func(seq int64, turn, step int, chunk string) Event {
		ev := mk(seq, "assistant/chunk", `{"turn":`+itoa(turn)+`,"step":`+itoa(step)+`,"chunk":`+chunk+`}`)
		return ev
	}
	text := func(i int, s string) string {
		return `{"type":"text-delta","index":` + itoa(i) + `,"text":"` + s + `"}`
	}
	reason := func(i int, s string) string {
		return `{"type":"reasoning-delta","index":` + itoa(i) + `,"text":"` + s + `"}`
	}
	tool := func(i int, id, name, a string) string {
		if name == "" {
			return `{"type":"tool-call-delta","index":` + itoa(i) + `,"id":"` + id + `","argumentsDelta":"` + a + `"}`
		}
		return `{"type":"tool-call-delta","index":` + itoa(i) + `,"id":"` + id + `","name":"` + name + `","argumentsDelta":"` + a + `"}`
	}
	evs := []Event{
		mk(0, "turn/start", `{"turn":1}`),
		chunk(1, 1, 1, reason(0, "r1")), chunk(2, 1, 1, reason(0, "r2")), chunk(3, 1, 1, reason(0, `r\"3`)), // row
		chunk(4, 1, 1, text(1, "a")), chunk(5, 1, 1, text(1, "b")), // 2: verbatim
		chunk(6, 1, 1, text(2, "c")), chunk(7, 1, 1, text(2, "d")), chunk(8, 1, 1, text(2, "e")), chunk(9, 1, 1, text(2, "f")), // row
		chunk(10, 1, 1, tool(3, "c1", "bash", "{")), chunk(11, 1, 1, tool(3, "c1", "bash", "x")), chunk(12, 1, 1, tool(3, "c1", "bash", "}")), // row with name
		chunk(13, 1, 1, tool(3, "c1", "", "{")), chunk(14, 1, 1, tool(3, "c1", "", "}")), chunk(15, 1, 1, tool(3, "c1", "", "}")), // row without name
		chunk(16, 1, 2, text(0, "g")), chunk(17, 1, 1, text(0, "h")), chunk(18, 1, 1, text(0, "i")), // step changes: verbatim
		mk(19, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"j","extra":1}}`), // not whitelisted
		chunk(20, 1, 1, text(0, "k")), chunk(21, 1, 1, text(0, "l")),
	}
	evs[21].Time = "1.0e3" // not a canonical integer literal: stored verbatim so its bytes survive
	evs = append(evs, chunk(22, 1, 1, text(0, "m")))
	var out bytes.Buffer
	h := &Header{Version: 0, ID: "rt", CreatedAt: 9}
	if err := WriteJSONL(&out, h, evs, WriteOptions{Pack: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var tags []string
	for _, l := range lines[1:] {
		var v struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(l), &v)
		tags = append(tags, v.Type)
	}
	wantTags := "turn/start reasoning-chunks assistant/chunk assistant/chunk text-chunks tool-call-chunks tool-call-chunks " +
		"assistant/chunk assistant/chunk assistant/chunk assistant/chunk assistant/chunk assistant/chunk assistant/chunk"
	if strings.Join(tags, " ") != wantTags {
		t.Fatalf("layout:\n%s\nwant:\n%s\n%s", strings.Join(tags, " "), wantTags, out.String())
	}
	if lines[0] != `{"type":"session","version":0,"id":"rt","createdAt":9}` {
		t.Fatalf("header line %s", lines[0])
	}
	h2, back, err := ReadJSONL(&out, "x")
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID != "rt" || !reflect.DeepEqual(back, evs) {
		for i := range evs {
			if i < len(back) && !reflect.DeepEqual(back[i], evs[i]) {
				t.Errorf("event %d:\n got %+v %s\nwant %+v %s", i, back[i], back[i].Data, evs[i], evs[i].Data)
			}
		}
		t.Fatalf("round trip changed events (%d vs %d)", len(back), len(evs))
	}
	// Unpacked, every event is one line.
	out.Reset()
	if err := WriteJSONL(&out, nil, evs, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != len(evs) {
		t.Fatalf("%d lines for %d events", n, len(evs))
	}
}

func TestWriteJSONLRefusesWithoutWriting(t *testing.T) {
	var out bytes.Buffer
	evs := []Event{mk(0, "a", `{}`), {Type: "b", Seq: 1, Time: "x", Data: json.RawMessage(`{}`)}}
	if err := WriteJSONL(&out, nil, evs, WriteOptions{Pack: true}); err == nil || out.Len() != 0 {
		t.Fatalf("err %v, wrote %d bytes", err, out.Len())
	}
	if err := WriteJSONL(&out, &Header{Raw: json.RawMessage(`{"type":"x"}`)}, nil, WriteOptions{}); err == nil || out.Len() != 0 {
		t.Fatalf("bad header Raw: err %v, wrote %d bytes", err, out.Len())
	}
	if err := WriteJSONL(&out, nil, []Event{{Type: "a", Seq: 0, Time: "1"}}, WriteOptions{}); err == nil || out.Len() != 0 {
		t.Fatalf("no data: err %v", err)
	}
}

// TestRecordedLogsRoundTrip: every recorded log reads, packs and reads back to the same events,
// and the packed lines are the original lines as JSON values (the reference's packing layout).
func TestRecordedLogsRoundTrip(t *testing.T) {
	paths := expectedPairs(t, recordedDir)
	for _, p := range paths {
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h, evs := readLog(t, p)
		var out bytes.Buffer
		if err := WriteJSONL(&out, h, evs, WriteOptions{Pack: true}); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		gotLines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		wantLines := strings.Split(strings.TrimSuffix(string(orig), "\n"), "\n")
		if len(gotLines) != len(wantLines) {
			t.Fatalf("%s: %d lines, original has %d", filepath.Base(p), len(gotLines), len(wantLines))
		}
		for i := range gotLines {
			if !jsonEqual(t, []byte(gotLines[i]), []byte(wantLines[i])) {
				t.Fatalf("%s line %d:\n got %s\nwant %s", filepath.Base(p), i+1, gotLines[i], wantLines[i])
			}
		}
		_, back, err := ReadJSONL(&out, "x")
		if err != nil || !reflect.DeepEqual(back, evs) {
			t.Fatalf("%s: read back differs: %v", p, err)
		}
	}
	t.Logf("%d recorded logs round-trip through WriteJSONL(Pack) and ReadJSONL", len(paths))
}

func TestEventJSON(t *testing.T) {
	ev := Event{Type: "user/message", Seq: 3, Time: "1700000000000", Data: json.RawMessage(`{"text":"<a&b>"}`),
		SurfaceOp: json.RawMessage(`"append"`), SourceEventSeqs: json.RawMessage(`[1, 2]`), Ignorable: true}
	b, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"user/message","seq":3,"time":1700000000000,"data":{"text":"<a&b>"},"sourceEventSeqs":[1,2],"surfaceOp":"append","ignorable":true}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	var back Event
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	ev.SourceEventSeqs = json.RawMessage(`[1,2]`)
	if !reflect.DeepEqual(back, ev) {
		t.Fatalf("unmarshal %+v", back)
	}
	for _, bad := range []Event{{Type: "a", Data: json.RawMessage(`{}`)}, {Type: "a", Time: "1"}, {Type: "a", Time: "1", Data: json.RawMessage(`{`)}} {
		if _, err := bad.MarshalJSON(); err == nil {
			t.Errorf("MarshalJSON(%+v) succeeded", bad)
		}
	}
	for _, bad := range []string{`[]`, `{"type":"text-chunks","seq0":0,"time0":0,"data":{}}`, `{"type":1,"seq":0,"data":{}}`, `{"type":"a","seq":0}`} {
		var e Event
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// repeatReader yields n copies of c without holding them in memory.
type repeatReaderT struct {
	c byte
	n int
}

func repeatReader(c byte, n int) io.Reader { return &repeatReaderT{c: c, n: n} }

func (r *repeatReaderT) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := len(p)
	if k > r.n {
		k = r.n
	}
	if k > 0 {
		p[0] = r.c
		for filled := 1; filled < k; filled *= 2 {
			copy(p[filled:k], p[:filled])
		}
	}
	r.n -= k
	return k, nil
}

// TestNestingLimits: the public reading path stops at 10,000 levels (encoding/json's limit);
// Inspect follows the reference up to 100,000; deeper is refused, never a crash.
func TestNestingLimits(t *testing.T) {
	line := func(depth int) string {
		return `{"type":"plugin/x","seq":0,"time":1,"data":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
	}
	_, _, err := ReadJSONL(strings.NewReader(line(20000)), "deep")
	var e *Error
	if !errors.As(err, &e) || e.Rule != RuleJSON || !strings.Contains(e.Error(), "nesting deeper than 10000") {
		t.Fatalf("ReadJSONL: %v", err)
	}
	if res := Inspect(strings.NewReader(line(20000)), false); !res.OK || *res.Events != 1 {
		t.Fatalf("Inspect refused 20000 levels: %s", res.Error)
	}
	if res := Inspect(strings.NewReader(line(200000)), false); res.OK || *res.AcceptedEvents != 0 || !strings.Contains(res.Error, "[rule json]") {
		t.Fatalf("Inspect accepted 200000 levels: %+v", res)
	}
}

// TestNonStringType: ReadJSONL refuses an event whose type is not a string; Inspect keeps it as
// the reference does and refuses only the forks that include it.
func TestNonStringType(t *testing.T) {
	in := `{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}` + "\n" + `{"type":"turn/end","seq":1,"time":2,"data":{"turn":1}}` + "\n" + `{"type":5,"seq":2,"time":3,"data":{}}`
	if _, _, err := ReadJSONL(strings.NewReader(in), "t"); err == nil {
		t.Fatal("ReadJSONL accepted a numeric type")
	}
	res := Inspect(strings.NewReader(in), true)
	if !res.OK || *res.Events != 3 {
		t.Fatalf("Inspect: %+v", res)
	}
	if f := res.Forks[0]; f.OK || f.Error != "seed event at index 2 has an invalid event envelope" {
		t.Fatalf("fork at the end: %+v", f)
	}
	if f := res.Forks[2]; !f.OK || *f.SeedLength != 2 {
		t.Fatalf("fork at 1: %+v", f)
	}
}
