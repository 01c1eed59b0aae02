package main

import (
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/store"
)

// hint is the command that deals with err, for the errors of the libraries that call for one
// (they say what is wrong and carry the data; the commands to run are the CLI's): "" for none.
func hint(err error) string {
	var ce *client.Error
	switch {
	case errors.Is(err, client.ErrRemoving) && errors.As(err, &ce) && ce.Session != "":
		return fmt.Sprintf("run `agentlog rm %s` to finish", shellquote.Quote(ce.Session))
	case errors.As(err, &ce) && ce.Child != "":
		c := shellquote.Quote(ce.Child)
		return fmt.Sprintf("child session %q may be left incomplete: check it with `agentlog events %s` (`agentlog rm %s` removes it)", ce.Child, c, c)
	case errors.Is(err, store.ErrNotProvisioned):
		return "run `agentlog provision` or `agentlog dev` first"
	}
	return ""
}

// withHint is err followed by its hint, if it has one.
func withHint(err error) error {
	if h := hint(err); h != "" {
		return &hinted{err, h}
	}
	return err
}

// hinted is an error with the command that deals with it.
type hinted struct {
	err  error
	hint string
}

func (e *hinted) Error() string { return e.err.Error() + "; " + e.hint }
func (e *hinted) Unwrap() error { return e.err }
