package projector

import (
	"errors"
	"fmt"
	"github.com/agentlog/agentlog/client"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// TestMessagesReplyPaged: derived messages larger than one NATS message come in pages that
// QueryMessages joins (the same messages as derived from the whole log), down to a single message
// as large as one record can hold; the bytes '<', '>' and '&' in messages come back as stored.
func TestMessagesReplyPaged(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	const id = "big"
	e.create(id)
	text := strings.Repeat("x", 200<<10) // 200 KiB per message: 12 messages take 3 pages
	var events []session.Event
	for i := int64(0); i < 12; i++ {
		events = append(events, userMsg(i, fmt.Sprintf("m%d", i), text))
	}
	for _, ev := range events {
		e.appendRecord(id, []session.Event{ev})
	}
	r, err := queryMessages(ctx(t), e.nc, id, 11)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 12 || r.Partial != nil || !sameMessages(r.Messages, e.wantMessages(id, r.Nodes)) {
		t.Fatalf("paged messages: %d messages, partial %v; want the 12 derived from the log", len(r.Messages), r.Partial)
	}
	// The first page alone is partial.
	first, err := queryMessagesPage(ctx(t), e.nc, client.QueryRequest{Session: id})
	if err != nil || first.Partial == nil || *first.Partial < 1 || *first.Partial >= 12 || len(first.Messages) != *first.Partial || len(first.Nodes) != 12 {
		t.Fatalf("first page: partial %v, %d messages, %d nodes, %v", first.Partial, len(first.Messages), len(first.Nodes), err)
	}
	// A continuation's nodes are the ones it covers.
	next, err := queryMessagesPage(ctx(t), e.nc, client.QueryRequest{Session: id, Nodes: first.Nodes[*first.Partial:]})
	if err != nil || next.Partial == nil || len(next.Nodes) != *next.Partial || len(next.Messages) != *next.Partial {
		t.Fatalf("continuation: partial %v, %d nodes, %d messages, %v", next.Partial, len(next.Nodes), len(next.Messages), err)
	}
	// A continuation naming a seq that is not a surface event, or past asOfSeq, is refused.
	e.appendRecord(id, []session.Event{ev(12, "turn/start", `{"turn":1}`, "", "")})
	if _, err := queryMessages(ctx(t), e.nc, id, 12); err != nil {
		t.Fatal(err)
	}
	for _, nodes := range [][]int64{{12}, {99}, {-1}} {
		_, err := queryMessagesPage(ctx(t), e.nc, client.QueryRequest{Session: id, Nodes: nodes})
		queryErr(t, err, client.CodeBadRequest, id)
	}

	// A message as large as one record can hold comes back too, alone on its page.
	const huge = "huge"
	e.create(huge)
	e.appendRecord(huge, []session.Event{userMsg(0, "h0", "small")})
	e.appendRecord(huge, []session.Event{userMsg(1, "h1", strings.Repeat("y", 1047900))})
	var after []session.Event // many nodes after it: a page must not carry them all in its envelope
	for seq := int64(2); seq < 300; seq++ {
		after = append(after, userMsg(seq, fmt.Sprint("a", seq), "after"))
	}
	e.appendRecord(huge, after)
	hr, err := queryMessages(ctx(t), e.nc, huge, 299)
	if err != nil || len(hr.Messages) != 300 || !sameMessages(hr.Messages, e.wantMessages(huge, hr.Nodes)) {
		t.Fatalf("a message of about 1 MiB among 300: %d messages, %v", len(hr.Messages), err)
	}

	const small = "html"
	e.create(small)
	e.appendRecord(small, []session.Event{userMsg(0, "h", "<a & b>")})
	reply, err := queryMessages(ctx(t), e.nc, small, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Messages) != 1 || !strings.Contains(string(reply.Messages[0]), `"<a & b>"`) {
		t.Fatalf("messages %s, want the text bytes as stored", reply.Messages)
	}
}

// TestDuplicateNameRefused: a second live instance with the same name is refused, naming the name;
// after the first stops (its lease deleted), the name is free again.
func TestDuplicateNameRefused(t *testing.T) {
	e := newEnv(t)
	p1 := e.startProjector("same")
	p2 := mustNew(t, e.store, e.nc, Options{Name: "same", Logger: quietLogger()})
	err := p2.Start(ctx(t))
	if err == nil {
		p2.Stop()
		t.Fatal("a second projector named \"same\" started")
	}
	if !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), `"same"`) {
		t.Fatalf("error %v, want ErrNameInUse naming \"same\"", err)
	}
	if err := p1.Stop(); err != nil {
		t.Fatal(err)
	}
	p3 := mustNew(t, e.store, e.nc, Options{Name: "same", Logger: quietLogger()})
	if err := p3.Start(ctx(t)); err != nil {
		t.Fatalf("restart after a graceful stop: %v", err)
	}
	p3.Stop()
}

// TestSnapshotReplyTooLarge: a snapshot whose unit views together pass one NATS message (each
// stored view fits on its own) is refused with 413 naming the session. (The built-in views cap
// their text, so two units of the test's own keep the whole notes.)
func TestSnapshotReplyTooLarge(t *testing.T) {
	e := newEnv(t)
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"notes-a", "notes-b"} {
		if err := reg.Register(Def[string]{Key: key, StateVersion: 1, Reads: []string{"test/note"},
			Init:  func() string { return "" },
			Apply: func(_ string, ev session.Event) (string, error) { return string(ev.Data), nil }}); err != nil {
			t.Fatal(err)
		}
	}
	e.startProjectorOpts("p1", Options{Registry: reg})
	const id = "wide"
	e.create(id)
	big := strings.Repeat("t", 600<<10)
	note := ev(0, "test/note", `{"note":"`+big+`"}`, "", "")
	note.Ignorable = true
	e.appendRecord(id, []session.Event{note})
	e.appendRecord(id, []session.Event{userMsg(1, "m1", "hi")})
	if _, err := queryMessages(ctx(t), e.nc, id, 1); err != nil {
		t.Fatal(err)
	}
	_, err = querySnapshot(ctx(t), e.nc, id, -1)
	qe := queryErr(t, err, client.CodeTooLarge, id)
	if !strings.Contains(qe.Description, "max payload") {
		t.Fatalf("description %q does not say why", qe.Description)
	}
}

// TestBusyProjectorAnswers503: when every answering slot is taken, a query gets "503" at once
// (naming the session) instead of queueing behind them or being dropped by a slow subscription;
// once a slot is free, queries are answered again.
func TestBusyProjectorAnswers503(t *testing.T) {
	e := newEnv(t)
	p := e.startProjector("p1")
	e.create("s")
	e.appendRecord("s", toolSession()[:3])
	if _, err := queryMessages(ctx(t), e.nc, "s", 2); err != nil {
		t.Fatal(err)
	}
	for range cap(p.query.work) {
		p.query.work <- struct{}{}
	}
	_, err := queryMessages(ctx(t), e.nc, "s", -1)
	qe := queryErr(t, err, client.CodeUnavailable, "s")
	if !strings.Contains(qe.Description, "retry") {
		t.Fatalf("503 description %q does not say to retry", qe.Description)
	}
	<-p.query.work
	if _, err := queryMessages(ctx(t), e.nc, "s", -1); err != nil {
		t.Fatalf("after a slot freed: %v", err)
	}
	for range cap(p.query.work) - 1 {
		<-p.query.work
	}
}
