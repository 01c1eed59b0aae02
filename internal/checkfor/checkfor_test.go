package checkfor

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestErr: nil once f holds (f called at once, then until it holds); f's last error, wrapped, when
// it never does. Holds: an error naming what while cond is false.
func TestErr(t *testing.T) {
	n := 0
	if err := Err(time.Minute, time.Millisecond, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Err = %v after %d calls, want nil after 3", err, n)
	}
	ok := false
	if err := Holds("ok", func() bool { return ok })(); err == nil || err.Error() != "not yet: ok" {
		t.Fatalf("Holds while false: %v", err)
	}
	if ok = true; Holds("ok", func() bool { return ok })() != nil {
		t.Fatal("Holds while true: an error")
	}
	last := errors.New("")
	n = 0
	err := Err(0, time.Millisecond, func() error { n++; last = errors.New(strings.Repeat("x", n)); return last })
	if !errors.Is(err, last) || n != 1 || !strings.Contains(err.Error(), "still failing after 0s: x") {
		t.Fatalf("Err = %v after %d calls, want the last error after 1", err, n)
	}
}
