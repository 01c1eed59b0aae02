package jsvalue

import (
	"iter"
)

// IndexNode is one value located inside an indexed JSON value: its span, its parent (the index
// of its node, -1 for the indexed value itself) and, for an object member, its key's span (the
// quoted literal; 0, 0 for an array element). Offsets are from the start of the indexed value.
type IndexNode struct {
	Parent           int32
	Next             int32 // the next member of the same parent (-1: none)
	KeyStart, KeyEnd uint32
	Start, End       uint32
	// PlainKey: the key's literal holds only ASCII without escapes, so its bytes are its name.
	PlainKey bool
}

// An Index locates the values of one valid JSON value down to Levels levels of nesting (its
// members are level 1, theirs level 2, ...), as the scan that validated it found them, so that
// reading a member needs no second pass over the text. Values nested deeper are located on
// demand by a scan of their parent's bytes only. The zero Index holds no value.
type Index struct {
	raw    []byte
	nodes  []IndexNode // in document order: a parent before its descendants
	levels int
}

// NewIndex returns the index of raw, a valid JSON value, from the nodes a SkipIndexed of it
// returned with levels.
func NewIndex(raw []byte, nodes []IndexNode, levels int) Index {
	return Index{raw: raw, nodes: nodes, levels: levels}
}

// BuildIndex validates raw as one JSON value (JSON whitespace around it allowed) and indexes it
// down to levels, recording at most limit values (beyond that the index locates nothing and
// every read scans); lossy reports a number JSON cannot carry losslessly, as Scan does.
func BuildIndex(raw []byte, levels, limit int) (x Index, lossy bool, err error) {
	s := Scanner{B: raw}
	s.Space()
	start := s.Pos
	nodes, complete, lossy, err := s.SkipIndexed(0, levels, -1, nil, limit)
	if err != nil {
		return Index{}, false, err
	}
	end := s.Pos
	s.Space()
	if s.Pos != len(raw) {
		return Index{}, false, &SyntaxError{Offset: s.Pos, Why: "unexpected data after the JSON value"}
	}
	if !complete {
		nodes, levels = nil, 0
	}
	return Index{raw: raw[start:end], nodes: nodes, levels: levels}, lossy, nil
}

// Root is the indexed value (Kind Undefined for the zero Index).
func (x *Index) Root() Node {
	if x.raw == nil {
		return Node{}
	}
	return Node{x: x, i: -1, raw: x.raw}
}

// SkipIndexed is Skip that also appends to nodes the values nested in the skipped one down to
// levels levels, their offsets counted from s.Pos at the call and their node numbers from
// len(nodes) at the call (what NewIndex takes is the part appended); its own members name parent
// as theirs (-1 when the skipped value is the one to be indexed). It records no more than limit
// nodes in all; complete is false when it left some out (the nodes are then of no use).
func (s *Scanner) SkipIndexed(depth, levels int, parent int32, nodes []IndexNode, limit int) (_ []IndexNode, complete, lossy bool, err error) {
	p := parser{b: s.B, i: s.Pos, maxDepth: MaxDepth}
	x := indexer{base: s.Pos, first: len(nodes), limit: limit, nodes: nodes}
	lossy, err = x.skip(&p, depth, levels, parent)
	s.Pos = p.i
	return x.nodes, !x.truncated, lossy, err
}

// indexer is the state of one SkipIndexed.
type indexer struct {
	base      int // spans are relative to this offset
	first     int // node numbers (Parent, Next) are relative to this index of nodes
	limit     int
	truncated bool
	nodes     []IndexNode
}

// skip is parser.skip recording the members (down to levels more levels) of the value at p.i;
// parent is the node index their entries name.
func (x *indexer) skip(p *parser, depth, levels int, parent int32) (bool, error) {
	if levels <= 0 || p.i >= len(p.b) || (p.b[p.i] != '{' && p.b[p.i] != '[') {
		return p.skip(depth)
	}
	if depth >= p.maxDepth {
		return false, p.fail("nesting deeper than " + itoa(p.maxDepth) + " levels")
	}
	c := p.b[p.i]
	closer := byte('}')
	if c == '[' {
		closer = ']'
	}
	p.i++
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == closer {
		p.i++
		return false, nil
	}
	lossy := false
	prev := int32(-1) // the previous member's node
	for {
		p.ws()
		var ks, ke int
		if c == '{' {
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return false, p.fail("expected a string key")
			}
			ks = p.i
			if err := p.skipString(); err != nil {
				return false, err
			}
			ke = p.i
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return false, p.fail("expected ':' after an object key")
			}
			p.i++
			p.ws()
		}
		var l bool
		var err error
		if len(x.nodes) >= x.limit {
			x.truncated = true
			l, err = p.skip(depth + 1)
		} else {
			self := int32(len(x.nodes) - x.first)
			if prev >= 0 {
				x.nodes[x.first+int(prev)].Next = self
			}
			prev = self
			n := IndexNode{Parent: parent, Next: -1, Start: uint32(p.i - x.base)}
			if c == '{' {
				n.KeyStart, n.KeyEnd, n.PlainKey = uint32(ks-x.base), uint32(ke-x.base), plainASCII(p.b[ks+1:ke-1])
			}
			x.nodes = append(x.nodes, n)
			l, err = x.skip(p, depth+1, levels-1, self)
			x.nodes[x.first+int(self)].End = uint32(p.i - x.base)
		}
		if err != nil {
			return false, err
		}
		lossy = lossy || l
		p.ws()
		if p.i >= len(p.b) {
			return false, p.fail("unexpected end of JSON input")
		}
		if p.b[p.i] == ',' {
			p.i++
			continue
		}
		if p.b[p.i] == closer {
			p.i++
			return lossy, nil
		}
		return false, p.fail("expected ',' or a closing bracket")
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// Node is one value of an indexed JSON text, or undefined (the zero Node: a missing member).
type Node struct {
	x     *Index // nil: a value located by a scan (its members are located by scans too)
	i     int32  // its node in x (-1: x's root)
	level int32  // its nesting below x's root
	raw   []byte
}

// Raw is the value's JSON text (nil when undefined); it aliases the indexed text.
func (n Node) Raw() []byte { return n.raw }

// Kind is the value's kind, Undefined for a missing value.
func (n Node) Kind() Kind {
	if len(n.raw) == 0 {
		return Undefined
	}
	return kindOf(n.raw[0])
}

// indexed reports whether n's members are in its index.
func (n Node) indexed() bool { return n.x != nil && int(n.level) < n.x.levels }

// first is the node of n's first member (-1: none); the others follow by Next.
func (n Node) first() int32 {
	j := n.i + 1
	if int(j) < len(n.x.nodes) && n.x.nodes[j].Parent == n.i {
		return j
	}
	return -1
}

func (n Node) at(j int32) Node {
	e := &n.x.nodes[j]
	return Node{x: n.x, i: j, level: n.level + 1, raw: n.x.raw[e.Start:e.End]}
}

// Get returns member name of the object n (undefined when n is not an object or has no such
// member); as in JSON.parse, the last of repeated names wins and names compare unescaped.
func (n Node) Get(name string) Node {
	if n.Kind() != Object {
		return Node{}
	}
	if !n.indexed() {
		v, ok := Lookup(n.raw, name)
		if !ok {
			return Node{}
		}
		return Node{raw: v}
	}
	found := int32(-1)
	nodes, raw := n.x.nodes, n.x.raw
	want := uint32(len(name) + 2)
	for j := n.first(); j >= 0; j = nodes[j].Next {
		e := &nodes[j]
		if e.PlainKey {
			if e.KeyEnd-e.KeyStart == want && string(raw[e.KeyStart+1:e.KeyEnd-1]) == name {
				found = j
			}
		} else if keyEquals(raw[e.KeyStart:e.KeyEnd], name) {
			found = j
		}
	}
	if found < 0 {
		return Node{}
	}
	return n.at(found)
}

// Path is Get of each name in turn.
func (n Node) Path(names ...string) Node {
	for _, name := range names {
		n = n.Get(name)
	}
	return n
}

// Elems yields the elements of the array n (nothing when n is not an array).
func (n Node) Elems() iter.Seq[Node] {
	return func(yield func(Node) bool) {
		if n.Kind() != Array {
			return
		}
		if n.indexed() {
			for j := n.first(); j >= 0; j = n.x.nodes[j].Next {
				if !yield(n.at(j)) {
					return
				}
			}
			return
		}
		s := Scanner{B: n.raw, Pos: 1}
		for {
			s.Space()
			if s.Pos >= len(s.B) || s.B[s.Pos] == ']' {
				return
			}
			start := s.Pos
			if _, err := s.Skip(1); err != nil {
				return
			}
			if !yield(Node{raw: s.B[start:s.Pos]}) {
				return
			}
			s.Space()
			if s.Pos >= len(s.B) || s.B[s.Pos] != ',' {
				return
			}
			s.Pos++
		}
	}
}

// IsString reports whether n is a string equal to s (escapes decoded).
func (n Node) IsString(s string) bool { return StringIs(n.raw, s) }

// plainASCII reports whether b is printable-range ASCII without a backslash (a key literal's
// bytes that are its name).
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}
