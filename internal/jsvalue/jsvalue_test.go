package jsvalue

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

var seeds = []string{
	``,
	`[[[[[[[[[[]]]]]]]]]]`,
	`{"a":"\ud800\udc00\ud800","b":-0,"c":1e400}`,
	"{\"type\":\"x\",\"seq\":0,\"time\":\"t\",\"data\":\"\xff\xfe\"}",
	`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}`,
}

// FuzzJSONParsers: the building parser and the validating scanner accept the same texts and
// agree on losslessness; the building parser never panics on any input.
func FuzzJSONParsers(f *testing.F) {
	for _, s := range append(seeds, `-0`, `1e400`, `-1e-400`, `"\u00e9\ud800"`, `{"a":[1,{"b":null}],"a":2}`, `01`, `1.`, `"\x01"`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, perr := Parse(in)
		s, serr := Scan(in)
		if (perr == nil) != (serr == nil) {
			t.Fatalf("parse %v, scan %v", perr, serr)
		}
		if perr == nil {
			if v.Lossy() != s.Lossy() || v.Kind() != s.Kind() || !bytes.Equal(v.Raw(), s.Raw()) {
				t.Fatalf("parse %+v, scan %+v", v, s)
			}
			if out := Stringify(v); !json.Valid(out) {
				t.Fatalf("Stringify gave invalid JSON %q", out)
			}
		}
	})
}

// TestPlainRun checks the eight-bytes-at-a-time scan against a byte loop on random strings rich in
// the bytes it must stop at and their neighbours.
func TestPlainRun(t *testing.T) {
	alphabet := []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a', 'z'}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 20000; n++ {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = 'a' + byte(r.IntN(26))
			}
		}
		for start := 0; start <= len(b); start++ {
			want := len(b)
			for i := start; i < len(b); i++ {
				if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
					want = i
					break
				}
			}
			if got := PlainRun(b, start); got != want {
				t.Fatalf("PlainRun(%q, %d) = %d, want %d", b, start, got, want)
			}
		}
	}
}

func TestNumberString(t *testing.T) {
	for _, c := range []struct {
		f         float64
		str, json string
	}{
		{0, "0", "0"}, {math.Copysign(0, -1), "0", "0"}, {123.456, "123.456", "123.456"}, {-1.5, "-1.5", "-1.5"},
		{1e21, "1e+21", "1e+21"}, {1e20, "100000000000000000000", "100000000000000000000"},
		{0.000001, "0.000001", "0.000001"}, {1e-7, "1e-7", "1e-7"}, {1.5e-7, "1.5e-7", "1.5e-7"},
		{math.Inf(1), "Infinity", "null"}, {math.Inf(-1), "-Infinity", "null"}, {math.NaN(), "NaN", "null"},
	} {
		if got := NumberString(c.f); got != c.str {
			t.Errorf("NumberString(%v) = %q, want %q", c.f, got, c.str)
		}
		if got := NumberJSON(c.f); got != c.json {
			t.Errorf("NumberJSON(%v) = %q, want %q", c.f, got, c.json)
		}
	}
}

func TestParseShallow(t *testing.T) {
	in := []byte(` {"type":"a","data":{"x":[1,-0]},"seq":1,"data":"d"} `)
	v, err := ParseShallow(in, "type", "seq")
	if err != nil {
		t.Fatal(err)
	}
	if v.Field("type").Str() != "a" || v.Field("seq").Num() != 1 || string(v.Raw()) != string(bytes.TrimSpace(in)) {
		t.Fatalf("built members: %+v", v)
	}
	if d := v.Field("data"); d.Kind() != String || string(d.Raw()) != `"d"` || d.Str() != "" || !v.Lossy() {
		t.Fatalf("placeholder %+v (the last data wins; the first made the object lossy)", d)
	}
	full, _ := Parse(in)
	for _, bad := range []string{`{"a":1,}`, `{"a":[}`, `{"a":1} x`, `{"a"`} {
		_, serr := ParseShallow([]byte(bad), "type")
		_, perr := Parse([]byte(bad))
		if serr == nil || perr == nil || serr.Error() != perr.Error() {
			t.Errorf("%s: ParseShallow %v, Parse %v", bad, serr, perr)
		}
	}
	if !bytes.Equal(Stringify(full), []byte(`{"type":"a","data":"d","seq":1}`)) {
		t.Errorf("Stringify %s", Stringify(full))
	}
}
