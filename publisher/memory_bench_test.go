package publisher

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
)

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkWriterMemory reports the client-side memory of the publisher, without any server:
// idle_B/writer is the heap of one open Writer with nothing pending (after its Flush), and
// pending_B/event the heap each admitted, not yet durable 512-byte event adds (its window never
// ends here). Run: go test -run x -bench WriterMemory -benchtime 1x ./publisher/
func BenchmarkWriterMemory(b *testing.B) {
	const writers, events = 1000, 200
	p := offline(b, "mem")
	p.after = func(time.Duration, func()) func() bool { return func() bool { return true } }
	text := strings.Repeat("x", 512-110)
	for range b.N {
		base := liveHeap()
		ws := make([]*Writer, writers)
		for i := range ws {
			id := fmt.Sprintf("mem-%06d", i)
			ws[i] = newWriter(p, storetest.Session(p.store, id), "", session.NewSurface(), acked{})
		}
		idle := liveHeap()
		for _, w := range ws[:10] {
			for seq := range events {
				ev := session.Event{Type: "assistant/chunk", Seq: int64(seq), Time: json.Number(strconv.Itoa(1785000000000 + seq)),
					Data: json.RawMessage(`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"` + text + `"}}`)}
				if err := w.Append(ev); err != nil {
					b.Fatal(err)
				}
			}
		}
		pending := liveHeap()
		b.ReportMetric(float64(idle-base)/writers, "idle_B/writer")
		b.ReportMetric(float64(pending-idle)/(10*events), "pending_B/event")
		runtime.KeepAlive(ws)
	}
}
