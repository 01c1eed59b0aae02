package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestSessionChecksTheID: the handle checks the id once, with an error naming it and the rule.
func TestSessionChecksTheID(t *testing.T) {
	s := &Store{partitions: 16}
	for _, c := range []struct{ id, rule string }{
		{"", "id-empty"}, {strings.Repeat("x", wire.MaxSessionIDBytes+1), "id-too-long"}, {"a\xffb", "id-utf8"},
	} {
		ss, err := s.Session(c.id)
		var se *session.Error
		if ss != nil || !errors.As(err, &se) || string(se.Rule) != c.rule || !strings.Contains(err.Error(), c.rule) {
			t.Errorf("Session(%q) = %v, %v; want a *session.Error with rule %s", c.id, ss, err, c.rule)
		}
	}
	ss, err := s.Session("a.b")
	if err != nil || ss.ID() != "a.b" || ss.Token() != "a_2Eb" || ss.Subject() != "agentlog.session.10.a_2Eb" || ss.Store() != s {
		t.Fatalf("Session(a.b) = %+v, %v", ss, err)
	}
	// A handle of a Store that is not open fails its reads, naming the session.
	if _, err := ss.Tail(context.Background()); err == nil || !strings.Contains(err.Error(), `"a.b"`) {
		t.Fatalf("Tail on the zero Store: %v", err)
	}
}

// TestRecordsOptions: options refuse bad input before anything is read; Follow hands over the
// records appended after the log's end until ctx ends.
func TestRecordsOptions(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	ss := sessionOf(s, "follow")
	if _, err := ss.Records(ctx, func(Record) error { return nil }, AfterStreamSeq(0, 3)); err == nil || !strings.Contains(err.Error(), `"follow"`) {
		t.Fatalf("AfterStreamSeq(0, 3): %v, want a refusal naming the session", err)
	}
	r, err := ss.Append(ctx, 0, evs(0, 2, "a"))
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan Record, 8)
	done := make(chan error, 1)
	go func() {
		_, err := ss.Records(fctx, func(rec Record) error { got <- rec; return nil }, Follow())
		done <- err
	}()
	first := <-got
	if first.StreamSeq != r.StreamSeq || len(first.Events) != 2 || !strings.HasPrefix(string(first.Body), `{"type":"test/note","seq":0`) {
		t.Fatalf("first record %+v", first)
	}
	r2, err := ss.Append(ctx, r.StreamSeq, evs(2, 3, "b"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case rec := <-got:
		if rec.StreamSeq != r2.StreamSeq || rec.Events[0].Seq != 2 {
			t.Fatalf("followed record %+v, want stream seq %d from seq 2", rec, r2.StreamSeq)
		}
	case err := <-done:
		t.Fatalf("Follow ended before the new record: %v", err)
	case <-ctx.Done():
		t.Fatal("the appended record was not followed")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow ended with %v, want the ctx's error", err)
	}
}

// TestScans: the passes over every session read metadata (without delete markers), the last
// records' headers and a session's error reports.
func TestScans(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	for _, id := range []string{"s1", "s2", "s3"} {
		if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := sessionOf(s, "s3").Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sessionOf(s, "s3").DeleteMetadata(ctx, info.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "s1").Append(ctx, 0, evs(0, 3, "x")); err != nil {
		t.Fatal(err)
	}
	var toks []string
	var sized uint64
	if err := s.ScanSessions(ctx, false, func(n uint64) { sized = n }, func(e SessionEntry) error {
		if e.Value == nil || e.Header.Get(wire.IncarnationHeader) == "" {
			t.Errorf("entry %s: value %q, headers %v", e.Token, e.Value, e.Header)
		}
		toks = append(toks, e.Token)
		return nil
	}); err != nil || !slices.Equal(toks, []string{"s1", "s2"}) || sized != 3 {
		t.Fatalf("ScanSessions: %v (sized %d), %v; want s1 s2 (and the marker of s3 counted)", toks, sized, err)
	}
	if err := s.ScanSessions(ctx, true, nil, func(e SessionEntry) error {
		if e.Value != nil {
			t.Errorf("keys only: %s has a value", e.Token)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check := func(what string, scan func(fn func(nats.Header, time.Time) error) error) {
		t.Helper()
		n := 0
		err := scan(func(h nats.Header, stored time.Time) error {
			n++
			if last, ok := wire.RecordLastSeq(h); !ok || last != 2 || h.Get(wire.HeaderSession) != "s1" || stored.IsZero() {
				t.Errorf("%s: headers %v, stored %s", what, h, stored)
			}
			return nil
		})
		if err != nil || n != 1 {
			t.Fatalf("%s: %d last records, %v; want 1", what, n, err)
		}
	}
	check("ScanTails", func(fn func(nats.Header, time.Time) error) error { return s.ScanTails(ctx, nil, fn) })
	check("TailsOf", func(fn func(nats.Header, time.Time) error) error { return s.TailsOf(ctx, []string{"s1", "s2"}, fn) })
	if _, err := s.js.Publish(ctx, wire.ErrorsPrefix+".s2", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	var reports []string
	if err := sessionOf(s, "s2").ErrorReports(ctx, func(r []byte) error { reports = append(reports, string(r)); return nil }); err != nil || !slices.Equal(reports, []string{`{"n":1}`}) {
		t.Fatalf("ErrorReports: %q, %v", reports, err)
	}
}

// TestProjections: a session's projection entries, through its handle; a unit name that could
// name another key is refused.
func TestProjections(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	ss := sessionOf(s, "a.b")
	for _, bad := range []string{"", "a.b", "*", ">", strings.Repeat("u", 65)} {
		if _, err := ss.ProjectionEntry(ctx, bad); err == nil || !strings.Contains(err.Error(), "unit") {
			t.Errorf("ProjectionEntry(%q): %v, want a refusal of the unit", bad, err)
		}
	}
	if _, err := ss.ProjectionEntry(ctx, "messages"); !errors.Is(err, natsjs.ErrKeyNotFound) {
		t.Fatalf("no state yet: %v, want jetstream.ErrKeyNotFound", err)
	}
	woken := make(chan string, 16)
	sub, err := ss.SubscribeProjection("*", func(unit string) { woken <- unit })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := s.js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.projections.Put(ctx, wire.ProjectionKey("messages", "other"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.projections.Put(ctx, wire.ProjectionKey("messages", ss.Token()), []byte(`{"asOfSeq":1}`)); err != nil {
		t.Fatal(err)
	}
	e, err := ss.ProjectionEntry(ctx, "messages")
	if err != nil || string(e.Value()) != `{"asOfSeq":1}` {
		t.Fatalf("ProjectionEntry: %v, %v", e, err)
	}
	select {
	case u := <-woken:
		if u != "messages" {
			t.Fatalf("SubscribeProjection woke for unit %q", u)
		}
	case <-ctx.Done():
		t.Fatal("no wake-up for the session's state")
	}
	if len(woken) != 0 {
		t.Fatalf("SubscribeProjection woke for another session's key")
	}
	states, err := ss.ProjectionStates(ctx)
	if err != nil || len(states) != 1 || states[0].Unit != "messages" || string(states[0].Value) != `{"asOfSeq":1}` {
		t.Fatalf("ProjectionStates: %+v, %v", states, err)
	}
}

// TestRecordsUpTo: UpTo reads to a record the caller names (through direct gets, and past
// directReadRecords with a consumer), handing each record's timestamp and, with Scanned, its
// events in the shared form; a stream seq that is not one of the session's records is
// ErrLogChanged.
func TestRecordsUpTo(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	ss := sessionOf(s, "upto")
	other := sessionOf(s, "other")
	var seqs []uint64
	var last, olast uint64
	for i := int64(0); i < 10; i++ {
		r, err := ss.Append(ctx, last, evs(i, i+1, "a"))
		if err != nil {
			t.Fatal(err)
		}
		last = r.StreamSeq
		seqs = append(seqs, last)
		o, err := other.Append(ctx, olast, evs(i, i+1, "o")) // interleaved records of another subject
		if err != nil {
			t.Fatal(err)
		}
		olast = o.StreamSeq
	}
	for _, upTo := range []int{2, 9} { // direct gets only, then a consumer for the rest
		var got []Record
		n, err := ss.Records(ctx, func(r Record) error { got = append(got, r); return nil }, UpTo(seqs[upTo]), Scanned())
		if err != nil || n != seqs[upTo] || len(got) != upTo+1 {
			t.Fatalf("up to record %d: read %d records to stream seq %d, %v", upTo, len(got), n, err)
		}
		for i, r := range got {
			if r.StreamSeq != seqs[i] || r.Stored.IsZero() || len(r.Scanned) != 1 || r.Scanned[0].Seq != int64(i) || r.Events[0].Seq != int64(i) {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
	}
	var after []Record
	if _, err := ss.Records(ctx, func(r Record) error { after = append(after, r); return nil }, AfterStreamSeq(seqs[6], 7), UpTo(seqs[8])); err != nil || len(after) != 2 {
		t.Fatalf("after record 6 up to record 8: %d records, %v", len(after), err)
	}
	if _, err := ss.Records(ctx, func(Record) error { return nil }, UpTo(olast)); !errors.Is(err, ErrLogChanged) {
		t.Fatalf("up to another session's record: %v, want ErrLogChanged", err)
	}
	if _, err := ss.Records(ctx, func(Record) error { return nil }, UpTo(olast+100)); !errors.Is(err, ErrLogChanged) {
		t.Fatalf("up to a stream seq past the log: %v, want ErrLogChanged", err)
	}
	if _, err := ss.Records(ctx, func(Record) error { return nil }, UpTo(seqs[1]), Follow()); err == nil {
		t.Fatal("UpTo with Follow was accepted")
	}
}
