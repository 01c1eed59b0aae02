package multitenant

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// violationLog records the permission violations a server logs.
type violationLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *violationLog) Errorf(format string, v ...any) {
	if m := fmt.Sprintf(format, v...); strings.Contains(m, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, m)
		l.mu.Unlock()
	}
}
func (l *violationLog) Noticef(string, ...any) {}
func (l *violationLog) Warnf(string, ...any)   {}
func (l *violationLog) Fatalf(string, ...any)  {}
func (l *violationLog) Debugf(string, ...any)  {}
func (l *violationLog) Tracef(string, ...any)  {}

// since returns the violations logged after the first n.
func (l *violationLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[n:]...)
}

// roleServer runs an embedded nats-server with one account T whose users agent, projector and
// operator (password pw) have RolePermissions, and returns its URL and its log of violations.
func roleServer(t *testing.T) (string, *violationLog) {
	t.Helper()
	dir := t.TempDir()
	var users []string
	for _, r := range []Role{Agent, Projector, Operator} {
		p, err := RolePermissions(r, wire.DefaultPartitions)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, fmt.Sprintf("      { user: %q, password: pw, permissions: %s }", r, p.conf("      ")))
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\naccounts {\n  T {\n    jetstream: enabled\n    users: [\n%s\n    ]\n  }\n}\n",
		filepath.Join(dir, "data"), strings.Join(users, "\n"))
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(cf)
	if err != nil {
		t.Fatalf("%v\n%s", err, conf)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	log := &violationLog{}
	srv.SetLogger(log, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL(), log
}

// dialRole connects as role.
func dialRole(t *testing.T, url string, r Role) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(string(r), "pw"), nats.Name(string(r)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := natsjs.New(nc)
	return nc, js
}

// bigMessage is a turn start and a user message of n bytes of text.
func bigMessage(t *testing.T, id string, n int) []session.Event {
	t.Helper()
	var out []session.Event
	for _, l := range []string{
		`{"type":"turn/start","seq":0,"time":1784998084454,"data":{"turn":1,"trigger":{"kind":"message"}}}`,
		`{"type":"user/message","seq":1,"time":1784998084455,"data":{"id":"m1","role":"user","content":[{"type":"text","text":"` + strings.Repeat("x", n) + `"}],"source":{"kind":"user"}},"surfaceOp":"append"}`,
	} {
		ev, err := session.DecodeEventLine([]byte(l), id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// write creates session id through the publisher and flushes events.
func write(ctx context.Context, t *testing.T, pub *publisher.Publisher, id string, events []session.Event) error {
	t.Helper()
	w, err := pub.Create(ctx, session.Header{ID: id, CreatedAt: 1784998084454})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for _, ev := range events {
		if err := w.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	return w.Flush(ctx)
}

// TestAgentBlobs checks, with the role permissions on a real server, what the agent's lack of
// STREAM.PURGE on agentlog_blobs means: the agent cannot purge the bucket (which would take every
// session's blobs); its blob upload that the server refuses part-way fails at once naming the
// session and the seq, with the server's reason, and no purge is attempted (Go publisher and
// TypeScript backend); the projector's blob GC then purges the chunks the failed uploads left.
func TestAgentBlobs(t *testing.T) {
	url, viols := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, opJS := dialRole(t, url, Operator)
	if _, err := store.Provision(ctx, opJS, store.Config{}); err != nil {
		t.Fatal(err)
	}
	agentNC, agentJS := dialRole(t, url, Agent)
	st, err := store.Open(ctx, agentJS)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(st, agentNC, publisher.Options{RetryBudget: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	victim := bigMessage(t, "victim", 2<<20)
	if err := write(ctx, t, pub, "victim", victim); err != nil {
		t.Fatal(err)
	}
	if v := viols.since(0); len(v) > 0 {
		t.Fatalf("violations writing a blob: %v", v)
	}

	// The agent purges the blob bucket: refused, the other session's blob stays.
	blobs, err := agentJS.Stream(ctx, "OBJ_"+wire.BlobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	err = blobs.Purge(pctx)
	pcancel()
	if v := viols.since(0); err == nil || len(v) != 1 || !strings.Contains(v[0], "STREAM.PURGE.OBJ_"+wire.BlobsBucket) {
		t.Fatalf("the agent purged agentlog_blobs: %v; violations %v, want the purge's", err, v)
	}
	readBack := func(who string) {
		got, _, err := storetest.ReadAll(ctx, storetest.Session(st, "victim"))
		if err != nil || len(got) != 2 || string(got[1].Data) != string(victim[1].Data) {
			t.Fatalf("%s: reading the victim's blob back: %d events, %v", who, len(got), err)
		}
	}
	readBack("after the agent's purge")

	// A full bucket refuses uploads part-way.
	opBlobs, err := opJS.Stream(ctx, "OBJ_"+wire.BlobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	setMax := func(room int64) {
		info, err := opBlobs.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.Config
		cfg.MaxBytes = -1
		if room > 0 {
			cfg.MaxBytes = int64(info.State.Bytes) + room
		}
		if _, err := opJS.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMax(512 << 10)
	err = write(ctx, t, pub, "full", bigMessage(t, "full", 2<<20))
	if err == nil || !strings.Contains(err.Error(), `session "full" seq 1: store the event's`) || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Fatalf("the agent's upload into a full bucket: %v; want the session, the seq and the server's reason", err)
	}
	if v := viols.since(1); len(v) > 0 {
		t.Fatalf("the failed upload was refused a request: %v", v)
	}
	typescriptFullBucket(t, url)
	if v := viols.since(1); len(v) > 0 {
		t.Fatalf("the TypeScript backend's failed upload was refused a request: %v", v)
	}
	setMax(0)

	// The projector's GC purges the partial uploads' chunks, with its own permissions.
	_, projJS := dialRole(t, url, Projector)
	pstore, err := store.Open(ctx, projJS)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pstore.CollectBlobs(ctx, 0)
	if err != nil || len(c.PartialRemoved) == 0 || c.Used != 1 {
		t.Fatalf("the projector's CollectBlobs: %+v, %v; want the partial uploads purged (10077 is retried: one per try) and the victim's blob kept", c, err)
	}
	if v := viols.since(1); len(v) > 0 {
		t.Fatalf("the projector's CollectBlobs was refused: %v", v)
	}
	info, err := opBlobs.Info(ctx, natsjs.WithSubjectFilter("$O."+wire.BlobsBucket+".C.>"))
	if err != nil || len(info.State.Subjects) != 1 {
		t.Fatalf("chunk subjects after the GC: %v, %v; want the victim's only", info.State.Subjects, err)
	}
	readBack("after the GC")
}

// typescriptFullBucket runs test/blob-failure-check.mjs of the TypeScript backend as the agent
// (the bucket is full). Without the package built it says so and returns (CI=true: fails).
func typescriptFullBucket(t *testing.T, url string) {
	t.Helper()
	pkg, _ := filepath.Abs("../../typescript/dsh-persistence")
	if _, err := os.Stat(filepath.Join(pkg, "lib/index.js")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the TypeScript backend is not built (npm ci in %s): %v", pkg, err)
		}
		t.Logf("not checking the TypeScript backend: run npm ci in %s (%v)", pkg, err)
		return
	}
	cmd := exec.Command(filepath.Join(pkg, "node_modules/.bin/node"), "test/blob-failure-check.mjs")
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "NATS_URL="+url, "TS_USER="+string(Agent), "TS_PASS=pw", "TS_SESSION=ts-full", "TS_READ=victim")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("TypeScript backend, upload into a full bucket: %v\n%s", err, out)
	}
}
