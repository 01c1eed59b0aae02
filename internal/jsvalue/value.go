package jsvalue

import (
	"math"
	"strconv"
)

// Kind is the type of a JSON value.
type Kind uint8

// The kinds of Value. Undefined is the kind of a nil *Value.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
	Undefined
)

// Value is one JSON value. A nil *Value stands for JavaScript undefined (an absent property).
type Value struct {
	kind Kind
	b    bool
	n    float64
	s    string
	arr  []*Value
	keys []string // object keys in first-insertion order (duplicates collapse, the last value wins)
	vals []*Value
	idx  map[string]int // built for larger objects only
	raw  []byte         // the exact source bytes of this value; nil for synthesized values
	// lossy is true when this value or a descendant is a number that JSON cannot carry losslessly
	// (non-finite after parsing, such as 1e400, or negative zero).
	lossy bool
}

// NullValue is the shared JavaScript null.
var NullValue = &Value{kind: Null, raw: []byte("null")}

// NewNumber returns a number value; NewString a string value (WTF-8).
func NewNumber(f float64) *Value { return &Value{kind: Number, n: f} }
func NewString(s string) *Value  { return &Value{kind: String, s: s} }

// NewObject returns an empty object; NewArray an array of elems.
func NewObject() *Value               { return &Value{kind: Object} }
func NewArray(elems ...*Value) *Value { return &Value{kind: Array, arr: elems} }

// Kind returns v's kind, Undefined for nil.
func (v *Value) Kind() Kind {
	if v == nil {
		return Undefined
	}
	return v.kind
}

// Bool, Num and Str return the scalar of a non-nil boolean, number or string value (zero for
// other kinds).
func (v *Value) Bool() bool   { return v.b }
func (v *Value) Num() float64 { return v.n }
func (v *Value) Str() string  { return v.s }

// Elems returns an array's elements. Keys and Values return an object's keys in insertion order
// and their values, index for index. The slices are v's own: do not modify them.
func (v *Value) Elems() []*Value  { return v.arr }
func (v *Value) Keys() []string   { return v.keys }
func (v *Value) Values() []*Value { return v.vals }

// Raw returns the exact source bytes v was parsed from (nil for a synthesized value).
func (v *Value) Raw() []byte { return v.raw }

// Lossy reports whether v or a descendant is a number JSON cannot carry losslessly (non-finite
// after parsing, such as 1e400, or negative zero).
func (v *Value) Lossy() bool { return v.lossy }

// Set adds or replaces an object member (JSON.parse semantics: a repeated key keeps its first
// position and takes the last value).
func (v *Value) Set(key string, child *Value) {
	if i, ok := v.lookup(key); ok {
		v.vals[i] = child
		return
	}
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, child)
	if v.idx != nil {
		v.idx[key] = len(v.keys) - 1
	} else if len(v.keys) > 12 {
		v.idx = make(map[string]int, len(v.keys)*2)
		for i, k := range v.keys {
			v.idx[k] = i
		}
	}
}

func (v *Value) lookup(key string) (int, bool) {
	if v.idx != nil {
		i, ok := v.idx[key]
		return i, ok
	}
	for i, k := range v.keys {
		if k == key {
			return i, true
		}
	}
	return 0, false
}

// Field returns an own member of an object (nil when absent or when v is not an object).
func (v *Value) Field(key string) *Value {
	if v == nil || v.kind != Object {
		return nil
	}
	if i, ok := v.lookup(key); ok {
		return v.vals[i]
	}
	return nil
}

// HasOwn is Object.hasOwn for objects and arrays.
func (v *Value) HasOwn(key string) bool {
	if v == nil {
		return false
	}
	switch v.kind {
	case Object:
		_, ok := v.lookup(key)
		return ok
	case Array:
		i, ok := ArrayIndex(key)
		return ok && i < uint64(len(v.arr))
	}
	return false
}

// ownKeyCount is Object.keys(v).length for objects and arrays.
func (v *Value) ownKeyCount() int {
	switch v.kind {
	case Object:
		return len(v.keys)
	case Array:
		return len(v.arr)
	case String:
		return len(utf16Units(v.s))
	}
	return 0
}

// HasExactKeys reports whether v's own keys are exactly keys (in any order).
func HasExactKeys(v *Value, keys ...string) bool {
	if v.ownKeyCount() != len(keys) {
		return false
	}
	for _, k := range keys {
		if !v.HasOwn(k) {
			return false
		}
	}
	return true
}

// ArrayIndex reports whether key is a canonical array index ("0", "17"; not "01" or "-1").
func ArrayIndex(key string) (uint64, bool) {
	if key == "" || len(key) > 10 || (len(key) > 1 && key[0] == '0') {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(key); i++ {
		if !isDigit(key[i]) {
			return 0, false
		}
		n = n*10 + uint64(key[i]-'0')
	}
	return n, n <= 4294967294
}

// TypeError is the JavaScript TypeError that Get raises on undefined or null.
type TypeError struct{ msg string }

func (e *TypeError) Error() string { return e.msg }

// Get is JavaScript property access v[key]: a TypeError on undefined or null, undefined (nil)
// for a missing property.
func Get(v *Value, key string) (*Value, error) {
	if v == nil {
		return nil, &TypeError{"Cannot read properties of undefined (reading '" + key + "')"}
	}
	switch v.kind {
	case Null:
		return nil, &TypeError{"Cannot read properties of null (reading '" + key + "')"}
	case Object:
		return v.Field(key), nil
	case Array:
		if key == "length" {
			return NewNumber(float64(len(v.arr))), nil
		}
		if i, ok := ArrayIndex(key); ok && i < uint64(len(v.arr)) {
			return v.arr[i], nil
		}
	case String:
		units := utf16Units(v.s)
		if key == "length" {
			return NewNumber(float64(len(units))), nil
		}
		if i, ok := ArrayIndex(key); ok && i < uint64(len(units)) {
			return NewString(unitsString(units[i : i+1])), nil
		}
	}
	return nil, nil
}

// GetPath applies Get along a path, returning the first TypeError.
func GetPath(v *Value, keys ...string) (*Value, error) {
	var err error
	for _, k := range keys {
		if v, err = Get(v, k); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// IsObjectLike is typeof v === "object" && v !== null (objects and arrays).
func IsObjectLike(v *Value) bool { return v != nil && (v.kind == Object || v.kind == Array) }

// IsPlainObject is a non-null, non-array object.
func IsPlainObject(v *Value) bool { return v != nil && v.kind == Object }

// IsNullish is v == null (undefined or null).
func IsNullish(v *Value) bool { return v == nil || v.kind == Null }

// IsString is v === s; IsNonEmptyString is typeof v === "string" && v !== "".
func IsString(v *Value, s string) bool { return v != nil && v.kind == String && v.s == s }

func IsNonEmptyString(v *Value) bool { return v != nil && v.kind == String && v.s != "" }

// Truthy is JavaScript truthiness.
func Truthy(v *Value) bool {
	if v == nil {
		return false
	}
	switch v.kind {
	case Null:
		return false
	case Bool:
		return v.b
	case Number:
		return v.n != 0 && !math.IsNaN(v.n)
	case String:
		return v.s != ""
	}
	return true
}

// StrictEqual is JavaScript === for two values (objects compare by identity).
func StrictEqual(a, b *Value) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a == b {
		return true
	}
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case Null:
		return true
	case Bool:
		return a.b == b.b
	case Number:
		return a.n == b.n
	case String:
		return a.s == b.s
	}
	return false
}

// DeepEqual is structural equality of JSON values: arrays element by element, objects by key
// regardless of order, scalars with ===.
func DeepEqual(a, b *Value) bool {
	if StrictEqual(a, b) {
		return true
	}
	aArr, bArr := a != nil && a.kind == Array, b != nil && b.kind == Array
	if aArr || bArr {
		if !aArr || !bArr || len(a.arr) != len(b.arr) {
			return false
		}
		for i := range a.arr {
			if !DeepEqual(a.arr[i], b.arr[i]) {
				return false
			}
		}
		return true
	}
	if !IsObjectLike(a) || !IsObjectLike(b) {
		return false
	}
	if len(a.keys) != len(b.keys) {
		return false
	}
	for i, k := range a.keys {
		j, ok := b.lookup(k)
		if !ok || !DeepEqual(a.vals[i], b.vals[j]) {
			return false
		}
	}
	return true
}

// Spread is the object spread {...v}: a fresh object with v's own enumerable properties.
func Spread(v *Value) *Value {
	out := &Value{kind: Object}
	if v == nil {
		return out
	}
	switch v.kind {
	case Object:
		for i, k := range v.keys {
			out.Set(k, v.vals[i])
		}
	case Array:
		for i, e := range v.arr {
			out.Set(strconv.Itoa(i), e)
		}
	case String:
		units := utf16Units(v.s)
		for i := range units {
			out.Set(strconv.Itoa(i), NewString(unitsString(units[i:i+1])))
		}
	}
	return out
}
