package session

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

var fuzzSeeds = []string{
	``,
	"\n\n",
	`{"type":"session","version":0,"id":"f","createdAt":1}` + "\n" +
		`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}` + "\n" +
		`{"type":"user/message","seq":1,"time":2,"data":{"id":"u","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}` + "\n" +
		`{"type":"user/message","seq":2,"time":3,"data":{"id":"v","role":"user","content":[],"source":{"kind":"user"}},"surfaceOp":{"op":"replace","start":1,"end":1},"sourceEventSeqs":[1]}`,
	`{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}}`,
	`{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"id":"c","name":"n","dt":[1],"args":["{","}"]}}`,
	`{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}` + "\n" + `{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}` + "\n" +
		`{"type":"assistant/message","seq":2,"time":1,"data":{"turn":1,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c"}],"source":{"kind":"model","provider":"p","model":"m"}}},"surfaceOp":"append"}` + "\n" +
		`{"type":"tool/call","seq":3,"time":1,"data":{"callId":"c"}}`,
	`{"type":"tool/result","seq":0,"time":1,"data":{"message":{"content":[{"content":[]}],"source":{"callId":"c"}}},"surfaceOp":"append"}` + "\n" +
		`{"type":"tool/result","seq":1,"time":1,"data":{"message":{"content":[{"content":[1]}],"source":{"callId":"c"}}},"surfaceOp":{"op":"replace","start":0,"end":0},"sourceEventSeqs":[0]}`,
	`[[[[[[[[[[]]]]]]]]]]`,
	`{"a":"\ud800\udc00\ud800","b":-0,"c":1e400}`,
	"{\"type\":\"x\",\"seq\":0,\"time\":\"t\",\"data\":\"\xff\xfe\"}",
}

// addRecordedSeeds adds the recorded sessions in ../../shared/data/dsh-sessions to the corpus when
// they are there (the smaller ones whole; of the larger ones, their first lines), so the fuzzer
// starts from real agent work: real event shapes, packed chunk rows, replaces.
func addRecordedSeeds(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		const max = 64 << 10 // keep each seed small enough to mutate quickly
		if len(b) > max {
			cut := bytes.LastIndexByte(b[:max], '\n')
			if cut <= 0 {
				continue
			}
			b = b[:cut+1]
		}
		f.Add(b)
	}
}

// FuzzReadJSONL: reading never panics; what reads back writes and re-reads to the same events;
// Inspect never panics and its output is JSON.
func FuzzReadJSONL(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	addRecordedSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		h, evs, err := ReadJSONL(bytes.NewReader(in), "fuzz")
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not *Error", err)
			}
		} else {
			for _, pack := range []bool{false, true} {
				var out bytes.Buffer
				if werr := WriteJSONL(&out, h, evs, WriteOptions{Pack: pack}); werr != nil {
					// events without a numeric time cannot be written; that is the only reason
					ok := false
					for _, ev := range evs {
						if !jsvalue.ValidNumber(string(ev.Time)) {
							ok = true
						}
					}
					if !ok {
						t.Fatalf("WriteJSONL: %v", werr)
					}
					continue
				}
				_, back, rerr := ReadJSONL(&out, "fuzz")
				if rerr != nil {
					t.Fatalf("re-read: %v\n%s", rerr, out.Bytes())
				}
				if len(back) != len(evs) {
					t.Fatalf("re-read %d events, wrote %d", len(back), len(evs))
				}
				for i := range evs {
					if back[i].Type != evs[i].Type || back[i].Seq != evs[i].Seq || back[i].Time != evs[i].Time ||
						!jsonEqual(t, back[i].Data, evs[i].Data) {
						t.Fatalf("event %d changed: %+v -> %+v", i, evs[i], back[i])
					}
				}
			}
		}
		res := Inspect(bytes.NewReader(in), true)
		b, merr := res.MarshalJSON()
		if merr != nil || !json.Valid(b) {
			t.Fatalf("Inspect output: %v %s", merr, b)
		}
	})
}

// FuzzLoad: whatever reads as events loads without panicking; a loaded session derives, repairs,
// forks and folds a Surface consistently.
func FuzzLoad(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	addRecordedSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		_, evs, _ := ReadJSONL(bytes.NewReader(in), "fuzz")
		s, err := Load("fuzz", evs)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || e.Session != "fuzz" || !strings.Contains(e.Error(), "[rule ") {
				t.Fatalf("bad error %T %v", err, err)
			}
		}
		msgs := s.DeriveMessages()
		scratch, derr := DeriveMessages(s.Surface().Nodes, func(seq int64) (Event, error) { return s.Events()[seq], nil })
		if derr != nil || len(scratch) != len(msgs) {
			t.Fatalf("derivation: %v, %d vs %d", derr, len(scratch), len(msgs))
		}
		if rep, rerr := RepairChecked(s.Events()); rerr != nil || !reflect.DeepEqual(rep, s.Repair()) {
			t.Fatalf("repair: %v", rerr)
		}
		sf := NewSurface()
		for _, ev := range s.Events() {
			if err := sf.Apply("fuzz", ev, func(seq int64) (Event, error) { return s.Events()[seq], nil }); err != nil {
				t.Fatalf("Surface.Apply refused an event Session accepted: %v", err)
			}
		}
		if !reflect.DeepEqual(*sf, s.Surface()) {
			t.Fatalf("Surface %+v != Session surface %+v", *sf, s.Surface())
		}
		for _, b := range []int64{-1, 0, s.NextSeq() - 1, s.NextSeq()} {
			bb := b
			seed, ferr := ForkSeed("fuzz", s.Events(), &bb)
			if ferr == nil {
				child, cerr := ForkChild(seed, 1)
				if cerr == nil && len(child) < len(seed) {
					t.Fatalf("child shorter than seed")
				}
			}
		}
	})
}

// FuzzDecodeEventLine: the shallow record-line decoder agrees with Event.UnmarshalJSON on every
// input: both refuse, or both give the same event.
func FuzzDecodeEventLine(f *testing.F) {
	for _, s := range append(fuzzSeeds,
		`{"type":"a","seq":0,"time":1,"data":{}}`,
		`{"type":"a","seq":0,"time":1,"data":{"x":-0}}`,
		`{"type":"a","seq":0,"time":1,"data":[1e400]}`,
		`{"type":"a","seq":1,"time":1,"data":{},"type":"b","sourceEventSeqs":[0],"surfaceOp":"append","ignorable":true}`,
		` {"type":"a","seq":0,"time":"t","data":"x"} `,
		`{"type":"text-chunks","seq0":0,"time0":1,"data":{}}`) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, gerr := DecodeEventLine(in, "fuzz")
		var want Event
		werr := want.UnmarshalJSON(in)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("DecodeEventLine err %v, UnmarshalJSON err %v", gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeEventLine %+v, UnmarshalJSON %+v", got, want)
		}
	})
}
