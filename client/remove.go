package client

import (
	"context"
	"errors"

	"github.com/agentlog/agentlog/store"
)

// Removed is what Remove removed (the `agentlog rm --json` object): the session, its incarnation,
// whether its metadata was there, the records and events purged, the projection keys, the writer
// lease fenced, the error reports.
type Removed = store.Removed

// Remove deletes session id (the exact id, never a prefix): its records, metadata, projection
// states, writer lease and error reports; a live writer of it is fenced. The id can then be
// created again. It is a direct JetStream operation on the caller's connection, not a service
// request: the connection needs the operator's permissions (purge on stream AGENTLOG and
// AGENTLOG_ERRORS, KV writes and deletes on agentlog_sessions, agentlog_projections and
// agentlog_writers). How it stays safe against writers and forks: ARCHITECTURE.md, "Deleting a
// session". A Remove that failed half-way is finished by calling it again.
//
// An id with nothing stored is an *Error with CodeNotFound (errors.Is ErrNotFound); an invalid
// id one with CodeBadRequest; others wrap the store's error.
func (c *Client) Remove(ctx context.Context, id string) (Removed, error) {
	st, err := c.openStore(ctx)
	if err != nil {
		return Removed{}, err
	}
	ss, err := st.Session(id)
	if err != nil {
		return Removed{}, &Error{Code: CodeBadRequest, Session: id, Description: "remove", Err: err}
	}
	rm, err := ss.Remove(ctx)
	if errors.Is(err, store.ErrSessionNotFound) {
		return rm, &Error{Code: CodeNotFound, Session: id, Description: "remove", Err: err}
	}
	return rm, err
}
