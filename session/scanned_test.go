package session

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// paths lists every member path of v down to depth levels (objects only; arrays are walked with
// Elems), plus a few paths that name nothing.
func memberPaths(v *jsvalue.Value, prefix []string, depth int, out *[][]string) {
	if depth == 0 || v == nil || v.Kind() != jsvalue.Object {
		return
	}
	for _, k := range v.Keys() {
		p := append(append([]string(nil), prefix...), k)
		*out = append(*out, p)
		memberPaths(v.Field(k), p, depth-1, out)
	}
	*out = append(*out, append(append([]string(nil), prefix...), "no such member"))
}

// checkScanned checks that every Field of sc (the decoder's scan, or a lazy one) gives what a
// fresh scan of the data (jsvalue.Lookup) gives, and that Elems gives an array's elements.
func checkScanned(t *testing.T, what string, sc *Scanned) {
	t.Helper()
	v, err := jsvalue.Parse(sc.Data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var paths [][]string
	memberPaths(v, nil, 6, &paths)
	for _, p := range paths {
		got, gok := sc.Lookup(p...)
		want, wok := jsvalue.Lookup(sc.Data, p...)
		if gok != wok || !bytes.Equal(got, want) {
			t.Fatalf("%s: Field(%q) = %q, %v; a scan of the data finds %q, %v", what, p, got, gok, want, wok)
		}
		f := sc.Field(p...)
		if !f.IsArray() {
			continue
		}
		var elems [][]byte
		for e := range f.Elems() {
			elems = append(elems, e.Raw())
		}
		pv, _ := jsvalue.GetPath(v, p...)
		if len(elems) != len(pv.Elems()) {
			t.Fatalf("%s: Field(%q).Elems gave %d elements, want %d", what, p, len(elems), len(pv.Elems()))
		}
		for i, e := range pv.Elems() {
			if !bytes.Equal(elems[i], e.Raw()) {
				t.Fatalf("%s: Field(%q) element %d = %q, want %q", what, p, i, elems[i], e.Raw())
			}
		}
	}
}

// TestScannedFieldsMatchAScan scans the recorded sessions with one LineScanner per run of lines
// (as the record decoder shares one among a record's events) and checks every member of every
// event's data against a fresh scan, for the decoder's scan and for Scan's lazy one; and that
// ScanEventLine decodes each line as DecodeEventLine does.
func TestScannedFieldsMatchAScan(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl"))
	if len(paths) == 0 {
		t.Skipf("no recorded sessions at %s", recordedDir)
	}
	lines := 0
	for _, p := range paths {
		_, evs := readLog(t, p)
		var ls LineScanner
		var scanned []Scanned
		for i := range evs {
			line, err := evs[i].AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if i%7 == 0 {
				ls = LineScanner{} // a new record
			}
			sc, err := ls.Scan(line, "s")
			if err != nil {
				t.Fatalf("%s seq %d: %v", p, i, err)
			}
			ev, err := DecodeEventLine(line, "s")
			if err != nil || !reflect.DeepEqual(ev, sc.Event) {
				t.Fatalf("%s seq %d: ScanEventLine %+v, DecodeEventLine %+v (%v)", p, i, sc.Event, ev, err)
			}
			scanned = append(scanned, sc)
			lines++
		}
		for i := range scanned { // after the whole run: no event's index was disturbed by a later one
			checkScanned(t, filepath.Base(p)+" (decoder)", &scanned[i])
			lazy := Scan(evs[i])
			checkScanned(t, filepath.Base(p)+" (lazy)", &lazy)
		}
	}
	t.Logf("%d events of %d sessions", lines, len(paths))
}

// TestScannedEdgeCases: repeated members (the last wins), escaped names, deep values (located by
// a scan of their parent), more values than the decoder records, a data replaced after the scan.
func TestScannedEdgeCases(t *testing.T) {
	many := `[` + string(bytes.Repeat([]byte(`{"a":1},`), 100)) + `{"a":2}]`
	for _, data := range []string{
		`{"chunk":{"type":"text"},"chunk":{"type":"usage","usage":{"inputTokens":3}}}`,
		`{"chunk":{"type":"text","type":"usage"}}`,
		`{"ch\u0075nk":{"t\u0079pe":"us\u0061ge"}}`,
		`{"a":{"b":{"c":{"d":{"e":{"f":{"g":1}}}}}}}`,
		`{"list":` + many + `,"after":true}`,
		`{"s":"` + "\xff\xfe" + `","n":-0,"big":1e400}`,
		`[1,{"a":2}]`, `"text"`, `17`, `{}`, `[]`,
	} {
		line := []byte(`{"type":"x/y","seq":0,"time":1,"data":` + data + `}`)
		var ls LineScanner
		if _, err := ls.Scan([]byte(`{"type":"x/y","seq":0,"time":1,"data":{"first":{"event":1}}}`), "s"); err != nil {
			t.Fatal(err)
		}
		sc, err := ls.Scan(line, "s")
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		checkScanned(t, data, &sc)
	}
	var ls LineScanner
	sc, err := ls.Scan([]byte(`{"type":"x/y","seq":0,"time":1,"data":{"a":1}}`), "s")
	if err != nil {
		t.Fatal(err)
	}
	sc.Data = []byte(`{"a":2}`) // replaced: the scan no longer describes it
	if v, _ := sc.Lookup("a"); string(v) != "2" {
		t.Fatalf("after Data was replaced, a = %s, want 2", v)
	}
	sc.Data = []byte(`{"a":`) // not JSON: nothing is located
	if _, ok := sc.Lookup("a"); ok {
		t.Fatal("a located in data that is not JSON")
	}
}

// TestApplyScannedIsApply: ApplyScanned accepts and refuses what Apply does, with the same
// errors, for events from the decoder and wrapped by Scan; a lossy number in a type whose data no
// rule reads is still refused.
func TestApplyScannedIsApply(t *testing.T) {
	lines := []string{
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`,
		`{"type":"assistant/chunk","seq":1,"time":1,"data":{"chunk":{"type":"text","text":"x"}}}`,
		`{"type":"assistant/chunk","seq":2,"time":1,"data":{"n":1e400}}`,
		`{"type":"assistant/chunk","seq":2,"time":1,"data":{"n":-0}}`,
		`{"type":"assistant/chunk","seq":2,"time":1,"data":{},"surfaceOp":"append"}`,
		`{"type":"user/message","seq":2,"time":1,"data":{"role":"user","content":[{"type":"text","text":"hi"}]},"surfaceOp":"append"}`,
		`{"type":"assistant/chunk","seq":9,"time":1,"data":{}}`,
		`{"type":"turn/end","seq":3,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}`,
	}
	a, b, c := NewSurface(), NewSurface(), NewSurface()
	for _, l := range lines {
		ev, err := DecodeEventLine([]byte(l), "s")
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ScanEventLine([]byte(l), "s")
		if err != nil {
			t.Fatal(err)
		}
		lazy := Scan(ev)
		ea, eb, ec := a.Apply("s", ev, nil), b.ApplyScanned("s", &sc, nil), c.ApplyScanned("s", &lazy, nil)
		if !sameErr(ea, eb) || !sameErr(ea, ec) {
			t.Fatalf("%s: Apply %v, ApplyScanned %v (lazy %v)", l, ea, eb, ec)
		}
		if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, c) {
			t.Fatalf("%s: surfaces differ: %+v %+v %+v", l, a, b, c)
		}
	}
	if a.AsOfSeq != 3 {
		t.Fatalf("folded to seq %d, want 3", a.AsOfSeq)
	}
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var ea, eb *Error
	return errors.As(a, &ea) && errors.As(b, &eb) && ea.Error() == eb.Error() && ea.Rule == eb.Rule
}

// TestSeedAddScannedIsAdd: the seed validator refuses and accepts the same events, with the same
// texts, from the decoder's scan as from plain events, on every recorded session.
func TestSeedAddScannedIsAdd(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl"))
	if len(paths) == 0 {
		t.Skipf("no recorded sessions at %s", recordedDir)
	}
	refused := 0
	for _, p := range paths {
		_, evs := readLog(t, p)
		plain, scanned := NewSeedValidator(nil), NewSeedValidator(nil)
		var ls LineScanner
		for i := range evs {
			line, err := evs[i].AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := ls.Scan(line, "s")
			if err != nil {
				t.Fatal(err)
			}
			ea, eb := plain.Add(&evs[i]), scanned.AddScanned(&sc)
			if (ea == nil) != (eb == nil) || (ea != nil && ea.Error() != eb.Error()) {
				t.Fatalf("%s seq %d: Add %v, AddScanned %v", p, i, ea, eb)
			}
			if ea != nil {
				refused++
				break
			}
		}
		if plain.Len() != scanned.Len() {
			t.Fatalf("%s: %d and %d seed events", p, plain.Len(), scanned.Len())
		}
	}
	t.Logf("%d sessions, %d refused as seeds", len(paths), refused)
}
