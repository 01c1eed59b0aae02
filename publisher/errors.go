package publisher

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

var (
	// ErrSessionExists is returned (wrapped) by Publisher.Create for an id already registered in the
	// agentlog_sessions KV bucket. It wraps store.ErrSessionExists. The reference's fork code for
	// the same condition is SESSION_ALREADY_EXISTS.
	ErrSessionExists error = &sentinel{"session already exists", store.ErrSessionExists}

	// ErrClosed is returned by Writer.Append/Emit after Writer.Close (or Publisher.Close) began, and by
	// Publisher.Create/Open after Publisher.Close.
	ErrClosed = errors.New("writer closed")

	// ErrConflict is returned (wrapped, inside a *WriteError) when the
	// Nats-Expected-Last-Subject-Sequence guard of a write fails and the session's tail record is not
	// this writer's own: another writer appended to the session. It wraps store.ErrConflict.
	// The writer is fenced from then on.
	ErrConflict error = &sentinel{"session log changed under this writer", store.ErrConflict}

	// ErrFenced is returned (wrapped) by every call on a Writer that stopped writing its session:
	// a write hit ErrConflict, its acknowledged events were lost (ErrAckedLost), or another writer
	// took its lease over (Open with Takeover). The *WriteError that fenced it wraps ErrFenced too.
	// Its pending events are not written; reopen the session with Publisher.Open to continue from
	// the stored log.
	ErrFenced = errors.New("writer fenced (after a guard conflict, a takeover or lost acknowledged events)")
	// ErrArchived is returned (wrapped, with ErrConflict) by a write whose session was archived
	// under the writer (store.Session.Archive committed after its last record): no
	// acknowledged event is lost, but the writer is fenced; Open the session again (it restores it).
	ErrArchived = errors.New("session archived under the writer")

	// ErrSessionLive is returned (wrapped, in a *LiveError) by Publisher.Open and Create when
	// another writer's lease on the session is live.
	ErrSessionLive = errors.New("session has a live writer")

	// ErrAckedLost is returned (wrapped, in an *AckedLostError inside a *WriteError) when the
	// stored log no longer holds events this writer had acknowledged as durable (the server lost
	// them, or the subject was purged), found when the writer proves its tail before writing, or
	// after a record acknowledged across a reconnect turned out to follow another writer's. The
	// writer is fenced: it writes nothing more.
	ErrAckedLost = errors.New("acknowledged events lost from the stored log")

	// ErrSessionDeleted is matched (errors.Is) by the fencing error of a Writer whose session was
	// removed (store.Session.Remove) under it; that error also wraps ErrConflict. It wraps
	// store.ErrSessionDeleted.
	ErrSessionDeleted error = &sentinel{"session deleted under this writer", store.ErrSessionDeleted}

	// ErrUnavailable is matched (errors.Is) by a *WriteError whose cause is an outage: no server
	// took the record within the retry budget (no responders, timeouts, a connection lost, a
	// leaf node cut off from its hub). The write is not fenced: its events stay pending, in
	// order, and the next write (a new event, Flush or Close) takes them.
	ErrUnavailable = errors.New("agentlog unavailable (no JetStream answered: server down or unreachable, or a leaf node's link to its hub down)")

	// ErrInvalidOption is returned (wrapped, with the option's own error) by Publisher.Open for an
	// OpenOption that refuses its input. Nothing was done.
	ErrInvalidOption = errors.New("invalid option")

	// ErrAlreadyOpen is returned (wrapped) by Publisher.Create/Open for a session that already has an
	// open Writer in this Publisher (one writer per session per publisher, so that Nats-Msg-Id values
	// never repeat).
	ErrAlreadyOpen = errors.New("the session already has an open writer in this publisher")
)

// sentinel is an error with its own text that also matches (errors.Is) the error it stands for.
type sentinel struct {
	msg  string
	base error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.base }

// ErrBacklog is returned (wrapped, inside a *BacklogError) by Writer.Append/Emit when admitting
// the event would make the Writer hold more than Options.MaxPendingBytes of events that are not
// yet durable — typically because the store keeps failing. The event is not admitted (NextSeq is
// unchanged): Flush (which retries the failed write at once) and append it again.
var ErrBacklog = errors.New("too many events pending")

// LiveError is the refusal of Open (or Create) of a session whose writer lease is live: the
// session and the lease holder (writer id, host, pid, Since in Unix ms). It wraps ErrSessionLive.
// Open(ctx, id, Takeover()) fences that writer instead.
type LiveError struct {
	Session string
	Writer  string
	Host    string
	PID     int
	Since   int64
}

func (e *LiveError) Error() string {
	held := &store.LeaseHeldError{Session: e.Session, Holder: store.Lease{Writer: e.Writer, Host: e.Host, PID: e.PID, Since: e.Since}}
	return "publisher: " + held.Error() + "; open it with publisher.Takeover() to fence that writer"
}

func (e *LiveError) Unwrap() error { return ErrSessionLive }

// AckedLostError names the session and the acknowledged seqs FromSeq..ToSeq that the stored log
// no longer holds (at least those), with what the writer found there. It wraps ErrAckedLost. It
// comes inside a *WriteError, which names the session, so its own text does not.
type AckedLostError struct {
	Session string
	FromSeq int64
	ToSeq   int64
	Detail  string
}

func (e *AckedLostError) Error() string {
	return fmt.Sprintf("acknowledged events %d..%d are no longer in the stored log (%s); the writer stops writing this session",
		e.FromSeq, e.ToSeq, e.Detail)
}

func (e *AckedLostError) Unwrap() error { return ErrAckedLost }

// BacklogError is the refusal of one event by the Options.MaxPendingBytes cap: the session, the
// refused seq, how many events and bytes are pending (not durable), the event's size, the limit
// (bytes), and the latest write failure if any. It wraps ErrBacklog.
type BacklogError struct {
	Session      string
	Seq          int64
	Pending      int64
	PendingBytes int64
	EventBytes   int64
	Limit        int64
	LastErr      error
}

func (e *BacklogError) Error() string {
	msg := fmt.Sprintf("publisher: session %q seq %d: refused: %d events (%d bytes) are not durable yet and this event (%d bytes) would exceed MaxPendingBytes %d; Flush, then append it again",
		e.Session, e.Seq, e.Pending, e.PendingBytes, e.EventBytes, e.Limit)
	if e.LastErr != nil {
		msg += fmt.Sprintf(" (last write failure: %v)", e.LastErr)
	}
	return msg
}

func (e *BacklogError) Unwrap() error { return ErrBacklog }

// WriteError is a failed write of one record: the session, the seq range [FirstSeq, LastSeq] of the
// events it carried (they stay pending, in order, unless Fenced), and the cause. Fenced means the
// writer stopped writing the session (Err is ErrConflict, ErrAckedLost or a lost lease); it then
// wraps ErrFenced too. It is what Writer.Errors delivers and what Writer.Flush/Close return for a
// write failure.
type WriteError struct {
	Session  string
	FirstSeq int64
	LastSeq  int64
	Err      error
	Fenced   bool
}

// Error names the session through Err: every error of a write names it (ARCHITECTURE.md, Errors).
func (e *WriteError) Error() string { return "publisher: " + e.text() }

func (e *WriteError) text() string {
	if !e.Fenced && transient(e.Err) {
		return fmt.Sprintf("write of seqs %d..%d failed: agentlog unavailable (the events stay pending): %v", e.FirstSeq, e.LastSeq, e.Err)
	}
	return fmt.Sprintf("write of seqs %d..%d failed: %v", e.FirstSeq, e.LastSeq, e.Err)
}

// fencedError is what a call on a Writer fenced by the write error fenced returns: it wraps
// ErrFenced and fenced, whose text follows without a second "publisher: ".
func fencedError(fenced error) error {
	var we *WriteError
	if errors.As(fenced, &we) {
		return fmt.Errorf("publisher: %w: %w", ErrFenced, unprefixed{we})
	}
	return fmt.Errorf("publisher: %w: %w", ErrFenced, fenced)
}

// unprefixed is a *WriteError inside another publisher error: the same error, its text without
// the package prefix.
type unprefixed struct{ *WriteError }

func (u unprefixed) Error() string { return u.text() }
func (u unprefixed) Unwrap() error { return u.WriteError }

func (e *WriteError) Unwrap() []error {
	if e.Fenced {
		return []error{e.Err, ErrFenced}
	}
	if transient(e.Err) {
		return []error{e.Err, ErrUnavailable}
	}
	return []error{e.Err}
}

// transient reports whether a store error is worth retrying inside the same write: no responders
// (503), request timeouts, "duplicate message id is in process" (10158), "too many requests"
// (429), and a connection lost or reconnecting under the write (a blob upload's chunks fail so
// when the server goes away). A guard conflict is never transient.
func transient(err error) bool {
	if err == nil || errors.Is(err, store.ErrConflict) {
		return false
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, njs.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, njs.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrReconnectBufExceeded) ||
		errors.Is(err, errNotConnected) || errors.Is(err, errReconnected) {
		return true
	}
	// A socket that failed under a write (connection reset, broken pipe): nats.go reconnects,
	// and the write is tried again (an Object Store upload reports the socket's own error).
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	var apiErr *njs.APIError
	if errors.As(err, &apiErr) && apiErr != nil {
		switch {
		case apiErr.Code == 503, apiErr.Code == 429, apiErr.Code == 408:
			return true
		case apiErr.ErrorCode == 10158:
			return true
		}
	}
	return false
}

// ctxError is a write that ended with its context: it names the session, through the last try's
// error when there was one.
func ctxError(id string, err, lastErr error) error {
	if lastErr != nil {
		return fmt.Errorf("%w (last try: %v)", err, lastErr)
	}
	return fmt.Errorf("session %q: %w", id, err)
}
