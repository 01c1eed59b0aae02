package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestAppendGuardOnZero(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	// Two writers both creating session "new" (expected 0), racing: exactly one wins. This only
	// holds if Nats-Expected-Last-Subject-Sequence: 0 is really sent.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[w] = sessionOf(s, "new").Append(ctx, 0, evs(0, 2, fmt.Sprintf("w%d", w)), WithMsgID(fmt.Sprintf("writer-%d", w)))
		}()
	}
	wg.Wait()
	ok, conflicts := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrConflict):
			conflicts++
			if !strings.Contains(err.Error(), `"new"`) || !strings.Contains(err.Error(), "expected last stream seq 0") {
				t.Errorf("conflict error does not name the session and expected seq: %v", err)
			}
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok != 1 || conflicts != 1 {
		t.Fatalf("%d writers succeeded and %d got a conflict, want 1 and 1 (%v)", ok, conflicts, errs)
	}
	// And sequentially: a third writer expecting 0 is refused as well.
	if _, err := sessionOf(s, "new").Append(ctx, 0, evs(0, 1, "w3"), WithMsgID("writer-3")); !errors.Is(err, ErrConflict) {
		t.Fatalf("third writer expecting 0: %v, want ErrConflict", err)
	}
	got, _, err := readAll(ctx, sessionOf(s, "new"))
	if err != nil || len(got) != 2 {
		t.Fatalf("Read: %d events, %v; want the 2 of the winner", len(got), err)
	}
}

func TestAppendGuardStale(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	r1, err := sessionOf(s, "sess").Append(ctx, 0, evs(0, 2, "a"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := sessionOf(s, "sess").Append(ctx, r1.StreamSeq, evs(2, 3, "b"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sessionOf(s, "sess").Append(ctx, r1.StreamSeq, evs(2, 3, "stale"))
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("expected last stream seq %d", r1.StreamSeq)) || !strings.Contains(err.Error(), `"sess"`) {
		t.Fatalf("stale writer: %v, want ErrConflict naming session and expected seq %d", err, r1.StreamSeq)
	}
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != natsjs.JSErrCodeStreamWrongLastSequence || !IsWrongLastSequence(err) {
		t.Errorf("conflict does not carry the JetStream error 10071: %v", err)
	}
	tail, err := sessionOf(s, "sess").Tail(ctx)
	if err != nil || tail.LastStreamSeq != r2.StreamSeq || tail.NextSeq != 3 {
		t.Fatalf("tail %+v, %v; want last stream seq %d, next seq 3", tail, err, r2.StreamSeq)
	}
	// A new session's first record must start at seq 0.
	var se *session.Error
	if _, err := sessionOf(s, "other").Append(ctx, 0, evs(1, 2, "x")); !errors.As(err, &se) || se.Rule != session.RuleRecordContinue {
		t.Fatalf("first record at seq 1: %v, want rule %s", err, session.RuleRecordContinue)
	}
}

func TestAppendInterleavedSessionsUseStreamSeq(t *testing.T) {
	s := testStore(t, Config{Partitions: 4})
	ctx := testCtx(t)
	ids := []string{"alpha", "beta.gamma", "δ"}
	tails := map[string]uint64{}
	next := map[string]int64{}
	for round := range 5 {
		for _, id := range ids {
			n := int64(1 + round%3)
			r, err := sessionOf(s, id).Append(ctx, tails[id], evs(next[id], next[id]+n, id), WithMsgID(fmt.Sprintf("%s-%d", id, round)))
			if err != nil {
				t.Fatalf("round %d %s: %v", round, id, err)
			}
			tails[id] = r.StreamSeq
			next[id] += n
		}
	}
	// Stream seqs of one session are not contiguous: the guard must take the stream seq, and our
	// per-session seq (next event seq) is not a valid guard.
	if tails["alpha"] == uint64(next["alpha"]) {
		t.Fatalf("test setup: stream and event seqs coincide (%d)", tails["alpha"])
	}
	if _, err := sessionOf(s, "alpha").Append(ctx, uint64(next["alpha"]-1), evs(next["alpha"], next["alpha"]+1, "x")); !errors.Is(err, ErrConflict) {
		t.Fatalf("guard with an event seq: %v, want ErrConflict", err)
	}
	for _, id := range ids {
		got, last, err := readAll(ctx, sessionOf(s, id))
		if err != nil {
			t.Fatal(err)
		}
		if last != tails[id] || int64(len(got)) != next[id] {
			t.Errorf("%s: %d events last %d, want %d events last %d", id, len(got), last, next[id], tails[id])
		}
		for i, e := range got {
			if e.Seq != int64(i) || !strings.Contains(string(e.Data), id) {
				t.Fatalf("%s: event %d is %s", id, i, mustJSON(t, e))
			}
		}
		tail, err := sessionOf(s, id).Tail(ctx)
		if err != nil || tail.LastStreamSeq != tails[id] || tail.NextSeq != next[id] || tail.LastMsgID != fmt.Sprintf("%s-4", id) {
			t.Errorf("%s: tail %+v, %v", id, tail, err)
		}
	}
}

func TestAppendDedupeByMsgID(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	r1, err := sessionOf(s, "d").Append(ctx, 0, evs(0, 3, "a"), WithMsgID("batch-1"))
	if err != nil || r1.Duplicate {
		t.Fatalf("first append: %+v, %v", r1, err)
	}
	// The retry after a lost ack: same msg id, same guard. Stored once, reported as Duplicate,
	// with the stream seq of the stored record.
	r2, err := sessionOf(s, "d").Append(ctx, 0, evs(0, 3, "a"), WithMsgID("batch-1"))
	if err != nil || !r2.Duplicate || r2.StreamSeq != r1.StreamSeq {
		t.Fatalf("retry: %+v, %v; want Duplicate at stream seq %d", r2, err, r1.StreamSeq)
	}
	got, _, err := readAll(ctx, sessionOf(s, "d"))
	if err != nil || len(got) != 3 {
		t.Fatalf("Read: %d events, %v; want 3", len(got), err)
	}
	if tail, _ := sessionOf(s, "d").Tail(ctx); tail.LastMsgID != "batch-1" {
		t.Errorf("tail msg id %q", tail.LastMsgID)
	}
	if _, err := sessionOf(s, "d").Append(ctx, r1.StreamSeq, evs(3, 4, "a"), WithMsgID("bad\nid")); err == nil {
		t.Errorf("msg id with a line break accepted")
	}
	if _, err := sessionOf(s, "d").Append(ctx, r1.StreamSeq, evs(3, 4, "a"), WithMsgID("")); err == nil || !strings.Contains(err.Error(), "empty msg id") {
		t.Errorf("empty msg id: %v, want a refusal", err)
	}
	// Without WithMsgID the record carries no Nats-Msg-Id.
	if _, err := sessionOf(s, "d").Append(ctx, r1.StreamSeq, evs(3, 4, "a")); err != nil {
		t.Fatal(err)
	}
	if tail, _ := sessionOf(s, "d").Tail(ctx); tail.LastMsgID != "" {
		t.Errorf("append without WithMsgID: tail msg id %q, want none", tail.LastMsgID)
	}
}

func TestReadManyRecords(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	if got, last, err := readAll(ctx, sessionOf(s, "empty")); err != nil || len(got) != 0 || last != 0 {
		t.Fatalf("Read of a session without records: %d events, last %d, %v", len(got), last, err)
	}
	var tail, noise uint64
	next := int64(0)
	const records = 300
	for i := range records {
		n := int64(1 + i%4)
		r, err := sessionOf(s, "many").Append(ctx, tail, evs(next, next+n, "m"))
		if err != nil {
			t.Fatal(err)
		}
		tail, next = r.StreamSeq, next+n
		if i%3 == 0 { // another session in between
			rn, err := sessionOf(s, "noise").Append(ctx, noise, evs(int64(i/3), int64(i/3)+1, "n"))
			if err != nil {
				t.Fatal(err)
			}
			noise = rn.StreamSeq
		}
	}
	got, last, err := readAll(ctx, sessionOf(s, "many"))
	if err != nil {
		t.Fatal(err)
	}
	if last != tail || int64(len(got)) != next {
		t.Fatalf("Read: %d events, last %d; want %d, %d", len(got), last, next, tail)
	}
	for i, e := range got {
		if e.Seq != int64(i) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	nrec := 0
	if _, err := sessionOf(s, "many").Records(ctx, func(Record) error { nrec++; return nil }); err != nil || nrec != records {
		t.Fatalf("Records: %d records, %v", nrec, err)
	}
	stop := errors.New("stop")
	if _, err := sessionOf(s, "many").Records(ctx, func(Record) error { return stop }); err != stop {
		t.Fatalf("Records does not return fn's error: %v", err)
	}
	// A read creates no consumer (batched direct gets).
	if n := readerConsumers(t, s); n != 0 {
		t.Errorf("%d consumers left after Read", n)
	}
}

// TestRecordsAfterStreamSeq reads a log in steps: each step reads only the records appended since the
// last one, nothing new costs no consumer, and a wrong nextSeq or a position past the log's end
// is refused.
func TestRecordsAfterStreamSeq(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	var after, tail uint64
	var next, read int64
	for step := range 5 {
		for range step + 1 {
			r, err := sessionOf(s, "steps").Append(ctx, tail, evs(next, next+2, "s"))
			if err != nil {
				t.Fatal(err)
			}
			tail, next = r.StreamSeq, next+2
		}
		var records int
		last, err := sessionOf(s, "steps").Records(ctx, func(r Record) error {
			events := r.Events
			records++
			if events[0].Seq != read {
				t.Fatalf("step %d: record starts at seq %d, want %d", step, events[0].Seq, read)
			}
			read = events[len(events)-1].Seq + 1
			return nil
		}, AfterStreamSeq(after, read))
		if err != nil || last != tail || records != step+1 || read != next {
			t.Fatalf("step %d: last %d (want %d), %d records (want %d), read to %d (want %d): %v", step, last, tail, records, step+1, read, next, err)
		}
		after = last
	}
	if last, err := sessionOf(s, "steps").Records(ctx, func(Record) error {
		t.Fatal("no record is new")
		return nil
	}, AfterStreamSeq(after, read)); err != nil || last != after {
		t.Fatalf("nothing new: last %d, %v", last, err)
	}
	if n := readerConsumers(t, s); n != 0 {
		t.Errorf("consumers left: %d", n)
	}
	if _, err := sessionOf(s, "steps").Records(ctx, func(Record) error { return nil }, AfterStreamSeq(after+1000, read)); !errors.Is(err, ErrLogChanged) {
		t.Fatalf("a position past the log's end: %v, want ErrLogChanged", err)
	}
	r, err := sessionOf(s, "steps").Append(ctx, tail, evs(next, next+1, "s"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = sessionOf(s, "steps").Records(ctx, func(Record) error { return nil }, AfterStreamSeq(after, read+5))
	var se *session.Error
	if !errors.As(err, &se) || se.Rule != session.RuleRecordContinue || se.Seq != next {
		t.Fatalf("a wrong nextSeq: %v, want rule %s at seq %d (record stream seq %d)", err, session.RuleRecordContinue, next, r.StreamSeq)
	}
}

// publishRaw stores a record bypassing Append (as a broken or foreign writer would).
func publishRaw(t *testing.T, s *Store, id string, h nats.Header, body []byte) uint64 {
	t.Helper()
	subj, err := wire.SessionSubject(id, s.partitions)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := s.js.PublishMsg(testCtx(t), &nats.Msg{Subject: subj, Header: h, Data: body})
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func TestReadRefusesBrokenLogs(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)

	// A gap between records.
	r, err := sessionOf(s, "gap").Append(ctx, 0, evs(0, 2, "a"))
	if err != nil {
		t.Fatal(err)
	}
	h, body, _ := wire.EncodeRecord("gap", evs(3, 4, "b"))
	bad := publishRaw(t, s, "gap", h, body)
	_, _, err = readAll(ctx, sessionOf(s, "gap"))
	var se *session.Error
	if !errors.As(err, &se) || se.Rule != session.RuleRecordContinue || se.Seq != 3 || se.Session != "gap" ||
		!strings.Contains(err.Error(), fmt.Sprintf("stream seq %d", bad)) || !strings.Contains(err.Error(), fmt.Sprintf("stream seq %d", r.StreamSeq)) {
		t.Fatalf("Read over a gap: %v", err)
	}

	// A first record not at seq 0.
	h, body, _ = wire.EncodeRecord("late", evs(1, 2, "b"))
	publishRaw(t, s, "late", h, body)
	if _, _, err := readAll(ctx, sessionOf(s, "late")); !errors.As(err, &se) || se.Rule != session.RuleRecordContinue || se.Seq != 1 {
		t.Fatalf("Read of a log starting at seq 1: %v", err)
	}

	// A record that does not decode.
	h, _, _ = wire.EncodeRecord("corrupt", evs(0, 2, "b"))
	bad = publishRaw(t, s, "corrupt", h, []byte("not json\nat all"))
	_, _, err = readAll(ctx, sessionOf(s, "corrupt"))
	if !errors.As(err, &se) || se.Rule != session.RuleRecordEvent || !strings.Contains(err.Error(), fmt.Sprintf("stream seq %d", bad)) {
		t.Fatalf("Read of a corrupt record: %v", err)
	}
	if _, err := sessionOf(s, "corrupt").Tail(ctx); !errors.As(err, &se) || se.Rule != session.RuleRecordEvent {
		t.Fatalf("GetTail of a corrupt record: %v", err)
	}

	// A record of another session stored under this subject.
	h, body, _ = wire.EncodeRecord("someone-else", evs(0, 1, "b"))
	publishRaw(t, s, "mine", h, body)
	if _, _, err := readAll(ctx, sessionOf(s, "mine")); !errors.As(err, &se) || se.Rule != session.RuleRecordSession {
		t.Fatalf("Read of a foreign record: %v", err)
	}
}

// bigEvents returns n events whose data is about size bytes each.
func bigEvents(from int64, n int, size int) []session.Event {
	out := make([]session.Event, n)
	for i := range out {
		seq := from + int64(i)
		data, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("%d:%s", seq, strings.Repeat("x", size))})
		out[i] = session.Event{Type: "assistant/chunk", Seq: seq, Time: "1785000000000", Data: data}
	}
	return out
}

func TestAppendSplitsOversizedWindowAtomically(t *testing.T) {
	const limit = 4096
	s := testStore(t, Config{MaxMsgSize: limit})
	ctx := testCtx(t)
	r0, err := sessionOf(s, "big").Append(ctx, 0, bigEvents(0, 2, 100), WithMsgID("w0"))
	if err != nil {
		t.Fatal(err)
	}
	window := bigEvents(2, 40, 500) // ~21 KB: about 6 records of ≤ 4 KiB
	r1, err := sessionOf(s, "big").Append(ctx, r0.StreamSeq, window, WithMsgID("w1"))
	if err != nil {
		t.Fatal(err)
	}
	if r1.Duplicate {
		t.Fatal("split append reported as duplicate")
	}
	var seqs []uint64
	_, err = sessionOf(s, "big").Records(ctx, func(r Record) error { seqs = append(seqs, r.StreamSeq); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) < 4 || seqs[len(seqs)-1] != r1.StreamSeq {
		t.Fatalf("records at %v, want the window split into several records ending at %d", seqs, r1.StreamSeq)
	}
	for _, ss := range seqs[1:] {
		m, err := s.stream.GetMsg(ctx, ss)
		if err != nil {
			t.Fatal(err)
		}
		size := wire.HeaderWireSize(m.Header) + len(m.Data)
		if len(m.Data) > limit || !strings.HasPrefix(m.Header.Get(natsjs.MsgIDHeader), "w1") {
			t.Errorf("record at %d: %d bytes (headers and body %d), msg id %q", ss, len(m.Data), size, m.Header.Get(natsjs.MsgIDHeader))
		}
	}
	got, last, err := readAll(ctx, sessionOf(s, "big"))
	if err != nil || len(got) != 42 || last != r1.StreamSeq {
		t.Fatalf("Read: %d events, last %d, %v", len(got), last, err)
	}
	for i, e := range got {
		if want := mustJSON(t, append(bigEvents(0, 2, 100), window...)[i]); mustJSON(t, e) != want {
			t.Fatalf("event %d differs", i)
		}
	}
	tail, err := sessionOf(s, "big").Tail(ctx)
	if err != nil || tail.LastMsgID != "w1" || tail.NextSeq != 42 || tail.LastStreamSeq != r1.StreamSeq {
		t.Fatalf("tail after split: %+v, %v", tail, err)
	}

	// The retry of the committed split append (lost ack): reported as Duplicate, nothing stored.
	info0, _ := s.stream.Info(ctx)
	r2, err := sessionOf(s, "big").Append(ctx, r0.StreamSeq, window, WithMsgID("w1"))
	if err != nil || !r2.Duplicate || r2.StreamSeq != r1.StreamSeq {
		t.Fatalf("retry of split append: %+v, %v", r2, err)
	}
	// A stale split append: refused with ErrConflict, and none of its records is stored.
	_, err = sessionOf(s, "big").Append(ctx, r0.StreamSeq, bigEvents(42, 40, 500), WithMsgID("w2"))
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale split append: %v, want ErrConflict", err)
	}
	info1, _ := s.stream.Info(ctx)
	if info1.State.Msgs != info0.State.Msgs || info1.State.LastSeq != info0.State.LastSeq {
		t.Fatalf("refused split appends stored records: %+v -> %+v", info0.State, info1.State)
	}
	// A fresh split append on a new session (guard 0), without msg id.
	if r, err := sessionOf(s, "big2").Append(ctx, 0, bigEvents(0, 20, 500)); err != nil || r.StreamSeq == 0 {
		t.Fatalf("split append to a new session: %+v, %v", r, err)
	}
	if got, _, err := readAll(ctx, sessionOf(s, "big2")); err != nil || len(got) != 20 {
		t.Fatalf("Read big2: %d, %v", len(got), err)
	}
}

func TestAppendEventTooLarge(t *testing.T) {
	const limit = 4096
	s := testStore(t, Config{MaxMsgSize: limit})
	ctx := testCtx(t)
	capped := s.WithMaxEventBytes(4500)
	window := append(bigEvents(0, 3, 200), bigEvents(3, 1, 5000)...)
	_, err := sessionOf(capped, "huge").Append(ctx, 0, window)
	var se *session.Error
	if !errors.Is(err, ErrEventTooLarge) || !errors.As(err, &se) || se.Rule != session.RuleEventTooLarge || se.Seq != 3 ||
		!strings.Contains(err.Error(), "4500 bytes") || !strings.Contains(err.Error(), `"huge"`) {
		t.Fatalf("Append with a 5 KB event over a 4500-byte max event size: %v", err)
	}
	if got, last, err := readAll(ctx, sessionOf(s, "huge")); err != nil || len(got) != 0 || last != 0 {
		t.Fatalf("something was written: %d events, %v", len(got), err)
	}
	if objs := blobList(t, s); len(objs) != 0 {
		t.Fatalf("a refused append stored %d blobs", len(objs))
	}
	if err := sessionOf(capped, "huge").CheckEventSize(window[3]); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("CheckEventSize over the max event size: %v", err)
	}
	// Under the cap it is offloaded (the record holds its reference).
	if err := sessionOf(s, "huge").CheckEventSize(window[3]); err != nil {
		t.Fatalf("CheckEventSize of a 5 KB event with a blob bucket: %v", err)
	}
	if _, err := sessionOf(s, "huge").Append(ctx, 0, window); err != nil {
		t.Fatalf("a 5 KB event under a 4 KiB record limit: %v", err)
	}
}

func TestAppendRetryAfterSessionMovedOn(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	r1, err := sessionOf(s, "m").Append(ctx, 0, evs(0, 1, "a"), WithMsgID("a-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "m").Append(ctx, r1.StreamSeq, evs(1, 2, "a"), WithMsgID("a-2")); err != nil {
		t.Fatal(err)
	}
	// The retry of a-1 finds a-2 at the tail: the guard fails and it is not its own record.
	if _, err := sessionOf(s, "m").Append(ctx, 0, evs(0, 1, "a"), WithMsgID("a-1")); !errors.Is(err, ErrConflict) {
		t.Fatalf("retry after the session moved on: %v, want ErrConflict", err)
	}
	if got, _, _ := readAll(ctx, sessionOf(s, "m")); len(got) != 2 {
		t.Fatalf("%d events stored, want 2", len(got))
	}
}
