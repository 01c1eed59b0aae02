package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/store"
)

// TestHints: the CLI adds the command that deals with a library error from the data the error
// carries (the libraries' texts name no command).
func TestHints(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&client.Error{Code: client.CodeRemoving, Session: "a b", Description: client.RemovingText("a b")}, "run `agentlog rm 'a b'` to finish"},
		{fmt.Errorf("status: %w", &client.Error{Code: client.CodeRemoving, Session: "s"}), "run `agentlog rm s` to finish"},
		{&client.Error{Service: client.ForkService, Code: client.CodeInternal, Session: "p", Child: "p~fork~1"},
			"child session \"p~fork~1\" may be left incomplete: check it with `agentlog events 'p~fork~1'` (`agentlog rm 'p~fork~1'` removes it)"},
		{fmt.Errorf("NATS at x: %w", fmt.Errorf("%w: stream AGENTLOG does not exist", store.ErrNotProvisioned)), "run `agentlog provision` or `agentlog dev` first"},
		{&client.Error{Code: client.CodeUnavailable, Description: "open agentlog", Err: store.ErrNotProvisioned}, "run `agentlog provision` or `agentlog dev` first"},
		{&client.Error{Code: client.CodeNotFound, Session: "s"}, ""},
		{&client.Error{Code: client.CodeRemoving}, ""}, // no session to name
		{errors.New("other"), ""},
	} {
		if got := hint(c.err); got != c.want {
			t.Errorf("hint(%v) = %q, want %q", c.err, got, c.want)
		}
		if got := withHint(c.err); c.want != "" && got.Error() != c.err.Error()+"; "+c.want || c.want == "" && got != c.err {
			t.Errorf("withHint(%v) = %v", c.err, got)
		}
	}
}
