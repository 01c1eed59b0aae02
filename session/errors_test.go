package session

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorText(t *testing.T) {
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{NewError("s", 3, 0, RuleSeqContiguous, "expected seq 2"), `session "s" seq 3: expected seq 2 [rule seq-contiguous]`},
		{NewError("a\"b", -1, 7, RuleJSON, "bad"), `session "a\"b" line 7: bad [rule json]`},
		{NewError("", 0, 2, RuleData, "x"), `line 2 seq 0: x [rule data]`},
		{NewError("", -1, 0, RuleData, "x"), `x [rule data]`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
	e := NewError("s", 3, 0, RuleSeqContiguous, "why")
	if got := e.ForSession("t").withLine(4).Error(); got != `session "t" line 4 seq 3: why [rule seq-contiguous]` {
		t.Errorf("ForSession/withLine: %q", got)
	}
	if e.Session != "s" || e.Line != 0 {
		t.Error("ForSession/withLine changed the original")
	}
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("publish: %w", NewError("s", 3, 0, RuleSeqContiguous, "why"))
	if !errors.Is(err, &Error{Rule: RuleSeqContiguous}) || errors.Is(err, &Error{Rule: RuleData}) {
		t.Error("Error.Is must match by rule")
	}
	ferr := fmt.Errorf("fork: %w", SessionNotFound("x"))
	if !errors.Is(ferr, &ForkError{Code: CodeSessionNotFound}) || errors.Is(ferr, &ForkError{Code: CodeOpenTurn}) {
		t.Error("ForkError.Is must match by code")
	}
	if errors.Is(err, &ForkError{}) || errors.Is(ferr, &Error{}) {
		t.Error("an Error is not a ForkError")
	}
}
