package multitenant

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// roleServer runs RoleServer with the users agent, projector and operator, and returns its URL
// and its log of violations.
func roleServer(t *testing.T) (string, *ViolationLog) {
	t.Helper()
	srv, log, err := RoleServer(t.TempDir(), wire.DefaultPartitions, Agent, Projector, Operator)
	if err != nil {
		t.Fatal(err)
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

// TestAgentBlobs checks, with the role permissions on a real server, that agents may create blobs
// and never delete or overwrite another session's (issue 20): an agent cannot put the Object Store
// delete marker on a legacy blob (it could on the old roles, and the victim then failed with
// record-blob), cannot overwrite or append to a stored chunk of AGENTLOG_BLOBS (the stream refuses a
// second message on a subject), cannot delete or purge one, and a blob's id is 128 random bits (no
// name to squat). A Go writer's large event is read by the TypeScript backend and the TypeScript
// backend's by Go. An upload the server refuses part-way fails at once naming the session and the
// seq, and no purge is attempted (Go publisher and TypeScript backend). The projector cannot purge
// blobs; the operator's GC removes the failed uploads' chunks and a removed session's blobs, and
// keeps a live one's.
func TestAgentBlobs(t *testing.T) {
	url, viols := roleServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, opJS := dialRole(t, url, Operator)
	opStore, err := store.Provision(ctx, opJS, store.Config{})
	if err != nil {
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
	if v := viols.Since(0); len(v) > 0 {
		t.Fatalf("violations writing a blob: %v", v)
	}
	readBack := func(who, id string, want []session.Event) {
		t.Helper()
		got, _, err := storetest.ReadAll(ctx, storetest.Session(st, id))
		if err != nil || len(got) != len(want) || string(got[len(got)-1].Data) != string(want[len(want)-1].Data) {
			t.Fatalf("%s: reading %s's blob back as the agent: %d events, %v", who, id, len(got), err)
		}
	}
	readBack("after the write", "victim", victim)
	victimTok, _ := wire.Token("victim")
	refs := recordRefs(ctx, t, st, "victim")
	if len(refs) != 1 || refs[0].Legacy() || len(refs[0].ID) != wire.BlobIDBytes || refs[0].Chunks < 2 {
		t.Fatalf("the victim's blob refs %+v: want one format 3 ref of several chunks with a 128-bit id", refs)
	}
	ref := refs[0]
	refused := func(what, subject string, n int) {
		t.Helper()
		if v := viols.Since(n); len(v) != 1 || !strings.Contains(v[0], subject) {
			t.Fatalf("%s: violations %v, want one for %s", what, v, subject)
		}
	}

	// 1. Overwrite or append to a stored chunk: the stream refuses a second message on a subject,
	// guarded or not; a chunk past the last is stored but never read (the record names the count).
	for k := 0; k < ref.Chunks; k++ {
		for _, h := range []nats.Header{nil, {natsjs.ExpectedLastSubjSeqHeader: []string{"0"}}, {natsjs.ExpectedLastSubjSeqHeader: []string{"1"}}} {
			subj := wire.BlobChunkSubject(victimTok, ref.ID, k)
			if _, err := agentJS.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: []byte("overwritten")}); err == nil {
				t.Fatalf("the agent overwrote chunk %s (headers %v)", subj, h)
			}
		}
	}
	if _, err := agentJS.Publish(ctx, wire.BlobChunkSubject(victimTok, ref.ID, ref.Chunks), []byte("appended")); err != nil {
		t.Fatalf("a new chunk subject: %v", err)
	}
	readBack("after the agent's overwrites and append", "victim", victim)
	// 2. Delete or purge a chunk, or the whole stream: refused by permission.
	n := len(viols.Since(0))
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	blobs, err := agentJS.Stream(dctx, wire.BlobStream)
	if err != nil {
		t.Fatal(err)
	}
	err = blobs.Purge(dctx)
	dcancel()
	if err == nil {
		t.Fatal("the agent purged AGENTLOG_BLOBS")
	}
	refused("the agent's purge", "STREAM.PURGE."+wire.BlobStream, n)
	n = len(viols.Since(0))
	dctx, dcancel = context.WithTimeout(ctx, 2*time.Second)
	err = blobs.DeleteMsg(dctx, 1)
	dcancel()
	if err == nil {
		t.Fatal("the agent deleted a chunk")
	}
	refused("the agent's message delete", "STREAM.MSG.DELETE."+wire.BlobStream, n)
	readBack("after the agent's purge and delete", "victim", victim)
	// 3. No squatting: each blob gets a fresh 128-bit id, even for the same bytes.
	again := bigMessage(t, "victim2", 2<<20)
	if err := write(ctx, t, pub, "victim2", again); err != nil {
		t.Fatal(err)
	}
	if r2 := recordRefs(ctx, t, st, "victim2"); len(r2) != 1 || r2[0].ID == ref.ID || r2[0].SHA256 != ref.SHA256 {
		t.Fatalf("two blobs of the same bytes: %+v and %+v; want the same digest under different ids", ref, r2)
	}

	// 4. A legacy blob (format 2, Object Store object, written the old way by the operator): the
	// agent reads it by direct gets, and cannot put the delete marker on it (it could, on the old
	// roles: the victim then failed with record-blob).
	n = len(viols.Since(0))
	old := legacyVictim(ctx, t, opJS, opStore, "old-victim", 300_000)
	readBack("the legacy blob", "old-victim", old)
	if v := viols.Since(n); len(v) > 0 {
		t.Fatalf("violations reading a legacy blob: %v", v)
	}
	n = len(viols.Since(0))
	oldTok, _ := wire.Token("old-victim")
	marker := &nats.Msg{Subject: "$O." + wire.BlobsBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(oldTok+"/0/NUIDOLD")), Header: nats.Header{}, Data: []byte(`{"name":"` + oldTok + `/0/NUIDOLD","bucket":"agentlog_blobs","deleted":true}`)}
	marker.Header.Set(natsjs.MsgRollup, natsjs.MsgRollupSubject)
	_ = agentNC.PublishMsg(marker)
	_ = agentNC.Flush()
	eventually(t, "the delete marker's violation", func() bool { return len(viols.Since(n)) > 0 })
	refused("the agent's Object Store delete marker", "$O."+wire.BlobsBucket+".M.", n)
	readBack("after the agent's delete marker", "old-victim", old)

	// 5. Round trips: the TypeScript backend (as the agent) writes a 3 MiB event Go reads, and reads
	// the Go writer's.
	n = len(viols.Since(0))
	if typescriptCheck(t, url, "TS_WRITE=ts-large") {
		got, _, err := storetest.ReadAll(ctx, storetest.Session(st, "ts-large"))
		if err != nil || len(got) != 2 || !strings.Contains(string(got[1].Data), strings.Repeat("y", 3<<20)) {
			t.Fatalf("Go reading the TypeScript backend's large event: %d events, %v", len(got), err)
		}
	}
	if v := viols.Since(n); len(v) > 0 {
		t.Fatalf("the TypeScript backend's blob write and read were refused a request: %v", v)
	}

	// 6. A full stream refuses uploads part-way: the error names the session, the seq, the reason.
	setMax := func(room int64) {
		t.Helper()
		info, err := opStore.JetStream().Stream(ctx, wire.BlobStream)
		if err != nil {
			t.Fatal(err)
		}
		cfg := info.CachedInfo().Config
		cfg.MaxBytes = -1
		if room > 0 {
			cfg.MaxBytes = int64(info.CachedInfo().State.Bytes) + room
		}
		if _, err := opJS.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	setMax(512 << 10)
	err = write(ctx, t, pub, "full", bigMessage(t, "full", 2<<20))
	if err == nil || !strings.Contains(err.Error(), `session "full" seq 1: store the event's`) || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Fatalf("the agent's upload into a full stream: %v; want the session, the seq and the server's reason", err)
	}
	typescriptCheck(t, url, "TS_SESSION=ts-full", "TS_READ=victim")
	if v := viols.Since(n); len(v) > 0 {
		t.Fatalf("the failed uploads were refused a request: %v", v)
	}
	setMax(0)

	// 7. The projector may not purge blobs (its GC moved to the operator).
	_, projJS := dialRole(t, url, Projector)
	pstore, err := store.Open(ctx, projJS)
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{wire.BlobStream, "OBJ_" + wire.BlobsBucket} {
		n = len(viols.Since(0))
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := projJS.Conn().RequestWithContext(pctx, "$JS.API.STREAM.PURGE."+stream, []byte(`{"filter":"`+wire.BlobPrefix+`.>"}`))
		pcancel()
		_ = err // no reply: the request is dropped
		refused("the projector's purge of "+stream, "STREAM.PURGE."+stream, n)
	}
	n = len(viols.Since(0))
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := pstore.CollectBlobs(pctx, 0); err == nil {
		t.Fatal("the projector's CollectBlobs ran")
	}
	pcancel()
	readBack("after the projector's purges", "victim", victim)

	// 8. The operator's GC: the failed uploads' chunks and the blobs of a session whose records
	// are gone (purged outside agentlog rm) are removed; the live sessions' blobs are kept. rm
	// removes a session's blobs with it.
	if _, err := opJS.Conn().Request("$JS.API.STREAM.PURGE."+wire.StreamName, []byte(`{"filter":"`+wire.TokenSubject(mustToken(t, "victim2"), wire.DefaultPartitions)+`"}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c, err := opStore.CollectBlobs(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	left := tokensWithBlobs(t, opStore)
	for _, gone := range []string{"full", "ts-full", "victim2"} {
		if left[mustToken(t, gone)] {
			t.Errorf("the operator's GC left blobs of %s: %+v", gone, c)
		}
	}
	for _, kept := range []string{"victim", "ts-large"} {
		if !left[mustToken(t, kept)] {
			t.Errorf("the operator's GC removed %s's blob: %+v", kept, c)
		}
	}
	readBack("after the operator's GC", "victim", victim)
	readBack("after the operator's GC", "old-victim", old)
	if rm, err := storetest.Session(opStore, "victim").Remove(ctx); err != nil || rm.Blobs < 1 {
		t.Fatalf("rm victim: %+v, %v", rm, err)
	}
	if tokensWithBlobs(t, opStore)[victimTok] {
		t.Fatal("rm left blobs of the victim")
	}
}

// recordRefs returns the blob refs of session id's records.
func recordRefs(ctx context.Context, t *testing.T, st *store.Store, id string) []wire.BlobRef {
	t.Helper()
	tok := mustToken(t, id)
	var out []wire.BlobRef
	for seq := uint64(1); ; {
		msgs, err := st.MsgsFrom(ctx, wire.StreamName, seq, 100, wire.TokenSubject(tok, wire.DefaultPartitions))
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			out = append(out, wire.RecordBlobs(m.Header)...)
			seq = m.Sequence + 1
		}
	}
}

// tokensWithBlobs returns the session tokens AGENTLOG_BLOBS holds chunks of.
func tokensWithBlobs(t *testing.T, st *store.Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, f := range storetest.Blobs(st) {
		tok, _, _, ok := wire.ParseBlobSubject(strings.TrimSuffix(f, "*") + "0")
		if ok {
			out[tok] = true
		}
	}
	return out
}

func mustToken(t *testing.T, id string) string {
	t.Helper()
	tok, err := wire.Token(id)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// legacyVictim writes, as the operator and the old way, session id with one offloaded event of n
// bytes: an object of the Object Store bucket agentlog_blobs (its Put) and a format 2 record.
func legacyVictim(ctx context.Context, t *testing.T, js natsjs.JetStream, st *store.Store, id string, n int) []session.Event {
	t.Helper()
	evs := bigMessage(t, id, n)[1:]
	evs[0].Seq = 0
	line, err := evs[0].AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{Bucket: wire.BlobsBucket, Storage: natsjs.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	tok := mustToken(t, id)
	ref := wire.BlobRef{Seq: 0, Size: int64(len(line)), SHA256: sha256.Sum256(line), ID: "NUIDOLD"}
	if _, err := obs.PutBytes(ctx, wire.BlobName(tok, ref), line); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(wire.HeaderSession, tok)
	h.Set(wire.HeaderFirstSeq, "0")
	h.Set(wire.HeaderCount, "1")
	h.Set(wire.HeaderFormat, wire.RecordFormatBlobs)
	h.Set(wire.HeaderBlob, ref.HeaderValue())
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: wire.TokenSubject(tok, wire.DefaultPartitions), Header: h}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// eventually waits (up to 10 s) for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after 10 s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// typescriptCheck runs test/blob-failure-check.mjs of the TypeScript backend as the agent with
// env (KEY=VALUE). Without the package built it says so and returns false (CI=true: fails).
func typescriptCheck(t *testing.T, url string, env ...string) bool {
	t.Helper()
	pkg, _ := filepath.Abs("../../typescript/dsh-persistence")
	if _, err := os.Stat(filepath.Join(pkg, "lib/index.js")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the TypeScript backend is not built (npm ci in %s): %v", pkg, err)
		}
		t.Logf("not checking the TypeScript backend: run npm ci in %s (%v)", pkg, err)
		return false
	}
	cmd := exec.Command(filepath.Join(pkg, "node_modules/.bin/node"), "test/blob-failure-check.mjs")
	cmd.Dir = pkg
	cmd.Env = append(append(os.Environ(), "NATS_URL="+url, "TS_USER="+string(Agent), "TS_PASS=pw", "TS_SESSION=unused", "TS_READ=victim"), env...)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "ok") {
		t.Fatalf("TypeScript backend (%v): %v\n%s", env, err, out)
	}
	return true
}
