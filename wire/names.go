package wire

import (
	"fmt"

	"github.com/nats-io/nuid"
)

// Names of what `agentlog provision` creates (docs/PROTOCOL.md §2; ARCHITECTURE.md, "Where state
// lives").
const (
	StreamName        = "AGENTLOG"
	SubjectPrefix     = "agentlog.session" // agentlog.session.<partition>.<token>
	SessionsBucket    = "agentlog_sessions"
	ProjectionsBucket = "agentlog_projections"
	WritersBucket     = "agentlog_writers" // writer leases: key Token(id), one per session being written
	BlobsBucket       = "agentlog_blobs"   // Object Store bucket of offloaded events (docs/PROTOCOL.md §4.1)
	ErrorsStream      = "AGENTLOG_ERRORS"
	ErrorsPrefix      = "agentlog.errors" // agentlog.errors.<token>
	// ProjectionWakePrefix is where agentlog_projections republishes each state it stores, headers
	// only: agentlog.wake.projections.<unit>.<token> (docs/PROTOCOL.md §8). A wake-up for waiters
	// in any account: a put that reaches the bucket through a service import (a projector in an
	// account of its own) is not delivered to other accounts on its own subject.
	ProjectionWakePrefix = "agentlog.wake.projections"
)

// KVSubject is the subject of key in KV bucket bucket: "$KV.<bucket>.<key>" (the layout of
// JetStream's KV, ADR-8). A write to it with Nats-Expected-Last-Subject-Sequence is a revision
// compare-and-swap of the key.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// ProjectionKey is the agentlog_projections key of unit's state of the session whose subject token
// is token: "<unit>.<token>" (docs/PROTOCOL.md §8). A unit name is what CheckUnit accepts.
func ProjectionKey(unit, token string) string { return unit + "." + token }

// maxUnitBytes is the longest projection unit name.
const maxUnitBytes = 64

// CheckUnit refuses a projection unit name that is not 1..maxUnitBytes bytes of [A-Za-z0-9_-]
// (it is the first token of a KV key, so it can hold no '.' or wildcard).
func CheckUnit(unit string) error {
	if unit == "" || len(unit) > maxUnitBytes {
		return fmt.Errorf("unit %q: want 1..%d characters of [A-Za-z0-9_-]", unit, maxUnitBytes)
	}
	for i := 0; i < len(unit); i++ {
		if c := unit[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("unit %q: character %q is not allowed (want [A-Za-z0-9_-], it is a KV key token)", unit, c)
		}
	}
	return nil
}

// ProjectionKeysFilter is the agentlog_projections key filter of every unit's state of the session
// whose subject token is token: "*.<token>".
func ProjectionKeysFilter(token string) string { return "*." + token }

// Stream metadata keys of AGENTLOG, written at creation, and the partition counts.
const (
	MetaPartitions    = "agentlog.partitions" // partition count, decimal; fixed at creation
	MetaFormat        = "agentlog.format"     // record format of the stream: StoreFormat
	StoreFormat       = "1"
	DefaultPartitions = 16
	MaxPartitions     = 1 << 16
)

// MaxBatchRecords is the most records one split append may need: nats-server's default limit on
// the messages of one atomic batch (ADR-50).
const MaxBatchRecords = 1000

// Headers of a session's agentlog_sessions entry.
const (
	// IncarnationHeader holds the session's incarnation, a random id given at create. A session
	// deleted and created again under the same id gets a new one. An entry without it is legacy
	// (incarnation "").
	IncarnationHeader = "Agentlog-Incarnation"
	// DeletingHeader marks the entry while the session is being removed (value: Unix ms). A marked
	// entry is read as not found, and its id cannot be created again.
	DeletingHeader = "Agentlog-Deleting"
	// IncompleteHeader marks the entry of a fork child whose seed is being written as several
	// records that are not one atomic batch (value: the decimal number of events, N, the child's
	// log holds once the fork's last record is stored: its seed, end-seed and then-events). The
	// child is complete, and read as any session, once its log holds seq N-1; before that it is
	// read as not found (docs/PROTOCOL.md, "Incomplete fork children"). An entry without it is
	// complete.
	IncompleteHeader = "Agentlog-Incomplete"
)

// MaxIncarnationBytes is the longest incarnation: 1..32 bytes of [A-Za-z0-9_-].
const MaxIncarnationBytes = 32

// NewIncarnation returns a fresh random incarnation (a nuid, 22 bytes).
func NewIncarnation() string { return nuid.Next() }

// CheckIncarnation refuses an incarnation that is empty, longer than MaxIncarnationBytes or holds
// a byte outside [A-Za-z0-9_-] (it goes into Nats-Msg-Id values).
func CheckIncarnation(inc string) error {
	if inc == "" || len(inc) > MaxIncarnationBytes {
		return fmt.Errorf("incarnation %q: want 1..%d bytes", inc, MaxIncarnationBytes)
	}
	for i := 0; i < len(inc); i++ {
		c := inc[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("incarnation %q: byte %q is not in [A-Za-z0-9_-]", inc, c)
		}
	}
	return nil
}
