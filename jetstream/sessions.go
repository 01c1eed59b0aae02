package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/session"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrSessionExists is returned (wrapped) by CreateSession for an id already in agentlog_sessions.
var ErrSessionExists = errors.New("agentlog: session already exists")

// ErrSessionNotFound is returned (wrapped) when a session has no metadata.
var ErrSessionNotFound = errors.New("agentlog: session not found")

// CreateSession stores the header in agentlog_sessions with a KV create.
//
// The key is Token(h.ID); the value is the session's dsh JSONL header line,
// {"type":"session","version":0,"id":…,"createdAt":…,…}: h.Raw as read from a file (so fields we do
// not model survive) when it names the same id, else the fields of h in the reference's order. It writes no event (design.md §1, "Create"). An id that
// already has metadata is a wrapped ErrSessionExists naming the id; nothing is changed.
func (s *Store) CreateSession(ctx context.Context, h session.Header) error {
	tok, err := Token(h.ID)
	if err != nil {
		return err
	}
	val, err := headerValue(h)
	if err != nil {
		return fmt.Errorf("agentlog: session %q: encode header: %w", h.ID, err)
	}
	if _, err := s.Sessions.Create(ctx, tok, val); err != nil {
		if errors.Is(err, natsjs.ErrKeyExists) {
			return fmt.Errorf("%w: session %q (key %s in KV bucket %s)", ErrSessionExists, h.ID, tok, SessionsBucket)
		}
		return fmt.Errorf("agentlog: create session %q (key %s in KV bucket %s): %w", h.ID, tok, SessionsBucket, err)
	}
	return nil
}

// GetSession reads a session header.
//
// A missing (or deleted) key is a wrapped ErrSessionNotFound naming the id. The header's Raw is set
// to the stored value. A stored value that does not decode, or names another id, is an error naming
// the session and the key.
func (s *Store) GetSession(ctx context.Context, id string) (session.Header, error) {
	tok, err := Token(id)
	if err != nil {
		return session.Header{}, err
	}
	e, err := s.Sessions.Get(ctx, tok)
	if err != nil {
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			return session.Header{}, fmt.Errorf("%w: session %q (no key %s in KV bucket %s)", ErrSessionNotFound, id, tok, SessionsBucket)
		}
		return session.Header{}, fmt.Errorf("agentlog: read session %q (key %s in KV bucket %s): %w", id, tok, SessionsBucket, err)
	}
	var h session.Header
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return session.Header{}, fmt.Errorf("agentlog: session %q: the header at key %s in KV bucket %s does not decode: %w", id, tok, SessionsBucket, err)
	}
	if h.ID != id {
		return session.Header{}, fmt.Errorf("agentlog: session %q: the header at key %s in KV bucket %s names session %q", id, tok, SessionsBucket, h.ID)
	}
	if h.Raw == nil {
		h.Raw = append(json.RawMessage(nil), e.Value()...)
	}
	return h, nil
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

// ErrSessionHasEvents is returned (wrapped) by DeleteSession for a session whose log holds events.
var ErrSessionHasEvents = errors.New("agentlog: session has events")

// DeleteSession removes the metadata of a session whose log is empty, undoing a CreateSession that
// was never followed by a write (a failed import, a fork that lost its guard). A session with
// events is refused with a wrapped ErrSessionHasEvents: its log is append-only (the stream denies
// deletes) and its metadata stays with it. Deleting a session without metadata is not an error.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	tok, err := Token(id)
	if err != nil {
		return err
	}
	tail, err := s.GetTail(ctx, id)
	if err != nil {
		return err
	}
	if tail.NextSeq > 0 {
		return fmt.Errorf("%w: session %q holds %d events; its metadata is kept", ErrSessionHasEvents, id, tail.NextSeq)
	}
	if err := s.Sessions.Delete(ctx, tok); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("agentlog: delete session %q (key %s in KV bucket %s): %w", id, tok, SessionsBucket, err)
	}
	return nil
}
