package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// lineOf is the encoded line of ev, the bytes a read must give back.
func lineOf(t testing.TB, ev session.Event) []byte {
	t.Helper()
	b, err := ev.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameEvents fails unless got encodes to exactly the lines of want.
func sameEvents(t testing.TB, got, want []session.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if g, w := lineOf(t, got[i]), lineOf(t, want[i]); !bytes.Equal(g, w) {
			t.Fatalf("event %d (seq %d) differs: %d bytes read, %d written", i, want[i].Seq, len(g), len(w))
		}
	}
}

// sizedEvent is a tool/result-like log event whose encoded line is exactly n bytes.
func sizedEvent(t testing.TB, seq int64, n int) session.Event {
	t.Helper()
	mk := func(pad int) session.Event {
		data := fmt.Sprintf(`{"text":"%s"}`, strings.Repeat("y", pad))
		return session.Event{Type: "test/blob", Seq: seq, Time: "1785000000000", Data: json.RawMessage(data)}
	}
	base := len(lineOf(t, mk(0)))
	if n < base {
		t.Fatalf("a line of %d bytes is below the smallest (%d)", n, base)
	}
	ev := mk(n - base)
	if got := len(lineOf(t, ev)); got != n {
		t.Fatalf("sized event: %d bytes, want %d", got, n)
	}
	return ev
}

// rawRecords returns the headers of each stored record of session id.
func rawRecords(t testing.TB, s *Store, id string) []*natsjs.RawStreamMsg {
	t.Helper()
	ctx := testCtx(t)
	subject, _ := wire.SessionSubject(id, s.partitions)
	var out []*natsjs.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := s.leaderNextMsg(ctx, subject, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

func TestOffloadRoundTrip(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	ctx := testCtx(t)
	window := append(evs(0, 3, "small"), sizedEvent(t, 3, 50_000))
	window = append(window, evs(4, 6, "small")...)
	window = append(window, sizedEvent(t, 6, 9000))
	r, err := sessionOf(s, "big").Append(ctx, 0, window, WithMsgID("w.big.0"))
	if err != nil {
		t.Fatal(err)
	}
	got, last, err := readAll(ctx, sessionOf(s, "big"))
	if err != nil || last != r.StreamSeq {
		t.Fatalf("Read: last %d (want %d), %v", last, r.StreamSeq, err)
	}
	sameEvents(t, got, window)
	recs := rawRecords(t, s, "big")
	if len(recs) != 1 || recs[0].Header.Get(wire.HeaderFormat) != wire.RecordFormatChunks || len(recs[0].Header.Values(wire.HeaderBlob)) != 2 {
		t.Fatalf("stored %d records, first headers %v; want one format 2 record naming 2 blobs", len(recs), recs[0].Header)
	}
	if refs := wire.RecordBlobs(recs[0].Header); len(refs) != 2 || refs[0].Seq != 3 || refs[0].Size != 50_000 || refs[1].Seq != 6 {
		t.Fatalf("RecordBlobs: %+v", refs)
	}
	// The package-level decoder cannot fetch: it refuses rather than serve a placeholder.
	if _, err := wire.DecodeRecord(recs[0].Header, recs[0].Data); !errors.Is(err, &session.Error{Rule: session.RuleRecordBlob}) {
		t.Fatalf("DecodeRecord of a record with blobs: %v", err)
	}
	evs2, err := s.DecodeRecord(ctx, recs[0].Header, recs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, evs2, window)
	tail, err := sessionOf(s, "big").Tail(ctx)
	if err != nil || tail.NextSeq != 7 {
		t.Fatalf("GetTail: %+v, %v", tail, err)
	}
	// A retry of the same append (lost ack) dedupes and stores no second blob.
	if r2, err := sessionOf(s, "big").Append(ctx, 0, window, WithMsgID("w.big.0")); err != nil || !r2.Duplicate {
		t.Fatalf("retry: %+v, %v", r2, err)
	}
	// The retry wrote its blobs again (new objects, never overwriting): they are orphans, which
	// CollectBlobs removes once older than its grace, keeping the two the record references.
	if objs := blobList(t, s); len(objs) != 4 {
		t.Fatalf("%d blobs, want 4", len(objs))
	}
	if c, err := s.CollectBlobs(ctx, time.Hour); err != nil || len(c.Removed) != 0 || c.Young != 2 || c.Used != 2 {
		t.Fatalf("CollectBlobs with an hour's grace: %+v, %v", c, err)
	}
	c, err := s.CollectBlobs(ctx, 0)
	if err != nil || len(c.Removed) != 2 || c.Used != 2 {
		t.Fatalf("CollectBlobs: %+v, %v; want 2 removed, 2 used", c, err)
	}
	got, _, err = readAll(ctx, sessionOf(s, "big"))
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, got, window)
	// rm deletes the blobs of the session's records.
	rm, err := sessionOf(s, "big").Remove(ctx)
	if err != nil || rm.Blobs != 2 || rm.Events != 7 {
		t.Fatalf("RemoveSession: %+v, %v", rm, err)
	}
	if objs := blobList(t, s); len(objs) != 0 {
		t.Fatalf("%d blobs left after rm (%v)", len(objs), objs)
	}
}

func TestOffloadAtTheRecordLimit(t *testing.T) {
	const limit = 4096
	s := testStore(t, Config{MaxMsgSize: limit})
	ctx := testCtx(t)
	tok, _ := wire.Token("edge")
	// The record limit of a one-event window with this msg id: the largest line stored inline.
	inline := limit - splitWorstHeaderBytes(len(tok), 0, 1, 0, len("w.edge.0"), 0)
	at := sizedEvent(t, 0, inline)
	over := sizedEvent(t, 0, inline+1)
	if _, err := sessionOf(s, "edge").Append(ctx, 0, []session.Event{at}, WithMsgID("w.edge.0")); err != nil {
		t.Fatal(err)
	}
	recs := rawRecords(t, s, "edge")
	if len(recs) != 1 || recs[0].Header.Get(wire.HeaderFormat) != wire.RecordFormat || !bytes.Equal(recs[0].Data, lineOf(t, at)) {
		t.Fatalf("an event at the record limit (%d bytes) was not stored inline: %v", inline, recs[0].Header)
	}
	if _, err := sessionOf(s, "edge2").Append(ctx, 0, []session.Event{over}, WithMsgID("w.edge.1")); err != nil {
		t.Fatal(err)
	}
	recs = rawRecords(t, s, "edge2")
	if len(recs) == 0 {
		info, _ := s.stream.Info(ctx)
		t.Fatalf("no records of edge2: %+v", info.State)
	}
	if len(recs) != 1 || recs[0].Header.Get(wire.HeaderFormat) != wire.RecordFormatChunks || len(recs[0].Data) != 0 {
		t.Fatalf("an event one byte over the record limit was not offloaded: %v, %d body bytes", recs[0].Header, len(recs[0].Data))
	}
	for id, want := range map[string]session.Event{"edge": at, "edge2": over} {
		got, _, err := readAll(ctx, sessionOf(s, id))
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, got, []session.Event{want})
	}
}

func TestOffloadSplitWindow(t *testing.T) {
	// 20 large events and small ones in one window under a small record limit: the header values
	// of the blobs spread over several records, committed as one atomic batch.
	s := testStore(t, Config{MaxMsgSize: 1024})
	ctx := testCtx(t)
	var window []session.Event
	for i := int64(0); i < 60; i++ {
		if i%3 == 1 {
			window = append(window, sizedEvent(t, i, 3000+int(i)))
		} else {
			window = append(window, ev(i, strings.Repeat("s", 100)))
		}
	}
	if _, err := sessionOf(s, "many").Append(ctx, 0, window, WithMsgID("w.many.0")); err != nil {
		t.Fatal(err)
	}
	if n := len(rawRecords(t, s, "many")); n < 2 {
		t.Fatalf("%d records, want a split", n)
	}
	got, _, err := readAll(ctx, sessionOf(s, "many"))
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, got, window)
}

func TestOffloadedBlobMissingOrCorrupt(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	ctx := testCtx(t)
	window := append(evs(0, 2, "a"), sizedEvent(t, 2, 10_000))
	if _, err := sessionOf(s, "c").Append(ctx, 0, window); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token("c")
	ref := wire.RecordBlobs(rawRecords(t, s, "c")[0].Header)[0]
	// Other bytes of the same length under the blob's subjects (only after an operator's purge:
	// the stream refuses a second message on a subject): refused, never served.
	if err := s.purgeBlob(ctx, tok, ref.ID); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Repeat([]byte{'z'}, int(ref.Size))
	if n, err := s.putBlob(ctx, tok, ref.ID, bad); err != nil || n != ref.Chunks {
		t.Fatal(n, err)
	}
	_, _, err := readAll(ctx, sessionOf(s, "c"))
	var se *session.Error
	if !errors.As(err, &se) || se.Rule != session.RuleRecordBlob || se.Seq != 2 || se.Session != "c" || !strings.Contains(err.Error(), "another SHA-256") {
		t.Fatalf("Read with a corrupt blob: %v", err)
	}
	// One chunk short.
	if _, err := s.purge(ctx, wire.BlobStream, wire.BlobChunkSubject(tok, ref.ID, 0), 0); err != nil {
		t.Fatal(err)
	}
	_, _, err = readAll(ctx, sessionOf(s, "c"))
	if !errors.As(err, &se) || se.Rule != session.RuleRecordBlob || se.Seq != 2 || !strings.Contains(err.Error(), "chunk 0 of 1 is missing") {
		t.Fatalf("Read with a missing chunk: %v", err)
	}
	if err := s.purgeBlob(ctx, tok, ref.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = readAll(ctx, sessionOf(s, "c"))
	if !errors.As(err, &se) || se.Rule != session.RuleRecordBlob || se.Seq != 2 || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Read with a missing blob: %v", err)
	}
	// A tail reads no blob (the guard and the next seq are in the record); the record read whole fails.
	if tail, err := sessionOf(s, "c").Tail(context.Background()); err != nil || tail.NextSeq != 3 || tail.LastEvents[2].Seq != 2 {
		t.Fatalf("GetTail with a missing blob: %+v, %v", tail, err)
	}
	if _, _, err := sessionOf(s, "c").RecordFromLeader(ctx, 1); !errors.Is(err, &session.Error{Rule: session.RuleRecordBlob}) {
		t.Fatalf("GetRecordFromLeader with a missing blob: %v", err)
	}
}

// BenchmarkOffload appends one 5 MiB event per op (offloaded: its blob, then its record) and, in
// the same run, does the raw work (an Object Store put of the same bytes and a publish of a small
// message); it reports both rates and raw_ns/append_ns as "ratio" (1 = no overhead). Run:
// go test -run '^$' -bench Offload -benchtime 20x ./jetstream
func BenchmarkOffload(b *testing.B) {
	s := testStore(b, Config{})
	ctx := testCtx(b)
	ev := sizedEvent(b, 0, 5<<20)
	line := lineOf(b, ev)
	var appendNs, rawNs time.Duration
	var last uint64
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	raw := func(i int) {
		t0 := time.Now()
		if _, err := s.putBlob(ctx, "raw", wire.NewBlobID(), line); err != nil {
			b.Fatal(err)
		}
		if _, err := s.js.Publish(ctx, "agentlog.session.0.raw", []byte(`{"raw":true}`)); err != nil {
			b.Fatal(err)
		}
		rawNs += time.Since(t0)
	}
	for i := 0; i < b.N; i++ {
		if i%2 == 0 { // alternate which goes first: the second may wait on the first's writes
			raw(i)
		}
		t1 := time.Now()
		e := ev
		e.Seq = int64(i)
		r, err := sessionOf(s, "bench").Append(ctx, last, []session.Event{e})
		if err != nil {
			b.Fatal(err)
		}
		last = r.StreamSeq
		appendNs += time.Since(t1)
		if i%2 == 1 {
			raw(i)
		}
	}
	b.StopTimer()
	mb := float64(len(line)) * float64(b.N) / (1 << 20)
	b.ReportMetric(mb/appendNs.Seconds(), "append_MiB/s")
	b.ReportMetric(mb/rawNs.Seconds(), "raw_MiB/s")
	b.ReportMetric(float64(rawNs)/float64(appendNs), "ratio")
}

// chunkSubjects returns the chunk subjects of AGENTLOG_BLOBS and how many chunks each holds.
func chunkSubjects(t testing.TB, s *Store) map[string]uint64 {
	t.Helper()
	info, err := s.blobStream.Info(testCtx(t), natsjs.WithSubjectFilter(wire.BlobPrefix+".>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// blobList returns the blobs of AGENTLOG_BLOBS as their chunk filters, sorted.
func blobList(t testing.TB, s *Store) []string {
	t.Helper()
	byTok, err := s.sessionBlobIDs(testCtx(t), wire.BlobPrefix+".>")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for tok, ids := range byTok {
		for id := range ids {
			out = append(out, wire.BlobChunksFilter(tok, id))
		}
	}
	slices.Sort(out)
	return out
}

// setBlobsMaxBytes sets the max bytes of AGENTLOG_BLOBS (-1: none), as an operator would.
func setBlobsMaxBytes(t testing.TB, s *Store, n int64) {
	t.Helper()
	st, err := s.js.Stream(testCtx(t), wire.BlobStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = n
	if _, err := s.js.UpdateStream(testCtx(t), cfg); err != nil {
		t.Fatal(err)
	}
}

// TestFailedPutLeavesChunksForCollectBlobs: a blob upload the server refuses part-way (the bucket
// is full) fails naming the session and seq with the server's reason, leaves its stored chunks
// (the writer does not purge the bucket), and CollectBlobs purges them once older than its grace,
// keeping the chunks of every object.
func TestFailedPutLeavesChunksForCollectBlobs(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	ctx := testCtx(t)
	kept := []session.Event{sizedEvent(t, 0, 300_000)}
	if _, err := sessionOf(s, "kept").Append(ctx, 0, kept); err != nil {
		t.Fatal(err)
	}
	info, err := s.blobStream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	setBlobsMaxBytes(t, s, int64(info.State.Bytes)+200_000)
	_, err = sessionOf(s, "failed").Append(ctx, 0, []session.Event{sizedEvent(t, 0, 1_000_000)})
	if err == nil || !strings.Contains(err.Error(), `session "failed" seq 0: store the event's 1000000 bytes as blob`) || !strings.Contains(err.Error(), "maximum bytes") {
		t.Fatalf("append into a full bucket: %v; want the session, the seq and the server's reason", err)
	}
	setBlobsMaxBytes(t, s, -1)
	before := blobList(t, s)
	if len(before) != 2 {
		t.Fatalf("blobs after the failed put: %v; want the kept one and the partial upload", before)
	}
	c, err := s.CollectBlobs(ctx, time.Hour)
	if err != nil || c.Young != 1 || c.Used != 1 || len(c.Removed) != 0 {
		t.Fatalf("CollectBlobs with an hour's grace: %+v, %v; want the partial upload kept as young", c, err)
	}
	c, err = s.CollectBlobs(ctx, 0)
	if err != nil || len(c.Removed) != 1 || c.Young != 0 || c.Used != 1 {
		t.Fatalf("CollectBlobs: %+v, %v; want the partial upload purged, the kept blob used", c, err)
	}
	failedTok, _ := wire.Token("failed")
	after := chunkSubjects(t, s)
	for subj := range after {
		if tok, _, _, _ := wire.ParseBlobSubject(subj); tok == failedTok {
			t.Fatalf("chunk %s of the failed upload left after CollectBlobs", subj)
		}
	}
	if len(after) != 3 || !strings.HasPrefix(c.Removed[0], wire.BlobPrefix+"."+failedTok+".") {
		t.Fatalf("chunk subjects after CollectBlobs: %v (removed %v); want the kept blob's 3", after, c.Removed)
	}
	got, _, err := readAll(ctx, sessionOf(s, "kept"))
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, got, kept)
}
