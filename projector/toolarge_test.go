package projector

import (
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
