package jsvalue

import (
	"bytes"
	"testing"
)

// FuzzIndex: BuildIndex accepts what Scan accepts, with the same lossiness, and every member path
// located through the index (at every depth of indexing, after other values in the same buffer)
// is what Lookup finds by scanning.
func FuzzIndex(f *testing.F) {
	for _, s := range []string{
		`{"a":{"b":[1,{"c":2}],"b":3},"d":"\u0041","e\u0041":-0}`,
		`{"chunk":{"type":"text","text":"` + string(bytes.Repeat([]byte("x"), 40)) + `"}}`,
		`[[[[[{"a":1}]]]]]`, `{"a":1e999}`, `{"a":"\ud800"}`, `{}`, `[]`, `"s"`, ` {"a" : [ 1 , 2 ] } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sv, serr := Scan(b)
		for levels := 0; levels <= 5; levels++ {
			x, lossy, err := BuildIndex(b, levels, 1<<20)
			if (err == nil) != (serr == nil) {
				t.Fatalf("levels %d: BuildIndex %v, Scan %v", levels, err, serr)
			}
			if err != nil {
				return
			}
			if lossy != sv.Lossy() {
				t.Fatalf("levels %d: lossy %v, Scan %v", levels, lossy, sv.Lossy())
			}
			// The same value indexed after another one in a shared buffer.
			prefix := []IndexNode{{Parent: 7, Next: 3}, {Parent: -1, Next: -1}}
			s := Scanner{B: sv.Raw()}
			nodes, complete, _, err := s.SkipIndexed(0, levels, -1, prefix, 1<<20)
			if err != nil || !complete {
				t.Fatalf("SkipIndexed: %v", err)
			}
			shared := NewIndex(sv.Raw(), nodes[len(prefix):], levels)
			v, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			var check func(v *Value, path []string, a, c Node)
			check = func(v *Value, path []string, a, c Node) {
				if !bytes.Equal(a.Raw(), c.Raw()) {
					t.Fatalf("path %q: own index %q, shared %q", path, a.Raw(), c.Raw())
				}
				if v.Kind() == Array {
					i := 0
					for e := range a.Elems() {
						if i >= len(v.Elems()) || !bytes.Equal(e.Raw(), v.Elems()[i].Raw()) {
							t.Fatalf("path %q element %d: %q", path, i, e.Raw())
						}
						i++
					}
					if i != len(v.Elems()) {
						t.Fatalf("path %q: %d elements, want %d", path, i, len(v.Elems()))
					}
				}
				if v.Kind() != Object || len(path) > 6 {
					return
				}
				for _, k := range append(v.Keys(), "missing") {
					p := append(path[:len(path):len(path)], k)
					want, ok := Lookup(sv.Raw(), p...)
					ga, gc := a.Get(k), c.Get(k)
					if ok != (ga.Kind() != Undefined) || !bytes.Equal(ga.Raw(), want) {
						t.Fatalf("levels %d path %q: %q, Lookup %q %v", levels, p, ga.Raw(), want, ok)
					}
					if ok {
						check(v.Field(k), p, ga, gc)
					}
				}
			}
			check(v, nil, x.Root(), shared.Root())
		}
	})
}

// FuzzPlainRun: PlainRun stops at the first '"', '\\' or control byte, as a byte loop does.
func FuzzPlainRun(f *testing.F) {
	f.Add([]byte(`abcdefgh"ijklmnop\q`), 0)
	f.Add([]byte("0123456789abcdef\x01"), 3)
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		if i < 0 || i > len(b) {
			return
		}
		want := i
		for want < len(b) && b[want] != '"' && b[want] != '\\' && b[want] >= 0x20 {
			want++
		}
		if got := PlainRun(b, i); got != want {
			t.Fatalf("PlainRun(%q, %d) = %d, want %d", b, i, got, want)
		}
	})
}
