package projector

import (
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
)

// The query service applies the id rules to the request's bytes (an ill-formed id is not answered
// as the session "\uFFFD"), bounds the ids it echoes, and refuses integers that are not safe.
func TestQueryIDRulesOnRawRequest(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	e.create("\uFFFD") // a session that an ill-formed id must not reach
	e.appendRecord("\uFFFD", toolSession()[0:3])
	if _, err := queryMessages(ctx(t), e.nc, "\uFFFD", 2); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("x", 1_040_000)
	for _, c := range []struct{ body, rule string }{
		{"{\"session\":\"\xff\"}", "id-utf8"},
		{`{"session":"\ud800"}`, "id-utf8"},
		{`{"session":"a\udfff","minSeq":2}`, "id-utf8"},
		{`{"session":"` + huge + `"}`, "id-too-long"},
		{`{"session":"` + huge + `","minSeq":"x"}`, ""},
		{`{"session":"s1","minSeq":9007199254740993}`, "safe integer"},
		{`{"session":"s1","minSeq":-9007199254740993}`, "safe integer"},
		{`{"session":"s1","timeoutMs":9007199254740993}`, "safe integer"},
		{`{"session":"s1","nodes":[9007199254740993]}`, "safe integer"},
	} {
		msg, err := e.nc.RequestWithContext(ctx(t), client.MessagesSubject, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		code, desc := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error")
		if client.Code(code) != client.CodeBadRequest || !strings.Contains(desc, c.rule) || len(desc) > 400 {
			t.Errorf("%.60s: got %s %.300q (%d bytes), want 400 naming %s", c.body, code, desc, len(desc), c.rule)
		}
	}
}

// A wait for minSeq on a session with no metadata and no records is answered 404 at once.
func TestQueryWaitOnUnknownSessionIs404(t *testing.T) {
	e := newEnv(t)
	e.startProjector("p1")
	c, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Messages(ctx(t), "nosuch", client.MinSeq(3), client.Timeout(20*time.Second))
	queryErr(t, err, client.CodeNotFound, "nosuch")
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("answered after %s: the query waited", d)
	}
	// A session that exists but is not projected yet is still waited for.
	e.create("later")
	_, err = c.Messages(ctx(t), "later", client.MinSeq(0), client.Timeout(200*time.Millisecond))
	queryErr(t, err, client.CodeTimeout, "later")
}
