package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The defaults Provision applies (the names it creates are wire's: wire.StreamName, ...).
const (
	DefaultReplicas        = 1
	DefaultMaxMsgSize      = int32(1 << 20) // bytes (1 MiB), headers plus body of one record
	DefaultDuplicateWindow = 2 * time.Minute

	// Limits of the AGENTLOG_ERRORS stream (agent/error reports, kept for inspection only).
	errorsMaxAge            = 7 * 24 * time.Hour
	errorsMaxMsgsPerSubject = 1000
	errorsMaxBytes          = 256 << 20 // bytes
)

// ErrIncompatible is returned (wrapped) when an existing stream or KV bucket has a setting that
// agentlog cannot work with. The message names the stream or bucket, the setting, the value found
// and the value wanted. agentlog never updates an existing stream or bucket by itself.
var ErrIncompatible = errors.New("existing stream or bucket cannot be used")

// ErrNotProvisioned is returned (wrapped) by Open when the stream or a bucket does not exist.
var ErrNotProvisioned = errors.New("not provisioned")

// Config is the provisioning configuration. Zero values take defaults: Partitions 16, Replicas 1,
// MaxMsgSize 1 MiB (bytes), DuplicateWindow 2 min.
//
// A non-zero value is "asked explicitly": an existing stream or bucket with a different value is
// refused (ErrIncompatible) rather than silently used. With a zero value the existing setting is
// taken as it is.
type Config struct {
	Partitions      int
	Replicas        int
	MaxMsgSize      int32
	DuplicateWindow time.Duration
	// Compression of a new AGENTLOG stream: "s2" (the default) or "none". An existing stream
	// keeps its own (archives are compressed either way).
	Compression string
}

// Provision creates the AGENTLOG stream, the agentlog_sessions, agentlog_projections and
// agentlog_writers KV buckets, the AGENTLOG_ERRORS stream, and the projectors' partition consumers
// and members bucket (ProjectorConsumerConfig) where missing, and checks them where
// they exist: one it cannot use is a wrapped ErrIncompatible naming the setting, and is never
// changed. An explicit MaxMsgSize above the server's max payload is refused; the default is capped
// at it. The settings and the refusals: ARCHITECTURE.md, "Provisioning".
func Provision(ctx context.Context, js natsjs.JetStream, cfg Config) (*Store, error) {
	w, err := wantFromConfig(js, cfg)
	if err != nil {
		return nil, err
	}

	stream, err := ensureStream(ctx, js, wire.StreamName, w.sessionStreamConfig(), func(c natsjs.StreamConfig) error {
		_, err := checkSessionStream(c, w)
		return err
	})
	if err != nil {
		return nil, err
	}
	found, err := checkSessionStream(stream.CachedInfo().Config, w)
	if err != nil {
		return nil, err
	}
	if !w.explicitReplicas {
		// What is missing (a bucket lost, or added by a later version) is created with the
		// session stream's replicas: provision again without --replicas on R3 makes R3.
		w.replicas = stream.CachedInfo().Config.Replicas
	}
	if err := denyRollups(ctx, js); err != nil {
		return nil, err
	}
	if err := addProjectionWakes(ctx, js); err != nil {
		return nil, err
	}

	sessions, err := ensureBucket(ctx, js, wire.SessionsBucket, w, "agentlog session metadata (header per session token)")
	if err != nil {
		return nil, err
	}
	projections, err := ensureBucket(ctx, js, wire.ProjectionsBucket, w, "agentlog projection states and checkpoints (<unit>.<token>)")
	if err != nil {
		return nil, err
	}
	if _, err := ensureStream(ctx, js, wire.ErrorsStream, w.errorsStreamConfig(), checkErrorsStream); err != nil {
		return nil, err
	}
	st, err := newStore(ctx, js, stream, found, sessions, projections, true)
	if err != nil {
		return nil, err
	}
	if err := st.ensureProjector(ctx, stream.CachedInfo().Config.Replicas); err != nil {
		return nil, err
	}
	return st, nil
}

// Open attaches to an already provisioned agentlog (reading the partition count from the stream
// metadata); it fails with a clear error if it is not provisioned.
//
// A missing stream or bucket is ErrNotProvisioned (wrapped, naming it); an existing one that
// Provision would refuse is ErrIncompatible (wrapped). Open changes no existing stream or bucket;
// the things it may create are the lease bucket agentlog_writers and the blob stream
// AGENTLOG_BLOBS, when missing (deployments provisioned before they existed) and the credentials
// may; one that is not write-once is ErrIncompatible.
func Open(ctx context.Context, js natsjs.JetStream) (*Store, error) {
	w, err := wantFromConfig(js, Config{})
	if err != nil {
		return nil, err
	}
	stream, err := openStream(ctx, js, wire.StreamName)
	if err != nil {
		return nil, err
	}
	found, err := checkSessionStream(stream.CachedInfo().Config, w)
	if err != nil {
		return nil, err
	}
	kvs := make([]natsjs.KeyValue, 2)
	wakes := false
	for i, bucket := range []string{wire.SessionsBucket, wire.ProjectionsBucket} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			if errors.Is(err, natsjs.ErrBucketNotFound) {
				return nil, fmt.Errorf("%w: KV bucket %s does not exist", ErrNotProvisioned, bucket)
			}
			return nil, fmt.Errorf("look up KV bucket %s: %w", bucket, err)
		}
		c, err := checkKVStream(ctx, js, bucket, w.bucketCheck(bucket))
		if err != nil {
			return nil, err
		}
		if bucket == wire.ProjectionsBucket {
			wakes = hasProjectionWakes(c)
		}
		kvs[i] = kv
	}
	es, err := openStream(ctx, js, wire.ErrorsStream)
	if err != nil {
		return nil, err
	}
	if err := checkErrorsStream(es.CachedInfo().Config); err != nil {
		return nil, err
	}
	return newStore(ctx, js, stream, found, kvs[0], kvs[1], wakes)
}

// openStream looks up an existing stream: a missing one is a wrapped ErrNotProvisioned.
func openStream(ctx context.Context, js natsjs.JetStream, name string) (natsjs.Stream, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: stream %s does not exist", ErrNotProvisioned, name)
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", name, err)
	}
	return s, nil
}

// newStore completes a Store on the checked AGENTLOG stream and KV buckets: it creates the lease
// bucket agentlog_writers and the blob stream AGENTLOG_BLOBS where missing (deployments
// provisioned before they existed get them here), with the stream's replicas.
func newStore(ctx context.Context, js natsjs.JetStream, stream natsjs.Stream, found foundStream, sessions, projections natsjs.KeyValue, projectionWakes bool) (*Store, error) {
	replicas := stream.CachedInfo().Config.Replicas
	writers, err := ensureWritersBucket(ctx, js, replicas)
	if err != nil {
		return nil, err
	}
	blobStream, err := ensureStream(ctx, js, wire.BlobStream, blobStreamConfig(replicas, stream.CachedInfo().Config.Compression), checkBlobStream)
	if errors.Is(err, ErrIncompatible) {
		return nil, err
	}
	if err != nil {
		// Credentials that may not create it (an agent's, on a deployment provisioned before it
		// existed): without it, events larger than a record are refused and format 3 records
		// cannot be read (rule record-blob), each with an error saying so.
		blobStream = nil
	}
	archive, children, lifecycle, err := ensureLifecycle(ctx, js, replicas, found.maxMsgSize)
	if err != nil {
		if errors.Is(err, ErrIncompatible) {
			return nil, err
		}
		// Credentials that may not create them (an agent's, on a deployment provisioned before
		// they existed): use what exists, and go without the rest (no archived reads).
		archive, children, lifecycle = lookupLifecycle(ctx, js)
	}
	return &Store{
		projectionWakes: projectionWakes,
		mux:             &directMux{},
		archive:         archive,
		children:        children,
		lifecycle:       lifecycle,
		js:              js,
		stream:          stream,
		sessions:        sessions,
		projections:     projections,
		writers:         writers,
		blobStream:      blobStream,
		partitions:      found.partitions,
		maxMsgSize:      found.maxMsgSize,
	}, nil
}

// want is the resolved configuration plus which settings were asked explicitly.
type want struct {
	partitions, replicas int
	maxMsgSize           int32
	dupWindow            time.Duration
	maxPayload           int64 // the server's max payload, bytes
	explicitPartitions   bool
	explicitReplicas     bool
	explicitMaxMsgSize   bool
	explicitDupWindow    bool
	compression          natsjs.StoreCompression
}

func wantFromConfig(js natsjs.JetStream, cfg Config) (want, error) {
	w := want{
		partitions: cfg.Partitions, replicas: cfg.Replicas, maxMsgSize: cfg.MaxMsgSize, dupWindow: cfg.DuplicateWindow,
		explicitPartitions: cfg.Partitions != 0, explicitReplicas: cfg.Replicas != 0,
		explicitMaxMsgSize: cfg.MaxMsgSize != 0, explicitDupWindow: cfg.DuplicateWindow != 0,
	}
	if js == nil || js.Conn() == nil {
		return w, errors.New("provision: no JetStream connection")
	}
	w.maxPayload = js.Conn().MaxPayload()
	if w.maxPayload <= 0 {
		return w, errors.New("provision: the connection has no server max payload yet (not connected?)")
	}
	switch {
	case cfg.Partitions < 0 || cfg.Partitions > wire.MaxPartitions:
		return w, fmt.Errorf("provision: partitions %d, want 1..%d (0 for the default %d)", cfg.Partitions, wire.MaxPartitions, wire.DefaultPartitions)
	case cfg.Replicas < 0 || cfg.Replicas > 5:
		return w, fmt.Errorf("provision: replicas %d, want 1..5 (0 for the default %d)", cfg.Replicas, DefaultReplicas)
	case cfg.MaxMsgSize < 0:
		return w, fmt.Errorf("provision: max message size %d bytes, want > 0 (0 for the default %d)", cfg.MaxMsgSize, DefaultMaxMsgSize)
	case cfg.MaxMsgSize > 0 && int64(cfg.MaxMsgSize) > w.maxPayload:
		return w, fmt.Errorf("provision: max message size %d bytes is above the server's max_payload %d bytes", cfg.MaxMsgSize, w.maxPayload)
	case cfg.MaxMsgSize > 0 && cfg.MaxMsgSize < minMaxMsgSize:
		return w, fmt.Errorf("provision: max message size %d bytes, want at least %d", cfg.MaxMsgSize, minMaxMsgSize)
	case cfg.DuplicateWindow < 0:
		return w, fmt.Errorf("provision: duplicate window %s, want > 0 (0 for the default %s)", cfg.DuplicateWindow, DefaultDuplicateWindow)
	}
	w.partitions = cmp.Or(w.partitions, wire.DefaultPartitions)
	w.replicas = cmp.Or(w.replicas, DefaultReplicas)
	if w.maxMsgSize == 0 {
		w.maxMsgSize = int32(min(int64(DefaultMaxMsgSize), w.maxPayload))
	}
	w.dupWindow = cmp.Or(w.dupWindow, DefaultDuplicateWindow)
	switch cfg.Compression {
	case "", "s2":
		w.compression = natsjs.S2Compression
	case "none":
		w.compression = natsjs.NoCompression
	default:
		return w, fmt.Errorf("provision: compression %q, want s2 or none", cfg.Compression)
	}
	return w, nil
}

// minMaxMsgSize keeps room for the record headers plus at least a small event.
const minMaxMsgSize = 1024

func (w want) sessionStreamConfig() natsjs.StreamConfig {
	c := w.streamConfig(wire.StreamName, wire.SubjectPrefix, "agentlog session logs: one subject per session, one record (1..K events) per message")
	c.MaxBytes, c.MaxMsgsPerSubject = -1, -1
	c.MaxMsgSize = w.maxMsgSize
	c.Duplicates = w.dupWindow
	c.DenyDelete = true
	c.DenyPurge = false // Session.Remove purges a session's subject
	c.Compression = w.compression
	c.AllowAtomicPublish = true
	c.Metadata = map[string]string{wire.MetaPartitions: strconv.Itoa(w.partitions), wire.MetaFormat: wire.StoreFormat}
	return c
}

func (w want) errorsStreamConfig() natsjs.StreamConfig {
	c := w.streamConfig(wire.ErrorsStream, wire.ErrorsPrefix, "agentlog agent/error reports (kept for inspection, never session events)")
	c.MaxBytes, c.MaxAge, c.MaxMsgsPerSubject = errorsMaxBytes, errorsMaxAge, errorsMaxMsgsPerSubject
	return c
}

// streamConfig is what both streams share: subjects prefix.>, limits retention with no consumer
// or message count limit (discard old), file storage, w's replicas, direct get.
func (w want) streamConfig(name, prefix, description string) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name:         name,
		Description:  description,
		Subjects:     []string{prefix + ".>"},
		Retention:    natsjs.LimitsPolicy,
		MaxConsumers: -1,
		MaxMsgs:      -1,
		Discard:      natsjs.DiscardOld,
		Storage:      natsjs.FileStorage,
		Replicas:     w.replicas,
		AllowDirect:  true,
	}
}

// foundStream is what Open and Provision read back from an acceptable AGENTLOG stream.
type foundStream struct {
	partitions int
	maxMsgSize int32 // effective limit, bytes
}

func incompatible(what, setting string, found, wanted any) error {
	return fmt.Errorf("%w: %s: setting %s is %v, want %v (agentlog never changes an existing stream or bucket: fix it with the nats CLI, or remove it)",
		ErrIncompatible, what, setting, found, wanted)
}

// checkSessionStream validates an existing AGENTLOG config against w.
func checkSessionStream(c natsjs.StreamConfig, w want) (foundStream, error) {
	what := "stream " + wire.StreamName
	var f foundStream
	wantSubj := []string{wire.SubjectPrefix + ".>"}
	switch {
	case !slices.Equal(c.Subjects, wantSubj):
		return f, incompatible(what, "subjects", c.Subjects, wantSubj)
	case c.Storage != natsjs.FileStorage:
		return f, incompatible(what, "storage", c.Storage, natsjs.FileStorage)
	case c.Retention != natsjs.LimitsPolicy:
		return f, incompatible(what, "retention", c.Retention, natsjs.LimitsPolicy)
	case !c.DenyDelete:
		return f, incompatible(what, "deny_delete", false, true)
	case !c.AllowAtomicPublish:
		return f, incompatible(what, "allow_atomic (atomic batch publish, needed for split records)", false, true)
	case c.MaxAge != 0:
		return f, incompatible(what, "max_age (would expire session events)", c.MaxAge, "0 (unlimited)")
	case c.MaxMsgs > 0:
		return f, incompatible(what, "max_msgs (would drop session events)", c.MaxMsgs, "-1 (unlimited)")
	case c.MaxBytes > 0:
		return f, incompatible(what, "max_bytes (would drop session events)", c.MaxBytes, "-1 (unlimited)")
	case c.MaxMsgsPerSubject > 0:
		return f, incompatible(what, "max_msgs_per_subject (would drop session events)", c.MaxMsgsPerSubject, "-1 (unlimited)")
	case c.Sealed:
		return f, incompatible(what, "sealed", true, false)
	case c.NoAck:
		return f, incompatible(what, "no_ack", true, false)
	case c.Mirror != nil:
		return f, incompatible(what, "mirror", c.Mirror.Name, "none")
	case c.AllowMsgCounter:
		return f, incompatible(what, "allow_msg_counter", true, false)
	case c.SubjectTransform != nil:
		return f, incompatible(what, "subject_transform", c.SubjectTransform.Source+" -> "+c.SubjectTransform.Destination, "none")
	}
	ps, ok := c.Metadata[wire.MetaPartitions]
	n, err := strconv.Atoi(ps)
	if !ok || err != nil || n < 1 || n > wire.MaxPartitions || strconv.Itoa(n) != ps {
		return f, incompatible(what, "metadata "+wire.MetaPartitions, strconv.Quote(ps), fmt.Sprintf("a partition count 1..%d", wire.MaxPartitions))
	}
	if w.explicitPartitions && n != w.partitions {
		return f, incompatible(what, "metadata "+wire.MetaPartitions+" (fixed at creation)", n, w.partitions)
	}
	if got := c.Metadata[wire.MetaFormat]; got != wire.StoreFormat {
		return f, incompatible(what, "metadata "+wire.MetaFormat, strconv.Quote(got), strconv.Quote(wire.StoreFormat))
	}
	if w.explicitReplicas && c.Replicas != w.replicas {
		return f, incompatible(what, "replicas", c.Replicas, w.replicas)
	}
	if w.explicitMaxMsgSize && c.MaxMsgSize != w.maxMsgSize {
		return f, incompatible(what, "max_msg_size (bytes)", c.MaxMsgSize, w.maxMsgSize)
	}
	if w.explicitDupWindow && c.Duplicates != w.dupWindow {
		return f, incompatible(what, "duplicate_window", c.Duplicates, w.dupWindow)
	}
	f.partitions = n
	limit := w.maxPayload
	if c.MaxMsgSize > 0 && int64(c.MaxMsgSize) < limit {
		limit = int64(c.MaxMsgSize)
	}
	if limit < minMaxMsgSize {
		return f, incompatible(what, "max_msg_size (bytes, or the server's max_payload)", limit, fmt.Sprintf("at least %d", minMaxMsgSize))
	}
	f.maxMsgSize = int32(limit)
	return f, nil
}

func checkErrorsStream(c natsjs.StreamConfig) error {
	what := "stream " + wire.ErrorsStream
	wantSubj := []string{wire.ErrorsPrefix + ".>"}
	switch {
	case !slices.Equal(c.Subjects, wantSubj):
		return incompatible(what, "subjects", c.Subjects, wantSubj)
	case c.Sealed:
		return incompatible(what, "sealed", true, false)
	case c.NoAck:
		return incompatible(what, "no_ack", true, false)
	case c.Mirror != nil:
		return incompatible(what, "mirror", c.Mirror.Name, "none")
	}
	return nil
}

// ensureStream returns the stream name, creating it from create when it does not exist. An
// existing stream (including one created concurrently) is checked with check, never updated.
func ensureStream(ctx context.Context, js natsjs.JetStream, name string, create natsjs.StreamConfig, check func(natsjs.StreamConfig) error) (natsjs.Stream, error) {
	s, err := js.Stream(ctx, name)
	if err == nil {
		if err := check(s.CachedInfo().Config); err != nil {
			return nil, err
		}
		return s, nil
	}
	if !errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", name, err)
	}
	s, err = js.CreateStream(ctx, create)
	if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
		// Created concurrently by someone else, with another config: check theirs.
		if s, err = js.Stream(ctx, name); err == nil {
			if err := check(s.CachedInfo().Config); err != nil {
				return nil, err
			}
			return s, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s (subjects %v): %w", name, create.Subjects, err)
	}
	return s, nil
}

// ensureBucket returns the KV bucket, creating it when missing; an existing one is checked.
func ensureBucket(ctx context.Context, js natsjs.JetStream, bucket string, w want, desc string) (natsjs.KeyValue, error) {
	cfg := natsjs.KeyValueConfig{
		Bucket:      bucket,
		Description: desc,
		History:     1,
		Storage:     natsjs.FileStorage,
		Replicas:    w.replicas,
	}
	if bucket == wire.ProjectionsBucket {
		cfg.RePublish = projectionWakes()
	}
	return ensureKV(ctx, js, cfg, w.bucketCheck(bucket))
}

// projectionWakes is the republish of agentlog_projections: the headers of each state stored, on
// wire.ProjectionWakePrefix.<unit>.<token>.
func projectionWakes() *natsjs.RePublish {
	return &natsjs.RePublish{Source: wire.KVSubject(wire.ProjectionsBucket, ">"), Destination: wire.ProjectionWakePrefix + ".>", HeadersOnly: true}
}

// hasProjectionWakes reports whether c (the stream of agentlog_projections) republishes as
// projectionWakes says.
func hasProjectionWakes(c natsjs.StreamConfig) bool {
	r, want := c.RePublish, projectionWakes()
	return r != nil && r.Source == want.Source && r.Destination == want.Destination && r.HeadersOnly
}

// addProjectionWakes adds the republish (projectionWakes) to an existing agentlog_projections that
// has none: deployments provisioned before it. (A Store opened on one without it subscribes to the
// bucket's own subjects, which a projector in an account of its own does not reach.)
func addProjectionWakes(ctx context.Context, js natsjs.JetStream) error {
	st, err := js.Stream(ctx, "KV_"+wire.ProjectionsBucket)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up the stream of KV bucket %s: %w", wire.ProjectionsBucket, err)
	}
	c := st.CachedInfo().Config
	if hasProjectionWakes(c) {
		return nil
	}
	c.RePublish = projectionWakes()
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return fmt.Errorf("republish the states of KV bucket %s on %s.> (wake-ups): %w", wire.ProjectionsBucket, wire.ProjectionWakePrefix, err)
	}
	return nil
}

// ensureKV returns the KV bucket cfg.Bucket, creating it when missing (kvStreamConfig: no rollup
// headers). An existing one (including one created concurrently) is checked (checkKVStream),
// never updated.
func ensureKV(ctx context.Context, js natsjs.JetStream, cfg natsjs.KeyValueConfig, check func(natsjs.StreamConfig) error) (natsjs.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		_, err = js.CreateStream(ctx, kvStreamConfig(cfg))
		if err != nil && !errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) { // created concurrently: check theirs below
			return nil, fmt.Errorf("create KV bucket %s: %w", cfg.Bucket, err)
		}
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("look up KV bucket %s: %w", cfg.Bucket, err)
	}
	if _, err := checkKVStream(ctx, js, cfg.Bucket, check); err != nil {
		return nil, err
	}
	return kv, nil
}

// kvStreamConfig is the stream nats.go's CreateKeyValue makes of cfg, except that it refuses
// rollup headers (AllowRollup false), and that a LimitMarkerTTL allows per-key TTLs but leaves no
// marker when a key expires (the server keeps such markers only with rollups allowed): a put with Nats-Rollup: all on any key purges every other
// key of the bucket, and every role that may put one key may send it. agentlog removes keys with
// delete markers (history 1: the marker replaces the value), never with KV purges.
func kvStreamConfig(cfg natsjs.KeyValueConfig) natsjs.StreamConfig {
	history := int64(max(cfg.History, 1))
	dups := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dups {
		dups = cfg.TTL
	}
	sc := natsjs.StreamConfig{
		Name:              "KV_" + cfg.Bucket,
		Description:       cfg.Description,
		Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: history,
		MaxBytes:          -1,
		MaxAge:            cfg.TTL,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           cfg.Storage,
		Replicas:          max(cfg.Replicas, 1),
		AllowRollup:       false,
		DenyDelete:        true,
		Duplicates:        dups,
		AllowDirect:       true,
		Discard:           natsjs.DiscardNew,
	}
	sc.RePublish = cfg.RePublish
	if cfg.LimitMarkerTTL != 0 {
		// Per-key TTLs (Nats-TTL) without the markers of expired keys: the server allows
		// subject delete markers only with rollups.
		sc.AllowMsgTTL = true
	}
	return sc
}

// kvBuckets are the KV buckets agentlog provisions, each written by some role that is not the
// operator.
var kvBuckets = []string{wire.SessionsBucket, wire.ProjectionsBucket, wire.WritersBucket, wire.LifecycleBucket, ProjectorMembersBucket}

// checkNoRollups refuses a bucket's stream that allows rollup headers (see kvStreamConfig), as
// ErrIncompatible saying to run agentlog provision, which turns them off.
func checkNoRollups(bucket string, c natsjs.StreamConfig) error {
	if c.AllowRollup {
		return fmt.Errorf("%w (run agentlog provision: it turns them off)", incompatible("KV bucket "+bucket, "allow_rollup_hdrs (a put with Nats-Rollup: all on any key would purge every key)", true, false))
	}
	return nil
}

// denyRollups turns rollup headers off (AllowRollup false, a stream update) on every existing
// agentlog KV bucket that allows them: deployments provisioned before kvStreamConfig.
func denyRollups(ctx context.Context, js natsjs.JetStream) error {
	for _, b := range kvBuckets {
		st, err := js.Stream(ctx, "KV_"+b)
		if errors.Is(err, natsjs.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("look up the stream of KV bucket %s: %w", b, err)
		}
		c := st.CachedInfo().Config
		if !c.AllowRollup {
			continue
		}
		c.AllowRollup = false
		c.SubjectDeleteMarkerTTL = 0 // the server turns rollups back on for it
		if _, err := js.UpdateStream(ctx, c); err != nil {
			return fmt.Errorf("turn rollup headers off on KV bucket %s (a put with Nats-Rollup: all purges every key): %w", b, err)
		}
	}
	return nil
}

// checkKVStream checks the config of the stream behind KV bucket bucket: no rollups
// (checkNoRollups), then check.
func checkKVStream(ctx context.Context, js natsjs.JetStream, bucket string, check func(natsjs.StreamConfig) error) (natsjs.StreamConfig, error) {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return natsjs.StreamConfig{}, fmt.Errorf("look up the stream of KV bucket %s: %w", bucket, err)
	}
	c := s.CachedInfo().Config
	if err := checkNoRollups(bucket, c); err != nil {
		return c, err
	}
	return c, check(c)
}

// bucketCheck validates the stream behind agentlog_sessions or agentlog_projections.
func (w want) bucketCheck(bucket string) func(natsjs.StreamConfig) error {
	what := "KV bucket " + bucket
	return func(c natsjs.StreamConfig) error {
		switch {
		case c.Storage != natsjs.FileStorage:
			return incompatible(what, "storage", c.Storage, natsjs.FileStorage)
		case bucket == wire.SessionsBucket && c.MaxAge != 0:
			return incompatible(what, "ttl (would expire session metadata)", c.MaxAge, "0 (none)")
		case w.explicitReplicas && c.Replicas != w.replicas:
			return incompatible(what, "replicas", c.Replicas, w.replicas)
		case c.Sealed:
			return incompatible(what, "sealed", true, false)
		}
		return nil
	}
}
