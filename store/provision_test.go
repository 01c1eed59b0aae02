package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

func TestProvisionCreatesWhatDesignSays(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	if s.partitions != wire.DefaultPartitions || s.maxMsgSize != DefaultMaxMsgSize {
		t.Errorf("store partitions %d max msg size %d, want %d and %d", s.partitions, s.maxMsgSize, wire.DefaultPartitions, DefaultMaxMsgSize)
	}
	info, err := s.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if len(c.Subjects) != 1 || c.Subjects[0] != "agentlog.session.>" || c.Storage != natsjs.FileStorage ||
		c.Compression != natsjs.S2Compression || !c.AllowDirect || !c.DenyDelete || !c.AllowAtomicPublish ||
		c.Duplicates != 2*time.Minute || c.MaxMsgSize != 1<<20 || c.Replicas != 1 || c.Retention != natsjs.LimitsPolicy ||
		c.Metadata[wire.MetaPartitions] != "16" || c.Metadata[wire.MetaFormat] != "1" {
		t.Errorf("AGENTLOG config not as designed: %+v", c)
	}
	for _, b := range []string{wire.SessionsBucket, wire.ProjectionsBucket} {
		st, err := s.js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if bc := st.CachedInfo().Config; bc.Storage != natsjs.FileStorage || bc.MaxMsgsPerSubject != 1 || bc.Replicas != 1 {
			t.Errorf("bucket %s config: storage %v history %d replicas %d", b, bc.Storage, bc.MaxMsgsPerSubject, bc.Replicas)
		}
	}
	es, err := s.js.Stream(ctx, wire.ErrorsStream)
	if err != nil {
		t.Fatal(err)
	}
	if ec := es.CachedInfo().Config; ec.Subjects[0] != "agentlog.errors.>" || ec.MaxAge != 7*24*time.Hour || ec.MaxMsgsPerSubject != 1000 || ec.MaxBytes != 256<<20 {
		t.Errorf("errors stream config: %+v", ec)
	}
}

func TestProvisionIdempotentAndOpen(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{})
	ctx := testCtx(t)
	if _, err := Open(ctx, js); !errors.Is(err, ErrNotProvisioned) || !strings.Contains(err.Error(), wire.StreamName) {
		t.Fatalf("Open before Provision: %v, want ErrNotProvisioned naming %s", err, wire.StreamName)
	}
	cfg := Config{Partitions: 8, MaxMsgSize: 64 << 10, DuplicateWindow: time.Minute}
	s1, err := Provision(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s1, "x").Append(ctx, 0, evs(0, 3, "a"), WithMsgID("m1")); err != nil {
		t.Fatal(err)
	}
	before, _ := s1.stream.Info(ctx)
	// Again with the same config, and with zero values (existing settings are taken as they are).
	for _, c := range []Config{cfg, {}} {
		s2, err := Provision(ctx, js, c)
		if err != nil {
			t.Fatalf("Provision again with %+v: %v", c, err)
		}
		if s2.partitions != 8 || s2.maxMsgSize != 64<<10 {
			t.Errorf("Provision again: partitions %d max msg size %d, want 8 and %d", s2.partitions, s2.maxMsgSize, 64<<10)
		}
	}
	after, _ := s1.stream.Info(ctx)
	if after.State.Msgs != before.State.Msgs || after.Created != before.Created {
		t.Errorf("Provision again changed the stream: %+v -> %+v", before.State, after.State)
	}
	s3, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if s3.partitions != 8 || s3.maxMsgSize != 64<<10 {
		t.Errorf("Open: partitions %d max msg size %d", s3.partitions, s3.maxMsgSize)
	}
	// Same subject mapping through Open: the session written through s1 is read through s3.
	got, last, err := readAll(ctx, sessionOf(s3, "x"))
	if err != nil || len(got) != 3 || last != 1 {
		t.Errorf("Read through Open: %d events, last %d, %v", len(got), last, err)
	}
	// Asked explicitly and different: refused, naming the setting, the found and the wanted value.
	for _, c := range []struct {
		cfg     Config
		setting string
	}{
		{Config{Partitions: 4}, "agentlog.partitions"},
		{Config{MaxMsgSize: 32 << 10}, "max_msg_size"},
		{Config{DuplicateWindow: 2 * time.Minute}, "duplicate_window"},
	} {
		_, err := Provision(ctx, js, c.cfg)
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), c.setting) || !strings.Contains(err.Error(), wire.StreamName) {
			t.Errorf("Provision(%+v): %v, want ErrIncompatible naming %s", c.cfg, err, c.setting)
		}
	}
	if _, err := Provision(ctx, js, Config{Partitions: 4}); err == nil || !strings.Contains(err.Error(), "is 8, want 4") {
		t.Errorf("partition refusal does not give found and wanted values: %v", err)
	}
}

func TestProvisionRefusesUnusableStream(t *testing.T) {
	base := func() natsjs.StreamConfig {
		return natsjs.StreamConfig{
			Name: wire.StreamName, Subjects: []string{"agentlog.session.>"}, Storage: natsjs.FileStorage,
			DenyDelete: true, AllowAtomicPublish: true, AllowDirect: true,
			Metadata: map[string]string{wire.MetaPartitions: "16", wire.MetaFormat: "1"},
		}
	}
	cases := []struct {
		name    string
		edit    func(c *natsjs.StreamConfig)
		setting string
	}{
		{"usable", func(c *natsjs.StreamConfig) {}, ""},
		{"other subjects", func(c *natsjs.StreamConfig) { c.Subjects = []string{"agentlog.session.>", "other.>"} }, "subjects"},
		{"memory", func(c *natsjs.StreamConfig) { c.Storage = natsjs.MemoryStorage }, "storage"},
		{"deny delete off", func(c *natsjs.StreamConfig) { c.DenyDelete = false }, "deny_delete"},
		{"no atomic", func(c *natsjs.StreamConfig) { c.AllowAtomicPublish = false }, "allow_atomic"},
		{"max age", func(c *natsjs.StreamConfig) { c.MaxAge = time.Hour }, "max_age"},
		{"per subject limit", func(c *natsjs.StreamConfig) { c.MaxMsgsPerSubject = 10 }, "max_msgs_per_subject"},
		{"work queue", func(c *natsjs.StreamConfig) { c.Retention = natsjs.WorkQueuePolicy }, "retention"},
		{"no partitions", func(c *natsjs.StreamConfig) { delete(c.Metadata, wire.MetaPartitions) }, wire.MetaPartitions},
		{"bad partitions", func(c *natsjs.StreamConfig) { c.Metadata[wire.MetaPartitions] = "0" }, wire.MetaPartitions},
		{"other format", func(c *natsjs.StreamConfig) { c.Metadata[wire.MetaFormat] = "2" }, wire.MetaFormat},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			js := testJetStream(t, natsdev.ServerOptions{})
			ctx := testCtx(t)
			sc := base()
			c.edit(&sc)
			if _, err := js.CreateStream(ctx, sc); err != nil {
				t.Fatal(err)
			}
			s, err := Provision(ctx, js, Config{})
			if c.setting == "" {
				if err != nil || s.partitions != 16 {
					t.Fatalf("usable stream refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), c.setting) || !strings.Contains(err.Error(), "stream "+wire.StreamName) {
				t.Fatalf("Provision over %s: %v, want ErrIncompatible naming stream %s and %s", c.name, err, wire.StreamName, c.setting)
			}
			if _, err := Open(ctx, js); !errors.Is(err, ErrIncompatible) {
				t.Errorf("Open over %s: %v, want ErrIncompatible", c.name, err)
			}
			// Never silently updated: the user's stream is as they made it.
			st, err := js.Stream(ctx, wire.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			got := st.CachedInfo().Config
			if got.Storage != sc.Storage || got.DenyDelete != sc.DenyDelete || len(got.Subjects) != len(sc.Subjects) ||
				got.Metadata[wire.MetaPartitions] != sc.Metadata[wire.MetaPartitions] || got.MaxAge != sc.MaxAge {
				t.Errorf("stream changed by a refused Provision: %+v", got)
			}
			// And nothing else was created after the refusal.
			if _, err := js.KeyValue(ctx, wire.SessionsBucket); !errors.Is(err, natsjs.ErrBucketNotFound) {
				t.Errorf("bucket created after a refusal: %v", err)
			}
		})
	}
}

func TestProvisionRefusesUnusableBucket(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{})
	ctx := testCtx(t)
	if _, err := js.CreateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: wire.SessionsBucket, Storage: natsjs.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	_, err := Provision(ctx, js, Config{})
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "KV bucket "+wire.SessionsBucket) || !strings.Contains(err.Error(), "storage") {
		t.Fatalf("Provision over a memory sessions bucket: %v", err)
	}
}

func TestProvisionRefusesOverlappingStream(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{})
	ctx := testCtx(t)
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "OTHER", Subjects: []string{"agentlog.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err := Provision(ctx, js, Config{})
	if err == nil || !strings.Contains(err.Error(), "create stream "+wire.StreamName) {
		t.Fatalf("Provision with an overlapping stream: %v", err)
	}
}

func TestProvisionChecksConfig(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{MaxPayload: 256 << 10})
	ctx := testCtx(t)
	for _, c := range []Config{{Partitions: -1}, {Replicas: 6}, {MaxMsgSize: -5}, {MaxMsgSize: 512}, {MaxMsgSize: 1 << 20}, {DuplicateWindow: -time.Second}} {
		if _, err := Provision(ctx, js, c); err == nil {
			t.Errorf("Provision(%+v) accepted", c)
		}
	}
	// The default max message size is capped at the server's max payload.
	s, err := Provision(ctx, js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.maxMsgSize != 256<<10 {
		t.Errorf("MaxMsgSize %d, want the server max payload %d", s.maxMsgSize, 256<<10)
	}
}

// A put with Nats-Rollup: all on one key purges every key of a bucket that allows rollups: every
// agentlog bucket refuses them, and Provision turns them off on one made before (with nats.go's
// CreateKeyValue, which allows them), after which Open accepts it.
func TestKVBucketsRefuseRollups(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{})
	ctx := testCtx(t)
	// A deployment of an older version: buckets as nats.go makes them.
	for _, cfg := range []natsjs.KeyValueConfig{
		{Bucket: wire.SessionsBucket, History: 1, Storage: natsjs.FileStorage},
		{Bucket: wire.WritersBucket, History: 1, Storage: natsjs.FileStorage, LimitMarkerTTL: time.Minute},
	} {
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Provision(ctx, js, Config{}); err != nil {
		t.Fatalf("Provision over buckets that allow rollups: %v", err)
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatalf("Open after Provision: %v", err)
	}
	for _, b := range kvBuckets {
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.AllowRollup {
			t.Errorf("KV bucket %s allows rollups", b)
		}
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, "victim", []byte("kept")); err != nil {
			t.Fatalf("put into %s: %v", b, err)
		}
		m := nats.NewMsg("$KV." + b + ".attacker")
		m.Header.Set(natsjs.MsgRollup, natsjs.MsgRollupAll)
		if _, err := js.PublishMsg(ctx, m); err == nil || !strings.Contains(err.Error(), "rollup") {
			t.Errorf("KV bucket %s: a Nats-Rollup: all put: %v, want refused", b, err)
		}
		if e, err := kv.Get(ctx, "victim"); err != nil || string(e.Value()) != "kept" {
			t.Errorf("KV bucket %s after the rollup: %v", b, err)
		}
	}
	// Leases still expire by their per-key TTL, and the expired key is taken again.
	ss, err := s.Session("lease-after-rollups")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.AcquireLease(ctx, Lease{Writer: "w1"}, MinLeaseTTL, false); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 10*time.Second, 100*time.Millisecond, func() error {
		_, err := ss.AcquireLease(ctx, Lease{Writer: "w2"}, MinLeaseTTL, false)
		return err
	})

	// Open refuses a bucket that allows them, saying to run provision.
	st, _ := js.Stream(ctx, "KV_"+wire.ProjectionsBucket)
	c := st.CachedInfo().Config
	c.AllowRollup = true
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, js); !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "allow_rollup_hdrs") || !strings.Contains(err.Error(), "agentlog provision") {
		t.Errorf("Open over a bucket that allows rollups: %v", err)
	}
}

// TestProjectionWakes: agentlog_projections republishes each state's headers on
// agentlog.wake.projections.<unit>.<token>, where SubscribeUnit wakes; on a bucket provisioned
// before that (no republish), Open subscribes to the KV subjects and still wakes, and Provision
// adds the republish.
func TestProjectionWakes(t *testing.T) {
	js := testJetStream(t, natsdev.ServerOptions{})
	ctx := testCtx(t)
	// A deployment of an older version: agentlog_projections without the republish.
	if _, err := js.CreateStream(ctx, kvStreamConfig(natsjs.KeyValueConfig{Bucket: wire.ProjectionsBucket, History: 1, Storage: natsjs.FileStorage})); err != nil {
		t.Fatal(err)
	}
	if _, err := Provision(ctx, js, Config{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+wire.ProjectionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if !hasProjectionWakes(st.CachedInfo().Config) {
		t.Fatalf("Provision left agentlog_projections without the republish: %+v", st.CachedInfo().Config.RePublish)
	}
	wakes := func(s *Store, want string) {
		t.Helper()
		got := make(chan string, 4)
		sub, err := s.SubscribeUnit("messages", func(tok string) { got <- tok })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if want != "" && !strings.HasPrefix(sub.Subject, want) {
			t.Errorf("SubscribeUnit subscribed to %s, want %s...", sub.Subject, want)
		}
		if err := js.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.projections.Put(ctx, "messages.tokwake", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case tok := <-got:
			if tok != "tokwake" {
				t.Errorf("woken for %q, want tokwake", tok)
			}
		case <-ctx.Done():
			t.Fatal("no wake-up for a stored state")
		}
	}
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	wakes(s, wire.ProjectionWakePrefix+".")
	// The republish taken off again (a bucket of an older version): Open falls back to the KV subjects.
	c := st.CachedInfo().Config
	c.RePublish = nil
	if _, err := js.UpdateStream(ctx, c); err != nil {
		t.Fatal(err)
	}
	old, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	wakes(old, "$KV."+wire.ProjectionsBucket+".")
}
