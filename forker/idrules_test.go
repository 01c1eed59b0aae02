package forker

import (
	"strings"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/wire"
)

// The fork service applies the id rules to source and child as they appear in the request's bytes,
// checks the source's length, and bounds the ids it echoes.
func TestForkIDRulesOnRawRequest(t *testing.T) {
	e := newEnv(t)
	e.loadParent()
	huge := strings.Repeat("x", 1_000_000)
	for _, c := range []struct{ body, rule string }{
		{"{\"source\":\"\xff\"}", "id-utf8"},
		{`{"source":"\ud800"}`, "id-utf8"},
		{`{"source":"parent","child":"\ud800"}`, "id-utf8"},
		{"{\"source\":\"parent\",\"child\":\"a\xfe\"}", "id-utf8"},
		{`{"source":"` + huge + `"}`, "id-too-long"},
		{`{"source":"` + huge + `","boundary":1.5}`, "id-too-long"},
		{`{"source":"parent","child":"` + huge + `"}`, "id-too-long"},
	} {
		msg, err := e.nc.RequestWithContext(ctx(t), client.ForkSubject, []byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		code, desc := msg.Header.Get("Nats-Service-Error-Code"), msg.Header.Get("Nats-Service-Error")
		if client.Code(code) != client.CodeBadRequest || !strings.Contains(desc, c.rule) || len(desc) > 400 {
			t.Errorf("%.60s: got %s %.300q (%d bytes), want 400 naming %s", c.body, code, desc, len(desc), c.rule)
		}
	}
	if _, err := storetest.Header(storetest.Session(e.store, "\uFFFD").Info(ctx(t))); err == nil {
		t.Fatal("a child named U+FFFD was created")
	}
	// In process too: an over-long source is a bad request, not SESSION_NOT_FOUND.
	_, err := e.f.Fork(ctx(t), client.ForkRequest{Source: strings.Repeat("y", wire.MaxSessionIDBytes+1)})
	if code, _ := wireError(err); code != client.CodeBadRequest || !strings.Contains(err.Error(), "id-too-long") {
		t.Fatalf("over-long source: %s %v", code, err)
	}
}
