package session

import (
	"bufio"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fastPathEvents are varied events whose AppendJSON lines seed the fast-path tests.
func fastPathEvents() []Event {
	return []Event{
		{Type: "assistant/chunk", Seq: 12, Time: "1785000000000", Data: json.RawMessage(`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hello"}}`)},
		{Type: "turn/start", Seq: 0, Time: "1", Data: json.RawMessage(`{"turn":1}`)},
		{Type: "user/message", Seq: 1, Time: "2", Data: json.RawMessage(`{"id":"u","role":"user","content":[{"type":"text","text":"hi \"there\" \\ \u00e9 \ud83d\ude00"}],"source":{"kind":"user"}}`), SurfaceOp: json.RawMessage(`"append"`)},
		{Type: "user/message", Seq: 2, Time: "3", Data: json.RawMessage(`{"id":"v","role":"user","content":[],"source":{"kind":"user"}}`), SurfaceOp: json.RawMessage(`{"op":"replace","start":1,"end":1}`), SourceEventSeqs: json.RawMessage(`[1]`)},
		{Type: "tool/result", Seq: 9007199254740991, Time: "1.5e3", Data: json.RawMessage(`{"message":{"content":[{"content":[-0.5,1e300,true,false,null]}]}}`), Ignorable: true},
		{Type: "session/end-seed", Seq: 5, Time: "-1", Data: json.RawMessage(`{}`)},
		{Type: "some/other-type", Seq: 123456789012345, Time: "0", Data: json.RawMessage(`[]`)},
		{Type: "x/\u00e9\u4e16", Seq: 1234567890123456, Time: "1E-7", Data: json.RawMessage(`"str"`)},
		{Type: "", Seq: 0, Time: "5", Data: json.RawMessage(`null`)},
		{Type: "todo/write", Seq: 3, Time: "0.0", Data: json.RawMessage(`{"a":{"b":{"c":[[[[{}]]]]}}}`), Ignorable: true},
		{Type: "session/title", Seq: 4, Time: "17", Data: json.RawMessage(`{"title":"\u0000\u001f\t"}`)},
		{Type: "step/end", Seq: 7, Time: "8", Data: json.RawMessage(`{"x":-0}`)},
		{Type: "step/start", Seq: 7, Time: "8", Data: json.RawMessage(`[1e400]`)},
	}
}

// fastPathEdgeLines are hand-written lines for the edges of the fast path.
var fastPathEdgeLines = []string{
	`{"type":"a","seq":1,"time":1,"data":{},"type":"b"}`,
	`{"type":"a","seq":1,"time":1,"data":{},"seq":2}`,
	`{"type":"a","seq":1,"time":1,"data":{},"seq":"2"}`,
	`{"type":"a","seq":"1","time":1,"data":{},"seq":2}`,
	`{"type":"a","seq":1,"time":1,"data":{},"data":[1]}`,
	`{"type":"a","seq":1,"time":1,"data":{},"time":"x"}`,
	`{"type":"a","seq":1,"time":"x","data":{},"time":2}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":true,"ignorable":false}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":false,"ignorable":true}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":1}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":"true"}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":null}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":tru}`,
	`{"type":"a","seq":1,"time":1,"data":{},"ignorable":truex}`,
	`{"type":"a","seq":1,"time":1,"data":{},"unknown":{"deep":[1,2,{"x":null}]},"other":-0}`,
	`{"type":"a","seq":1,"time":1,"data":{},"unknown":[1e400]}`,
	`{"type":"a","seq":1,"time":1,"data":{},"unknown":[1,}`,
	" \t\r\n{ \"type\" : \"a\" ,\n\"seq\"\t:\r1 , \"time\" : 1 , \"data\" : { \"x\" : [ 1 , 2 ] } } \n\t",
	"{\"type\":\"a\",\"seq\":1,\"time\":1,\"data\":{}}\v",
	"\xef\xbb\xbf{\"type\":\"a\",\"seq\":1,\"time\":1,\"data\":{}}",
	`{"\u0074ype":"a","seq":1,"time":1,"data":{}}`,
	`{"type":"a","se\u0071":1,"time":1,"data":{}}`,
	`{"type":"a","seq":1,"time":1,"dat\u0061":{}}`,
	`{"type":"a","seq":1,"time":1,"data":{},"\u0069gnorable":true}`,
	`{"type":"a","seq":1,"time":1,"data":{},"surface\u004fp":"append"}`,
	`{"type":"a\u002fb","seq":1,"time":1,"data":{}}`,
	`{"type":"a\"b","seq":1,"time":1,"data":{}}`,
	`{"type":"text-chunks","seq":1,"time":1,"data":{}}`,
	`{"type":"text-chunks","seq":1,"time":1,"data":{},"type":"a"}`,
	`{"type":"a","seq":1,"time":1,"data":{},"type":"reasoning-chunks"}`,
	`{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{}}`,
	`{"type":"text-chunk\u0073","seq":1,"time":1,"data":{}}`,
	`{"type":"a","seq":1.0,"time":1,"data":{}}`,
	`{"type":"a","seq":1e0,"time":1,"data":{}}`,
	`{"type":"a","seq":1E0,"time":1,"data":{}}`,
	`{"type":"a","seq":-0,"time":1,"data":{}}`,
	`{"type":"a","seq":-1,"time":1,"data":{}}`,
	`{"type":"a","seq":0,"time":1,"data":{}}`,
	`{"type":"a","seq":00,"time":1,"data":{}}`,
	`{"type":"a","seq":01,"time":1,"data":{}}`,
	`{"type":"a","seq":0.5,"time":1,"data":{}}`,
	`{"type":"a","seq":1.,"time":1,"data":{}}`,
	`{"type":"a","seq":999999999999999,"time":1,"data":{}}`,
	`{"type":"a","seq":1000000000000000,"time":1,"data":{}}`,
	`{"type":"a","seq":9007199254740991,"time":1,"data":{}}`,
	`{"type":"a","seq":9007199254740992,"time":1,"data":{}}`,
	`{"type":"a","seq":9007199254740993,"time":1,"data":{}}`,
	`{"type":"a","seq":90071992547409930000,"time":1,"data":{}}`,
	`{"type":"a","seq":1e400,"time":1,"data":{}}`,
	`{"type":"a","seq":null,"time":1,"data":{}}`,
	`{"type":"a","seq":true,"time":1,"data":{}}`,
	`{"type":"a","seq":[1],"time":1,"data":{}}`,
	`{"type":"a","time":1,"data":{}}`,
	`{"type":1,"seq":1,"time":1,"data":{}}`,
	`{"type":null,"seq":1,"time":1,"data":{}}`,
	`{"type":{"a":1},"seq":1,"time":1,"data":{}}`,
	`{"seq":1,"time":1,"data":{}}`,
	`{"type":"a","seq":1,"time":1}`,
	`{"type":"a","seq":1,"time":1,"data":null}`,
	`{"type":"a","seq":1,"data":{}}`,
	`{"type":"a","seq":1,"time":"1785000000000","data":{}}`,
	`{"type":"a","seq":1,"time":null,"data":{}}`,
	`{"type":"a","seq":1,"time":-0,"data":{}}`,
	`{"type":"a","seq":1,"time":1e400,"data":{}}`,
	`{"type":"a","seq":1,"time":-,"data":{}}`,
	`{"type":"a","seq":1,"time":1.e5,"data":{}}`,
	`{"type":"a","seq":1,"time":01,"data":{}}`,
	`{"type":"a","seq":1,"time":1,"data":{"n":123456789012345678901234567890e-400}}`,
	`{"type":"a","seq":1,"time":1,"data":{"n":1` + strings.Repeat("0", 400) + `}}`,
	`{"type":"a","seq":1,"time":1,"data":{"n":-` + strings.Repeat("9", 400) + `}}`,
	`{"type":"a","seq":1,"time":1,"data":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"type":"a","seq":1,"time":1,"data":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	"{\"type\":\"a\xff\",\"seq\":1,\"time\":1,\"data\":{}}",
	"{\"type\":\"\xed\xa0\x80\",\"seq\":1,\"time\":1,\"data\":{}}",
	"{\"ty\xffpe\":\"a\",\"type\":\"b\",\"seq\":1,\"time\":1,\"data\":{}}",
	"{\"type\":\"a\",\"seq\":1,\"time\":1,\"data\":\"\xff\xfe\"}",
	"{\"type\":\"a\",\"seq\":1,\"time\":1,\"data\":\"\x01\"}",
	"{\"type\":\"a\x01\",\"seq\":1,\"time\":1,\"data\":{}}",
	"{\"type\":\"a\",\"seq\":1,\"time\":1,\"da\nta\":{}}",
	`{"type":"a","seq":1,"time":1,"data":"\ud800"}`,
	`{"type":"a","seq":1,"time":1,"data":"\uZZZZ"}`,
	`{"type":"a","seq":1,"time":1,"data":"\q"}`,
	`{"type":"a","seq":1,"time":1,"data":{}`,
	`{"type":"a","seq":1,"time":1,"data":{}}}`,
	`{"type":"a","seq":1,"time":1,"data":{}} x`,
	`{"type":"a","seq":1,"time":1,"data":{},}`,
	`{"type":"a","seq":1,"time":1,"data":{} "x":1}`,
	`{"type":"a","seq":1,"time":1,"data"}`,
	`{"type":"a","seq":1,"time":1,"data":}`,
	`{"type":"a","seq":1,"time":1,"data`,
	`{"type":"a","seq":1,"time":1,"data":`,
	`{"type":"a","seq":1,"time":1,"data":{},`,
	`{"type":"a","seq":1,"time":1,"data":{},"`,
	`{"type":"a`,
	`{"type"`,
	`{"type":`,
	`{`,
	`{}`,
	` { } `,
	`{"type":"a","seq":1,"time":1,"data":{},"sourceEventSeqs":[0,1],"surfaceOp":{"op":"replace","start":0,"end":1}}`,
	`{"type":"a","seq":1,"time":1,"data":{},"sourceEventSeqs":null,"surfaceOp":null}`,
	`{"type":"a","seq":1,"time":1,"data":{},"sourceEventSeqs":"x","surfaceOp":7}`,
	`{"type":"a","seq":1,"time":1,"data":{},"surfaceOp":"append","surfaceOp":"x"}`,
	`[{"type":"a","seq":1,"time":1,"data":{}}]`,
	`"x"`, `1`, `true`, `null`, `-0`, ``, ` `,
}

// addRecordedLineSeeds adds single lines of the recorded sessions (as read, and as AppendJSON
// re-encodes their events) when the shared data is there.
func addRecordedLineSeeds(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl"))
	seen := map[string]bool{}
	for _, p := range paths {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		n := 0
		for sc.Scan() && n < 8 {
			line := sc.Text()
			if len(line) > 4096 {
				continue
			}
			var ev Event
			if ev.UnmarshalJSON([]byte(line)) == nil {
				if b, err := ev.AppendJSON(nil); err == nil && !seen[string(b)] {
					seen[string(b)] = true
					f.Add(b)
				}
			}
			if !seen[line] {
				seen[line] = true
				f.Add([]byte(line))
				n++
			}
		}
		fh.Close()
	}
}

// checkSameDecode fails t unless decodeEventLineFast (when it accepts in) and DecodeEventLine both
// give exactly what decodeEventLineGeneral gives for in.
func checkSameDecode(t *testing.T, in []byte) {
	t.Helper()
	want, werr := decodeEventLineGeneral(in, "fuzz")
	if fast, ok := decodeEventLineFast(in); ok {
		if werr != nil {
			t.Fatalf("fast path accepted %q as %+v; general path: %v", in, fast, werr)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("fast path %+v, general path %+v for %q", fast, want, in)
		}
	}
	got, gerr := DecodeEventLine(in, "fuzz")
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("DecodeEventLine err %v, general err %v for %q", gerr, werr, in)
	}
	if gerr != nil {
		var ge, we *Error
		if !errors.As(gerr, &ge) || !errors.As(werr, &we) {
			t.Fatalf("errors are not *Error: %T %T", gerr, werr)
		}
		if gerr.Error() != werr.Error() || !reflect.DeepEqual(ge, we) {
			t.Fatalf("DecodeEventLine err %#v, general err %#v for %q", ge, we, in)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeEventLine %+v, general %+v for %q", got, want, in)
	}
}

// FuzzDecodeEventLineFastPath: DecodeEventLine (fast path or not) gives exactly what the general
// path gives, on every input: the same event, or the same *Error (rule, seq and message).
func FuzzDecodeEventLineFastPath(f *testing.F) {
	for _, ev := range fastPathEvents() {
		b, err := ev.AppendJSON(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range fastPathEdgeLines {
		f.Add([]byte(s))
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add(benchChunkLine())
	addRecordedLineSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		checkSameDecode(t, in)
	})
}

// TestDecodeEventLineFastPathEdges runs the fuzz seeds as a plain test and checks that the lines
// AppendJSON writes take the fast path.
func TestDecodeEventLineFastPathEdges(t *testing.T) {
	for _, s := range fastPathEdgeLines {
		checkSameDecode(t, []byte(s))
	}
	for _, s := range fuzzSeeds {
		checkSameDecode(t, []byte(s))
	}
	for _, ev := range fastPathEvents() {
		b, err := ev.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		checkSameDecode(t, b)
		if _, ok := decodeEventLineFast(b); !ok && ev.Seq < 1e15 {
			t.Errorf("AppendJSON line %s does not take the fast path", b)
		}
	}
	// Lines that must take the fast path (the common shapes, with whitespace and repeats).
	for _, s := range []string{
		`{"type":"a","seq":1,"time":1,"data":{}}`,
		" {\"type\" :\"a\",\n\"seq\": 0 ,\"time\":-1.5e3,\"data\":[],\"x\":{\"y\":1}} \r\n",
		`{"type":"a","seq":1,"time":1,"data":{},"type":"b","seq":2,"ignorable":true,"ignorable":false}`,
		`{"data":1,"seq":999999999999999,"type":"","time":1}`,
	} {
		checkSameDecode(t, []byte(s))
		if _, ok := decodeEventLineFast([]byte(s)); !ok {
			t.Errorf("%q does not take the fast path", s)
		}
	}
}

// TestDecodeEventLineFastPathAllocs: a line of a common type allocates only its time string.
func TestDecodeEventLineFastPathAllocs(t *testing.T) {
	line := benchChunkLine()
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodeEventLine(line, "x"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("DecodeEventLine allocates %v times per line, want at most 1 (the time string)", allocs)
	}
}

// benchChunkLine is a 512-byte assistant/chunk record line.
func benchChunkLine() []byte {
	r := rand.New(rand.NewSource(1))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	head := `{"type":"assistant/chunk","seq":12,"time":1785000000000,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"`
	tail := `"}}}`
	text := make([]byte, 512-len(head)-len(tail))
	for i := range text {
		text[i] = letters[r.Intn(len(letters))]
	}
	return []byte(head + string(text) + tail)
}

// BenchmarkDecodeEventLine compares the general path with DecodeEventLine (fast path) on a
// 512-byte assistant/chunk line.
func BenchmarkDecodeEventLine(b *testing.B) {
	line := benchChunkLine()
	if len(line) != 512 {
		b.Fatalf("line is %d bytes", len(line))
	}
	want, err := decodeEventLineGeneral(line, "x")
	if err != nil {
		b.Fatal(err)
	}
	if got, err := DecodeEventLine(line, "x"); err != nil || !reflect.DeepEqual(got, want) {
		b.Fatalf("fast %+v %v, general %+v", got, err, want)
	}
	for _, c := range []struct {
		name string
		fn   func([]byte, string) (Event, error)
	}{{"general", decodeEventLineGeneral}, {"fast", DecodeEventLine}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn(line, "x"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
