package client

import (
	"context"

	"github.com/agentlog/agentlog/session"
)

// ForkBoundaries returns the valid fork boundaries of session id, in seq order: one range per
// turn end (a fork at any seq of it is accepted), each with the turn's first user message, plus a
// leading range for events before the first turn (session.ForkBoundary). It reads the log once,
// keeping one entry per turn (session.BoundaryScan, the rule the forker applies), and is what
// `agentlog forks` prints and the inspector's fork buttons offer. Errors: ErrBadRequest,
// ErrNotFound (neither metadata nor events; ErrRemoving too for a session being removed), and
// Events' errors.
func (c *Client) ForkBoundaries(ctx context.Context, id string) ([]session.ForkBoundary, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return nil, err
	}
	_, found, err := lookup(ctx, ss)
	if err != nil {
		return nil, err
	}
	scan := session.NewBoundaryScan()
	n := 0
	err = c.Events(ctx, id, EventsQuery{}, func(ev session.Event) error {
		scan.Add(&ev)
		n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found && n == 0 {
		return nil, notFoundError(id)
	}
	return scan.Boundaries(), nil
}
