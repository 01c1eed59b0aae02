package client

import (
	"context"
	"errors"

	"github.com/agentlog/agentlog/store"
)

// SessionState is where a session's log lives and whether it is held: State is "active" or
// "archived"; Held with its reason under a legal hold.
type SessionState struct {
	State      string `json:"state"`
	Held       bool   `json:"held"`
	HoldReason string `json:"holdReason,omitempty"`
}

// State reads session id's state (store.Session.Locate) and hold. Errors: ErrBadRequest,
// ErrInternal.
func (c *Client) State(ctx context.Context, id string) (SessionState, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return SessionState{}, err
	}
	loc, err := ss.Locate(ctx)
	if err != nil {
		return SessionState{}, &Error{Code: CodeInternal, Session: id, Description: "locate the log", Err: err}
	}
	s := SessionState{State: StateActive}
	if loc.State == store.StateArchived {
		s.State = StateArchived
	}
	if h, err := ss.GetHold(ctx); err == nil {
		s.Held, s.HoldReason = true, h.Reason
	} else if !errors.Is(err, store.ErrNoHold) {
		return SessionState{}, &Error{Code: CodeInternal, Session: id, Description: "read the hold", Err: err}
	}
	return s, nil
}

// Restore brings archived session id back to the hot stream (store.Session.Restore: atomic,
// idempotent; a session that is not archived is left as it is). Errors: ErrBadRequest,
// ErrNotFound, ErrInternal.
func (c *Client) Restore(ctx context.Context, id string) (store.RestoreResult, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return store.RestoreResult{}, err
	}
	res, err := ss.Restore(ctx)
	switch {
	case errors.Is(err, store.ErrSessionNotFound):
		return res, notFoundError(id)
	case err != nil:
		return res, &Error{Code: CodeInternal, Session: id, Description: "restore", Err: err}
	}
	return res, nil
}
