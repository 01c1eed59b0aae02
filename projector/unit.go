package projector

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/agentlog/agentlog/session"
)

// Definition is one projection unit in its registered (untyped) form: the reference's
// ProjectionDefinition {key, stateVersion, init, apply, view}, plus Reads, the optional list of
// event types the unit reads. Build one with Def[S].Definition (or use Builtins).
//
// Key names the unit in the agentlog_projections bucket (key "<Key>.<token>") and in queries: 1..64
// characters of [A-Za-z0-9_-]. StateVersion (≥ 1) versions the stored state shape and the fold:
// a stored state with another stateVersion is discarded and rebuilt from the session log.
type Definition struct {
	Key          string
	StateVersion int
	// Reads lists the event types Apply is called for; nil means every event. Events of other
	// types advance the unit's asOfSeq without calling Apply.
	Reads []string

	init    func(h session.Header) any
	lineage bool // init reads the session header (Def.InitSession)
	apply   func(state any, ev *session.Scanned) (any, error)
	view    func(state any) any
	decode  func(raw []byte) (any, error)
	same    func(a, b any) bool // Apply returned its input unchanged (nil: sameState)
	gate    bool                // the messages unit: Surface.Apply, the log's rules, run before every other unit
	reads   map[string]bool
}

// Definer is anything that yields a Definition: a Def[S] or a Definition itself.
type Definer interface{ Definition() Definition }

// Definition returns d (so that a Definition is a Definer).
func (d Definition) Definition() Definition { return d }

// wants reports whether the unit's Apply is called for events of type typ.
func (d *Definition) wants(typ string) bool {
	if d.reads == nil {
		return true
	}
	if len(d.Reads) <= 8 {
		// A short list is faster to walk than to hash into (the decoder's common type strings are
		// constants, which compare by pointer).
		for _, t := range d.Reads {
			if t == typ {
				return true
			}
		}
		return false
	}
	return d.reads[typ]
}

// Def is a projection unit over a state of Go type S, which must round-trip through
// encoding/json (states are plain JSON when stored). Init returns the state before any event;
// InitSession, when set, is called instead, with the session's header from agentlog_sessions (its
// ID, and for a fork ParentSession and SeedLength), and Init may then be nil. Keep in the state
// what the fold needs from the header: a stored state is decoded, not started again.
// Apply folds one accepted event (the messages unit has already checked it against the log's
// rules) and returns the next state; for an event it ignores it returns its input unchanged, and
// then nothing further happens for that event (the state is not copied or re-encoded). Apply must
// be pure and must not modify its input in place when it returns a new state (copy maps and slices
// it changes). An error from Apply stops this unit for this session only: the stored value keeps
// the state as of the previous event and gains "error" naming the session, the seq and rule
// "unit-apply". ApplyScanned, when set, is called instead of Apply, with the event in the form
// its decoder left it (session.Scanned): reading its data through Field or Lookup costs no second
// parse. View turns a state into what queries return (nil: the state itself).
type Def[S any] struct {
	Key          string
	StateVersion int
	Reads        []string
	Init         func() S
	InitSession  func(h session.Header) S
	Apply        func(state S, ev session.Event) (S, error)
	ApplyScanned func(state S, ev *session.Scanned) (S, error)
	View         func(state S) any
}

// Definition converts d to its registered form.
func (d Def[S]) Definition() Definition {
	def := Definition{Key: d.Key, StateVersion: d.StateVersion, Reads: d.Reads}
	switch {
	case d.InitSession != nil:
		def.init, def.lineage = func(h session.Header) any { return d.InitSession(h) }, true
	case d.Init != nil:
		def.init = func(session.Header) any { return d.Init() }
	}
	// An unchanged state of a comparable type is handed back as the interface it came in, so that
	// an event the unit ignores costs no new box (and unchanged sees the same value).
	comparable := plainComparable(reflect.TypeFor[S](), 0)
	switch {
	case d.ApplyScanned != nil:
		def.apply = func(state any, ev *session.Scanned) (any, error) {
			s, _ := state.(S)
			next, err := d.ApplyScanned(s, ev)
			if comparable && err == nil && any(next) == any(s) {
				return state, nil
			}
			return next, err
		}
	case d.Apply != nil:
		def.apply = func(state any, ev *session.Scanned) (any, error) {
			s, _ := state.(S)
			next, err := d.Apply(s, ev.Event)
			if comparable && err == nil && any(next) == any(s) {
				return state, nil
			}
			return next, err
		}
	}
	def.view = func(state any) any {
		s, _ := state.(S)
		if d.View == nil {
			return s
		}
		return d.View(s)
	}
	if comparable {
		// == on the interface values is the same shallow identity as sameState, without reflection.
		def.same = func(a, b any) bool { return a == b }
	}
	def.decode = func(raw []byte) (any, error) {
		var s S
		if d.Init != nil {
			s = d.Init()
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return s, nil
	}
	return def
}

// unchanged reports whether Apply returned its input unchanged (see sameState).
func (d *Definition) unchanged(next, prev any) bool {
	if d.same != nil {
		return d.same(next, prev)
	}
	return sameState(next, prev)
}

// plainComparable reports whether == on values of t never panics and compares what sameState
// does: scalars, strings, pointers and channels, and arrays and structs of those (no interfaces,
// whose dynamic values may not be comparable).
func plainComparable(t reflect.Type, depth int) bool {
	if depth > 8 {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.String,
		reflect.Pointer, reflect.Chan, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return plainComparable(t.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !plainComparable(t.Field(i).Type, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// sameState reports whether Apply returned its input unchanged: shallow identity, i.e. the same
// pointers, maps and slices (same backing array and length) and equal scalars, field by field.
func sameState(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if !va.IsValid() || !vb.IsValid() {
		return !va.IsValid() && !vb.IsValid()
	}
	if va.Type() != vb.Type() {
		return false
	}
	return sameValue(va, vb, 0)
}

func sameValue(va, vb reflect.Value, depth int) bool {
	if depth > 8 {
		return false
	}
	switch va.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return va.UnsafePointer() == vb.UnsafePointer()
	case reflect.Slice:
		return va.Len() == vb.Len() && (va.Len() == 0 || va.UnsafePointer() == vb.UnsafePointer())
	case reflect.Interface:
		if va.IsNil() || vb.IsNil() {
			return va.IsNil() && vb.IsNil()
		}
		ea, eb := va.Elem(), vb.Elem()
		return ea.Type() == eb.Type() && sameValue(ea, eb, depth+1)
	case reflect.Struct:
		for i := 0; i < va.NumField(); i++ {
			if !sameValue(va.Field(i), vb.Field(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Array:
		for i := 0; i < va.Len(); i++ {
			if !sameValue(va.Index(i), vb.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Bool:
		return va.Bool() == vb.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return va.Int() == vb.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return va.Uint() == vb.Uint()
	case reflect.Float32, reflect.Float64:
		return va.Float() == vb.Float()
	case reflect.String:
		return va.String() == vb.String()
	case reflect.Complex64, reflect.Complex128:
		return va.Complex() == vb.Complex()
	}
	return false
}

// Registry holds the projection units a projector maintains, in registration order. The zero
// value is not usable; use NewRegistry. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	units []*Definition
	byKey map[string]*Definition
}

// NewRegistry returns a registry holding the built-in units (Builtins) followed by extra.
func NewRegistry(extra ...Definer) (*Registry, error) {
	r := &Registry{byKey: map[string]*Definition{}}
	for _, d := range append(Builtins(), extra...) {
		if err := r.Register(d); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ErrUnitExists is returned (wrapped) by Register for a key already registered.
var ErrUnitExists = errors.New("projector: projection unit already registered")

// Register adds a unit. It refuses a key that is empty, longer than 64 bytes or not
// [A-Za-z0-9_-] (it is a KV key token), a stateVersion below 1, a missing Init (and InitSession)
// or Apply (and ApplyScanned), and a key already registered (ErrUnitExists). Register units before Start: a running projector folds
// only the units registered when it loaded a session.
func (r *Registry) Register(u Definer) error {
	d := u.Definition()
	if err := checkUnitKey(d.Key); err != nil {
		return err
	}
	if d.StateVersion < 1 {
		return fmt.Errorf("projector: unit %q: stateVersion must be >= 1, got %d", d.Key, d.StateVersion)
	}
	if !d.gate && (d.init == nil || d.apply == nil) {
		return fmt.Errorf("projector: unit %q: Init (or InitSession) and Apply (or ApplyScanned) are required", d.Key)
	}
	if d.Reads != nil {
		d.reads = map[string]bool{}
		for _, t := range d.Reads {
			d.reads[t] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byKey[d.Key]; ok {
		return fmt.Errorf("%w: %q", ErrUnitExists, d.Key)
	}
	r.units = append(r.units, &d)
	r.byKey[d.Key] = &d
	return nil
}

// Keys returns the registered unit keys in registration order ("messages" first).
func (r *Registry) Keys() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	keys := make([]string, len(r.units))
	for i, d := range r.units {
		keys[i] = d.Key
	}
	return keys
}

// Unit returns the registered unit with key, and whether there is one.
func (r *Registry) Unit(key string) (Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.byKey[key]
	if !ok {
		return Definition{}, false
	}
	return *d, true
}

// list returns the registered units (shared pointers; Definitions are immutable once registered).
func (r *Registry) list() []*Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.units)
}

func (r *Registry) get(key string) *Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byKey[key]
}

func checkUnitKey(k string) error {
	if k == "" || len(k) > 64 {
		return fmt.Errorf("projector: unit key %q: want 1..64 characters of [A-Za-z0-9_-]", k)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("projector: unit key %q: character %q is not allowed (want [A-Za-z0-9_-], it is a KV key token)", k, c)
		}
	}
	return nil
}
