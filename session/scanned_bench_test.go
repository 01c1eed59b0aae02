package session

import "testing"

func BenchmarkScannedField(b *testing.B) {
	line := []byte(`{"type":"assistant/chunk","seq":5,"time":1700000000005,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"}}}`)
	var ls LineScanner
	sc, err := ls.Scan(line, "s")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if sc.Field("chunk", "type").IsString("usage") {
			n++
		}
	}
	_ = n
}

func BenchmarkScanEventLine(b *testing.B) {
	line := []byte(`{"type":"assistant/chunk","seq":5,"time":1700000000005,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		var ls LineScanner
		if _, err := ls.Scan(line, "s"); err != nil {
			b.Fatal(err)
		}
	}
}
