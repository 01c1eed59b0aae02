package multitenant_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/client"
	multitenant "github.com/agentlog/agentlog/deploy/multi-tenant"
	"github.com/agentlog/agentlog/internal/inspector"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// deployment is a running up.sh deployment: what gen wrote and what DIR/env defines.
type deployment struct {
	*multitenant.Deployment
	bin string            // DIR/bin/agentlog
	env map[string]string // NATS_URL, A_AGENT_ARGS, ... as DIR/env defines them
	cfg string            // XDG_CONFIG_HOME of up.sh and the CLI: where its agentlog contexts are
}

// up runs up.sh into a temporary directory, for real, and stops it with DIR/down.sh at cleanup.
func up(t *testing.T) *deployment {
	t.Helper()
	for _, tool := range []string{"sh", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("deploy/multi-tenant/up.sh needs %s, not found: %v", tool, err)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := t.TempDir() // up.sh's agentlog contexts go here, not in the user's configuration
	cmd := exec.CommandContext(ctx, "sh", "up.sh", dir)
	cmd.Env = append(os.Environ(), "AGENTLOG_MT_TENANTS=A,B", "XDG_CONFIG_HOME="+cfg)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		if keep := os.Getenv("AGENTLOG_MT_KEEP_LOG"); keep != "" {
			b, _ := os.ReadFile(filepath.Join(dir, "logs", "nats-server.log"))
			os.WriteFile(keep, b, 0o644)
		}
		if b, err := exec.Command(filepath.Join(dir, "down.sh")).CombinedOutput(); err != nil {
			t.Errorf("down.sh: %v\n%s", err, b)
		}
		if t.Failed() {
			for _, name := range []string{"nats-server", "a-projector", "a-forker", "b-projector", "b-forker"} {
				b, _ := os.ReadFile(filepath.Join(dir, "logs", name+".log"))
				t.Logf("%s.log (tail):\n%s", name, tail(string(b), 3000))
			}
		}
	})
	if err := cmd.Run(); err != nil {
		t.Fatalf("up.sh %s: %v\n%s", dir, err, out.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "deployment.json"))
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{Deployment: &multitenant.Deployment{}, bin: filepath.Join(dir, "bin", "agentlog"), env: map[string]string{}, cfg: cfg}
	if err := json.Unmarshal(b, d.Deployment); err != nil {
		t.Fatal(err)
	}
	// The passwords are not in deployment.json: read them from their files, as a user would.
	for _, id := range d.Identities {
		if id.PassFile != "" {
			pw, err := os.ReadFile(id.PassFile)
			if err != nil {
				t.Fatal(err)
			}
			id.Password = strings.TrimSpace(string(pw))
		}
	}
	// DIR/env, sourced by a shell.
	names := []string{"NATS_URL", "AGENTLOG_NATS_URL", "A_AGENT_ARGS", "B_AGENT_ARGS", "A_NATS_ARGS", "B_NATS_ARGS", "A_VIEWER_ARGS", "A_OPERATOR_ARGS", "B_OPERATOR_ARGS", "A_FORKER_ARGS"}
	script := ". " + filepath.Join(dir, "env")
	for _, n := range names {
		script += fmt.Sprintf("; printf '%%s\\n' \"$%s\"", n)
	}
	vals, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("sourcing %s/env: %v", dir, err)
	}
	lines := strings.Split(strings.TrimSuffix(string(vals), "\n"), "\n")
	if len(lines) != len(names) {
		t.Fatalf("%s/env defines %d of %v:\n%s", dir, len(lines), names, vals)
	}
	for i, n := range names {
		if lines[i] == "" {
			t.Fatalf("%s/env: %s is empty", dir, n)
		}
		d.env[n] = lines[i]
	}
	return d
}

// cli runs the agentlog binary with the global flags in the variable args of DIR/env (e.g.
// A_AGENT_ARGS, expanded as a shell would, unquoted) and NATS_URL from DIR/env in its environment.
func (d *deployment) cli(t *testing.T, stdin, args string, cmdArgs ...string) (int, string, string) {
	t.Helper()
	all := append(strings.Fields(d.env[args]), cmdArgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, all...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "XDG_CONFIG_HOME=" + d.cfg}
	if args != "" {
		cmd.Env = append(cmd.Env, "NATS_URL="+d.env["NATS_URL"])
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("agentlog %v: %v", cmdArgs, err)
	return 0, "", ""
}

// importLog writes log to a file and imports it with the flags of args (plus extra).
func (d *deployment) importLog(t *testing.T, args, log string, extra ...string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(f, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	d.ok(t, "", args, append([]string{"import", f}, extra...)...)
}

// ok runs cli and fails the test unless it exits 0; it returns stdout.
func (d *deployment) ok(t *testing.T, stdin, args string, cmdArgs ...string) string {
	t.Helper()
	code, out, errOut := d.cli(t, stdin, args, cmdArgs...)
	if code != 0 {
		t.Fatalf("agentlog $%s %s: exit %d\nstdout: %s\nstderr: %s", args, strings.Join(cmdArgs, " "), code, tail(out, 2000), errOut)
	}
	return out
}

// refused runs cli and fails the test unless it exits 1 with stderr matching want.
func (d *deployment) refused(t *testing.T, want, stdin, args string, cmdArgs ...string) {
	t.Helper()
	code, out, errOut := d.cli(t, stdin, args, cmdArgs...)
	if code != 1 || !regexp.MustCompile(want).MatchString(errOut) {
		t.Fatalf("agentlog $%s %s: exit %d, want 1 with stderr matching %q\nstdout: %s\nstderr: %s", args, strings.Join(cmdArgs, " "), code, want, tail(out, 2000), errOut)
	}
}

// conn connects as id with the deployment's CA and id's certificate, named name.
func (d *deployment) conn(t *testing.T, id *multitenant.Identity, name string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := d.dial(id, name, extra...)
	if err != nil {
		t.Fatalf("connect as %s: %v", id.Name, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (d *deployment) dial(id *multitenant.Identity, name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.RootCAs(d.CAFile), nats.ClientCert(id.CertFile, id.KeyFile),
		nats.Timeout(5 * time.Second), nats.NoReconnect(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if id.NkeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(id.NkeyFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	} else {
		opts = append(opts, nats.UserInfo(id.Name, id.Password))
	}
	return nats.Connect(d.URL, append(opts, extra...)...)
}

// smallLog is a session log of one turn whose user message carries marker.
func smallLog(id, marker string) string {
	return fmt.Sprintf(`{"type":"session","version":0,"id":%q,"createdAt":1784998084454}
{"type":"turn/start","seq":0,"time":1784998084454,"data":{"turn":1,"trigger":{"kind":"message"}}}
{"type":"user/message","seq":1,"time":1784998084455,"data":{"id":"m1","role":"user","content":[{"type":"text","text":%q}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"turn/end","seq":2,"time":1784998084456,"data":{"turn":1,"reason":{"kind":"completed"}}}
`, id, marker)
}

// violations returns the permission violations nats-server logged so far, one line each.
func (d *deployment) violations(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.Dir, "logs", "nats-server.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Violation") {
			out = append(out, l)
		}
	}
	return out
}

const (
	markerA = "tenant-A-private-text"
	markerB = "tenant-B-private-text"
)

// TestMultiTenant starts deploy/multi-tenant/up.sh for real (nats-server built from the module's
// dependency, the generated config, a projector and a forker per tenant, each as its role) and
// checks, against that server and config: every role's legitimate work with only its permissions,
// every attack of tenant A on tenant B, the limits of each role within a tenant, and TLS.
func TestMultiTenant(t *testing.T) {
	d := up(t)
	a, b := d.Tenants[0], d.Tenants[1]

	t.Run("legitimate", func(t *testing.T) {
		// Agents: import, messages, events, fork, sessions, status; the same id in both tenants.
		d.importLog(t, "A_AGENT_ARGS", smallLog("s1", markerA))
		d.importLog(t, "B_AGENT_ARGS", smallLog("s1", markerB))
		d.importLog(t, "B_AGENT_ARGS", smallLog("b-secret", markerB))
		if out := d.ok(t, "", "A_AGENT_ARGS", "messages", "s1"); !strings.Contains(out, markerA) || strings.Contains(out, markerB) {
			t.Fatalf("A's messages of s1: %s", out)
		}
		if out := d.ok(t, "", "B_AGENT_ARGS", "messages", "s1"); !strings.Contains(out, markerB) || strings.Contains(out, markerA) {
			t.Fatalf("B's messages of s1: %s", out)
		}
		if out := d.ok(t, "", "A_AGENT_ARGS", "events", "s1"); !strings.Contains(out, markerA) {
			t.Fatalf("A's events of s1: %s", out)
		}
		if out := d.ok(t, "", "A_AGENT_ARGS", "fork", "s1", "--child", "s1-fork", "--json"); !strings.Contains(out, `"seedLength":3`) {
			t.Fatalf("fork: %s", out)
		}
		if out := d.ok(t, "", "A_AGENT_ARGS", "messages", "s1-fork"); !strings.Contains(out, markerA) {
			t.Fatalf("A's messages of the fork: %s", out)
		}
		out := d.ok(t, "", "A_AGENT_ARGS", "sessions")
		if !strings.Contains(out, "s1-fork") || strings.Contains(out, "b-secret") {
			t.Fatalf("A's sessions:\n%s", out)
		}
		d.ok(t, "", "A_AGENT_ARGS", "status", "s1")

		// The viewer reads everything of its tenant.
		if out := d.ok(t, "", "A_VIEWER_ARGS", "sessions"); !strings.Contains(out, "s1-fork") {
			t.Fatalf("viewer's sessions:\n%s", out)
		}
		d.ok(t, "", "A_VIEWER_ARGS", "status", "s1")
		if out := d.ok(t, "", "A_VIEWER_ARGS", "events", "s1"); !strings.Contains(out, markerA) {
			t.Fatalf("viewer's events: %s", out)
		}
		if out := d.ok(t, "", "A_VIEWER_ARGS", "messages", "s1"); !strings.Contains(out, markerA) {
			t.Fatalf("viewer's messages: %s", out)
		}
		// Live: the viewer subscribes to the session subject and to a projection's key (the
		// wake-ups of follow reads and watches: readers create no consumer), and reads the
		// projection state with a get.
		// Its account is its own: it reaches A's JetStream under its domain (API prefix).
		vid := d.Identity(a, multitenant.Viewer)
		viewer := d.conn(t, vid, "viewer-live")
		js, err := store.NewJetStream(viewer, vid.Domain)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		subj, _ := wire.SessionSubject("s2", d.Partitions)
		live, err := viewer.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		sto, err := store.Open(ctx, js)
		if err != nil {
			t.Fatalf("viewer: store.Open: %v", err)
		}
		s1, _ := sto.Session("s1")
		if e, err := s1.ProjectionEntry(ctx, "messages"); err != nil || e.Revision() == 0 {
			t.Fatalf("viewer: the messages state of s1: %v %v", e, err)
		}
		s2, _ := sto.Session("s2")
		woken := make(chan string, 8)
		wake, err := s2.SubscribeProjection("messages", func(unit string) { woken <- unit })
		if err != nil {
			t.Fatalf("viewer: subscribe to the messages state of s2: %v", err)
		}
		defer func() { _ = wake.Unsubscribe() }()
		// A follow of s2 (not created yet) and a watch of its messages, as the viewer: direct
		// gets and gets woken by core subscriptions, no consumer.
		followed := make(chan int64, 64)
		go func() {
			_, _ = s2.Records(ctx, func(r store.Record) error {
				followed <- r.Events[len(r.Events)-1].Seq
				return nil
			}, store.Follow())
		}()
		vc, err := client.New(viewer, client.Domain(vid.Domain))
		if err != nil {
			t.Fatal(err)
		}
		watched := make(chan string, 8)
		go func() {
			_ = vc.WatchMessages(ctx, "s2", func(r client.MessagesReply) error {
				for _, m := range r.Messages {
					if strings.Contains(string(m), "live text") {
						watched <- string(m)
						return errors.New("seen")
					}
				}
				return nil
			})
		}()
		viewer.Flush()
		d.importLog(t, "A_AGENT_ARGS", smallLog("s1", "live text"), "--session", "s2")
		if m, err := live.NextMsg(10 * time.Second); err != nil || !strings.Contains(string(m.Data), "live text") {
			t.Fatalf("viewer's live subscription to %s: %v", subj, err)
		}
		select {
		case <-woken:
		case <-ctx.Done():
			t.Fatal("viewer: no wake-up for the messages state of s2")
		}
		if e, err := s2.ProjectionEntry(ctx, "messages"); err != nil || e.Revision() == 0 {
			t.Fatalf("viewer: the messages state of s2 after its wake-up: %v %v", e, err)
		}
		for last := int64(-1); last < 2; {
			select {
			case last = <-followed:
			case <-ctx.Done():
				t.Fatalf("viewer: the follow of s2 reached seq %d, want 2", last)
			}
		}
		select {
		case <-watched:
		case <-ctx.Done():
			t.Fatal("viewer: the watch of s2's messages never showed the live text")
		}

		// An event larger than a record (offloaded to agentlog_blobs): the agent writes and reads it,
		// the projector folds and serves it, the forker copies it, the viewer reads both, the
		// operator removes them.
		big := "big:" + strings.Repeat("L", 1<<20+512)
		d.importLog(t, "A_AGENT_ARGS", smallLog("big", big))
		if out := d.ok(t, "", "A_AGENT_ARGS", "messages", "big"); !strings.Contains(out, big) {
			t.Fatalf("A's messages of a session with a large event: %d bytes", len(out))
		}
		d.ok(t, "", "A_AGENT_ARGS", "fork", "big", "--child", "big-fork")
		for _, id := range []string{"big", "big-fork"} {
			if out := d.ok(t, "", "A_VIEWER_ARGS", "events", id); !strings.Contains(out, big) {
				t.Fatalf("viewer's events of %s: %d bytes", id, len(out))
			}
		}
		if out := d.ok(t, "", "A_VIEWER_ARGS", "messages", "big-fork"); !strings.Contains(out, big) {
			t.Fatalf("viewer's messages of the fork: %d bytes", len(out))
		}
		d.ok(t, "", "A_OPERATOR_ARGS", "rm", "big")
		d.ok(t, "", "A_OPERATOR_ARGS", "rm", "big-fork")
		d.ok(t, "", "A_OPERATOR_ARGS", "gc")

		// The operator provisions (again: idempotent), rebuilds and removes.
		d.ok(t, "", "A_OPERATOR_ARGS", "provision")
		d.ok(t, "", "A_OPERATOR_ARGS", "rebuild", "messages")
		d.ok(t, "", "A_OPERATOR_ARGS", "rm", "s2")

		// The TypeScript backend, as A's agent (nkey, TLS client certificate).
		typescriptAgent(t, d, a)

		// The web inspector, as A's viewer: the list, a session page, and their live streams (a
		// follow of the session and the sessions list's wake-ups).
		inspectAsViewer(t, d, a)
		ownAccount(t, d, a, multitenant.Viewer)
		ownAccount(t, d, a, multitenant.Projector)

		// The services did all of that with only their permissions, and so did every client.
		if v := d.violations(t); len(v) > 0 {
			t.Fatalf("permission violations during legitimate work:\n%s", strings.Join(v, "\n"))
		}
	})

	t.Run("contexts-and-readme", func(t *testing.T) { contextsAndReadme(t, d, a) })
	t.Run("attacks-from-A-on-B", func(t *testing.T) { attacks(t, d, a, b) })
	t.Run("within-a-tenant", func(t *testing.T) { withinTenant(t, d, a, b) })
	t.Run("readers-create-no-consumers", func(t *testing.T) { readersCreateNoConsumers(t, d, a) })
	t.Run("tls", func(t *testing.T) { tlsChecks(t, d, a) })
	t.Run("rm-preflight", func(t *testing.T) { rmPreflight(t, d) })
	// Last: its destructive attempts disturb the tenant (a purge of a whole stream, a deleted bucket).
	t.Run("audit", func(t *testing.T) { audit(t, d, a) })
}

// inspectAsViewer serves the web inspector on tenant's viewer credential and reads its pages and
// live streams (each stream for a moment: it holds a follow of the session, woken by a core
// subscription).
func inspectAsViewer(t *testing.T, d *deployment, tenant string) {
	id := d.Identity(tenant, multitenant.Viewer)
	nc := d.conn(t, id, "viewer-inspector")
	srv, err := inspector.New(nc, inspector.Options{Domain: id.Domain})
	if err != nil {
		t.Fatalf("inspector as the viewer: %v", err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for _, c := range []struct{ path, want string }{{"/", "s1-fork"}, {"/sessions/s1", markerA}} {
		resp, err := http.Get(hs.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), c.want) {
			t.Fatalf("inspector %s as the viewer: %s, %d bytes without %q", c.path, resp.Status, len(body), c.want)
		}
	}
	for _, path := range []string{"/live", "/sessions/s1/live"} {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("inspector %s as the viewer: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // until the deadline ends the stream
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("inspector %s as the viewer: %s", path, resp.Status)
		}
	}
}

// ownAccount: tenant's role (the viewer, the projector) is in an account of its own, without
// JetStream (nothing there can store a reply), whose imports all come from tenant or, for a
// subject another such role serves (the query service), from that role's account: one per entry of
// its permissions but its inbox and the micro discovery subjects.
func ownAccount(t *testing.T, d *deployment, tenant string, role multitenant.Role) {
	id := d.Identity(tenant, role)
	if id.Account == tenant || id.Domain == "" {
		t.Fatalf("the %s of %s is in account %q, domain %q: want an account of its own", role, tenant, id.Account, id.Domain)
	}
	resp, err := http.Get(d.HTTPURL + "/accountz?acc=" + id.Account)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var az struct {
		Detail *struct {
			JetStream bool `json:"jetstream_enabled"`
			Imports   []struct {
				Account string `json:"account"`
				Subject string `json:"subject"`
			} `json:"imports"`
		} `json:"account_detail"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&az); err != nil || az.Detail == nil {
		t.Fatalf("accountz of %s: %v %+v", id.Account, err, az)
	}
	if az.Detail.JetStream {
		t.Fatalf("the %s's account %s has JetStream", role, id.Account)
	}
	servedBy := map[string]string{}
	for _, r := range multitenant.Roles {
		if p, _ := multitenant.RolePermissions(r, d.Partitions); p.OwnAccount && r != role {
			for _, subj := range p.Serves {
				servedBy[subj] = d.Identity(tenant, r).Account
			}
		}
	}
	n := 0
	for _, im := range az.Detail.Imports {
		switch {
		case im.Account == tenant, im.Account == servedBy[im.Subject]:
			n++
		case im.Account == "SYS", im.Account == "$G":
		default:
			t.Fatalf("the %s's account %s imports %s from %s", role, id.Account, im.Subject, im.Account)
		}
	}
	p, _ := multitenant.RolePermissions(role, d.Partitions)
	want := map[string]bool{}
	for _, e := range append(p.Publish, p.Subscribe...) {
		if e.Subject != "_INBOX.>" && e.Subject != "$SRV.>" && !slices.Contains(p.Serves, e.Subject) {
			want[e.Subject] = true
		}
	}
	if n != len(want) {
		t.Fatalf("the %s's account %s imports %d subjects, want %d: %+v", role, id.Account, n, len(want), az.Detail.Imports)
	}
}

// readersCreateNoConsumers: a viewer and an agent of tenant may create no consumer, in any of the
// API's forms, on the session stream or the buckets. A consumer create carries deliver_subject
// and deliver_group in its payload: with the right, a reader could make the server deliver stored
// records into the query service's queue group (or any subject it may not publish to), and leave
// durables behind. Each request is refused (unanswered: it times out, the server logs the
// violation), and the operator finds no such consumer.
func readersCreateNoConsumers(t *testing.T, d *deployment, tenant string) {
	op := d.conn(t, d.Identity(tenant, multitenant.Operator), "consumer-check")
	ojs, _ := natsjs.New(op)
	for _, role := range []multitenant.Role{multitenant.Viewer, multitenant.Agent} {
		nc := d.conn(t, d.Identity(tenant, role), "consumer-"+string(role))
		for i, c := range []struct{ stream, subject, filter string }{
			{"AGENTLOG", "CONSUMER.CREATE.AGENTLOG.%s.agentlog.session.>", "agentlog.session.>"},
			{"AGENTLOG", "CONSUMER.CREATE.AGENTLOG.%s", "agentlog.session.>"},
			{"AGENTLOG", "CONSUMER.DURABLE.CREATE.AGENTLOG.%s", "agentlog.session.>"},
			{"KV_" + wire.ProjectionsBucket, "CONSUMER.CREATE.KV_" + wire.ProjectionsBucket + ".%s.$KV." + wire.ProjectionsBucket + ".>", "$KV." + wire.ProjectionsBucket + ".>"},
			{"KV_" + wire.SessionsBucket, "CONSUMER.CREATE.KV_" + wire.SessionsBucket + ".%s.$KV." + wire.SessionsBucket + ".>", "$KV." + wire.SessionsBucket + ".>"},
		} {
			name := fmt.Sprintf("evil-%s-%d", role, i)
			req := fmt.Sprintf(`{"stream_name":%q,"config":{"name":%q,"durable_name":%q,"deliver_subject":"agentlog.query.messages","deliver_group":"q","filter_subject":%q,"ack_policy":"none","deliver_policy":"all"}}`,
				c.stream, name, name, c.filter)
			subject := "$JS.API." + fmt.Sprintf(c.subject, name)
			r, err := nc.Request(subject, []byte(req), 2*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, gerr := ojs.Consumer(ctx, c.stream, name)
			if gerr == nil {
				_ = ojs.DeleteConsumer(ctx, c.stream, name)
			}
			cancel()
			if gerr == nil || !errors.Is(gerr, natsjs.ErrConsumerNotFound) {
				var reply string
				if r != nil {
					reply = string(r.Data)
				}
				t.Fatalf("%s created a push consumer delivering into agentlog.query.messages (%s): request %v %s; the operator finds it: %v", role, subject, err, reply, gerr)
			}
		}
	}
}

// typescriptAgent writes a session through the TypeScript backend (typescript/dsh-persistence) as
// tenant's agent and reads it with the CLI. Without the package's dependencies it says so and
// returns (under CI=true it fails, as typescript/dsh-persistence/npm_test.go does).
func typescriptAgent(t *testing.T, d *deployment, tenant string) {
	pkg, _ := filepath.Abs("../../typescript/dsh-persistence")
	node := filepath.Join(pkg, "node_modules/.bin/node")
	if _, err := os.Stat(filepath.Join(pkg, "lib/index.js")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the TypeScript backend is not built (npm ci in %s): %v", pkg, err)
		}
		t.Logf("not checking the TypeScript backend: run npm ci in %s (%v)", pkg, err)
		return
	}
	id := d.Identity(tenant, multitenant.Agent)
	// Once with the credentials in the plugin config, once with them in AGENTLOG_NATS_* only.
	for i, extra := range [][]string{
		{"TS_NKEY=" + id.NkeyFile, "TS_CA=" + d.CAFile, "TS_CERT=" + id.CertFile, "TS_KEY=" + id.KeyFile},
		append([]string{"TS_FROM_ENV=1"}, id.Env(d.Deployment)...),
	} {
		sid := fmt.Sprintf("ts-%d", i)
		cmd := exec.Command(node, "test/tenant-check.mjs")
		cmd.Dir = pkg
		cmd.Env = append(append(os.Environ(), "NATS_URL="+d.URL, "TS_SESSION="+sid, "TS_TEXT=written by the TypeScript backend"), extra...)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "ok") {
			t.Fatalf("TypeScript backend as %s (%v): %v\n%s", id.Name, extra, err, out)
		}
		if out := d.ok(t, "", strings.ToUpper(tenant)+"_AGENT_ARGS", "messages", sid); !strings.Contains(out, "written by the TypeScript backend") {
			t.Fatalf("messages of the TypeScript backend's session %s: %s", sid, out)
		}
	}
}

// attacks tries, as tenant A's agent and as tenant A's operator (who holds every right in A's
// account), to read, fork, watch and write tenant B's sessions. Each one fails, and B is unchanged.
func attacks(t *testing.T, d *deployment, a, b string) {
	before := d.ok(t, "", "B_AGENT_ARGS", "events", "b-secret")

	// events, messages, status, fork through the CLI.
	d.refused(t, `session "b-secret" not found`, "", "A_AGENT_ARGS", "events", "b-secret")
	d.refused(t, `404`, "", "A_AGENT_ARGS", "messages", "b-secret", "--min-seq", "-1")
	d.refused(t, `not found`, "", "A_AGENT_ARGS", "status", "b-secret")
	d.refused(t, `SESSION_NOT_FOUND`, "", "A_AGENT_ARGS", "fork", "b-secret", "--child", "stolen")
	d.refused(t, `not found`, "", "A_OPERATOR_ARGS", "events", "b-secret")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, role := range []multitenant.Role{multitenant.Agent, multitenant.Operator} {
		nc := d.conn(t, d.Identity(a, role), "attack-"+string(role))
		js, _ := natsjs.New(nc)
		subj, _ := wire.SessionSubject("b-secret", d.Partitions)
		tok, _ := wire.Token("b-secret")

		// The fork service, asked with the tenant in the payload: the tenant is the connection's.
		for _, req := range []string{
			`{"source":"b-secret","child":"stolen2"}`,
			`{"source":"b-secret","child":"stolen3","tenant":"` + b + `","account":"` + b + `"}`,
		} {
			reply, err := nc.RequestWithContext(ctx, "agentlog.fork", []byte(req))
			if err != nil {
				t.Fatalf("%s: fork request: %v", role, err)
			}
			if !strings.Contains(reply.Header.Get("Nats-Service-Error"), "not found") && !strings.Contains(string(reply.Data), "SESSION_NOT_FOUND") {
				t.Fatalf("%s: fork of B's session %s answered %v %s", role, req, reply.Header, reply.Data)
			}
		}

		// Direct get, last by subject and by sequence; STREAM.MSG.GET.
		if r, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.AGENTLOG."+subj, nil); err != nil || r.Header.Get("Status") != "404" || bytes.Contains(r.Data, []byte(markerB)) {
			t.Fatalf("%s: direct get of %s: %v %v %s", role, subj, err, r.Header, r.Data)
		}
		for seq := 1; seq <= 20; seq++ {
			r, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.AGENTLOG", fmt.Appendf(nil, `{"seq":%d}`, seq))
			if err == nil && bytes.Contains(r.Data, []byte(markerB)) {
				t.Fatalf("%s: direct get seq %d returned B's record", role, seq)
			}
		}
		if r, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.AGENTLOG", fmt.Appendf(nil, `{"last_by_subj":%q}`, subj)); err == nil && !bytes.Contains(r.Data, []byte(`"code":404`)) {
			t.Fatalf("%s: STREAM.MSG.GET of %s: %s", role, subj, r.Data)
		}

		// KV reads of B's metadata and projections.
		for _, kvName := range []string{wire.SessionsBucket, wire.ProjectionsBucket} {
			kv, err := js.KeyValue(ctx, kvName)
			if err != nil {
				t.Fatalf("%s: %s: %v", role, kvName, err)
			}
			key := tok
			if kvName == wire.ProjectionsBucket {
				key = "messages." + tok
			}
			// The operator's get finds nothing; the agent may not even ask (no direct get of
			// projections: a refused request, unanswered until its timeout).
			gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
			e, err := kv.Get(gctx, key)
			gcancel()
			if err == nil || (role == multitenant.Operator && !errors.Is(err, natsjs.ErrKeyNotFound)) {
				t.Fatalf("%s: KV get %s %s: %v %v", role, kvName, key, e, err)
			}
		}

		// A read of the whole stream, no filter: it reads A's records only. The agent reads with
		// batched direct gets (it may create no consumer), the operator with a consumer.
		var subjects [][]byte
		if role == multitenant.Operator {
			cons, err := js.OrderedConsumer(ctx, "AGENTLOG", natsjs.OrderedConsumerConfig{FilterSubjects: []string{"agentlog.>"}})
			if err != nil {
				t.Fatalf("%s: consumer on AGENTLOG: %v", role, err)
			}
			batch, err := cons.FetchNoWait(1000)
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				subjects = append(subjects, []byte(m.Subject()), m.Data())
			}
		} else {
			st, err := store.Open(ctx, js)
			if err != nil {
				t.Fatalf("%s: store.Open: %v", role, err)
			}
			msgs, err := st.MsgsFrom(ctx, "AGENTLOG", 1, 1000, "agentlog.>")
			if err != nil {
				t.Fatalf("%s: direct gets of AGENTLOG: %v", role, err)
			}
			for _, m := range msgs {
				subjects = append(subjects, []byte(m.Subject), m.Data)
			}
		}
		for i := 0; i < len(subjects); i += 2 {
			if bytes.Contains(subjects[i+1], []byte(markerB)) || strings.HasSuffix(string(subjects[i]), "."+tok) {
				t.Fatalf("%s: read B's record on %s", role, subjects[i])
			}
		}
		if len(subjects) == 0 {
			t.Fatalf("%s: the read got nothing (A's records were expected)", role)
		}
	}

	// Writing a record into B's session, on its subject with its headers, as A's agent: it lands in
	// A's stream (on the same subject name), never in B's.
	{
		nc := d.conn(t, d.Identity(a, multitenant.Agent), "attack-write")
		js, _ := natsjs.New(nc)
		subj, _ := wire.SessionSubject("b-secret", d.Partitions)
		tok, _ := wire.Token("b-secret")
		h := nats.Header{}
		h.Set("Agentlog-Session", tok)
		h.Set("Agentlog-First-Seq", "3")
		h.Set("Agentlog-Count", "1")
		h.Set("Agentlog-Format", "1")
		h.Set("Nats-Expected-Last-Subject-Sequence", "0")
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: []byte(`{"type":"x/evil","seq":3,"time":1,"data":{},"ignorable":true}`)}); err != nil {
			t.Fatalf("A's agent publishing on %s: %v", subj, err)
		}
	}

	// Core subscriptions: A's operator may subscribe to anything in A's account. While it listens,
	// B appends, reads, queries and forks: nothing of B's reaches it.
	op := d.conn(t, d.Identity(a, multitenant.Operator), "attack-listener")
	got := make(chan *nats.Msg, 100000)
	for _, s := range []string{"agentlog.>", "$JS.API.>", "$KV.>", ">"} {
		if _, err := op.ChanSubscribe(s, got); err != nil {
			t.Fatal(err)
		}
	}
	op.Flush()
	// The agent may not even subscribe to those.
	agent := d.conn(t, d.Identity(a, multitenant.Agent), "attack-agent-sub")
	for _, s := range []string{"$JS.API.>", ">", "$KV.>"} {
		sub, err := agent.SubscribeSync(s)
		if err == nil {
			agent.Flush()
			if _, err = sub.NextMsg(time.Second); !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(fmt.Sprint(err, agent.LastError()), "Permissions Violation") {
				t.Fatalf("agent subscribed to %s: %v / %v", s, err, agent.LastError())
			}
		}
	}
	d.importLog(t, "B_AGENT_ARGS", smallLog("b-more", markerB))
	d.ok(t, "", "B_AGENT_ARGS", "messages", "b-more")
	d.ok(t, "", "B_AGENT_ARGS", "fork", "b-more", "--child", "b-more-fork")
	d.ok(t, "", "B_AGENT_ARGS", "sessions")
	time.Sleep(300 * time.Millisecond)
	seen := len(got)
	for i := 0; i < seen; i++ {
		m := <-got
		if bytes.Contains(m.Data, []byte(markerB)) || strings.Contains(m.Subject, "b-more") || bytes.Contains(m.Data, []byte("b-more")) {
			t.Fatalf("A's operator saw B's traffic on %s: %.200s", m.Subject, m.Data)
		}
	}

	// B is unchanged: the records A wrote on B's subject went into A's stream.
	if after := d.ok(t, "", "B_AGENT_ARGS", "events", "b-secret"); after != before {
		t.Fatalf("B's session changed:\nbefore %s\nafter %s", before, after)
	}
}

// withinTenant checks that a role cannot do what another role of its tenant does, and that no
// identity of A can pass for B's.
func withinTenant(t *testing.T, d *deployment, a, b string) {
	// The viewer writes nothing: no import, fork, rm.
	f := filepath.Join(t.TempDir(), "v1.jsonl")
	if err := os.WriteFile(f, []byte(smallLog("v1", "x")), 0o600); err != nil {
		t.Fatal(err)
	}
	d.refused(t, `NATS refused a request of this command: nats: permissions violation: Permissions Violation for Publish`, "", "A_VIEWER_ARGS", "import", f)
	d.refused(t, `NATS refused a request of this command: nats: permissions violation: Permissions Violation for Publish to "agentlog.fork"`, "", "A_VIEWER_ARGS", "fork", "s1", "--child", "v-fork")
	// Without its --js-domain the viewer is refused at once, told to pass it.
	noDomain := regexp.MustCompile(`--js-domain \S+`).ReplaceAllString(d.env["A_VIEWER_ARGS"], "")
	if noDomain == d.env["A_VIEWER_ARGS"] {
		t.Fatalf("A_VIEWER_ARGS has no --js-domain: %s", noDomain)
	}
	d.env["A_VIEWER_NODOMAIN_ARGS"] = noDomain
	d.refused(t, `Permissions Violation for Publish to "\$JS\.API\.STREAM\.INFO\.AGENTLOG".*pass --js-domain \(the multi-tenant viewer's is <tenant>view`, "", "A_VIEWER_NODOMAIN_ARGS", "status", "s1")
	// A restore (a write) by the viewer is refused as soon as the server says so, not retried as a
	// write whose outcome is unknown.
	d.importLog(t, "A_AGENT_ARGS", smallLog("v-arch", "x"))
	d.ok(t, "", "A_OPERATOR_ARGS", "archive", "v-arch")
	d.refused(t, `the write was refused, nothing was stored: .*Permissions Violation for Publish to "agentlog\.session\.`, "", "A_VIEWER_ARGS", "restore", "v-arch")
	// rm says it needs the operator role, with the violation as detail, and changes nothing.
	rmRefused := `rm s1: rm needs the operator role: \$JS\.API\.STREAM\.PURGE\.AGENTLOG is denied \(.*\); nothing was changed\. .*Permissions Violation for Publish to "\$JS\.API\.STREAM\.PURGE\.AGENTLOG"`
	// The viewer's account imports A's API under its domain: the purge it would send is there.
	vp := regexp.QuoteMeta("$JS." + d.Identity(a, multitenant.Viewer).Domain + ".API.STREAM.PURGE.AGENTLOG")
	d.refused(t, `rm s1: rm needs the operator role: `+vp+` is denied \(.*\); nothing was changed\. .*Permissions Violation for Publish to "`+vp+`"`, "", "A_VIEWER_ARGS", "rm", "s1")
	// The agent does not administer: no provision, no rm (a purge), no rebuild.
	d.refused(t, rmRefused, "", "A_AGENT_ARGS", "rm", "s1")
	if out := d.ok(t, "", "A_AGENT_ARGS", "events", "s1"); !strings.Contains(out, markerA) {
		t.Fatalf("s1 after the refused rm: %s", out)
	}
	d.refused(t, `NATS refused a request of this command: nats: permissions violation: Permissions Violation for Publish`, "", "A_AGENT_ARGS", "rebuild", "messages", "--session", "s1")
	agent := d.conn(t, d.Identity(a, multitenant.Agent), "attack-within")
	js, _ := natsjs.New(agent)
	// Each refused request is answered by no one: it times out (2 s) and the server logs the violation.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "MINE", Subjects: []string{"mine.>"}}); err == nil {
		t.Fatal("agent created a stream")
	}
	if err := js.DeleteStream(ctx, "AGENTLOG"); err == nil {
		t.Fatal("agent deleted AGENTLOG")
	}
	// The agent purges the blob stream: refused (a STREAM.PURGE carries its filter in the payload,
	// so the right would take every session's blobs); it overwrites a chunk of the session's blob:
	// refused by the write-once stream. The session's blob still reads.
	big := "big:" + strings.Repeat("P", 1<<20+512)
	d.importLog(t, "A_AGENT_ARGS", smallLog("blob-victim", big))
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	blobs, err := js.Stream(ctx, wire.BlobStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := blobs.Purge(ctx); err == nil {
		t.Fatal("agent purged " + wire.BlobStream)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	victimTok, _ := wire.Token("blob-victim")
	info, err := blobs.Info(ctx, natsjs.WithSubjectFilter(wire.BlobSessionFilter(victimTok)))
	if err != nil || len(info.State.Subjects) == 0 {
		t.Fatalf("the chunks of blob-victim's blob: %v, %v", info, err)
	}
	for subj := range info.State.Subjects {
		if _, err := js.Publish(ctx, subj, []byte("overwritten")); err == nil {
			t.Fatalf("agent overwrote chunk %s of another session's blob", subj)
		}
	}
	if out := d.ok(t, "", "A_VIEWER_ARGS", "events", "blob-victim"); !strings.Contains(out, big) {
		t.Fatalf("the blob of blob-victim after the agent's purge: %d bytes of events", len(out))
	}
	// The projector's partition consumers are out of the agent's reach.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateConsumer(ctx, "AGENTLOG", natsjs.ConsumerConfig{Durable: "agentlog-projector-0", FilterSubject: "agentlog.session.0.*"}); err == nil {
		t.Fatal("agent changed the projector's consumer agentlog-projector-0")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := js.DeleteConsumer(ctx, "AGENTLOG", "agentlog-projector-1"); err == nil {
		t.Fatal("agent deleted the projector's consumer agentlog-projector-1")
	}
	// Projections are the projector's: an agent cannot forge one.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "$KV.agentlog_projections.messages.s1", []byte(`{}`)); err == nil {
		t.Fatal("agent wrote a projection")
	}
	// A service reply cannot be impersonated: the agent may not subscribe to the service subjects.
	sub, err := agent.SubscribeSync("agentlog.fork")
	if err == nil {
		agent.Flush()
		if _, err := sub.NextMsg(500 * time.Millisecond); !strings.Contains(fmt.Sprint(err, agent.LastError()), "ermission") {
			t.Fatalf("agent subscribed to agentlog.fork: %v", err)
		}
	}

	// No identity of A authenticates as B: B's viewer name with A's viewer password, A's certificate
	// with B's user, a password user in B's name with no password.
	av, bv := d.Identity(a, multitenant.Viewer), d.Identity(b, multitenant.Viewer)
	forged := *bv
	forged.Password = av.Password
	if nc, err := d.dial(&forged, "forged"); err == nil {
		nc.Close()
		t.Fatal("B's viewer authenticated with A's viewer password")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("forged B viewer: %v, want an authorization violation", err)
	}
	// A's agent, with B's certificate: the certificate carries no identity, the nkey does.
	mixed := *d.Identity(a, multitenant.Agent)
	mixed.CertFile, mixed.KeyFile = d.Identity(b, multitenant.Agent).CertFile, d.Identity(b, multitenant.Agent).KeyFile
	nc := d.conn(t, &mixed, "mixed-cert")
	kv, _ := natsjs.New(nc)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := store.Open(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Header(storetest.Session(st, "b-secret").Info(ctx)); err == nil {
		t.Fatal("A's agent with B's certificate read B's session")
	}
}

// tlsChecks: the server refuses plain connections, a client without a certificate, a certificate of
// another CA; a client refuses a server whose CA it does not trust; every connection of the
// services is TLS, in its tenant's account.
func tlsChecks(t *testing.T, d *deployment, a string) {
	id := d.Identity(a, multitenant.Agent)
	other := t.TempDir()
	wrongCA, err := multitenant.NewCA(other, "not the deployment's CA")
	if err != nil {
		t.Fatal(err)
	}
	wcert, wkey, err := wrongCA.Issue(other, "intruder", false, "")
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := nats.NkeyOptionFromSeed(id.NkeyFile)
	base := []nats.Option{seed, nats.Timeout(5 * time.Second), nats.NoReconnect()}
	cases := []struct {
		name string
		url  string
		opts []nats.Option
	}{
		{"plain", strings.Replace(d.URL, "tls://", "nats://", 1), nil},
		{"no client certificate", d.URL, []nats.Option{nats.RootCAs(d.CAFile)}},
		{"client certificate of another CA", d.URL, []nats.Option{nats.RootCAs(d.CAFile), nats.ClientCert(wcert, wkey)}},
		{"server not signed by the trusted CA", d.URL, []nats.Option{nats.RootCAs(wrongCA.CertFile), nats.ClientCert(id.CertFile, id.KeyFile)}},
	}
	for _, c := range cases {
		if nc, err := nats.Connect(c.url, append(base, c.opts...)...); err == nil {
			nc.Close()
			t.Fatalf("%s: connected", c.name)
		}
	}
	// The CLI with the wrong CA says why.
	code, _, errOut := d.cli(t, "", "A_AGENT_ARGS", "--tls-ca", wrongCA.CertFile, "sessions")
	if code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("agentlog with the wrong CA: exit %d: %s", code, errOut)
	}

	// A service given another CA refuses the server, and stops at once rather than wait for it.
	code, _, errOut = d.cli(t, "", "A_FORKER_ARGS", "--tls-ca", wrongCA.CertFile, "forker")
	if code != 1 || !strings.Contains(errOut, "certificate signed by unknown authority") || strings.Contains(errOut, "waiting for NATS") {
		t.Fatalf("agentlog forker with the wrong CA: exit %d: %s", code, errOut)
	}

	// Every client connection is TLS (the server requires it); the services' are in their tenant's
	// account, under their role's user.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{}}}
	resp, err := hc.Get(d.HTTPURL + "/connz?auth=true&limit=1000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var connz struct {
		Conns []struct {
			Name string `json:"name"`
			TLS  string `json:"tls_version"`
			Acc  string `json:"account"`
			User string `json:"authorized_user"`
		} `json:"connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&connz); err != nil {
		t.Fatal(err)
	}
	services := 0
	for _, c := range connz.Conns {
		if c.TLS == "" {
			t.Errorf("connection %q (account %s) is not TLS", c.Name, c.Acc)
		}
		if c.Name == "agentlog-projector" || c.Name == "agentlog-forker" {
			services++
			role := multitenant.Projector
			if c.Name == "agentlog-forker" {
				role = multitenant.Forker
			}
			var want *multitenant.Identity // the role's identity in the connection's account
			for _, id := range d.Identities {
				if id.Account == c.Acc && id.Role == role {
					want = id
				}
			}
			if want == nil || want.Public != c.User {
				t.Errorf("service connection %q in account %s as %s: not that tenant's %s", c.Name, c.Acc, c.User, role)
			}
		}
	}
	if services < 2*len(d.Tenants) {
		t.Errorf("found %d service connections, want at least %d: %+v", services, 2*len(d.Tenants), connz.Conns)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// contextsAndReadme: up.sh wrote one agentlog context per tenant role, each connects as its role
// with no flag or environment variable (the viewer may read, not remove), and the README's nats
// CLI line names a role allowed to list the tenant's streams (the agent is not: least privilege).
func contextsAndReadme(t *testing.T, d *deployment, a string) {
	out := d.ok(t, "", "", "context", "ls", "--json")
	var ctxs []struct {
		Name   string `json:"name"`
		TLS    bool   `json:"tls"`
		Domain string `json:"jsDomain"`
	}
	if err := json.Unmarshal([]byte(out), &ctxs); err != nil {
		t.Fatalf("context ls --json: %v: %s", err, out)
	}
	got := map[string]bool{}
	for _, c := range ctxs {
		got[c.Name] = c.TLS
		// The viewer's context reaches its tenant's JetStream through its own account's imports.
		for _, tn := range d.Tenants {
			for _, r := range multitenant.Roles {
				if id := d.Identity(tn, r); c.Name == "mt-"+strings.ToLower(tn)+"-"+string(r) && c.Domain != id.Domain {
					t.Fatalf("context %s: js-domain %q, want %q", c.Name, c.Domain, id.Domain)
				}
			}
		}
	}
	for _, tn := range d.Tenants {
		for _, r := range multitenant.Roles {
			name := "mt-" + strings.ToLower(tn) + "-" + string(r)
			if tls, ok := got[name]; !ok || !tls {
				t.Fatalf("context %s: found %v, TLS %v; contexts: %s", name, ok, tls, out)
			}
		}
	}
	info, err := os.Stat(filepath.Join(d.cfg, "agentlog", "context", "mt-"+strings.ToLower(a)+"-agent.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("context file: %v, mode %v, want 0600", err, info)
	}
	if out := d.ok(t, "", "", "--context", "mt-"+strings.ToLower(a)+"-agent", "sessions"); !strings.Contains(out, "s1") {
		t.Fatalf("sessions through the agent's context: %s", out)
	}
	d.refused(t, "operator role", "", "", "--context", "mt-"+strings.ToLower(a)+"-viewer", "rm", "s1", "--yes")
	if out := d.ok(t, "", "", "--context", "mt-"+strings.ToLower(a)+"-viewer", "sessions"); !strings.Contains(out, "s1") {
		t.Fatalf("sessions through the viewer's context: %s", out)
	}

	// The README's `nats $X_NATS_ARGS stream ls`: X's role may list the streams.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`nats \$([A-Z]+)_([A-Z]+)_NATS_ARGS stream ls`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no `nats $T_ROLE_NATS_ARGS stream ls` line")
	}
	var id *multitenant.Identity
	for _, tn := range d.Tenants {
		if strings.EqualFold(tn, string(m[1])) {
			id = d.Identity(tn, multitenant.Role(strings.ToLower(string(m[2]))))
		}
	}
	if id == nil {
		t.Fatalf("README.md names %s_%s, which is no identity", m[1], m[2])
	}
	names := func(id *multitenant.Identity) ([]string, error) {
		nc := d.conn(t, id, "readme-stream-ls")
		js, err := natsjs.New(nc)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var out []string
		l := js.StreamNames(ctx)
		for n := range l.Name() {
			out = append(out, n)
		}
		return out, l.Err()
	}
	if got, err := names(id); err != nil || !slices.Contains(got, wire.StreamName) {
		t.Fatalf("stream ls as %s (the README's): %v, %v", id.Name, got, err)
	}
	if _, err := names(d.Identity(a, multitenant.Agent)); err == nil {
		t.Fatalf("stream ls as the agent succeeded: the README may name the agent")
	}
}
