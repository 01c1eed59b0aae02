package jetstream

// STUBS: frozen signatures. The jetstream owner replaces each body; signatures must not change
// (additions are fine).

import (
	"context"
	"errors"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var errUnimplemented = errors.New("unimplemented")

// Names of what Provision creates (design.md §3).
const (
	StreamName        = "AGENTLOG"
	SubjectPrefix     = "agentlog.session" // agentlog.session.<partition>.<token>
	SessionsBucket    = "agentlog_sessions"
	ProjectionsBucket = "agentlog_projections"
	ErrorsStream      = "AGENTLOG_ERRORS"
	ErrorsPrefix      = "agentlog.errors" // agentlog.errors.<token>
	DefaultPartitions = 16
)

// Config is the provisioning configuration. Zero values take defaults: Partitions 16, Replicas 1,
// MaxMsgSize 1 MiB (bytes), DuplicateWindow 2 min.
type Config struct {
	Partitions      int
	Replicas        int
	MaxMsgSize      int32
	DuplicateWindow time.Duration
}

// Store is a provisioned agentlog on one JetStream account.
type Store struct {
	JS          jetstream.JetStream
	Stream      jetstream.Stream
	Sessions    jetstream.KeyValue
	Projections jetstream.KeyValue
	Partitions  int
	MaxMsgSize  int32 // bytes; the stream's max message size (or the server's max payload)
}

// Provision creates what is missing and checks what exists. It refuses, with an error naming the
// setting, an existing stream or bucket whose config it cannot use (wrong subjects, storage,
// partition count, DenyDelete off, ...).
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	return nil, errUnimplemented
}

// Open attaches to an already provisioned agentlog (reading the partition count from the stream
// metadata); it fails with a clear error if it is not provisioned.
func Open(ctx context.Context, js jetstream.JetStream) (*Store, error) { return nil, errUnimplemented }

// Token maps a session id (any UTF-8, 1..256 bytes) to its subject token: injective, reversible,
// never containing '.', '*', '>', whitespace or control characters. Errors name the id and the rule.
func Token(id string) (string, error) { return "", errUnimplemented }

// IDFromToken reverses Token.
func IDFromToken(token string) (string, error) { return "", errUnimplemented }

// Subject returns agentlog.session.<partition>.<token> for id.
func (s *Store) Subject(id string) (string, error) { return "", errUnimplemented }

// Tail is the end of a session's log: the stream sequence of its last record (0 when the session
// has none) and the next event seq.
type Tail struct {
	LastStreamSeq uint64
	NextSeq       int64
	LastEvents    []session.Event // the events of the last record
	LastMsgID     string          // Nats-Msg-Id of the last record
}

// GetTail reads the last record of the session (direct get of the last message for its subject).
func (s *Store) GetTail(ctx context.Context, id string) (Tail, error) { return Tail{}, errUnimplemented }

// ErrConflict is returned (wrapped) when the Nats-Expected-Last-Subject-Sequence guard fails
// (JetStream error 10071, or 10164 on replicated streams).
var ErrConflict = errors.New("agentlog: session log changed under this writer (guard conflict)")

// AppendResult reports a committed record.
type AppendResult struct {
	StreamSeq uint64 // stream sequence of the (last) record written
	Duplicate bool   // the server deduplicated it by Nats-Msg-Id: an earlier try was stored
}

// Append writes events (consecutive seqs of session id) as one record guarded with
// expectedLastStreamSeq (0 for a new session), with Nats-Msg-Id msgID. When the encoded record is
// larger than MaxMsgSize it is split into several records committed as one atomic batch.
func (s *Store) Append(ctx context.Context, id string, expectedLastStreamSeq uint64, msgID string, events []session.Event) (AppendResult, error) {
	return AppendResult{}, errUnimplemented
}

// Read returns all events of session id in order, and the stream sequence of its last record.
// A record that does not decode is an error naming the session, the stream sequence and the rule.
func (s *Store) Read(ctx context.Context, id string) ([]session.Event, uint64, error) {
	return nil, 0, errUnimplemented
}

// ErrSessionExists is returned (wrapped) by CreateSession for an id already in agentlog_sessions.
var ErrSessionExists = errors.New("agentlog: session already exists")

// ErrSessionNotFound is returned (wrapped) when a session has no metadata.
var ErrSessionNotFound = errors.New("agentlog: session not found")

// CreateSession stores the header in agentlog_sessions with a KV create.
func (s *Store) CreateSession(ctx context.Context, h session.Header) error { return errUnimplemented }

// GetSession reads a session header.
func (s *Store) GetSession(ctx context.Context, id string) (session.Header, error) {
	return session.Header{}, errUnimplemented
}

// EncodeRecord encodes events as a record: headers (first seq, count, session id) and body (one
// JSON event per line).
func EncodeRecord(id string, events []session.Event) (nats.Header, []byte, error) {
	return nil, nil, errUnimplemented
}

// DecodeRecord decodes a record's headers and body, checking the count and seq headers.
func DecodeRecord(h nats.Header, body []byte) ([]session.Event, error) { return nil, errUnimplemented }

// EmbeddedOptions configure RunEmbedded. Zero values: Host 127.0.0.1, Port -1 (random), SyncAlways false.
type EmbeddedOptions struct {
	DataDir    string
	Host       string
	Port       int
	SyncAlways bool
	ServerName string
}

// RunEmbedded starts a single-node nats-server with JetStream and file storage in DataDir and waits
// until it is ready. Shut it down with srv.Shutdown(); srv.WaitForShutdown().
func RunEmbedded(opts EmbeddedOptions) (*server.Server, error) { return nil, errUnimplemented }
