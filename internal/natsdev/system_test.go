package natsdev_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// TestSystemAccount: with a system user the server answers $SYS.REQ.SERVER.PING to it, clients
// without credentials keep the global account (and the data stored before), and the monitoring
// endpoints are served.
func TestSystemAccount(t *testing.T) {
	dir := t.TempDir()
	// Data written without a system account, as by an older dev.
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, js, err := natsdev.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Provision(testCtx(t), js, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Session(s, "before").Append(testCtx(t), 0, notes(3)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	srv.Shutdown()
	srv.WaitForShutdown()

	srv, err = natsdev.RunServer(natsdev.ServerOptions{DataDir: dir, HTTPPort: -1, SystemUser: "sys", SystemPassword: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()

	sys, err := nats.Connect(srv.ClientURL(), nats.UserInfo("sys", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	msg, err := sys.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second)
	if err != nil {
		t.Fatalf("$SYS.REQ.SERVER.PING as the system user: %v", err)
	}
	var ping struct {
		Server struct {
			Name string `json:"name"`
		} `json:"server"`
	}
	if err := json.Unmarshal(msg.Data, &ping); err != nil || ping.Server.Name != "agentlog-embedded" {
		t.Fatalf("ping reply %s: %v", msg.Data, err)
	}
	if _, err := nats.Connect(srv.ClientURL(), nats.UserInfo("sys", "wrong")); err == nil {
		t.Fatal("the system user connected with a wrong password")
	}

	nc, js, err = natsdev.Connect(srv.ClientURL())
	if err != nil {
		t.Fatalf("a client without credentials: %v", err)
	}
	defer nc.Close()
	if _, err := nc.Request("$SYS.REQ.SERVER.PING", nil, 500*time.Millisecond); err == nil {
		t.Error("a client without credentials reached the system account")
	}
	s, err = store.Open(testCtx(t), js)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := storetest.ReadAll(testCtx(t), storetest.Session(s, "before")); err != nil || len(got) != 3 {
		t.Fatalf("data stored before the system account: %d events, %v", len(got), err)
	}
	if _, err := storetest.Session(s, "after").Append(testCtx(t), 0, notes(1)); err != nil {
		t.Fatal(err)
	}

	addr := natsdev.MonitorAddr(srv)
	if addr == "" {
		t.Fatal("no monitoring address")
	}
	resp, err := http.Get("http://" + addr + "/jsz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var jsz struct {
		Streams int `json:"streams"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &jsz) != nil || jsz.Streams < 2 {
		t.Fatalf("/jsz: %d %s", resp.StatusCode, body)
	}
}
