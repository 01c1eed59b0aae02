package publisher

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
)

// checkCurrent refuses, with an error wrapping ErrConflict and ErrSessionDeleted, to write into a
// session whose metadata is gone, being removed, or another incarnation's (ARCHITECTURE.md,
// "Deleting a session"). Other errors (reading the metadata failed) are returned as they are.
func (p *Publisher) checkCurrent(ctx context.Context, ss *store.Session, inc string) error {
	cctx, cancel := context.WithTimeout(ctx, p.opts.AttemptTimeout)
	defer cancel()
	err := ss.CheckCurrent(cctx, inc)
	if errors.Is(err, store.ErrSessionDeleted) {
		return fmt.Errorf("%w: %w", ErrConflict, &deletedError{err})
	}
	return err
}

// undoIfDeleted runs after a first record (guard 0) was stored at streamSeq: when the session was
// removed meanwhile, that record (the subject was empty, so it is this writer's) is purged again
// (without the purge right: left with the session marked removed, store.Session.LeaveRemoving)
// and an error wrapping ErrConflict and ErrSessionDeleted is returned. A failure to read the
// metadata is logged and the record counts as written.
func (p *Publisher) undoIfDeleted(ctx context.Context, ss *store.Session, inc string, streamSeq uint64) error {
	id := ss.ID()
	err := p.checkCurrent(ctx, ss, inc)
	if err == nil || !errors.Is(err, ErrSessionDeleted) {
		if err != nil {
			p.log.Warn("agentlog publisher: cannot check the session's metadata after its first record", "session", id, "error", err)
		}
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.AttemptTimeout)
	defer cancel()
	if _, perr := ss.PurgeThrough(pctx, streamSeq); perr != nil {
		// Credentials without the purge right (an agent's): the record stays, and the session is
		// left marked removed so that no read serves it; the operator's rm clears it.
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.AttemptTimeout)
		defer lcancel()
		if lerr := ss.LeaveRemoving(lctx, session.Header{ID: id}, inc); lerr != nil {
			return fmt.Errorf("%w; its first record, stream seq %d, is left without metadata (purging it failed: %v; marking it removed failed: %v)", err, streamSeq, perr, lerr)
		}
		return fmt.Errorf("%w; its first record, stream seq %d, is left marked removed (purging it failed: %v): remove it with agentlog rm", err, streamSeq, perr)
	}
	return fmt.Errorf("%w; its first record, stream seq %d, was removed again", err, streamSeq)
}

// deletedUnder replaces a fencing error by one wrapping ErrConflict and ErrSessionDeleted when
// the session was removed.
func (p *Publisher) deletedUnder(ctx context.Context, ss *store.Session, inc string, err error) error {
	if errors.Is(err, ErrSessionDeleted) {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.opts.AttemptTimeout)
	defer cancel()
	if cerr := ss.CheckCurrent(cctx, inc); errors.Is(cerr, store.ErrSessionDeleted) {
		return fmt.Errorf("%w: %w", ErrConflict, &deletedError{cerr}) // the guard's details say nothing more
	}
	return err
}

// deletedError is the cause of a write into a removed session: it matches ErrSessionDeleted.
type deletedError struct{ err error }

func (e *deletedError) Error() string   { return e.err.Error() }
func (e *deletedError) Unwrap() []error { return []error{ErrSessionDeleted, e.err} }
