package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Policy is the lifecycle policy, kept in the cluster (agentlog_lifecycle, key "policy") so that
// every projector applies the same one. A zero duration is "off".
type Policy struct {
	// ArchiveAfter: a session with no append for this long is archived (0: never).
	ArchiveAfter time.Duration
	// RetainFor: a session whose last activity is older than this is deleted, archived or not
	// (0: never).
	RetainFor time.Duration
}

// DefaultPolicy is the policy of a cluster where none was set: archive after 24 h, retention off.
var DefaultPolicy = Policy{ArchiveAfter: 24 * time.Hour}

// policyValue is Policy as stored: durations as Go duration strings, "off" for 0.
type policyValue struct {
	ArchiveAfter string `json:"archiveAfter"`
	RetainFor    string `json:"retainFor"`
}

// FormatPolicyDuration writes d as the policy stores it ("off" for 0).
func FormatPolicyDuration(d time.Duration) string {
	if d <= 0 {
		return "off"
	}
	return d.String()
}

// ParsePolicyDuration reads a policy duration: "off" (or "0") is 0; else a Go duration (1h30m) or
// a number of days ("30d"), at least a minute.
func ParsePolicyDuration(s string) (time.Duration, error) {
	switch s {
	case "off", "0":
		return 0, nil
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err != nil || fmt.Sprint(days) != n || days < 1 {
			return 0, fmt.Errorf("duration %q: want off, a Go duration (36h) or whole days (30d)", s)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("duration %q: want off, a Go duration (36h) or whole days (30d)", s)
		}
	}
	if d < time.Minute {
		return 0, fmt.Errorf("duration %q: want at least 1m (or off)", s)
	}
	return d, nil
}

// GetPolicy reads the lifecycle policy (DefaultPolicy when none is stored).
func (s *Store) GetPolicy(ctx context.Context) (Policy, error) {
	if s.lifecycle == nil {
		return DefaultPolicy, nil
	}
	e, err := s.lifecycle.Get(ctx, wire.LifecyclePolicyKey)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return DefaultPolicy, nil
	}
	if err != nil {
		return Policy{}, fmt.Errorf("read the lifecycle policy (KV bucket %s): %w", wire.LifecycleBucket, err)
	}
	var v policyValue
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return Policy{}, fmt.Errorf("the lifecycle policy in KV bucket %s does not decode: %w", wire.LifecycleBucket, err)
	}
	var p Policy
	if p.ArchiveAfter, err = ParsePolicyDuration(v.ArchiveAfter); err != nil {
		return Policy{}, fmt.Errorf("the lifecycle policy: archiveAfter: %w", err)
	}
	if p.RetainFor, err = ParsePolicyDuration(v.RetainFor); err != nil {
		return Policy{}, fmt.Errorf("the lifecycle policy: retainFor: %w", err)
	}
	return p, nil
}

// SetPolicy stores the lifecycle policy.
func (s *Store) SetPolicy(ctx context.Context, p Policy) error {
	if s.lifecycle == nil {
		return fmt.Errorf("KV bucket %s is not provisioned", wire.LifecycleBucket)
	}
	b, _ := json.Marshal(policyValue{ArchiveAfter: FormatPolicyDuration(p.ArchiveAfter), RetainFor: FormatPolicyDuration(p.RetainFor)})
	if _, err := s.lifecycle.Put(ctx, wire.LifecyclePolicyKey, b); err != nil {
		return fmt.Errorf("store the lifecycle policy (KV bucket %s): %w", wire.LifecycleBucket, err)
	}
	return nil
}

// Hold is a legal hold on one session: it is neither archived nor deleted while held.
type Hold struct {
	Session string `json:"session"`
	Reason  string `json:"reason"`
	Since   int64  `json:"since"` // Unix ms
}

// ErrNoHold: the session is not held.
var ErrNoHold = errors.New("session is not held")

// Hold puts the session under a legal hold (replacing the reason of an existing one). The session
// must exist (its metadata).
func (ss *Session) Hold(ctx context.Context, reason string) (Hold, error) {
	s, id, tok := ss.s, ss.id, ss.tok
	if strings.TrimSpace(reason) == "" {
		return Hold{}, fmt.Errorf("hold session %q: the reason is blank", id)
	}
	if s.lifecycle == nil {
		return Hold{}, fmt.Errorf("hold session %q: KV bucket %s is not provisioned", id, wire.LifecycleBucket)
	}
	if _, err := ss.Info(ctx); err != nil {
		return Hold{}, err
	}
	h := Hold{Session: id, Reason: reason, Since: time.Now().UnixMilli()}
	b, _ := json.Marshal(h)
	if _, err := s.lifecycle.Put(ctx, wire.HoldKey(tok), b); err != nil {
		return Hold{}, fmt.Errorf("hold session %q (KV bucket %s): %w", id, wire.LifecycleBucket, err)
	}
	return h, nil
}

// ReleaseHold ends the session's hold; a session not held is a wrapped ErrNoHold.
func (ss *Session) ReleaseHold(ctx context.Context) error {
	if _, err := ss.GetHold(ctx); err != nil {
		return err
	}
	if err := ss.s.lifecycle.Delete(ctx, wire.HoldKey(ss.tok)); err != nil {
		return fmt.Errorf("release the hold of session %q (KV bucket %s): %w", ss.id, wire.LifecycleBucket, err)
	}
	return nil
}

// GetHold reads the session's hold; none is a wrapped ErrNoHold.
func (ss *Session) GetHold(ctx context.Context) (Hold, error) {
	return ss.s.getHold(ctx, ss.tok, ss.id)
}

func (s *Store) getHold(ctx context.Context, tok, id string) (Hold, error) {
	if s.lifecycle == nil {
		return Hold{}, fmt.Errorf("session %q: %w", id, ErrNoHold)
	}
	e, err := s.lifecycle.Get(ctx, wire.HoldKey(tok))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return Hold{}, fmt.Errorf("session %q: %w", id, ErrNoHold)
	}
	if err != nil {
		return Hold{}, fmt.Errorf("read the hold of session %q: %w", id, err)
	}
	var h Hold
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return Hold{}, fmt.Errorf("the hold of session %q does not decode: %w", id, err)
	}
	return h, nil
}

// Holds returns every hold, by token.
func (s *Store) Holds(ctx context.Context) (map[string]Hold, error) {
	out := map[string]Hold{}
	if s.lifecycle == nil {
		return out, nil
	}
	msgs, err := s.lastMsgs(ctx, "KV_"+wire.LifecycleBucket, []string{"$KV." + wire.LifecycleBucket + ".hold.*"})
	if err != nil {
		return nil, fmt.Errorf("list the holds (KV bucket %s): %w", wire.LifecycleBucket, err)
	}
	for _, m := range msgs {
		if kvDeleted(m.Header) {
			continue
		}
		var h Hold
		if json.Unmarshal(m.Data, &h) == nil {
			out[strings.TrimPrefix(m.Subject, "$KV."+wire.LifecycleBucket+".hold.")] = h
		}
	}
	return out, nil
}

// HoldsFor returns the holds of the sessions whose tokens are toks (one batched read).
func (s *Store) HoldsFor(ctx context.Context, toks []string) (map[string]Hold, error) {
	out := map[string]Hold{}
	if s.lifecycle == nil || len(toks) == 0 {
		return out, nil
	}
	subjects := make([]string, len(toks))
	for i, t := range toks {
		subjects[i] = "$KV." + wire.LifecycleBucket + "." + wire.HoldKey(t)
	}
	msgs, err := s.lastMsgs(ctx, "KV_"+wire.LifecycleBucket, subjects)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		var h Hold
		if !kvDeleted(m.Header) && json.Unmarshal(m.Data, &h) == nil {
			out[strings.TrimPrefix(m.Subject, "$KV."+wire.LifecycleBucket+".hold.")] = h
		}
	}
	return out, nil
}

// LinkChild records in AGENTLOG_CHILDREN that child's parent is parent (a fork's lineage), so that
// Children finds it without a pass over every header. CreateSession writes it before the
// metadata; a link whose child names another parent (a create that failed) is ignored by readers.
func (s *Store) LinkChild(ctx context.Context, parent, child string) error {
	if s.children == nil {
		return nil
	}
	pt, err := wire.Token(parent)
	if err != nil {
		return nil // an imported header may name a parent that is no session id: nothing to link
	}
	ct, err := wire.Token(child)
	if err != nil {
		return err
	}
	if _, err := s.js.Publish(ctx, wire.ChildSubject(pt, ct), nil); err != nil {
		return fmt.Errorf("session %q: record its parent %q in stream %s: %w", child, parent, wire.ChildrenStream, err)
	}
	return nil
}

// ChildTokens returns the tokens linked as children of the sessions whose tokens are parents
// (parent token -> child tokens, in stream order): one batched read. Links may name children
// that were never created, or were removed: callers check the children's metadata.
func (s *Store) ChildTokens(ctx context.Context, parents []string) (map[string][]string, error) {
	out := map[string][]string{}
	if s.children == nil || len(parents) == 0 {
		return out, nil
	}
	filters := make([]string, len(parents))
	for i, p := range parents {
		filters[i] = wire.ChildrenPrefix + "." + p + ".*"
	}
	msgs, err := s.lastMsgs(ctx, wire.ChildrenStream, filters)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", wire.ChildrenStream, err)
	}
	for _, m := range msgs {
		rest := strings.TrimPrefix(m.Subject, wire.ChildrenPrefix+".")
		p, c, ok := strings.Cut(rest, ".")
		if ok {
			out[p] = append(out[p], c)
		}
	}
	return out, nil
}

// lastMsgsBatch is how many subjects one batched direct get asks for.
const lastMsgsBatch = 1000

// lastMsgs is one or more batched direct gets (multi_last) of the last message of each subject
// of stream matching filters.
func (s *Store) lastMsgs(ctx context.Context, stream string, filters []string) ([]*natsjs.RawStreamMsg, error) {
	var out []*natsjs.RawStreamMsg
	for len(filters) > 0 {
		n := min(len(filters), lastMsgsBatch)
		msgs, err := s.getDirect(ctx, stream, map[string]any{"multi_last": filters[:n], "batch": directBatch})
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
		filters = filters[n:]
	}
	return out, nil
}

// ensureLifecycle returns the archive stream, the children stream and the lifecycle bucket,
// creating them where missing (with the session stream's replicas and max message size) and
// checking them where they exist.
func ensureLifecycle(ctx context.Context, js natsjs.JetStream, replicas int, maxMsgSize int32) (archive, children natsjs.Stream, lifecycle natsjs.KeyValue, err error) {
	perSubject := func(name, prefix, desc string) natsjs.StreamConfig {
		return natsjs.StreamConfig{
			Name: name, Description: desc, Subjects: []string{prefix + ".>"},
			Retention: natsjs.LimitsPolicy, MaxConsumers: -1, MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: 1,
			Discard: natsjs.DiscardOld, Storage: natsjs.FileStorage, Replicas: replicas, AllowDirect: true,
			MaxMsgSize: maxMsgSize, DenyDelete: true,
		}
	}
	check := func(name, prefix string) func(natsjs.StreamConfig) error {
		return func(c natsjs.StreamConfig) error {
			what := "stream " + name
			switch {
			case len(c.Subjects) != 1 || c.Subjects[0] != prefix+".>":
				return incompatible(what, "subjects", c.Subjects, []string{prefix + ".>"})
			case c.MaxMsgsPerSubject != 1:
				return incompatible(what, "max_msgs_per_subject", c.MaxMsgsPerSubject, 1)
			case c.MaxAge != 0 || c.MaxBytes > 0 || c.MaxMsgs > 0:
				return incompatible(what, "limits (would drop archives)", fmt.Sprintf("max_age %s, max_bytes %d, max_msgs %d", c.MaxAge, c.MaxBytes, c.MaxMsgs), "none")
			case c.Storage != natsjs.FileStorage:
				return incompatible(what, "storage", c.Storage, natsjs.FileStorage)
			case c.Sealed || c.DenyPurge:
				return incompatible(what, "sealed or deny_purge", true, false)
			}
			return nil
		}
	}
	archive, err = ensureStream(ctx, js, wire.ArchiveStream,
		perSubject(wire.ArchiveStream, wire.ArchivePrefix, "agentlog archived sessions: one head per session (agentlog.archive.<token>), parts of larger archives; zstd payloads"),
		check(wire.ArchiveStream, wire.ArchivePrefix))
	if err != nil {
		return nil, nil, nil, err
	}
	children, err = ensureStream(ctx, js, wire.ChildrenStream,
		perSubject(wire.ChildrenStream, wire.ChildrenPrefix, "agentlog fork lineage: one empty message per child, agentlog.children.<parent token>.<child token>"),
		check(wire.ChildrenStream, wire.ChildrenPrefix))
	if err != nil {
		return nil, nil, nil, err
	}
	lifecycle, err = ensureKV(ctx, js, natsjs.KeyValueConfig{
		Bucket: wire.LifecycleBucket, Description: "agentlog lifecycle policy (key policy) and legal holds (hold.<token>)",
		History: 1, Storage: natsjs.FileStorage, Replicas: replicas,
	}, func(c natsjs.StreamConfig) error {
		if c.MaxAge != 0 {
			return incompatible("KV bucket "+wire.LifecycleBucket, "ttl (would expire holds)", c.MaxAge, "0 (none)")
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return archive, children, lifecycle, nil
}

// SessionEntries reads the metadata of the sessions whose tokens are toks (batched direct gets;
// a stale answer on R>1 may miss one just created): token -> metadata, without the sessions that
// have none or are being removed.
func (s *Store) SessionEntries(ctx context.Context, toks []string) (map[string]SessionInfo, error) {
	out := map[string]SessionInfo{}
	if len(toks) == 0 {
		return out, nil
	}
	prefix := "$KV." + wire.SessionsBucket + "."
	subjects := make([]string, len(toks))
	for i, t := range toks {
		subjects[i] = prefix + t
	}
	msgs, err := s.lastMsgs(ctx, "KV_"+wire.SessionsBucket, subjects)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if kvDeleted(m.Header) || m.Header.Get(wire.DeletingHeader) != "" || m.Header.Get(wire.IncompleteHeader) != "" {
			continue
		}
		tok := strings.TrimPrefix(m.Subject, prefix)
		id, err := wire.IDFromToken(tok)
		if err != nil {
			continue
		}
		var h session.Header
		if json.Unmarshal(m.Data, &h) != nil || h.ID != id {
			continue
		}
		h.Raw = append(json.RawMessage(nil), m.Data...)
		out[tok] = SessionInfo{Header: h, Incarnation: m.Header.Get(wire.IncarnationHeader), Revision: m.Sequence}
	}
	return out, nil
}

// lookupLifecycle looks up the lifecycle's streams and bucket, nil for those it cannot find.
func lookupLifecycle(ctx context.Context, js natsjs.JetStream) (archive, children natsjs.Stream, lifecycle natsjs.KeyValue) {
	if st, err := js.Stream(ctx, wire.ArchiveStream); err == nil {
		archive = st
	}
	if st, err := js.Stream(ctx, wire.ChildrenStream); err == nil {
		children = st
	}
	if kv, err := js.KeyValue(ctx, wire.LifecycleBucket); err == nil {
		lifecycle = kv
	}
	return archive, children, lifecycle
}

// RebuildLineage writes the lineage link (LinkChild) of every session whose header names a
// parentSession, from a pass over agentlog_sessions: the lineage index rebuilt from the metadata
// alone (sessions created before the index existed, or a link lost). It returns the links written.
func (s *Store) RebuildLineage(ctx context.Context) (int, error) {
	type link struct{ parent, child string }
	var links []link
	err := s.ScanSessions(ctx, false, nil, func(e SessionEntry) error {
		if !bytes.Contains(e.Value, []byte(`"parentSession"`)) || e.Header.Get(wire.DeletingHeader) != "" {
			return nil
		}
		var h struct {
			ID            string `json:"id"`
			ParentSession string `json:"parentSession"`
		}
		if json.Unmarshal(e.Value, &h) == nil && h.ParentSession != "" && h.ID != "" {
			links = append(links, link{h.ParentSession, h.ID})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rebuild the lineage index: read KV bucket %s: %w", wire.SessionsBucket, err)
	}
	for i, l := range links {
		if err := s.LinkChild(ctx, l.parent, l.child); err != nil {
			return i, err
		}
	}
	return len(links), nil
}
