package projector

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/jsvalue"
	"github.com/agentlog/agentlog/wire"
)

// queryError is an error reply of the query service: its code and description, which names the
// session.
type queryError struct {
	code client.Code
	desc string
	lost *client.DataLoss // CodeDataLoss: sent in client.DataLossHeader
}

func (e *queryError) Error() string { return e.desc }

// replyErr returns a *queryError of code, its description formatted.
func replyErr(code client.Code, format string, a ...any) error {
	return &queryError{code: code, desc: fmt.Sprintf(format, a...)}
}

// dataLossErr is the CodeDataLoss reply for session id, whose log lost l.
func dataLossErr(id string, l *client.DataLoss) error {
	return &queryError{code: client.CodeDataLoss, desc: client.DataLossText(id, *l), lost: l}
}

// wireError maps a handler's error about session id to a reply's code and description: a
// *queryError's own; a session being removed (errSessionRemoving) CodeRemoving, described by
// client.RemovingText; one with neither metadata nor records (errSessionGone) and ErrNoProjection
// CodeNotFound; anything else CodeInternal, with the error's text (which names the session).
func wireError(id string, err error) (client.Code, string) {
	var qe *queryError
	switch {
	case errors.As(err, &qe):
		return qe.code, qe.desc
	case errors.Is(err, errSessionRemoving):
		return client.CodeRemoving, client.RemovingText(id)
	case errors.Is(err, errSessionGone):
		return client.CodeNotFound, fmt.Sprintf("session %q: not found (removed, or never created)", id)
	case errors.Is(err, ErrNoProjection):
		return client.CodeNotFound, err.Error()
	default:
		return client.CodeInternal, err.Error()
	}
}

// parseQuery decodes and checks a request: the query and its session's token, or a "400".
func parseQuery(data []byte) (query, string, error) {
	var q query
	if err := json.Unmarshal(data, &q.QueryRequest); err != nil {
		// Name the session when the request names one, even if another field is wrong.
		var named struct {
			Session string `json:"session"`
		}
		where := ""
		if json.Unmarshal(data, &named) == nil && named.Session != "" {
			where = fmt.Sprintf("session %s: ", wire.QuoteID(named.Session))
		}
		return q, "", replyErr(client.CodeBadRequest, "bad request: %snot a JSON object {\"session\", \"minSeq\"?, \"timeoutMs\"?, \"unit\"?, \"nodes\"?}: %v", where, err)
	}
	// Before the decoded id: decoding has turned invalid UTF-8 and lone surrogates into U+FFFD.
	if err := wire.CheckRawIDFields(data, "session"); err != nil {
		return q, "", replyErr(client.CodeBadRequest, "bad request: %v", err)
	}
	if q.Session == "" {
		return q, "", replyErr(client.CodeBadRequest, "bad request: \"session\" is required")
	}
	token, err := wire.Token(q.Session)
	if err != nil {
		return q, "", replyErr(client.CodeBadRequest, "bad request: %v", err) // err names the id, bounded
	}
	// The protocol's integers are safe integers (JSON numbers as JavaScript reads them exactly).
	for _, f := range []struct {
		name string
		v    *int64
	}{{"minSeq", q.MinSeq}, {"timeoutMs", q.TimeoutMs}} {
		if f.v != nil && !safeInt(*f.v) {
			return q, "", replyErr(client.CodeBadRequest, "bad request: session %q: %s %d is not a safe integer (|n| ≤ 2^53 − 1)", q.Session, f.name, *f.v)
		}
	}
	for _, n := range q.Nodes {
		if !safeInt(n) {
			return q, "", replyErr(client.CodeBadRequest, "bad request: session %q: nodes: %d is not a safe integer (|n| ≤ 2^53 − 1)", q.Session, n)
		}
	}
	return q, token, nil
}

// safeInt reports whether n is a safe integer: |n| ≤ 2^53 − 1 (Number.MAX_SAFE_INTEGER).
func safeInt(n int64) bool { return n >= -jsvalue.MaxSafeInteger && n <= jsvalue.MaxSafeInteger }
