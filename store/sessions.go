package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrSessionExists is returned (wrapped) by CreateSession for an id already in agentlog_sessions.
var ErrSessionExists = errors.New("session already exists")

// ErrSessionNotFound is returned (wrapped) when a session has no metadata.
var ErrSessionNotFound = errors.New("session not found")

// CreateOpt is an option of Store.CreateSession.
type CreateOpt func(*createOpts) error

type createOpts struct {
	incarnation string
	completeAt  int64 // WithIncomplete: 0 for none
}

// WithIncomplete marks the new session's entry with wire.IncompleteHeader: it is read as not found
// (ErrSessionIncomplete) until its log holds n events (seqs 0..n-1). For a fork child whose seed
// is written as several records outside an atomic batch. n must be > 0.
func WithIncomplete(n int64) CreateOpt {
	return func(o *createOpts) error {
		if n <= 0 {
			return fmt.Errorf("incomplete until %d events: want > 0", n)
		}
		o.completeAt = n
		return nil
	}
}

// WithIncarnation gives the new session the incarnation inc (see wire.CheckIncarnation) instead of a
// fresh wire.NewIncarnation.
func WithIncarnation(inc string) CreateOpt {
	return func(o *createOpts) error {
		if err := wire.CheckIncarnation(inc); err != nil {
			return err
		}
		o.incarnation = inc
		return nil
	}
}

// CreateSession stores the header in agentlog_sessions with a KV create.
//
// The key is wire.Token(h.ID); the value is the session's dsh JSONL header line,
// {"type":"session","version":0,"id":…,"createdAt":…,…}: h.Raw as read from a file (so fields we do
// not model survive) when it names the same id, else the fields of h in the reference's order. The
// entry carries the session's incarnation in the message header wire.IncarnationHeader (WithIncarnation,
// default wire.NewIncarnation()). It writes no event. An id that already has metadata is a wrapped
// ErrSessionExists naming the id; nothing is changed.
func (s *Store) CreateSession(ctx context.Context, h session.Header, opts ...CreateOpt) error {
	tok, err := wire.Token(h.ID)
	if err != nil {
		return err
	}
	var o createOpts
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return fmt.Errorf("create session %q: %w", h.ID, err)
		}
	}
	if o.incarnation == "" {
		o.incarnation = wire.NewIncarnation()
	}
	val, err := headerValue(h)
	if err != nil {
		return fmt.Errorf("session %q: encode header: %w", h.ID, err)
	}
	// A fork's lineage link first: a child is never without it (a link whose create then fails
	// names a child of another parent, or none, and readers skip it).
	if h.ParentSession != "" {
		if err := s.LinkChild(ctx, h.ParentSession, h.ID); err != nil {
			return err
		}
	}
	// A KV create, by hand so that the entry carries the incarnation header: expect no entry, or
	// (re-create after Session.Delete) the delete marker that is the key's last entry.
	subject := wire.KVSubject(wire.SessionsBucket, tok)
	expect := uint64(0)
	for try := 0; ; try++ {
		m := &nats.Msg{Subject: KVPutSubject(s.js, wire.SessionsBucket, tok), Header: nats.Header{wire.IncarnationHeader: []string{o.incarnation}}, Data: val}
		if o.completeAt > 0 {
			m.Header.Set(wire.IncompleteHeader, strconv.FormatInt(o.completeAt, 10))
		}
		_, err = s.js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(expect))
		if err == nil || try > 0 || !IsWrongLastSequence(err) {
			break
		}
		last, gerr := s.leaderGetFrom(ctx, "KV_"+wire.SessionsBucket, map[string]any{"last_by_subj": subject})
		if gerr != nil || !kvDeleted(last.Header) {
			return fmt.Errorf("create session %q: %w (key %s in KV bucket %s)", h.ID, ErrSessionExists, tok, wire.SessionsBucket)
		}
		expect = last.Sequence
	}
	if err != nil {
		if IsWrongLastSequence(err) {
			return fmt.Errorf("create session %q: %w (key %s in KV bucket %s)", h.ID, ErrSessionExists, tok, wire.SessionsBucket)
		}
		return fmt.Errorf("create session %q (key %s in KV bucket %s): %w", h.ID, tok, wire.SessionsBucket, err)
	}
	return nil
}

// kvDeleted reports whether a KV entry's headers make it a delete or purge marker.
func kvDeleted(h nats.Header) bool {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(natsjs.MarkerReasonHeader) != ""
}

// SessionInfo is a session's stored metadata: its header, its incarnation ("" for metadata
// written before incarnations existed) and the KV revision of the entry.
type SessionInfo struct {
	Header      session.Header
	Incarnation string
	Revision    uint64
	// CompleteAt is the value of the entry's wire.IncompleteHeader (the events its log must hold
	// to be complete), 0 for an entry without the mark. Only InfoAny returns an entry whose log
	// is still short of it.
	CompleteAt int64
}

// Info reads the session's metadata from the leader of agentlog_sessions.
//
// A missing (or deleted, or being removed: wire.DeletingHeader) key is a wrapped ErrSessionNotFound
// naming the id; one being removed wraps ErrSessionDeleted too. A fork child still being written
// (wire.IncompleteHeader, and its log, read from the stream leader, short of the marked count) is
// a wrapped ErrSessionNotFound and ErrSessionIncomplete. The header's Raw is set to the stored
// value. A stored value that does not decode, or names another id, is an error naming the session
// and the key.
func (ss *Session) Info(ctx context.Context) (SessionInfo, error) {
	info, err := ss.InfoAny(ctx)
	if err != nil || info.CompleteAt == 0 {
		return info, err
	}
	done, err := ss.complete(ctx, info.CompleteAt)
	if err != nil {
		return SessionInfo{}, fmt.Errorf("read session %q: is its fork complete: %w", ss.id, err)
	}
	if !done {
		return SessionInfo{}, incompleteErr(ss.id, info.CompleteAt)
	}
	return info, nil
}

// complete reports whether the session's log, read from the stream leader, holds n events.
func (ss *Session) complete(ctx context.Context, n int64) (bool, error) {
	tail, err := ss.TailFromLeader(ctx)
	if err != nil {
		return false, err
	}
	return tail.NextSeq >= n, nil
}

// incompleteErr is the not-found of a fork child whose log does not hold its n events yet.
func incompleteErr(id string, n int64) error {
	return fmt.Errorf("read session %q: %w: %w (a fork is writing its seed: its log does not hold its %d events yet)", id, ErrSessionNotFound, ErrSessionIncomplete, n)
}

// ErrSessionIncomplete is returned (wrapped, with ErrSessionNotFound) by Info for a fork child whose
// seed is still being written (wire.IncompleteHeader): no reader serves it.
var ErrSessionIncomplete = errors.New("session being created")

// MarkComplete rewrites the session's entry, at revision rev (SessionInfo.Revision), without
// wire.IncompleteHeader, keeping its value and incarnation: the fork that wrote the child's last
// record clears the mark. An entry written since is left (a JetStream wrong-last-sequence error).
func (ss *Session) MarkComplete(ctx context.Context, info SessionInfo) error {
	return ss.rewriteClaim(ctx, info, 0)
}

// Reclaim rewrites the session's entry at revision info.Revision with header h (the same id),
// its incarnation kept and marked wire.IncompleteHeader n (n > 0): a fork resuming an incomplete
// child it found abandoned. It returns the new revision.
func (ss *Session) Reclaim(ctx context.Context, info SessionInfo, h session.Header, n int64) (uint64, error) {
	if n <= 0 || h.ID != ss.id {
		return 0, fmt.Errorf("reclaim session %q: header of %q, %d events: want its id and a count > 0", ss.id, h.ID, n)
	}
	val, err := headerValue(h)
	if err != nil {
		return 0, fmt.Errorf("session %q: encode header: %w", ss.id, err)
	}
	return ss.putClaim(ctx, info, val, n)
}

func (ss *Session) rewriteClaim(ctx context.Context, info SessionInfo, n int64) error {
	_, err := ss.putClaim(ctx, info, info.Header.Raw, n)
	return err
}

// putClaim writes value as the session's entry guarded by info.Revision, with info's incarnation
// and, when n > 0, wire.IncompleteHeader n.
func (ss *Session) putClaim(ctx context.Context, info SessionInfo, value []byte, n int64) (uint64, error) {
	s := ss.s
	if s.js == nil {
		return 0, ss.noStore()
	}
	h := nats.Header{}
	if info.Incarnation != "" {
		h.Set(wire.IncarnationHeader, info.Incarnation)
	}
	if n > 0 {
		h.Set(wire.IncompleteHeader, strconv.FormatInt(n, 10))
	}
	m := &nats.Msg{Subject: KVPutSubject(s.js, wire.SessionsBucket, ss.tok), Header: h, Data: value}
	ack, err := s.js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(info.Revision))
	if err != nil {
		return 0, fmt.Errorf("rewrite the metadata of session %q (key %s in KV bucket %s, revision %d): %w", ss.id, ss.tok, wire.SessionsBucket, info.Revision, err)
	}
	return ack.Sequence, nil
}

// InfoAny is Info that also returns the metadata of an incomplete fork child (CompleteAt > 0,
// whatever its log holds): for the forker that resumes it and the projector that folds it.
//
// A missing (or deleted, or being removed: wire.DeletingHeader) key is a wrapped ErrSessionNotFound
// naming the id; one being removed wraps ErrSessionDeleted too. The header's Raw is set
// to the stored value. A stored value that does not decode, or names another id, is an error naming
// the session and the key.
func (ss *Session) InfoAny(ctx context.Context) (SessionInfo, error) {
	s, id, tok := ss.s, ss.id, ss.tok
	if s.js == nil {
		return SessionInfo{}, ss.noStore()
	}
	e, err := s.leaderGetFrom(ctx, "KV_"+wire.SessionsBucket, map[string]any{"last_by_subj": wire.KVSubject(wire.SessionsBucket, tok)})
	if errors.Is(err, natsjs.ErrMsgNotFound) || (err == nil && kvDeleted(e.Header)) {
		return SessionInfo{}, fmt.Errorf("read session %q: %w (no key %s in KV bucket %s)", id, ErrSessionNotFound, tok, wire.SessionsBucket)
	}
	if err == nil && e.Header.Get(wire.DeletingHeader) != "" {
		// Its records may still be there: callers that accept a log without metadata (a fork's
		// source) tell this case apart by ErrSessionDeleted.
		return SessionInfo{}, fmt.Errorf("read session %q: %w: %w (key %s in KV bucket %s is marked %s: a removal stopped half-way)",
			id, ErrSessionNotFound, ErrSessionDeleted, tok, wire.SessionsBucket, wire.DeletingHeader)
	}
	if err != nil {
		return SessionInfo{}, fmt.Errorf("read session %q (key %s in KV bucket %s): %w", id, tok, wire.SessionsBucket, err)
	}
	var h session.Header
	if err := json.Unmarshal(e.Data, &h); err != nil {
		return SessionInfo{}, fmt.Errorf("session %q: the header at key %s in KV bucket %s does not decode: %w", id, tok, wire.SessionsBucket, err)
	}
	if h.ID != id {
		return SessionInfo{}, fmt.Errorf("session %q: the header at key %s in KV bucket %s names session %q", id, tok, wire.SessionsBucket, h.ID)
	}
	if h.Raw == nil {
		h.Raw = append(json.RawMessage(nil), e.Data...)
	}
	info := SessionInfo{Header: h, Incarnation: e.Header.Get(wire.IncarnationHeader), Revision: e.Sequence}
	if v := e.Header.Get(wire.IncompleteHeader); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 {
			return SessionInfo{}, fmt.Errorf("session %q: the entry at key %s in KV bucket %s has %s %q: want a decimal count > 0", id, tok, wire.SessionsBucket, wire.IncompleteHeader, v)
		}
		info.CompleteAt = n
	}
	return info, nil
}

// headerValue renders h as its dsh JSONL header line (without the newline), the KV value of a session.
func headerValue(h session.Header) ([]byte, error) {
	if len(h.Raw) > 0 {
		var probe struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(h.Raw, &probe); err != nil || probe.ID != h.ID {
			h.Raw = nil // Raw is stale (e.g. the id was overridden): write the modelled fields
		}
	}
	var buf bytes.Buffer
	if err := session.WriteJSONL(&buf, &h, nil, session.WriteOptions{}); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// DeleteMetadata deletes the session's agentlog_sessions entry if it is still at revision rev
// (SessionInfo.Revision), whatever its log holds: for the writer of that entry undoing its claim
// of the id (a fork whose record lost its guard), never a removal (Remove deletes a whole
// session). An entry written since is left, and that refusal is a JetStream wrong-last-sequence
// error (IsWrongLastSequence); a session without metadata is not an error.
func (ss *Session) DeleteMetadata(ctx context.Context, rev uint64) error {
	s, id, tok := ss.s, ss.id, ss.tok
	if s.sessions == nil {
		return ss.noStore()
	}
	if err := s.sessions.Delete(ctx, tok, natsjs.LastRevision(rev)); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("delete the metadata of session %q (key %s in KV bucket %s, revision %d): %w", id, tok, wire.SessionsBucket, rev, err)
	}
	return nil
}
