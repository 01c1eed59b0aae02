package store

import (
	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Store is a provisioned agentlog on one JetStream account: the AGENTLOG stream and the buckets
// (wire.StreamName, wire.SessionsBucket, ...). Get one from Provision or Open, and a session's
// handle from Session. It holds no mutable state of its own and is safe for concurrent use. The
// zero Store holds nothing; its methods fail (an options-only use, such as a constructor's check).
type Store struct {
	js          natsjs.JetStream
	stream      natsjs.Stream
	sessions    natsjs.KeyValue // agentlog_sessions: session metadata
	projections natsjs.KeyValue // agentlog_projections: projection states
	// projectionWakes: agentlog_projections republishes its states (wire.ProjectionWakePrefix).
	projectionWakes bool
	writers         natsjs.KeyValue // agentlog_writers: writer leases
	blobStream      natsjs.Stream   // AGENTLOG_BLOBS: offloaded events (nil: events over a record are refused)
	partitions      int
	maxMsgSize      int32 // bytes; the stream's max message size (or the server's max payload)
	// maxEventBytes caps one event's encoded line, bytes (0: DefaultMaxEventBytes).
	maxEventBytes int64

	archive   natsjs.Stream   // AGENTLOG_ARCHIVE: archived sessions (nil: not provisioned)
	children  natsjs.Stream   // AGENTLOG_CHILDREN: fork lineage by parent
	lifecycle natsjs.KeyValue // agentlog_lifecycle: the lifecycle policy and legal holds
	mux       *directMux      // batched direct gets over one reply subscription (shared by copies)
}

// Archive is the AGENTLOG_ARCHIVE stream (nil when the store has none: not provisioned, or
// credentials that may not look it up).
func (s *Store) Archive() natsjs.Stream { return s.archive }

// JetStream is the JetStream context the Store was opened with (nil for the zero Store).
func (s *Store) JetStream() natsjs.JetStream { return s.js }

// Stream is the AGENTLOG stream, as looked up when the Store was opened (nil for the zero Store).
func (s *Store) Stream() natsjs.Stream { return s.stream }

// Partitions is the stream's partition count (wire.MetaPartitions), fixed at provisioning.
func (s *Store) Partitions() int { return s.partitions }

// MaxMsgSize is the largest record the stream takes, bytes: its max message size, or the server's
// max payload when that is smaller.
func (s *Store) MaxMsgSize() int32 { return s.maxMsgSize }

// MaxEventBytes is the cap on one event's encoded line, bytes (DefaultMaxEventBytes unless set with
// WithMaxEventBytes): a larger event is refused (ErrEventTooLarge) whether or not it could be
// offloaded.
func (s *Store) MaxEventBytes() int64 {
	if s.maxEventBytes > 0 {
		return s.maxEventBytes
	}
	return DefaultMaxEventBytes
}

// WithMaxEventBytes returns a copy of the Store whose cap on one event's encoded line is n bytes
// (n ≤ 0: DefaultMaxEventBytes). s is not changed.
func (s *Store) WithMaxEventBytes(n int64) *Store {
	c := *s
	c.maxEventBytes = max(n, 0)
	return &c
}

// Session is the handle of one session of a Store: its id, checked once by Store.Session, its
// subject token and its subject. It holds nothing of the session's state: every method reads or
// writes the store. It is safe for concurrent use.
type Session struct {
	s       *Store
	id      string
	tok     string
	subject string
}

// Session returns the handle of session id. An id that is not 1..wire.MaxSessionIDBytes bytes of
// UTF-8 is refused with a *session.Error naming it and the rule (id-empty, id-too-long,
// id-utf8); any other id is safe (wire.Token maps it to a subject token).
func (s *Store) Session(id string) (*Session, error) {
	tok, err := wire.Token(id)
	if err != nil {
		return nil, err
	}
	return &Session{s: s, id: id, tok: tok, subject: wire.TokenSubject(tok, s.partitions)}, nil
}

// ID is the session's id.
func (ss *Session) ID() string { return ss.id }

// Token is the session's subject token (wire.Token of its id): its key in agentlog_sessions and
// agentlog_writers, and the last part of its keys in agentlog_projections.
func (ss *Session) Token() string { return ss.tok }

// Subject is the session's subject in AGENTLOG: agentlog.session.<partition>.<token>.
func (ss *Session) Subject() string { return ss.subject }

// Store is the Store the handle belongs to.
func (ss *Session) Store() *Store { return ss.s }
