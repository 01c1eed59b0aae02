package projector

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
)

// The reference's view of toolSession (oracle.mjs output).
const (
	toolNodes      = "[2,3,7,10]"
	toolTranscript = "[2,3,5,10]"
)

func TestFoldsMultiRecordSession(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("s1")
	events := toolSession()
	// Records of 3, 1, 4 and 3 events: the replace (seq 7) and its target (seq 5) are in
	// different records, so its lookup reads the log.
	e.appendRecord("s1", events[0:3])
	e.appendRecord("s1", events[3:4])
	e.appendRecord("s1", events[4:7])
	e.appendRecord("s1", events[7:11])

	r, err := queryMessages(ctx(t), e.nc, "s1", 10)
	if err != nil {
		t.Fatalf("QueryMessages: %v", err)
	}
	if r.Session != "s1" || r.AsOfSeq != 10 || r.ReplaceGeneration != 1 || int64s(r.Nodes) != toolNodes {
		t.Fatalf("reply: session %q asOfSeq %d replaceGeneration %d nodes %s; want s1 10 1 %s", r.Session, r.AsOfSeq, r.ReplaceGeneration, int64s(r.Nodes), toolNodes)
	}
	if len(r.Messages) != 4 {
		t.Fatalf("want 4 messages, got %d", len(r.Messages))
	}
	if !strings.Contains(string(r.Messages[2]), `"[elided]"`) || !strings.Contains(string(r.Messages[3]), `"thanks"`) {
		t.Fatalf("messages do not follow the surface: %s", r.Messages)
	}
	p, _ := e.stored("s1")
	if p.StateVersion != 1 || p.AsOfSeq != 10 || p.Error != nil || int64s(p.State.Transcript) != toolTranscript ||
		p.State.OpenTurn == nil || *p.State.OpenTurn != 2 {
		t.Fatalf("stored projection %+v", p)
	}
	sp, err := querySurface(ctx(t), e.nc, "s1", -1)
	if err != nil {
		t.Fatalf("QuerySurface: %v", err)
	}
	if sp.AsOfSeq != 10 || int64s(sp.State.Nodes) != toolNodes || sp.State.ReplaceGeneration != 1 {
		t.Fatalf("surface endpoint: %+v", sp)
	}
	// The stored value has exactly the documented shape (nodeRecords: the stream seq of each
	// node's record).
	tok, _ := wire.Token("s1")
	ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitMessages, tok))
	if err != nil {
		t.Fatal(err)
	}
	info, err := storetest.Session(e.store, "s1").Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"stateVersion":1,"asOfSeq":10,"log":{"incarnation":"` + info.Incarnation + `","streamSeq":4},"state":{"nodes":[2,3,7,10],"replaceGeneration":1,"transcript":[2,3,5,10],"openTurn":2,"nodeRecords":[1,2,4,4]}}`
	if string(ent.Value()) != want {
		t.Fatalf("stored value\n got %s\nwant %s", ent.Value(), want)
	}
}

func TestIdempotentOnDuplicateRecordAndRestart(t *testing.T) {
	e := newEnv(t)
	p1 := e.startProjector("p1")
	e.create("s1")
	events := toolSession()
	e.appendRecord("s1", events[0:6])
	e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 5 })
	e.appendRecord("s1", []session.Event{
		events[6],
		ev(7, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`, "", ""),
		userMsg(8, "m3", "after"),
	})
	got := e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 8 || p.Error != nil })
	if got.Error != nil {
		t.Fatalf("projection stopped: %+v", got.Error)
	}
	if int64s(got.State.Nodes) != "[2,3,5,8]" || got.State.ReplaceGeneration != 0 || int64s(got.State.Transcript) != "[2,3,5,8]" {
		t.Fatalf("after two records: %+v", got.State)
	}
	_, rev := e.stored("s1")

	// Restart with the consumer deleted and provisioned again: every record is delivered again,
	// from the start of the stream. None may change the projection (not even its revision).
	if err := p1.Stop(); err != nil {
		t.Fatal(err)
	}
	for part := 0; part < e.store.Partitions(); part++ {
		if err := e.store.JetStream().DeleteConsumer(ctx(t), wire.StreamName, PartitionConsumer(part)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Provision(ctx(t), e.store.JetStream(), store.Config{}); err != nil {
		t.Fatal(err)
	}
	e.startProjector("p2")
	// Wait until the consumer of s1's partition has redelivered and acknowledged every record
	// of s1 (2 records: they are the only ones on the stream).
	sub, _ := wire.SessionSubject("s1", e.store.Partitions())
	part, _, _, _ := wire.ParseSubject(sub, e.store.Partitions())
	cons, err := e.store.JetStream().Consumer(ctx(t), wire.StreamName, PartitionConsumer(part))
	if err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		ci, err := cons.Info(ctx(t))
		if err != nil {
			return err
		}
		if ci.Delivered.Stream != 2 || ci.NumPending != 0 || ci.NumAckPending != 0 {
			return fmt.Errorf("consumer delivered stream seq %d, %d pending, %d ack pending; want 2, 0, 0", ci.Delivered.Stream, ci.NumPending, ci.NumAckPending)
		}
		return nil
	})
	again, rev2 := e.stored("s1")
	if rev2 != rev || again.AsOfSeq != 8 || int64s(again.State.Nodes) != "[2,3,5,8]" {
		t.Fatalf("redelivery changed the projection: revision %d -> %d, %+v", rev, rev2, again)
	}
}

// TestDuplicateRangeRecordRefolds: a record written past the guard that repeats seqs already
// folded (3..5, other content) is not skipped: the state no longer matches its log, so the log is
// refolded, which here refuses it (record-continue), as a fresh fold of the log would.
func TestDuplicateRangeRecordRefolds(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("s1")
	events := toolSession()
	e.appendRecord("s1", events[0:6])
	e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 5 })
	e.appendRecord("s1", []session.Event{events[3], events[4], toolResult(5, "DUPLICATE", "append", "")})
	got := e.waitStored("s1", func(p Projection) bool { return p.Error != nil })
	if !strings.Contains(got.Error.Message, "record-continue") {
		t.Fatalf("stopped with %+v, want the log's record-continue", got.Error)
	}
	if p.Refolds() != 1 {
		t.Fatalf("Refolds() = %d, want 1", p.Refolds())
	}
}

func TestGapRereadsTheLog(t *testing.T) {
	e := newEnv(t)
	e.create("s1")
	events := toolSession()
	e.appendRecord("s1", events[0:4])
	e.appendRecord("s1", events[4:8])
	e.appendRecord("s1", events[8:11])
	// Simulate a lost fold: the stored projection is at seq 1 while the consumer starts at the
	// third record (seq 8 > asOfSeq+1), which is a gap.
	s := session.NewSurface()
	for _, ev := range events[:2] {
		if err := s.Apply("s1", ev, nil); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	tok, _ := wire.Token("s1")
	b, _ := json.Marshal(fromSurface(s))
	if _, err := storetest.ProjectionsKV(e.store).Create(ctx(t), wire.ProjectionKey(UnitMessages, tok), b); err != nil {
		t.Fatal(err)
	}
	reg, _ := NewRegistry()
	sub, _ := wire.SessionSubject("s1", e.store.Partitions())
	msg, err := e.store.Stream().GetLastMsgForSubject(ctx(t), sub)
	if err != nil {
		t.Fatal(err)
	}
	recEvents, err := wire.DecodeRecord(msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := loadSession(ctx(t), e.store, reg.list(), tok, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if ss.gate().asOfSeq != 1 || ss.units[1].asOfSeq != -1 {
		t.Fatalf("loaded: gate at %d, transcript at %d", ss.gate().asOfSeq, ss.units[1].asOfSeq)
	}
	if err := foldEvents(ctx(t), e.store, ss, scanAll(recEvents), msg.Sequence); err != nil {
		t.Fatalf("fold: %v", err)
	}
	if conflicts, err := writeSessions(ctx(t), e.store.JetStream(), []*sessState{ss}); err != nil || len(conflicts) != 0 {
		t.Fatalf("write: %v (conflicts %d)", err, len(conflicts))
	}
	got, _ := e.stored("s1")
	if got.AsOfSeq != 10 || int64s(got.State.Nodes) != toolNodes || got.State.ReplaceGeneration != 1 {
		t.Fatalf("after a gap: %+v", got)
	}
	// Every other unit was folded from seq 0 (it had no state): the transcript is complete.
	var tr storedValue
	ent, err := storetest.ProjectionsKV(e.store).Get(ctx(t), wire.ProjectionKey(UnitTranscript, tok))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ent.Value(), &tr); err != nil || tr.AsOfSeq != 10 || string(tr.State) != `{"seqs":[2,3,5,10]}` {
		t.Fatalf("transcript after a gap: %s", ent.Value())
	}
}

func TestBadSessionStopsOnlyItself(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	for _, id := range []string{"good", "bad", "garbage"} {
		e.create(id)
	}
	events := toolSession()
	noOp := ev(2, "user/message", `{"id":"m1","role":"user","content":[{"type":"text","text":"x"}],"source":{"kind":"user"}}`, "", "")

	e.appendRecord("good", events[0:2])
	e.appendRecord("bad", events[0:2])
	e.appendRecord("bad", []session.Event{noOp, events[3]}) // seq 2 lacks its surfaceOp
	e.appendRecord("good", events[2:6])
	// A record whose body is not events, published with valid headers.
	sub, _ := wire.SessionSubject("garbage", e.store.Partitions())
	h, _, err := wire.EncodeRecord("garbage", events[0:1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.JetStream().PublishMsg(ctx(t), &nats.Msg{Subject: sub, Header: h, Data: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	e.appendRecord("bad", []session.Event{userMsg(4, "m9", "later")}) // acked and ignored
	// A record of session "good" stored under the subject of session "alien".
	e.create("alien")
	asub, _ := wire.SessionSubject("alien", e.store.Partitions())
	gh, gbody, err := wire.EncodeRecord("good", events[0:1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.JetStream().PublishMsg(ctx(t), &nats.Msg{Subject: asub, Header: gh, Data: gbody}); err != nil {
		t.Fatal(err)
	}
	e.appendRecord("good", events[6:11])

	r, err := queryMessages(ctx(t), e.nc, "good", 10)
	if err != nil {
		t.Fatalf("the good session stopped too: %v", err)
	}
	if int64s(r.Nodes) != toolNodes || len(r.Messages) != 4 {
		t.Fatalf("good session: nodes %s, %d messages", int64s(r.Nodes), len(r.Messages))
	}
	// "bad" and "garbage" may be on partitions that checkpoint after "good"'s: wait for them.
	bad := e.waitStored("bad", func(p Projection) bool { return p.Error != nil })
	if bad.Error == nil || bad.Error.Seq != 2 || bad.Error.Rule == "" || bad.AsOfSeq != 1 || !strings.Contains(bad.Error.Message, "bad") {
		t.Fatalf("bad session: %+v (error %+v)", bad, bad.Error)
	}
	_, err = queryMessages(ctx(t), e.nc, "bad", -1)
	qe := queryErr(t, err, client.CodeStopped, "bad")
	if !strings.Contains(qe.Description, "seq 2") || !strings.Contains(qe.Description, string(bad.Error.Rule)) {
		t.Fatalf("409 description does not name the seq and rule: %q", qe.Description)
	}
	// minSeq on a stopped projection answers 409 at once rather than waiting.
	_, err = queryMessages(ctx(t), e.nc, "bad", 4)
	queryErr(t, err, client.CodeStopped, "bad")

	garbage := e.waitStored("garbage", func(p Projection) bool { return p.Error != nil })
	if garbage.Error == nil || garbage.Error.Seq != 0 || garbage.Error.Rule != session.RuleRecordEvent || garbage.AsOfSeq != -1 {
		t.Fatalf("garbage session: %+v (error %+v)", garbage, garbage.Error)
	}
	alien := e.waitStored("alien", func(p Projection) bool { return p.Error != nil })
	if alien.Error.Rule != session.RuleRecordSession || alien.Error.Seq != 0 || alien.AsOfSeq != -1 {
		t.Fatalf("alien session: %+v", alien.Error)
	}
	// The surface endpoint shows a stopped projection with its error.
	sp, err := querySurface(ctx(t), e.nc, "garbage", -1)
	if err != nil || sp.Error == nil || *sp.Error != *garbage.Error {
		t.Fatalf("surface of a stopped projection: %+v %v", sp, err)
	}
}

func TestQueryWaitsForMinSeq(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("s1")
	events := toolSession()
	e.appendRecord("s1", events[0:3])
	if r, err := queryMessages(ctx(t), e.nc, "s1", 2); err != nil || r.AsOfSeq != 2 {
		t.Fatalf("QueryMessages minSeq 2: %+v %v", r, err)
	}

	type result struct {
		r   client.MessagesReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := queryMessages(ctx(t), e.nc, "s1", 8)
		done <- result{r, err}
	}()
	// Append only once the query is known to be waiting on the KV key.
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		if w := p.query.waiting.Load(); w != 1 {
			return fmt.Errorf("%d queries waiting, want 1", w)
		}
		return nil
	})
	select {
	case res := <-done:
		t.Fatalf("query answered before seq 8 was written: %+v %v", res.r, res.err)
	default:
	}
	e.appendRecord("s1", events[3:9])
	res := <-done
	if res.err != nil {
		t.Fatalf("QueryMessages minSeq 8: %v", res.err)
	}
	if res.r.AsOfSeq < 8 || int64s(res.r.Nodes) != "[2,3,7]" || len(res.r.Messages) != 3 {
		t.Fatalf("reply after waiting: %+v", res.r)
	}
}

func TestQueryErrors(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("s1")
	e.appendRecord("s1", toolSession()[0:3])
	if _, err := queryMessages(ctx(t), e.nc, "s1", 2); err != nil {
		t.Fatal(err)
	}

	_, err := queryMessages(ctx(t), e.nc, "nobody", -1)
	queryErr(t, err, client.CodeNotFound, "nobody")

	// minSeq never reached within timeoutMs: 408 naming the session and where it stands.
	body, _ := json.Marshal(map[string]any{"session": "s1", "minSeq": 50, "timeoutMs": 100})
	msg, err := e.nc.RequestWithContext(ctx(t), client.MessagesSubject, body)
	if err != nil {
		t.Fatal(err)
	}
	if code, desc := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error"); client.Code(code) != client.CodeTimeout ||
		!strings.Contains(desc, `"s1"`) || !strings.Contains(desc, "asOfSeq 2") {
		t.Fatalf("want 408 naming s1 at asOfSeq 2, got %s %q", code, desc)
	}

	for _, bad := range []string{`not json`, `{}`, `{"session":""}`, `{"session":5}`} {
		msg, err := e.nc.RequestWithContext(ctx(t), client.MessagesSubject, []byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if code := msg.Header.Get("Nats-Service-Error-Code"); client.Code(code) != client.CodeBadRequest {
			t.Fatalf("request %s: want 400, got %q (%s)", bad, code, msg.Data)
		}
	}
	long := strings.Repeat("x", 300)
	_, err = queryMessages(ctx(t), e.nc, long, -1)
	queryErr(t, err, client.CodeBadRequest, "")
}

func TestStopIsGraceful(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("s1")
	e.appendRecord("s1", toolSession()[0:3])
	if _, err := queryMessages(ctx(t), e.nc, "s1", 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := queryMessages(ctx(t), e.nc, "s1", 99)
		done <- err
	}()
	checkfor.Check(t, 90*time.Second, 10*time.Millisecond, func() error {
		if w := p.query.waiting.Load(); w != 1 {
			return fmt.Errorf("%d queries waiting, want 1", w)
		}
		return nil
	})
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	queryErr(t, <-done, client.CodeUnavailable, "s1")
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	// Nothing serves the query subject any more.
	_, err := queryMessages(ctx(t), e.nc, "s1", -1)
	if err == nil || !strings.Contains(err.Error(), "no instance") {
		t.Fatalf("after Stop: %v", err)
	}
}

func TestStaleStateVersionIsRebuilt(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("s1")
	events := toolSession()
	e.appendRecord("s1", events[0:4])
	e.waitStored("s1", func(p Projection) bool { return p.AsOfSeq == 3 })
	// A state of another stateVersion (wrong on purpose) must be discarded and rebuilt from
	// the log, not folded onto.
	tok, _ := wire.Token("s1")
	_, rev := e.stored("s1")
	stale := `{"stateVersion":0,"asOfSeq":3,"state":{"nodes":[99],"replaceGeneration":7,"transcript":[99],"openTurn":null}}`
	if _, err := storetest.ProjectionsKV(e.store).Update(ctx(t), wire.ProjectionKey(UnitMessages, tok), []byte(stale), rev); err != nil {
		t.Fatal(err)
	}
	e.appendRecord("s1", events[4:11])
	r, err := queryMessages(ctx(t), e.nc, "s1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.AsOfSeq != 10 || int64s(r.Nodes) != toolNodes || r.ReplaceGeneration != 1 || len(r.Messages) != 4 {
		t.Fatalf("after a stale stateVersion: %+v", r)
	}
}

func TestTwoInstancesOnOneConsumer(t *testing.T) {
	// Two instances pulling from the same durable consumer see records out of per-session
	// order; revision CAS, skip-by-seq and gap re-reads must still give every session the
	// reference's projection.
	e := newEnv(t)
	e.startProjector("p1")
	e.startProjector("p2")
	events := toolSession()
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		e.create(id)
	}
	for i := 0; i < len(events); {
		k := min(2, len(events)-i)
		for _, id := range ids {
			e.appendRecord(id, events[i:i+k])
		}
		i += k
	}
	for _, id := range ids {
		r, err := queryMessages(ctx(t), e.nc, id, 10)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if r.AsOfSeq != 10 || int64s(r.Nodes) != toolNodes || r.ReplaceGeneration != 1 || len(r.Messages) != 4 {
			t.Fatalf("%s: %+v", id, r)
		}
		p, _ := e.stored(id)
		if int64s(p.State.Transcript) != toolTranscript || p.Error != nil {
			t.Fatalf("%s: stored %+v", id, p)
		}
	}
}
