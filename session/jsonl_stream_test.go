package session

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readStream reads r with JSONLReader to the end: header, events and the error that ended it.
func readStream(r io.Reader, id string) (*Header, []Event, error) {
	jr := NewJSONLReader(r, id)
	h := jr.Header()
	var evs []Event
	for {
		ev, err := jr.Next()
		if errors.Is(err, io.EOF) {
			return h, evs, nil
		}
		if err != nil {
			return h, evs, err
		}
		evs = append(evs, ev)
	}
}

// TestJSONLReaderAsReadJSONL: the streaming reader gives ReadJSONL's header, events and error,
// on the recorded logs (packed rows included) and on broken input.
func TestJSONLReaderAsReadJSONL(t *testing.T) {
	inputs := map[string]string{
		"empty":        "",
		"blank lines":  "\n  \n",
		"header only":  `{"type":"session","version":0,"id":"h","createdAt":1}` + "\n",
		"no header":    `{"type":"a","seq":0,"time":1,"data":{}}` + "\n" + `{"type":"b","seq":1,"time":2,"data":{}}`,
		"bad json":     `{"type":"a","seq":0,"time":1,"data":{}}` + "\n{nope\n",
		"bad envelope": `{"type":"a","seq":0,"time":1}` + "\n{nope\n",
		"bad row":      `{"type":"text-chunks","seq0":0}` + "\n",
		"row":          `{"type":"text-chunks","seq0":1,"t0":5,"dt":[1,1],"turn":1,"step":1,"index":0,"texts":["a","b","c"]}`,
	}
	if paths, _ := filepath.Glob(filepath.Join(recordedDir, "*.jsonl")); len(paths) > 0 {
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			inputs[filepath.Base(p)] = string(b)
		}
	} else {
		t.Logf("no recorded logs at %s: only the inline inputs", recordedDir)
	}
	for name, in := range inputs {
		wh, wevs, werr := ReadJSONL(strings.NewReader(in), "s")
		gh, gevs, gerr := readStream(strings.NewReader(in), "s")
		if !reflect.DeepEqual(gh, wh) || len(gevs) != len(wevs) || (len(wevs) > 0 && !reflect.DeepEqual(gevs, wevs)) || errText(gerr) != errText(werr) {
			t.Errorf("%s: streaming read differs:\n got %v, %d events, %v\nwant %v, %d events, %v", name, gh, len(gevs), gerr, wh, len(wevs), werr)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestJSONLWriterAsWriteJSONL: writing in batches of every size gives WriteJSONL's bytes, packed
// runs that cross a batch boundary included.
func TestJSONLWriterAsWriteJSONL(t *testing.T) {
	chunk := func(seq int64, text string) Event {
		return mk(seq, "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"`+text+`"}}`)
	}
	evs := []Event{mk(0, "turn/start", `{"turn":1}`)}
	for i := int64(1); i < 9; i++ {
		evs = append(evs, chunk(i, "x"))
	}
	evs = append(evs, mk(9, "turn/end", `{"turn":1}`), chunk(10, "y"), chunk(11, "y"))
	h := &Header{ID: "w", CreatedAt: 1}
	for _, pack := range []bool{false, true} {
		var want bytes.Buffer
		if err := WriteJSONL(&want, h, evs, WriteOptions{Pack: pack}); err != nil {
			t.Fatal(err)
		}
		for batch := 1; batch <= len(evs); batch++ {
			var got bytes.Buffer
			jw := NewJSONLWriter(&got, WriteOptions{Pack: pack})
			if err := jw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(evs); i += batch {
				if err := jw.Write(evs[i:min(i+batch, len(evs))]...); err != nil {
					t.Fatal(err)
				}
			}
			if err := jw.Flush(); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Fatalf("pack %v, batches of %d:\n got %s\nwant %s", pack, batch, got.String(), want.String())
			}
		}
	}
}
