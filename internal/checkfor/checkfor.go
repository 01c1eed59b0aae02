// Package checkfor waits in tests for a condition instead of sleeping, like nats-server's
// checkFor: f is called at once and then every wait until it returns nil, for at most total.
// It imports no agentlog package, so any package's tests can use it, internal ones included.
package checkfor

import (
	"fmt"
	"testing"
	"time"
)

// Check calls f until it returns nil. After total it fails t with f's last error.
func Check(t testing.TB, total, wait time.Duration, f func() error) {
	t.Helper()
	if err := Err(total, wait, f); err != nil {
		t.Fatal(err)
	}
}

// Holds adapts a condition with no error of its own to Check: its error, while cond is false,
// says that what does not hold yet.
func Holds(what string, cond func() bool) func() error {
	return func() error {
		if !cond() {
			return fmt.Errorf("not yet: %s", what)
		}
		return nil
	}
}

// Err is Check for code that has no t to fail (a goroutine, a helper that returns an error): nil as
// soon as f returns nil, else f's last error after total, with how long it waited.
func Err(total, wait time.Duration, f func() error) error {
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("still failing after %v: %w", total, err)
		}
		time.Sleep(wait)
	}
}
