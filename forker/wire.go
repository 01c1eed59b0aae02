package forker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/jsvalue"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// requestError is a bad request (code 400).
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

// badSourceError is a source whose stored log breaks a record rule (code 422).
type badSourceError struct{ msg string }

func (e *badSourceError) Error() string { return e.msg }

// childLeftError is a fork that failed after it wrote part of its child: the child's metadata
// with its record's outcome unknown, or its record without metadata. Its reply's body names the
// child (client.Error.Child).
type childLeftError struct {
	child string
	err   error
}

func (e *childLeftError) Error() string { return e.err.Error() }
func (e *childLeftError) Unwrap() error { return e.err }

// errorBody is the body of the error reply of err: {"child"} for a fork that may have left its
// child behind, else none.
func errorBody(err error) []byte {
	var cl *childLeftError
	if !errors.As(err, &cl) {
		return nil
	}
	body, _ := json.Marshal(struct {
		Child string `json:"child"`
	}{cl.child})
	return body
}

// wireError maps an error to a micro error code and description: a refusal's reference code and
// exact text (CodeInvalidSeed for a seed-validation refusal, which has no code).
func wireError(err error) (client.Code, string) {
	var fe *session.ForkError
	var re *requestError
	var bs *badSourceError
	switch {
	case errors.As(err, &fe):
		if fe.Code == "" {
			return client.CodeInvalidSeed, fe.Msg
		}
		return client.Code(fe.Code), fe.Msg
	case errors.As(err, &re):
		return client.CodeBadRequest, re.msg
	case errors.As(err, &bs):
		return client.CodeBadSource, bs.msg
	default:
		return client.CodeInternal, err.Error()
	}
}

// wireRequest is client.ForkRequest as read from the wire, with its boundary kept raw so that a
// boundary that is not an int64 (1.5, 1e300, "3") is refused with the reference's INVALID_BOUNDARY
// text. The outer Boundary shadows the embedded one in encoding/json.
type wireRequest struct {
	client.ForkRequest
	Boundary json.RawMessage `json:"boundary"`
}

// parseRequest decodes a request. The boundary error texts follow the reference's
// `fork boundary for session "<id>" must be a non-negative safe integer, got <value>`.
func parseRequest(data []byte) (client.ForkRequest, error) {
	var w wireRequest
	if err := json.Unmarshal(data, &w); err != nil {
		return client.ForkRequest{}, &requestError{fmt.Sprintf("bad request: not a JSON object {\"source\", \"boundary\"?, \"child\"?}: %v", err)}
	}
	// Before the decoded ids: decoding has turned invalid UTF-8 and lone surrogates into U+FFFD.
	if err := wire.CheckRawIDFields(data, "source", "child"); err != nil {
		return client.ForkRequest{}, &requestError{fmt.Sprintf("bad request: %v", err)}
	}
	if w.Source == "" {
		return client.ForkRequest{}, &requestError{"bad request: \"source\" is required"}
	}
	if len(w.Source) > wire.MaxSessionIDBytes {
		return client.ForkRequest{}, &requestError{fmt.Sprintf("bad request: source: %v", checkSource(w.Source))}
	}
	r := client.ForkRequest{Source: w.Source, Child: w.Child}
	raw := bytes.TrimSpace(w.Boundary)
	if len(raw) == 0 || string(raw) == "null" {
		return r, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return client.ForkRequest{}, &requestError{fmt.Sprintf("bad request: boundary: %v", err)}
	}
	var got string
	switch x := v.(type) {
	case json.Number:
		n = x
		if b, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
			r.Boundary = &b
			return r, nil
		}
		fl, err := strconv.ParseFloat(n.String(), 64)
		if err == nil && fl == math.Trunc(fl) && math.Abs(fl) < 1<<62 {
			b := int64(fl) // e.g. 3.0 or 3e0: an integer in JavaScript
			r.Boundary = &b
			return r, nil
		}
		got = jsvalue.NumberString(fl)
	case string:
		got = x
	case bool:
		got = strconv.FormatBool(x)
	default:
		return client.ForkRequest{}, &requestError{fmt.Sprintf("bad request: boundary %s is not a number", raw)}
	}
	return client.ForkRequest{}, &session.ForkError{Code: session.CodeInvalidBoundary,
		Msg: fmt.Sprintf("fork boundary for session %s must be a non-negative safe integer, got %s", wire.QuoteID(w.Source), got)}
}
