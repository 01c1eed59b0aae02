package session

import (
	"encoding/json"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// LookupJSON returns the raw JSON value at path in the JSON object data: path[0] is a member of
// data, path[1] a member of that value, and so on. As in the reference's JSON.parse, the last of
// repeated member names wins, and names are compared after unescaping. ok is false when path is
// empty, when a member is missing, or when a value on the way is not an object. data is meant to be
// the data of an accepted event, which is valid JSON: the objects on the path are checked as they
// are read (ok false on a syntax error there), the rest of data is not.
//
// It reads without building anything: a projection unit that needs one or two fields of an event's
// data (say the chunk type of an assistant/chunk) finds them in one pass, allocation-free, instead
// of decoding the whole data with encoding/json. The value returned aliases data.
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
