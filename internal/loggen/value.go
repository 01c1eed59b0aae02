package loggen

import (
	"strconv"

	"github.com/agentlog/agentlog/internal/jsvalue"
)

// This file holds the tiny ordered JSON model the generator builds events with. Objects keep their
// key order (like a JavaScript object read by JSON.parse) and may hold duplicate keys or raw byte
// values on purpose, so that the corrupter can write things encoding/json would never produce
// (duplicate keys, -0, 1e400, NaN, invalid UTF-8).

// Obj is a JSON object with ordered keys. Duplicate keys are allowed and written as they are.
type Obj []KV

// KV is one key/value pair of an Obj.
type KV struct {
	K string
	V any
}

// Raw is a JSON value written verbatim (it may be invalid JSON on purpose).
type Raw []byte

// Arr is a JSON array.
type Arr []any

// Get returns the value of the last pair named k (JSON.parse keeps the last duplicate) and whether
// it exists.
func (o Obj) Get(k string) (any, bool) {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].K == k {
			return o[i].V, true
		}
	}
	return nil, false
}

// Set replaces the value of every pair named k, or appends the pair when there is none.
func (o Obj) Set(k string, v any) Obj {
	found := false
	for i := range o {
		if o[i].K == k {
			o[i].V = v
			found = true
		}
	}
	if !found {
		o = append(o, KV{k, v})
	}
	return o
}

// Del removes every pair named k.
func (o Obj) Del(k string) Obj {
	out := o[:0:0]
	for _, kv := range o {
		if kv.K != k {
			out = append(out, kv)
		}
	}
	return out
}

// Clone deep-copies a value of the model (Obj, Arr, Raw, scalars).
func Clone(v any) any {
	switch x := v.(type) {
	case Obj:
		out := make(Obj, len(x))
		for i, kv := range x {
			out[i] = KV{kv.K, Clone(kv.V)}
		}
		return out
	case Arr:
		out := make(Arr, len(x))
		for i, e := range x {
			out[i] = Clone(e)
		}
		return out
	case []int64:
		return append([]int64(nil), x...)
	case Raw:
		return append(Raw(nil), x...)
	default:
		return v
	}
}

// AppendJSON appends the compact JSON text of v to b; strings as JSON.stringify writes them
// (jsvalue.AppendQuote). Generated strings are valid UTF-8: Raw carries invalid bytes.
func AppendJSON(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case float64:
		return strconv.AppendFloat(b, x, 'g', -1, 64)
	case string:
		return jsvalue.AppendQuote(b, x)
	case Raw:
		return append(b, x...)
	case []int64:
		return jsvalue.AppendInts(b, x)
	case Arr:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSON(b, e)
		}
		return append(b, ']')
	case []any:
		return AppendJSON(b, Arr(x))
	case Obj:
		b = append(b, '{')
		for i, kv := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsvalue.AppendQuote(b, kv.K)
			b = append(b, ':')
			b = AppendJSON(b, kv.V)
		}
		return append(b, '}')
	default:
		panic("loggen: unsupported value type")
	}
}

// JSON returns the compact JSON text of v.
func JSON(v any) []byte { return AppendJSON(nil, v) }
