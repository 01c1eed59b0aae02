// Package sessiontest is test support only: session-level helpers shared by the tests of several
// packages (event generators, comparisons, the recorded sessions in ../shared/data). It starts no
// servers, and production code does not import it (it links package testing); the benchmarks'
// event generator is loggen.ChunkTurn.
package sessiontest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/agentlog/agentlog/session"
)

// SameEvent compares two events field by field, raw JSON byte for byte; nil when they are equal.
func SameEvent(a, b session.Event) error {
	switch {
	case a.Type != b.Type:
		return fmt.Errorf("type %q != %q", a.Type, b.Type)
	case a.Seq != b.Seq:
		return fmt.Errorf("seq %d != %d", a.Seq, b.Seq)
	case a.Time != b.Time:
		return fmt.Errorf("seq %d: time %q != %q", a.Seq, a.Time, b.Time)
	case string(a.Data) != string(b.Data):
		return fmt.Errorf("seq %d: data\n%s\n!=\n%s", a.Seq, a.Data, b.Data)
	case string(a.SurfaceOp) != string(b.SurfaceOp):
		return fmt.Errorf("seq %d: surfaceOp %s != %s", a.Seq, a.SurfaceOp, b.SurfaceOp)
	case string(a.SourceEventSeqs) != string(b.SourceEventSeqs):
		return fmt.Errorf("seq %d: sourceEventSeqs %s != %s", a.Seq, a.SourceEventSeqs, b.SourceEventSeqs)
	case a.Ignorable != b.Ignorable:
		return fmt.Errorf("seq %d: ignorable %v != %v", a.Seq, a.Ignorable, b.Ignorable)
	}
	return nil
}

// JSONEqual reports whether two JSON texts are the same value (key order ignored, numbers as
// float64); it fails the test when either is not JSON.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("bad JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("bad JSON %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}
