package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// wire.WritersBucket holds one writer lease per session being written: key wire.Token(id), value
// a Lease (JSON), each value with a per-message TTL (Nats-TTL) so that a lease ends when its writer
// stops renewing it.

// writersMarkerTTL is agentlog_writers' LimitMarkerTTL in its KeyValueConfig: kvStreamConfig makes
// it allow per-key TTLs, and keep no marker of an expired lease (markers need rollups).
const writersMarkerTTL = time.Minute

// MinLeaseTTL is the shortest lease TTL the server accepts (per-message TTLs are whole seconds).
const MinLeaseTTL = time.Second

// ErrLeaseHeld is returned (wrapped, in a *LeaseHeldError) by AcquireLease when another writer's
// lease on the session is live.
var ErrLeaseHeld = errors.New("session has a live writer")

// ErrNoLease is returned (wrapped) by Session.Lease when the session has no live writer lease.
var ErrNoLease = errors.New("no live writer lease")

// ErrLeaseLost is returned (wrapped) by RenewLease when the lease is no longer the caller's: it
// expired, or another writer took it over.
var ErrLeaseLost = errors.New("writer lease lost")

// Lease is the value of a writer lease: the writer's id, its host and process id, when it took the
// lease (Since, Unix ms) and the TTL it renews it with (TTLMillis, ms).
type Lease struct {
	Session   string `json:"session"`
	Writer    string `json:"writer"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	Since     int64  `json:"since"`
	TTLMillis int64  `json:"ttlMs"`
}

// NewLease returns the lease of writer in this process: its host name ("" when unknown) and
// process id. AcquireLease sets Session and TTLMillis; Since is the caller's.
func NewLease(writer string) Lease {
	host, _ := os.Hostname()
	return Lease{Writer: writer, Host: host, PID: os.Getpid()}
}

// LeaseHeldError names the session and the live lease that refused AcquireLease. It wraps
// ErrLeaseHeld.
type LeaseHeldError struct {
	Session string
	Holder  Lease
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("session %q is being written by writer %q (host %s, pid %d, since %s)",
		e.Session, e.Holder.Writer, e.Holder.Host, e.Holder.PID, time.UnixMilli(e.Holder.Since).UTC().Format(time.RFC3339))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// AcquireLease takes the session's writer lease with TTL ttl (at least MinLeaseTTL) and returns
// its revision. A live lease of another writer is a *LeaseHeldError unless takeover, which
// overwrites it. l.Session is set to the session's id and l.TTLMillis to ttl.
func (ss *Session) AcquireLease(ctx context.Context, l Lease, ttl time.Duration, takeover bool) (uint64, error) {
	return ss.s.acquireLease(ctx, ss.id, ss.tok, l, ttl, takeover)
}

// acquireLease is AcquireLease of session id (token tok).
func (s *Store) acquireLease(ctx context.Context, id, tok string, l Lease, ttl time.Duration, takeover bool) (uint64, error) {
	if s.writers == nil {
		return 0, fmt.Errorf("session %q: no KV bucket %s in this Store (use Provision or Open)", id, wire.WritersBucket)
	}
	if ttl < MinLeaseTTL {
		return 0, fmt.Errorf("session %q: lease TTL %s, want at least %s", id, ttl, MinLeaseTTL)
	}
	l.Session, l.TTLMillis = id, ttl.Milliseconds()
	val, _ := json.Marshal(l)
	if takeover {
		return s.publishLease(ctx, tok, val, ttl, nil)
	}
	rev, err := s.writers.Create(ctx, tok, val, natsjs.KeyTTL(ttl))
	if err == nil {
		return rev, nil
	}
	if !errors.Is(err, natsjs.ErrKeyExists) {
		return 0, fmt.Errorf("session %q: take the writer lease (key %s in KV bucket %s): %w", id, tok, wire.WritersBucket, err)
	}
	holder, _, gerr := s.getLease(ctx, tok, id)
	if errors.Is(gerr, ErrNoLease) {
		// Expired between the create and the read: try once more.
		if rev, err = s.writers.Create(ctx, tok, val, natsjs.KeyTTL(ttl)); err == nil {
			return rev, nil
		}
		holder, _, gerr = s.getLease(ctx, tok, id)
	}
	if gerr != nil {
		return 0, fmt.Errorf("session %q: the writer lease is held, and reading it failed: %w", id, gerr)
	}
	return 0, &LeaseHeldError{Session: id, Holder: holder}
}

// RenewLease rewrites the lease at revision rev with a fresh TTL and returns the new revision. A
// lease that is no longer at rev (expired, taken over) is a wrapped ErrLeaseLost.
func (ss *Session) RenewLease(ctx context.Context, rev uint64, l Lease, ttl time.Duration) (uint64, error) {
	l.Session, l.TTLMillis = ss.id, ttl.Milliseconds()
	val, _ := json.Marshal(l)
	return ss.s.publishLease(ctx, ss.tok, val, ttl, &rev)
}

// publishLease writes a lease value with a per-message TTL, guarded by rev when not nil.
func (s *Store) publishLease(ctx context.Context, tok string, val []byte, ttl time.Duration, rev *uint64) (uint64, error) {
	m := &nats.Msg{Subject: KVPutSubject(s.js, wire.WritersBucket, tok), Header: nats.Header{}, Data: val}
	opts := []natsjs.PublishOpt{natsjs.WithMsgTTL(ttl)}
	if rev != nil {
		opts = append(opts, natsjs.WithExpectLastSequencePerSubject(*rev))
	}
	ack, err := s.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		if rev != nil && IsWrongLastSequence(err) {
			return 0, fmt.Errorf("%w: key %s in KV bucket %s is no longer at revision %d", ErrLeaseLost, tok, wire.WritersBucket, *rev)
		}
		return 0, fmt.Errorf("write the writer lease (key %s in KV bucket %s): %w", tok, wire.WritersBucket, err)
	}
	return ack.Sequence, nil
}

// Lease reads the session's live writer lease and its revision; no live lease is a wrapped
// ErrNoLease.
func (ss *Session) Lease(ctx context.Context) (Lease, uint64, error) {
	return ss.s.getLease(ctx, ss.tok, ss.id)
}

// getLease is Lease of session id (token tok).
func (s *Store) getLease(ctx context.Context, tok, id string) (Lease, uint64, error) {
	if s.writers == nil {
		return Lease{}, 0, fmt.Errorf("session %q: no KV bucket %s in this Store (use Provision or Open)", id, wire.WritersBucket)
	}
	e, err := s.writers.Get(ctx, tok)
	if errors.Is(err, natsjs.ErrKeyNotFound) || errors.Is(err, natsjs.ErrKeyDeleted) {
		return Lease{}, 0, fmt.Errorf("%w: session %q", ErrNoLease, id)
	}
	if err != nil {
		return Lease{}, 0, fmt.Errorf("session %q: read the writer lease (key %s in KV bucket %s): %w", id, tok, wire.WritersBucket, err)
	}
	var l Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return Lease{}, 0, fmt.Errorf("session %q: the writer lease at key %s does not decode: %w", id, tok, err)
	}
	return l, e.Revision(), nil
}

// ReleaseLease deletes the session's writer lease if it is still at revision rev; a lease that
// moved on (expired, taken over) is left alone and is not an error.
func (ss *Session) ReleaseLease(ctx context.Context, rev uint64) error {
	return ss.s.releaseLease(ctx, ss.tok, ss.id, rev)
}

// releaseLease is ReleaseLease of session id (token tok).
func (s *Store) releaseLease(ctx context.Context, tok, id string, rev uint64) error {
	if s.writers == nil {
		return fmt.Errorf("session %q: no KV bucket %s in this Store (use Provision or Open)", id, wire.WritersBucket)
	}
	err := s.writers.Delete(ctx, tok, natsjs.LastRevision(rev))
	if err == nil || errors.Is(err, natsjs.ErrKeyNotFound) || IsWrongLastSequence(err) {
		return nil
	}
	return fmt.Errorf("session %q: release the writer lease (key %s in KV bucket %s, revision %s): %w", id, tok, wire.WritersBucket, strconv.FormatUint(rev, 10), err)
}

// EnsureWritersBucket creates agentlog_writers again when it is missing (lost with a server's
// state), as Open does; the Store stays usable.
func (s *Store) EnsureWritersBucket(ctx context.Context) error {
	replicas := 1
	if s.stream != nil {
		replicas = s.stream.CachedInfo().Config.Replicas
	}
	_, err := ensureWritersBucket(ctx, s.js, replicas)
	return err
}

// ensureWritersBucket returns agentlog_writers, creating it when missing (file storage, history 1,
// replicas, per-key TTLs with writersMarkerTTL); an existing one must allow per-message TTLs.
func ensureWritersBucket(ctx context.Context, js natsjs.JetStream, replicas int) (natsjs.KeyValue, error) {
	return ensureKV(ctx, js, natsjs.KeyValueConfig{
		Bucket:         wire.WritersBucket,
		Description:    "agentlog writer leases (one per session being written, per-key TTL)",
		History:        1,
		Storage:        natsjs.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: writersMarkerTTL,
	}, func(c natsjs.StreamConfig) error {
		switch {
		case !c.AllowMsgTTL:
			return incompatible("KV bucket "+wire.WritersBucket, "allow_msg_ttl (per-key lease TTLs)", false, true)
		case c.Sealed:
			return incompatible("KV bucket "+wire.WritersBucket, "sealed", true, false)
		}
		return nil
	})
}
