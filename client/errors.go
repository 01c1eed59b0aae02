package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentlog/agentlog/session"
)

// Code is the error code of an agentlog service reply (micro's Nats-Service-Error-Code header):
// an HTTP-like number, or the reference's code for a fork refusal.
type Code string

// Error codes of the query and fork services.
const (
	CodeBadRequest  Code = "400" // malformed request or invalid session id
	CodeNotFound    Code = "404" // unknown session, no projection stored yet, or no such unit
	CodeTimeout     Code = "408" // minSeq not reached in time (or the client's deadline passed)
	CodeStopped     Code = "409" // the session's projection was stopped by a bad log
	CodeRemoving    Code = "410" // the session is being removed (a removal stopped part-way); a not-found
	CodeTooLarge    Code = "413" // the reply is larger than the server's max payload
	CodeDataLoss    Code = "424" // the session's log lost acknowledged records (Error.Lost names them)
	CodeBadSource   Code = "422" // the fork source's stored log breaks a record rule
	CodeInternal    Code = "500" // KV or log failure
	CodeUnavailable Code = "503" // the service is stopping or at capacity: retry

	CodeOpenTurn        Code = Code(session.CodeOpenTurn)             // fork boundary inside an open turn
	CodeInvalidBoundary Code = Code(session.CodeInvalidBoundary)      // fork boundary not a seq of the source
	CodeSessionNotFound Code = Code(session.CodeSessionNotFound)      // fork source unknown
	CodeSessionExists   Code = Code(session.CodeSessionAlreadyExists) // fork child exists
	// CodeInvalidSeed is a seed-validation refusal, which the reference raises without a code.
	CodeInvalidSeed Code = "INVALID_SEED"
)

// Error is an error reply of an agentlog service, or a request that failed on the way (then Err is
// the cause). errors.Is matches it against the Err* values by Code.
type Error struct {
	Service     string // QueryService or ForkService
	Code        Code
	Session     string // the session asked about (the fork source for a fork)
	Description string // the service's text; for a fork refusal, the reference's exact text
	// Child is the child of a fork that failed after writing part of it (its metadata with its
	// record's outcome unknown, or its record without metadata): what is left of it is to be
	// checked, or removed. "" otherwise.
	Child string
	// Lost names the acknowledged records the session's log no longer holds (CodeDataLoss).
	Lost *DataLoss
	Err  error // the cause of a failure on the client's side, else nil
}

// Errors to match with errors.Is. ErrNotFound matches CodeSessionNotFound and CodeRemoving too.
var (
	ErrBadRequest      = &Error{Code: CodeBadRequest, Description: "bad request"}
	ErrNotFound        = &Error{Code: CodeNotFound, Description: "not found"}
	ErrTimeout         = &Error{Code: CodeTimeout, Description: "timeout"}
	ErrStopped         = &Error{Code: CodeStopped, Description: "projection stopped"}
	ErrTooLarge        = &Error{Code: CodeTooLarge, Description: "reply too large"}
	ErrBadSource       = &Error{Code: CodeBadSource, Description: "source log unreadable"}
	ErrInternal        = &Error{Code: CodeInternal, Description: "internal error"}
	ErrUnavailable     = &Error{Code: CodeUnavailable, Description: "service unavailable"}
	ErrBusy            = ErrUnavailable // 503: the service is at capacity or stopping; retry later
	ErrOpenTurn        = &Error{Code: CodeOpenTurn, Description: "fork boundary inside an open turn"}
	ErrInvalidBoundary = &Error{Code: CodeInvalidBoundary, Description: "invalid fork boundary"}
	ErrExists          = &Error{Code: CodeSessionExists, Description: "session already exists"}
	ErrInvalidSeed     = &Error{Code: CodeInvalidSeed, Description: "invalid fork seed"}
	// ErrRemoving matches the error of a read of a session that is being removed (CodeRemoving;
	// it matches ErrNotFound too): a removal stopped part-way, its agentlog_sessions entry
	// marked; Remove again finishes it. Every read refuses such a session so, naming it in
	// Error.Session, with RemovingText as its description.
	ErrRemoving = &Error{Code: CodeRemoving, Description: "session is being removed"}
	// ErrDataLoss matches the error of a read of a session whose log no longer holds records it
	// held (CodeDataLoss): a server that lost acknowledged writes, a purge outside agentlog. The
	// error names the session (Error.Session) and the seqs (Error.Lost). Messages answers it
	// unless asked with AllowDataLoss; Status returns it with the status.
	ErrDataLoss = &Error{Code: CodeDataLoss, Description: "acknowledged records lost"}
)

// DataLossHeader is the header of a CodeDataLoss error reply that carries its DataLoss (JSON).
const DataLossHeader = "Agentlog-Data-Loss"

// DataLossText is how a reader says that session id lost the records l names.
func DataLossText(id string, l DataLoss) string {
	what := fmt.Sprintf("seqs %d..%d", l.FromSeq, l.ToSeq)
	if l.FromSeq == l.ToSeq {
		what = fmt.Sprintf("seq %d", l.FromSeq)
	}
	return fmt.Sprintf("session %q lost acknowledged records: %s are no longer in its log, or hold other events now (%s)", id, what, l.Detail)
}

// dataLossError is ErrDataLoss for session id, which lost l.
func dataLossError(service, id string, l DataLoss) *Error {
	return &Error{Service: service, Code: CodeDataLoss, Session: id, Description: DataLossText(id, l), Lost: &l}
}

// IncompleteText is how a reader (the client's reads, the query service) says that session id is
// a fork child whose seed is still being written (a CodeNotFound):
// `session "s1" not found (being created: a fork is writing its seed)`.
func IncompleteText(id string) string {
	return fmt.Sprintf("session %q"+incompleteNote, id)
}

const incompleteNote = " not found (being created: a fork is writing its seed)"

// BeingCreated reports whether err is the not-found of a fork child whose seed is still being
// written (IncompleteText, from the client's reads or the query service): unlike a session that
// does not exist, its partial log is not to be read as a log without metadata.
func BeingCreated(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeNotFound && strings.HasSuffix(e.Description, incompleteNote)
}

// RemovingText is how a reader (the client's reads, the query service) says that session id is
// being removed: `session "s1" is being removed (an earlier removal stopped part-way)`.
func RemovingText(id string) string {
	return fmt.Sprintf("session %q is being removed (an earlier removal stopped part-way)", id)
}

// legacyRemovingNote is what the 404 of a query service before 0.4.0 says of a session being
// removed (it had no code of its own): ErrRemoving matches it too.
const legacyRemovingNote = " is being removed (an earlier agentlog rm stopped part-way)"

// removingError is ErrRemoving (and ErrNotFound) for session id.
func removingError(id string) *Error {
	return &Error{Code: CodeRemoving, Session: id, Description: RemovingText(id)}
}

// Error renders "<service>: <description> (code <code>)", or "<service>: <description>: <cause>".
func (e *Error) Error() string {
	s := e.Description
	if e.Service != "" {
		s = e.Service + ": " + s
	}
	if e.Err != nil {
		return s + ": " + e.Err.Error()
	}
	if e.Code != "" {
		s += fmt.Sprintf(" (code %s)", e.Code)
	}
	return s
}

// Unwrap returns the cause of a client-side failure.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code. CodeSessionNotFound and
// CodeRemoving are a CodeNotFound too; the 404 of an older query service that says a session is
// being removed is a CodeRemoving.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t.Code == "" {
		return false
	}
	code := e.Code
	if code == CodeNotFound && strings.Contains(e.Description, legacyRemovingNote) {
		code = CodeRemoving
	}
	if t.Code == CodeRemoving {
		return code == CodeRemoving
	}
	return code.class() == t.Code.class()
}

func (c Code) class() Code {
	if c == CodeSessionNotFound || c == CodeRemoving {
		return CodeNotFound
	}
	return c
}
