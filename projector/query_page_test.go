package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
)

// The pagination of messages replies, as a pure function: no server, no log.

const mib = 1 << 20

// msgOf is a message of n bytes as JSON: a string.
func msgOf(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}

// pageOf is a pageSpec over nodes 0..len(sizes)-1 (continuation: the nodes from first), whose
// node i derives one message of sizes[i] bytes (0: no message; -1: an error).
func pageOf(sizes []int, first bool, from int, maxPayload int64) pageSpec {
	nodes := make([]int64, 0, len(sizes))
	for i := from; i < len(sizes); i++ {
		nodes = append(nodes, int64(i))
	}
	return pageSpec{
		reply:      client.MessagesReply{Session: "s", AsOfSeq: int64(len(sizes)), ReplaceGeneration: 3},
		nodes:      nodes,
		first:      first,
		maxPayload: maxPayload,
		derive: func(seq int64) ([]json.RawMessage, error) {
			switch n := sizes[seq]; {
			case n < 0:
				return nil, errors.New("not a surface event")
			case n == 0:
				return nil, nil
			default:
				return []json.RawMessage{msgOf(n)}, nil
			}
		},
		streamSeq: func(seq int64) uint64 { return uint64(100 + seq) },
	}
}

// checkPage checks what holds for every page cut from spec: it fits the limit; it covers a prefix
// of the nodes (Partial k, or all), with their messages in order (those in External left out)
// and, on a continuation, exactly those nodes; and it is maximal: covering one node more would
// pass the limit, give or take the room kept for "partial" (32 bytes).
func checkPage(t *testing.T, name string, spec pageSpec, page client.MessagesReply) {
	t.Helper()
	b, err := encodeReply(page)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(1 << 62)
	if spec.maxPayload > 0 {
		limit = spec.maxPayload - 64
	}
	if int64(len(b)) > limit {
		t.Errorf("%s: the page takes %d bytes, over the limit %d", name, len(b), limit)
	}
	covered := len(spec.nodes)
	if page.Partial != nil {
		covered = *page.Partial
		if covered < 0 || covered >= len(spec.nodes) {
			t.Fatalf("%s: partial %d of %d nodes", name, covered, len(spec.nodes))
		}
	}
	var want []json.RawMessage
	external := map[int64]bool{}
	for _, x := range page.External {
		external[x.Node] = true
		if x.StreamSeq != spec.streamSeq(x.Node) {
			t.Errorf("%s: external node %d at stream seq %d, want %d", name, x.Node, x.StreamSeq, spec.streamSeq(x.Node))
		}
	}
	for i, seq := range spec.nodes[:covered] {
		msgs, _ := spec.derive(seq)
		if external[seq] {
			x := page.External[slices.IndexFunc(page.External, func(x client.ExternalMessage) bool { return x.Node == seq })]
			if x.Index != len(want) {
				t.Errorf("%s: external node %d (the %d-th) at index %d, want %d", name, seq, i, x.Index, len(want))
			}
			want = append(want, nil) // its place in the page's final list
			continue
		}
		want = append(want, msgs...)
	}
	got := append([]json.RawMessage{}, page.Messages...)
	for _, x := range page.External {
		got = slices.Insert(got, x.Index, nil)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages (with %d external), want %d", name, len(page.Messages), len(page.External), len(want))
	}
	for i := range want {
		if string(got[i]) != string(want[i]) {
			t.Errorf("%s: message %d differs", name, i)
		}
	}
	if spec.first && !slices.Equal(page.Nodes, spec.nodes) {
		t.Errorf("%s: a first page lists nodes %v, want every node %v", name, page.Nodes, spec.nodes)
	}
	if !spec.first && !slices.Equal(page.Nodes, spec.nodes[:covered]) {
		t.Errorf("%s: a continuation lists nodes %v, want the %d it covers", name, page.Nodes, covered)
	}
	if page.Partial != nil {
		more := page
		more.Partial = nil
		msgs, _ := spec.derive(spec.nodes[covered])
		more.Messages = append(slices.Clone(page.Messages), msgs...)
		if !spec.first {
			more.Nodes = spec.nodes[:covered+1]
		}
		mb, _ := encodeReply(more)
		if int64(len(mb)) <= limit-32 {
			t.Errorf("%s: partial %d, but the page with node %d too takes %d bytes, well within the limit %d", name, covered, spec.nodes[covered], len(mb), limit)
		}
	}
}

func TestMessagesPage(t *testing.T) {
	k := 1 << 10
	for _, tc := range []struct {
		name       string
		sizes      []int
		first      bool
		from       int
		external   bool
		maxPayload int64
		partial    int // -1: none
		externals  int
		code       client.Code // an error reply
	}{
		{name: "all fit", sizes: []int{10, 20, 30}, first: true, maxPayload: mib, partial: -1},
		{name: "no nodes", sizes: nil, first: true, maxPayload: mib, partial: -1},
		{name: "unbounded", sizes: []int{mib, mib, mib}, first: true, maxPayload: 0, partial: -1},
		{name: "nodes without messages", sizes: []int{0, 10, 0}, first: true, maxPayload: mib, partial: -1},
		{name: "1 MiB: two of three 400 KiB", sizes: []int{400 * k, 400 * k, 400 * k}, first: true, maxPayload: mib, partial: 2},
		{name: "1 MiB: continuation covers the rest", sizes: []int{400 * k, 400 * k, 400 * k}, from: 2, maxPayload: mib, partial: -1},
		{name: "1 MiB: continuation partial again", sizes: []int{400 * k, 400 * k, 400 * k, 400 * k, 400 * k}, from: 2, maxPayload: mib, partial: 2},
		{name: "1 MiB: a first page may cover none", sizes: []int{mib, 10}, first: true, maxPayload: mib, partial: 0},
		{name: "1 MiB: a continuation's first message alone is too large", sizes: []int{mib, 10}, from: 0, maxPayload: mib, code: client.CodeTooLarge},
		{name: "1 MiB: a later message too large ends the continuation", sizes: []int{10, mib}, from: 0, maxPayload: mib, partial: 1},
		{name: "1 MiB: external lists the message too large", sizes: []int{10, 2 * mib, 10}, first: true, external: true, maxPayload: mib, partial: -1, externals: 1},
		{name: "1 MiB: external on a continuation", sizes: []int{10, 2 * mib, 10}, from: 1, external: true, maxPayload: mib, partial: -1, externals: 1},
		{name: "1 MiB: external beside a full page", sizes: []int{600 * k, 2 * mib, 600 * k}, first: true, external: true, maxPayload: mib, partial: 2, externals: 1},
		{name: "1 MiB: external of a message that fits no page, though under the limit", sizes: []int{10, mib - 100, 10}, from: 1, external: true, maxPayload: mib, partial: -1, externals: 1},
		{name: "1 MiB: external of a fitting message is a message", sizes: []int{900 * k}, first: true, external: true, maxPayload: mib, partial: -1},
		{name: "the node list alone is too large", sizes: make([]int, 200_000), first: true, maxPayload: mib, code: client.CodeTooLarge},
		{name: "a stored node without a message event", sizes: []int{10, -1}, first: true, maxPayload: mib, code: client.CodeInternal},
		{name: "a requested node without a message event", sizes: []int{10, -1}, from: 1, maxPayload: mib, code: client.CodeBadRequest},
	} {
		spec := pageOf(tc.sizes, tc.first, tc.from, tc.maxPayload)
		spec.external = tc.external
		page, err := messagesPage(spec)
		if tc.code != "" {
			var qe *queryError
			if !errors.As(err, &qe) || qe.code != tc.code || !strings.Contains(qe.desc, `session "s"`) {
				t.Errorf("%s: %v, want a %s naming the session", tc.name, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := -1; page.Partial != nil && *page.Partial != tc.partial || page.Partial == nil && tc.partial != got {
			t.Errorf("%s: partial %v, want %d", tc.name, page.Partial, tc.partial)
		}
		if len(page.External) != tc.externals {
			t.Errorf("%s: %d external, want %d", tc.name, len(page.External), tc.externals)
		}
		checkPage(t, tc.name, spec, page)
	}
}

// TestMessagesPageBoundary finds, for first pages and continuations and node counts whose
// "partial" takes one or two digits, the largest size of n equal messages that one 1 MiB reply
// covers, and checks the sizes around it: every page fits and is maximal; up to that size every
// node is covered, one byte more and the last is left to the next page ("413" for a continuation
// of one node, which no page can carry).
func TestMessagesPageBoundary(t *testing.T) {
	for _, n := range []int{1, 3, 9, 10, 11} {
		for _, first := range []bool{true, false} {
			cut := func(s int) (pageSpec, client.MessagesReply, error) {
				spec := pageOf(slices.Repeat([]int{s}, n), first, 0, mib)
				page, err := messagesPage(spec)
				return spec, page, err
			}
			all := func(s int) bool {
				_, page, err := cut(s)
				return err == nil && page.Partial == nil
			}
			lo, hi := 2, mib // all(lo), !all(hi)
			for hi-lo > 1 {
				if m := (lo + hi) / 2; all(m) {
					lo = m
				} else {
					hi = m
				}
			}
			// The largest page covering every node leaves room for `,"partial":n` (a page does not
			// know it is the last before it ends), and no more than that: one byte more per
			// message (n bytes), give or take two commas, and it would not.
			_, page, _ := cut(lo)
			enc, _ := encodeReply(page)
			room := len(`,"partial":`) + len(strconv.Itoa(n))
			if limit := mib - 64; len(enc)+room > limit || len(enc)+room <= limit-n-2 {
				t.Errorf("n=%d first=%v: the largest page covering every node takes %d bytes, with room for partial %d; want at most the limit %d, and within %d bytes of it",
					n, first, len(enc), len(enc)+room, limit, n+2)
			}
			for s := lo - 3; s <= lo+3; s++ {
				name := fmt.Sprintf("n=%d first=%v size=%d (largest covered %d)", n, first, s, lo)
				spec, page, err := cut(s)
				var qe *queryError
				switch {
				case s > lo && !first && n == 1:
					if !errors.As(err, &qe) || qe.code != client.CodeTooLarge {
						t.Errorf("%s: %v, want 413", name, err)
					}
					continue
				case err != nil:
					t.Fatalf("%s: %v", name, err)
				case s <= lo && page.Partial != nil:
					t.Errorf("%s: partial %d, want every node", name, *page.Partial)
				case s > lo && (page.Partial == nil || *page.Partial != n-1):
					t.Errorf("%s: partial %v, want %d", name, page.Partial, n-1)
				}
				checkPage(t, name, spec, page)
			}
		}
	}
}
