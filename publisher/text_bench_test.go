package publisher

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// BenchmarkAppendText measures Writer.Append (validation and admission, no write) for event data
// of several kinds of text: the common path (valid UTF-8, no surrogate escape) and the repairs.
func BenchmarkAppendText(b *testing.B) {
	long := strings.Repeat(`line of tool output with \"quotes\", tabs\t, a pair \ud83d\ude00 and é\n`, 120)
	for _, c := range []struct{ name, typ, data string }{
		{"chunk", "assistant/chunk", `{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"Hello, world: a short streamed delta."}}`},
		{"toolcall-8k", "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"bash","arguments":"` + long + `"}`},
		{"toolcall-8k-cut-emoji", "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"bash","arguments":"` + long + "\xf0\x9f\x98" + `"}`},
		{"toolcall-8k-lone-surrogate", "tool/call", `{"turn":1,"step":1,"callId":"c1","name":"bash","arguments":"` + long + `\ud83d"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			p, err := New(&store.Store{}, nil, Options{WriterID: "bench", MaxPendingBytes: -1})
			if err != nil {
				b.Fatal(err)
			}
			p.after = func(time.Duration, func()) func() bool { return func() bool { return true } }
			data := json.RawMessage(c.data)
			var w *Writer
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := range b.N {
				seq := int64(i % 1000)
				if seq == 0 {
					w = newWriter(p, storetest.Session(p.store, "bench"), "", session.NewSurface(), acked{})
				}
				ev := session.Event{Type: c.typ, Seq: seq, Time: json.Number(strconv.Itoa(1785000000000 + i)), Data: data}
				if err := w.Append(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
