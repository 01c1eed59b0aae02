package session

import (
	"encoding/json"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// LookupJSON returns the raw JSON value at path in the JSON object data (path[0] a member of data,
// path[1] a member of that, ...), in one pass without allocating; the result aliases data. As in
// JSON.parse, the last of repeated names wins. ok is false for an empty path, a missing member, a
// value on the way that is not an object, or a syntax error on the path.
func LookupJSON(data []byte, path ...string) (value json.RawMessage, ok bool) {
	return jsvalue.Lookup(data, path...)
}

// StringIs reports whether the raw JSON value v is a string equal to s (escapes decoded).
func StringIs(v json.RawMessage, s string) bool { return jsvalue.StringIs(v, s) }

// SurfaceEligible reports whether events of type typ can be surface nodes (the reference's
// surface-eligible types: user/message, assistant/message, tool/result). DeriveMessages reads only
// surface nodes, so a reader that keeps these events of a log has all that deriving its messages
// needs.
func SurfaceEligible(typ string) bool { return isSurfaceType(typ) }
