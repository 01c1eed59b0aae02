package projector

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// TestMessagesReplyTooLarge: derived messages larger than one NATS message are refused at once
// with 413 naming the session, rather than left unanswered until the client's timeout; the bytes
// '<', '>' and '&' in messages come back as stored.
func TestMessagesReplyTooLarge(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	const id = "big"
	e.create(id)
	text := strings.Repeat("x", 200<<10) // 200 KiB per message: 6 messages pass 1 MiB
	var events []session.Event
	for i := int64(0); i < 6; i++ {
		events = append(events, userMsg(i, fmt.Sprintf("m%d", i), text))
	}
	for _, ev := range events {
		e.appendRecord(id, []session.Event{ev})
	}
	_, err := QueryMessages(ctx(t), e.nc, id, 5)
	qe := queryErr(t, err, CodeTooLarge, id)
	if !strings.Contains(qe.Description, "max payload") {
		t.Fatalf("description %q does not say why", qe.Description)
	}

	const small = "html"
	e.create(small)
	e.appendRecord(small, []session.Event{userMsg(0, "h", "<a & b>")})
	reply, err := QueryMessages(ctx(t), e.nc, small, 0)
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
	p2 := New(e.store, e.nc, Options{Name: "same", Logger: quietLogger()})
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
	p3 := New(e.store, e.nc, Options{Name: "same", Logger: quietLogger()})
	if err := p3.Start(ctx(t)); err != nil {
		t.Fatalf("restart after a graceful stop: %v", err)
	}
	p3.Stop()
}
