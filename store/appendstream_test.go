package store

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// streamAppend writes events through a StreamAppend and commits it.
func streamAppend(t *testing.T, s *Store, id string, expected uint64, events []session.Event, opts ...AppendOpt) (AppendResult, error) {
	t.Helper()
	a, err := sessionOf(s, id).BeginAppend(expected, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if err := a.Add(testCtx(t), &events[i]); err != nil {
			return AppendResult{}, err
		}
	}
	return a.Commit(testCtx(t))
}

// TestStreamAppend: a run that fits one record is one record; a longer one is several records
// (an atomic batch) that read back as the same events, the last one carrying the msg id; a
// guard that fails stores nothing; a discarded run leaves nothing visible.
func TestStreamAppend(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	short := []session.Event{ev(0, "a"), ev(1, "b")}
	if _, err := streamAppend(t, s, "one", 0, short, WithMsgID("m1")); err != nil {
		t.Fatal(err)
	}
	long := make([]session.Event, 200)
	for i := range long {
		long[i] = ev(int64(i), strings.Repeat("x", 100))
	}
	res, err := streamAppend(t, s, "many", 0, long, WithMsgID("m2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id      string
		want    []session.Event
		records int
	}{{"one", short, 1}, {"many", long, 2}} {
		var got []session.Event
		records := 0
		last, err := sessionOf(s, c.id).Records(testCtx(t), func(r Record) error {
			records++
			got = append(got, r.Events...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.want) || records < c.records || (c.id == "one" && records != 1) {
			t.Fatalf("%s: %d events in %d records, want %d events", c.id, len(got), records, len(c.want))
		}
		for i := range got {
			if string(got[i].Data) != string(c.want[i].Data) || got[i].Seq != c.want[i].Seq {
				t.Fatalf("%s: event %d differs", c.id, i)
			}
		}
		if c.id == "many" {
			tail, err := sessionOf(s, "many").TailFromLeader(testCtx(t))
			if err != nil || tail.LastMsgID != "m2" || tail.LastStreamSeq != last || last != res.StreamSeq {
				t.Fatalf("tail %+v (%v), last %d, result %+v", tail, err, last, res)
			}
		}
	}
	// The guard: expected 0 on a session with records.
	if _, err := streamAppend(t, s, "many", 0, long, WithMsgID("m3")); !errors.Is(err, ErrConflict) {
		t.Fatalf("append over existing records: %v, want ErrConflict", err)
	}
	if tail, _ := sessionOf(s, "many").TailFromLeader(testCtx(t)); tail.LastStreamSeq != res.StreamSeq {
		t.Fatalf("a refused batch stored something: tail %d, was %d", tail.LastStreamSeq, res.StreamSeq)
	}
	// Discarded after several records were sent: nothing visible.
	a, err := sessionOf(s, "dropped").BeginAppend(0, WithMsgID("m4"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range long {
		if err := a.Add(testCtx(t), &long[i]); err != nil {
			t.Fatal(err)
		}
	}
	a.Discard()
	if tail, err := sessionOf(s, "dropped").TailFromLeader(testCtx(t)); err != nil || tail.LastStreamSeq != 0 {
		t.Fatalf("a discarded run is visible: %+v, %v", tail, err)
	}
	// Seqs must continue.
	a, _ = sessionOf(s, "gap").BeginAppend(0)
	if err := a.Add(testCtx(t), &long[1]); err == nil {
		t.Fatal("a first record starting at seq 1 was taken")
	}
}

// TestEventWorstHeaderBytes: the arithmetic worst case equals the wire size of the headers it
// stands for.
func TestEventWorstHeaderBytes(t *testing.T) {
	for _, tok := range []string{"a", "a_2Eb", strings.Repeat("x", 700)} {
		for _, seq := range []int64{0, 9, 12345, 1 << 53} {
			worst := nats.Header(wire.RecordHeader(tok, seq, 1))
			worst.Set(natsjs.ExpectedLastSubjSeqHeader, strconv.FormatUint(^uint64(0), 10))
			worst.Set(natsjs.MsgIDHeader, strings.Repeat("x", 64+2*len(tok)+20+wire.MaxIncarnationBytes+1))
			worst.Set(jetstreamext.BatchIDHeader, strings.Repeat("x", 22))
			worst.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(wire.MaxBatchRecords))
			worst.Set(jetstreamext.BatchCommitHeader, "1")
			if got, want := eventWorstHeaderBytes(len(tok), seq), wire.HeaderWireSize(worst); got != want {
				t.Fatalf("token of %d bytes, seq %d: %d, want %d", len(tok), seq, got, want)
			}
		}
	}
}

// TestStreamAppendHeld: with HoldRecords, a run of several records within the hold is published
// record by record (not batched), each guarded by the one before, the last carrying the msg id; a
// run longer than the hold falls back to the atomic batch; OnStored cuts a held run part-way and
// leaves the records stored before the cut.
func TestStreamAppendHeld(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	long := make([]session.Event, 200)
	for i := range long {
		long[i] = ev(int64(i), strings.Repeat("x", 100))
	}
	read := func(id string) ([]session.Event, int, uint64) {
		t.Helper()
		var got []session.Event
		records := 0
		last, err := sessionOf(s, id).Records(testCtx(t), func(r Record) error {
			records++
			got = append(got, r.Events...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, records, last
	}
	for _, c := range []struct {
		id      string
		hold    int
		batched bool
	}{{"held", 1 << 20, false}, {"overflow", 5000, true}} {
		a, err := sessionOf(s, c.id).BeginAppend(0, WithMsgID("m-"+c.id), HoldRecords(c.hold))
		if err != nil {
			t.Fatal(err)
		}
		for i := range long {
			if err := a.Add(testCtx(t), &long[i]); err != nil {
				t.Fatal(err)
			}
		}
		records, batched := a.Pending()
		if records < 3 || batched != c.batched {
			t.Fatalf("%s: pending %d records, batched %v; want several, batched %v", c.id, records, batched, c.batched)
		}
		res, err := a.Commit(testCtx(t))
		if err != nil {
			t.Fatalf("%s: Commit: %v", c.id, err)
		}
		got, n, last := read(c.id)
		if len(got) != len(long) || n != records || last != res.StreamSeq || a.Stored() != records {
			t.Fatalf("%s: %d events in %d records (last %d), stored %d; want %d in %d (last %d)", c.id, len(got), n, last, a.Stored(), len(long), records, res.StreamSeq)
		}
		tail, err := sessionOf(s, c.id).TailFromLeader(testCtx(t))
		if err != nil || tail.LastMsgID != "m-"+c.id {
			t.Fatalf("%s: tail %+v, %v; want the msg id on the last record", c.id, tail, err)
		}
	}

	cut := errors.New("cut")
	a, err := sessionOf(s, "cut").BeginAppend(0, HoldRecords(1<<20), OnStored(func(n int) error {
		if n == 2 {
			return cut
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range long {
		if err := a.Add(testCtx(t), &long[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Commit(testCtx(t)); !errors.Is(err, cut) || a.Stored() != 2 {
		t.Fatalf("cut Commit: %v, stored %d; want the cut after 2", err, a.Stored())
	}
	if _, n, _ := read("cut"); n != 2 {
		t.Fatalf("cut run left %d records, want 2", n)
	}
}
