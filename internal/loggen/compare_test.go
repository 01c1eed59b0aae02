package loggen

import (
	"strings"
	"testing"
)

func TestCompareInspect(t *testing.T) {
	ok := func(v string) string { return `{"ok":true,"messages":` + v + `}` }
	for _, c := range []struct {
		name       string
		want, got  string
		equal      bool
		diffSubstr string
	}{
		{"same", ok(`[1]`), ok(`[1]`), true, ""},
		{"number spelling", ok(`[1,2]`), ok(`[1.0,2e0]`), true, ""},
		{"inexact integer rounds alike", ok(`[123456789012345680000]`), ok(`[123456789012345678901]`), true, ""},
		{"different number", ok(`[1]`), ok(`[2]`), false, "messages[0]"},
		{"overflow never equal", ok(`[1]`), ok(`[1e400]`), false, "messages[0]"},
		{"key order ignored", ok(`[{"a":1,"b":2}]`), ok(`[{"b":2,"a":1}]`), true, ""},
		{"duplicate key keeps the last", ok(`[{"a":2}]`), ok(`[{"a":1,"a":2}]`), true, ""},
		{"escape vs literal", ok(`["é\n"]`), ok(`["\u00e9\n"]`), true, ""},
		{"lone surrogate is not U+FFFD", ok(`["\ud800"]`), ok(`["\ufffd"]`), false, "messages[0]"},
		{"raw invalid byte is not U+FFFD", ok(`["\ufffd"]`), ok("[\"\xff\"]"), false, "messages[0]"},
		{"surrogate pair", ok(`["🙂"]`), ok(`["\ud83d\ude42"]`), true, ""},
		{"absent vs empty", `{"ok":true,"nodes":[]}`, `{"ok":true}`, false, "nodes"},
		{"null vs absent", `{"ok":true,"openTurn":null}`, `{"ok":true}`, false, "openTurn"},
		{"array length", ok(`[1,2]`), ok(`[1]`), false, "messages.length"},
		{"refused: only ok and acceptedEvents", `{"ok":false,"error":"a","acceptedEvents":3}`, `{"ok":false,"error":"b","acceptedEvents":3}`, true, ""},
		{"refused: acceptedEvents", `{"ok":false,"error":"a","acceptedEvents":3}`, `{"ok":false,"error":"a","acceptedEvents":4}`, false, "acceptedEvents"},
		{"ok differs", `{"ok":true,"events":3}`, `{"ok":false,"error":"x","acceptedEvents":1}`, false, "ok"},
		{"fork error text", `{"ok":true,"forks":[{"ok":false,"error":"a"}]}`, `{"ok":true,"forks":[{"ok":false,"error":"b"}]}`, false, "forks[0].error"},
		{"invalid output", ok(`[1]`), `{"ok":true,`, false, "(output)"},
	} {
		diffs, err := CompareInspect([]byte(c.want), []byte(c.got), CompareOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.equal != (len(diffs) == 0) {
			t.Errorf("%s: equal=%v, diffs %v", c.name, len(diffs) == 0, diffs)
			continue
		}
		if !c.equal && !strings.Contains(diffs[0].Path, c.diffSubstr) {
			t.Errorf("%s: first diff %v, want path with %q", c.name, diffs[0], c.diffSubstr)
		}
	}
	// repair times can be ignored
	w := `{"ok":true,"repair":[{"type":"turn/end","seq":3,"time":5}]}`
	g := `{"ok":true,"repair":[{"type":"turn/end","seq":3,"time":6}]}`
	if d, _ := CompareInspect([]byte(w), []byte(g), CompareOptions{}); len(d) != 1 {
		t.Errorf("repair time difference: %v", d)
	}
	if d, _ := CompareInspect([]byte(w), []byte(g), CompareOptions{IgnoreRepairTime: true}); len(d) != 0 {
		t.Errorf("IgnoreRepairTime: %v", d)
	}
}

func TestAppendJSONEscapes(t *testing.T) {
	got := string(JSON(Obj{{"s", "a\"b\\c\n\u0001<&>\u2028é"}, {"n", int64(-3)}, {"r", Raw("1e400")}, {"a", Arr{nil, true}}, {"i", []int64{1, 2}}}))
	want := `{"s":"a\"b\\c\n\u0001<&>` + "\u2028" + `é","n":-3,"r":1e400,"a":[null,true],"i":[1,2]}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
