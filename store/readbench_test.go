package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// BenchmarkReadPath compares Records (a leader get of the bound, then batched direct gets: no
// consumer) with a raw baseline, an ordered consumer on the same subject read to its end (create,
// pull, delete), on logs of a few and of many records. Each iteration does one read of each,
// timed apart; it reports both (ns per read) and their ratio (direct/consumer: below 1 is faster).
// Run: go test -run '^$' -bench BenchmarkReadPath -benchtime 200x ./store
func BenchmarkReadPath(b *testing.B) {
	for _, records := range []int{4, 100, 2000} {
		b.Run(fmt.Sprintf("records=%d", records), func(b *testing.B) {
			s := testStore(b, Config{})
			ctx := testCtx(b)
			ss := sessionOf(s, "bench")
			var tail uint64
			next := int64(0)
			for range records {
				r, err := ss.Append(ctx, tail, evs(next, next+3, "a payload of a few dozen bytes, as a short message is"))
				if err != nil {
					b.Fatal(err)
				}
				tail, next = r.StreamSeq, next+3
			}
			var direct, consumer, raw time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				n := 0
				if _, err := ss.Records(ctx, func(Record) error { n++; return nil }); err != nil || n != records {
					b.Fatalf("Records: %d records, %v", n, err)
				}
				t1 := time.Now()
				if got := orderedRead(ctx, b, s, ss.subject); got != records {
					b.Fatalf("ordered consumer: %d records", got)
				}
				t2 := time.Now()
				if got := rawDirectRead(ctx, b, s, ss.subject); got != records {
					b.Fatalf("raw direct gets: %d records", got)
				}
				t3 := time.Now()
				direct += t1.Sub(t0)
				consumer += t2.Sub(t1)
				raw += t3.Sub(t2)
			}
			b.ReportMetric(float64(direct.Nanoseconds())/float64(b.N), "direct-ns/read")
			b.ReportMetric(float64(consumer.Nanoseconds())/float64(b.N), "consumer-ns/read")
			b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "rawdirect-ns/read")
			b.ReportMetric(float64(direct)/float64(consumer), "direct/consumer")
		})
	}
}

// rawDirectRead reads every record of subject with batched direct gets as Records does, without
// the bound and without decoding, and returns how many it read.
func rawDirectRead(ctx context.Context, b *testing.B, s *Store, subject string) int {
	n, seq := 0, uint64(1)
	for {
		msgs, err := s.getDirect(ctx, "AGENTLOG", map[string]any{"seq": seq, "next_by_subj": subject, "batch": readBatch, "max_bytes": readBatchBytes})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			seq = m.Sequence + 1
		}
		n += len(msgs)
		if len(msgs) < readBatch {
			return n
		}
	}
}

// orderedRead reads every record of subject with an ordered consumer (the read path before
// direct gets, without its decoding) and returns how many it read.
func orderedRead(ctx context.Context, b *testing.B, s *Store, subject string) int {
	cons, err := s.stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.stream.DeleteConsumer(ctx, cons.CachedInfo().Name) }()
	it, err := cons.Messages(natsjs.PullMaxMessagesWithBytesLimit(readBatch, 4*int(s.maxMsgSize)))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	n := 0
	for {
		m, err := it.Next(natsjs.NextContext(ctx))
		if err != nil {
			b.Fatal(err)
		}
		n++
		md, err := m.Metadata()
		if err != nil {
			b.Fatal(err)
		}
		if md.NumPending == 0 {
			return n
		}
	}
}
