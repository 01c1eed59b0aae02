package session

import "strconv"

// Error renders e as `session "<id>"[ line L][ seq S]: <reason> [rule <rule>]`; an Error with no
// session (DeriveMessages does not know it) leaves `session "<id>"` out.
func (e *Error) Error() string {
	b := make([]byte, 0, 32+len(e.Session)+len(e.Reason)+len(e.Rule))
	if e.Session != "" {
		b = append(b, "session "...)
		b = strconv.AppendQuote(b, e.Session)
	}
	if e.Line > 0 {
		b = appendSpace(b)
		b = append(b, "line "...)
		b = strconv.AppendInt(b, int64(e.Line), 10)
	}
	if e.Seq >= 0 {
		b = appendSpace(b)
		b = append(b, "seq "...)
		b = strconv.AppendInt(b, e.Seq, 10)
	}
	if len(b) > 0 {
		b = append(b, ": "...)
	}
	b = append(b, e.Reason...)
	b = append(b, " [rule "...)
	b = append(b, e.Rule...)
	return string(append(b, ']'))
}

func appendSpace(b []byte) []byte {
	if len(b) > 0 {
		b = append(b, ' ')
	}
	return b
}

// Is reports whether target is an *Error with e's rule, so that
// errors.Is(err, &session.Error{Rule: session.RuleSeqContiguous}) matches by rule.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Rule == e.Rule
}

func (e *ForkError) Error() string { return e.Msg }

// Is reports whether target is a *ForkError with e's code, so that
// errors.Is(err, &session.ForkError{Code: session.CodeOpenTurn}) matches by code.
func (e *ForkError) Is(target error) bool {
	t, ok := target.(*ForkError)
	return ok && t.Code == e.Code
}

func newError(session string, seq int64, line int, rule Rule, why string) *Error {
	return &Error{Session: session, Seq: seq, Line: line, Rule: rule, Reason: why}
}

// NewError returns an *Error naming session, seq (-1: none), line (0: none) and rule, with the
// reason why: every refusal a user sees reads the same way (see Error.Error).
func NewError(session string, seq int64, line int, rule Rule, why string) *Error {
	return newError(session, seq, line, rule, why)
}

// ForSession returns a copy of e naming session instead (for a file imported under another id than
// its header's).
func (e *Error) ForSession(session string) *Error {
	if e == nil || e.Session == session {
		return e
	}
	c := *e
	c.Session = session
	return &c
}

// withLine returns a copy of e naming the JSONL line.
func (e *Error) withLine(line int) *Error {
	if e == nil || line <= 0 {
		return e
	}
	c := *e
	c.Line = line
	return &c
}

// jsQuote is the text `"${s}"` of a JavaScript template literal (no escaping at all).
func jsQuote(s string) string { return `"` + s + `"` }

// SessionNotFound is the reference's SESSION_NOT_FOUND fork refusal: `session "<id>" not found`.
func SessionNotFound(id string) *ForkError {
	return &ForkError{Code: CodeSessionNotFound, Msg: "session " + jsQuote(id) + " not found"}
}

// SessionAlreadyExists is the reference's SESSION_ALREADY_EXISTS fork refusal (checked before the
// source and the boundary): `session "<child>" already exists`.
func SessionAlreadyExists(child string) *ForkError {
	return &ForkError{Code: CodeSessionAlreadyExists, Msg: "session " + jsQuote(child) + " already exists"}
}
