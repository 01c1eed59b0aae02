package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestJSDomain: --js-domain (and AGENTLOG_JS_DOMAIN, and a saved context) sends every command's
// JetStream requests to that domain: against a server whose JetStream is domain hub, provision,
// import, events and sessions work with it and a wrong domain fails; a domain that is not one
// subject token is a usage error naming the flag.
func TestJSDomain(t *testing.T) {
	clearConnEnv(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(contextEnv, "")
	addr := authServer(t, func(o *server.Options) { o.JetStreamDomain = "hub" })
	url := "nats://" + addr
	code, out, errOut := cli(t, "--nats", url, "--js-domain", "hub", "provision")
	wantExit(t, "provision --js-domain hub", 0, code, out, errOut)
	log := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(log, []byte(`{"type":"user/message","seq":0,"time":1,"data":{"id":"m0","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = cli(t, "--nats", url, "--js-domain", "hub", "import", log, "--session", "d1")
	wantExit(t, "import --js-domain hub", 0, code, out, errOut)
	code, out, errOut = cli(t, "--nats", url, "--js-domain", "hub", "events", "d1")
	wantExit(t, "events --js-domain hub", 0, code, out, errOut, `"text":"hi"`)

	code, out, errOut = cli(t, "--nats", url, "--timeout", "3s", "--js-domain", "elsewhere", "events", "d1")
	wantExit(t, "events --js-domain elsewhere", 1, code, out, errOut, `no JetStream answered in domain "elsewhere"`)
	code, out, errOut = cli(t, "--nats", url, "--js-domain", "a.b", "events", "d1")
	wantExit(t, "--js-domain a.b", 2, code, out, errOut, "--js-domain", "one subject token")

	t.Setenv("AGENTLOG_JS_DOMAIN", "hub")
	code, out, errOut = cli(t, "--nats", url, "sessions")
	wantExit(t, "sessions with AGENTLOG_JS_DOMAIN=hub", 0, code, out, errOut, "d1")
	t.Setenv("AGENTLOG_JS_DOMAIN", "")

	code, out, errOut = cli(t, "context", "save", "edge", "--nats", url, "--js-domain", "hub")
	wantExit(t, "context save --js-domain", 0, code, out, errOut)
	if c, err := loadContext("edge"); err != nil || c.Settings["js-domain"] != "hub" {
		t.Fatalf("saved context edge: %+v, %v", c, err)
	}
	code, out, errOut = cli(t, "context", "ls")
	wantExit(t, "context ls", 0, code, out, errOut, "(js-domain hub)")
	code, out, errOut = cli(t, "--context", "edge", "sessions")
	wantExit(t, "sessions --context edge", 0, code, out, errOut, "d1")
	if !strings.Contains(out, "d1") {
		t.Fatalf("sessions through the context: %s", out)
	}
}
