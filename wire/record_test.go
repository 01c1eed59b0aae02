package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
)

func TestRecordRoundTrip(t *testing.T) {
	in := []session.Event{
		{Type: "user/message", Seq: 5, Time: "1785000000020", Data: json.RawMessage(`{ "id": "m1", "text": "a <b> & c\nd" }`), SurfaceOp: json.RawMessage(`"append"`)},
		{Type: "assistant/message", Seq: 6, Time: "1785000000030.5", Data: json.RawMessage(`{"message":{}}`), SurfaceOp: json.RawMessage(`{"op":"replace","start":5,"end":5}`), SourceEventSeqs: json.RawMessage(`[5]`)},
		{Type: "plugin/x", Seq: 7, Time: "1785000000040", Data: json.RawMessage(`{}`), Ignorable: true},
	}
	h, body, err := EncodeRecord("a.b", in)
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the four agentlog headers, never a Nats-* header.
	want := map[string]string{HeaderSession: "a_2Eb", HeaderFirstSeq: "5", HeaderCount: "3", HeaderFormat: "1"}
	if len(h) != len(want) {
		t.Errorf("headers %v, want exactly %v", h, want)
	}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %v, want %q", k, got, v)
		}
	}
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			t.Errorf("record carries control header %s", k)
		}
	}
	lines := strings.Split(string(body), "\n")
	if len(lines) != 3 {
		t.Fatalf("body has %d lines, want 3:\n%s", len(lines), body)
	}
	// Compact, no HTML escaping, the newline inside a string stays escaped.
	if want := `{"type":"user/message","seq":5,"time":1785000000020,"data":{"id":"m1","text":"a <b> & c\nd"},"surfaceOp":"append"}`; lines[0] != want {
		t.Errorf("line 1 = %s\nwant     %s", lines[0], want)
	}
	out, err := DecodeRecord(h, body)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("decoded %d events, want %d", len(out), len(in))
	}
	for i := range in {
		if a, b := mustJSON(t, in[i]), mustJSON(t, out[i]); a != b {
			t.Errorf("event %d: got %s, want %s", i, b, a)
		}
	}
}

func TestEncodeRecordRefuses(t *testing.T) {
	cases := []struct {
		name string
		id   string
		evs  []session.Event
		rule session.Rule
		seq  int64
	}{
		{"empty", "s", nil, session.RuleRecordEmpty, -1},
		{"gap", "s", []session.Event{ev(0, "a"), ev(2, "b")}, session.RuleRecordSeq, 2},
		{"backwards", "s", []session.Event{ev(3, "a"), ev(3, "b")}, session.RuleRecordSeq, 3},
		{"negative", "s", []session.Event{ev(-1, "a")}, session.RuleRecordSeq, -1},
		{"no type", "s", []session.Event{{Seq: 0, Time: "1", Data: json.RawMessage(`{}`)}}, session.RuleRecordEvent, 0},
		{"bad data", "s", []session.Event{{Type: "x", Seq: 0, Time: "1", Data: json.RawMessage(`{`)}}, session.RuleRecordEvent, 0},
	}
	for _, c := range cases {
		_, _, err := EncodeRecord(c.id, c.evs)
		var se *session.Error
		if !errors.As(err, &se) || se.Rule != c.rule || se.Session != c.id || se.Seq != c.seq {
			t.Errorf("%s: err %v (%#v), want rule %s seq %d", c.name, err, se, c.rule, c.seq)
		}
	}
	if _, _, err := EncodeRecord("", []session.Event{ev(0, "a")}); err == nil || !strings.Contains(err.Error(), "id-empty") {
		t.Errorf("empty id: %v", err)
	}
}

func TestDecodeRecordRefusesCorrupt(t *testing.T) {
	good := []session.Event{ev(3, "a"), ev(4, "b")}
	h0, body0, err := EncodeRecord("sess", good)
	if err != nil {
		t.Fatal(err)
	}
	clone := func() nats.Header {
		h := nats.Header{}
		for k, v := range h0 {
			h[k] = append([]string(nil), v...)
		}
		return h
	}
	line := func(i int) string { return strings.Split(string(body0), "\n")[i] }
	cases := []struct {
		name string
		edit func(h nats.Header) []byte
		rule session.Rule
		seq  int64
	}{
		{"count too high", func(h nats.Header) []byte { h.Set(HeaderCount, "3"); return body0 }, session.RuleRecordCount, 3},
		{"count too low", func(h nats.Header) []byte { h.Set(HeaderCount, "1"); return body0 }, session.RuleRecordCount, 3},
		{"count zero", func(h nats.Header) []byte { h.Set(HeaderCount, "0"); return body0 }, session.RuleRecordHeader, 3},
		{"count not a number", func(h nats.Header) []byte { h.Set(HeaderCount, "two"); return body0 }, session.RuleRecordHeader, 3},
		{"count missing", func(h nats.Header) []byte { h.Del(HeaderCount); return body0 }, session.RuleRecordHeader, -1},
		{"count twice", func(h nats.Header) []byte { h.Add(HeaderCount, "2"); return body0 }, session.RuleRecordHeader, -1},
		{"first seq off", func(h nats.Header) []byte { h.Set(HeaderFirstSeq, "2"); return body0 }, session.RuleRecordSeq, 2},
		{"first seq negative", func(h nats.Header) []byte { h.Set(HeaderFirstSeq, "-1"); return body0 }, session.RuleRecordHeader, -1},
		{"first seq padded", func(h nats.Header) []byte { h.Set(HeaderFirstSeq, "03"); return body0 }, session.RuleRecordHeader, -1},
		{"format", func(h nats.Header) []byte { h.Set(HeaderFormat, "2"); return body0 }, session.RuleRecordFormat, -1},
		{"blob in format 1", func(h nats.Header) []byte { h.Set(HeaderBlob, "3 10 "+strings.Repeat("ab", 32)+" NUID1"); return body0 }, session.RuleRecordFormat, -1},
		{"blob line not empty", func(h nats.Header) []byte {
			h.Set(HeaderFormat, RecordFormatBlobs)
			h.Set(HeaderBlob, "3 10 "+strings.Repeat("ab", 32)+" NUID1")
			return body0
		}, session.RuleRecordBlob, 3},
		{"blob value malformed", func(h nats.Header) []byte {
			h.Set(HeaderFormat, RecordFormatBlobs)
			h.Set(HeaderBlob, "0 10 xyz")
			return body0
		}, session.RuleRecordHeader, 3},
		{"empty line without blob", func(h nats.Header) []byte { return append(append([]byte(nil), body0...), '\n') }, session.RuleRecordCount, 3},
		{"format missing", func(h nats.Header) []byte { h.Del(HeaderFormat); return body0 }, session.RuleRecordHeader, -1},
		{"session missing", func(h nats.Header) []byte { h.Del(HeaderSession); return body0 }, session.RuleRecordHeader, -1},
		{"session not canonical", func(h nats.Header) []byte { h.Set(HeaderSession, "a.b"); return body0 }, session.RuleRecordSession, -1},
		{"trailing newline", func(h nats.Header) []byte { return append(append([]byte(nil), body0...), '\n') }, session.RuleRecordCount, 3},
		{"empty body", func(h nats.Header) []byte { return nil }, session.RuleRecordCount, 3},
		{"not json", func(h nats.Header) []byte { return []byte(line(0) + "\n{oops") }, session.RuleRecordEvent, 4},
		{"not an object", func(h nats.Header) []byte { return []byte(line(0) + "\n[1,2]") }, session.RuleRecordEvent, 4},
		{"no type", func(h nats.Header) []byte { return []byte(line(0) + `\n{"seq":4,"time":1,"data":{}}`) }, session.RuleRecordEvent, 4},
		{"no data", func(h nats.Header) []byte { return []byte(line(0) + `\n{"type":"x","seq":4,"time":1}`) }, session.RuleRecordEvent, 4},
		{"seq as string", func(h nats.Header) []byte { return []byte(line(0) + `\n{"type":"x","seq":"4","time":1,"data":{}}`) }, session.RuleRecordEvent, 4},
		{"swapped lines", func(h nats.Header) []byte { return []byte(line(1) + "\n" + line(0)) }, session.RuleRecordSeq, 3},
	}
	for _, c := range cases {
		h := clone()
		body := c.edit(h)
		// Undo the \n escapes of the raw strings above into real newlines.
		body = []byte(strings.ReplaceAll(string(body), `\n{`, "\n{"))
		_, err := DecodeRecord(h, body)
		var se *session.Error
		if !errors.As(err, &se) {
			t.Errorf("%s: err %v, want a *session.Error", c.name, err)
			continue
		}
		if se.Rule != c.rule || se.Seq != c.seq || !strings.Contains(se.Error(), string(c.rule)) {
			t.Errorf("%s: rule %s seq %d (%v), want rule %s seq %d", c.name, se.Rule, se.Seq, err, c.rule, c.seq)
		}
		if c.rule != session.RuleRecordSession && c.name != "session missing" && (se.Session != "sess" || !strings.Contains(se.Error(), `"sess"`)) {
			t.Errorf("%s: error does not name the session: %v", c.name, err)
		}
	}
	// The untouched record still decodes (the cases above edited copies).
	if _, err := DecodeRecord(h0, body0); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeRecordBlobs: the record decoder never panics on format 2 headers and bodies, and what
// it accepts is consistent: Count events, consecutive seqs, every offloaded event's line empty
// and named once by a canonical Agentlog-Blob value within the record's seqs.
func FuzzDecodeRecordBlobs(f *testing.F) {
	sha := strings.Repeat("ab", 32)
	f.Add("2", "3", "1", "3 10 "+sha+" ID1", "")
	f.Add("2", "3", "2", "4 10 "+sha+" ID1", `{"type":"a","seq":3,"time":1,"data":{}}`+"\n")
	f.Add("1", "0", "1", "", `{"type":"a","seq":0,"time":1,"data":{}}`)
	f.Add("2", "0", "3", "0 1 "+sha+" a\x002 5 "+sha+" b", "\n{\"type\":\"a\",\"seq\":1,\"time\":1,\"data\":{}}\n")
	f.Fuzz(func(t *testing.T, format, first, count, blobs, body string) {
		h := nats.Header{}
		h.Set(HeaderSession, "s")
		h.Set(HeaderFormat, format)
		h.Set(HeaderFirstSeq, first)
		h.Set(HeaderCount, count)
		if blobs != "" {
			for _, v := range strings.Split(blobs, "\x00") {
				h.Add(HeaderBlob, v)
			}
		}
		d, err := decodeRecord(h, []byte(body), 0, false)
		evs, bl := d.events, d.blobs
		// The scanning decoder (ScanRecord) gives the same events and the same refusals.
		ds, serr := decodeRecord(h, []byte(body), 0, true)
		if (err == nil) != (serr == nil) || (err != nil && err.Error() != serr.Error()) {
			t.Fatalf("decode: %v; scan: %v", err, serr)
		}
		if err == nil {
			if len(ds.scanned) != len(evs) {
				t.Fatalf("scan gave %d events, decode %d", len(ds.scanned), len(evs))
			}
			for i := range evs {
				if !reflect.DeepEqual(ds.scanned[i].Event, evs[i]) {
					t.Fatalf("event %d: scan %+v, decode %+v", i, ds.scanned[i].Event, evs[i])
				}
			}
		}
		if err != nil {
			var se *session.Error
			if !errors.As(err, &se) {
				t.Fatalf("a decode error that is not a *session.Error: %v", err)
			}
			return
		}
		n, _ := strconv.Atoi(count)
		if len(evs) != n {
			t.Fatalf("%d events, Count %d", len(evs), n)
		}
		for i := range evs {
			if i > 0 && evs[i].Seq != evs[i-1].Seq+1 {
				t.Fatalf("seqs not consecutive: %d after %d", evs[i].Seq, evs[i-1].Seq)
			}
		}
		if len(bl) != len(h.Values(HeaderBlob)) {
			t.Fatalf("%d blobs, %d headers", len(bl), len(h.Values(HeaderBlob)))
		}
		lines := strings.Split(body, "\n")
		for _, b := range bl {
			if b.Index < 0 || b.Index >= n || lines[b.Index] != "" || evs[b.Index].Seq != b.Ref.Seq {
				t.Fatalf("blob %+v: not an empty line of its seq", b)
			}
			if v := b.Ref.HeaderValue(); !slices.Contains(h.Values(HeaderBlob), v) {
				t.Fatalf("blob value %q is not one of the headers", v)
			}
		}
	})
}

func TestRecordLastSeq(t *testing.T) {
	for _, c := range []struct {
		first, count string
		last         int64
		ok           bool
	}{
		{"0", "1", 0, true}, {"5", "3", 7, true},
		{"", "1", 0, false}, {"-1", "2", 0, false}, {"4", "0", 0, false}, {"4", "x", 0, false},
	} {
		h := nats.Header{HeaderFirstSeq: []string{c.first}, HeaderCount: []string{c.count}}
		if last, ok := RecordLastSeq(h); last != c.last || ok != c.ok {
			t.Errorf("RecordLastSeq(first %q, count %q) = %d, %v; want %d, %v", c.first, c.count, last, ok, c.last, c.ok)
		}
	}
}
