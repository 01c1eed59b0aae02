package inspector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/projector"
	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go"
)

// The operator actions (AllowAdmin): rebuilding one session's projection unit.

// rebuildTimeout bounds one rebuild (a fold of the whole log).
const rebuildTimeout = 2 * time.Minute

// openAdmin attaches to the store and the built-in units for the operator actions.
func (s *Server) openAdmin(ctx context.Context, nc *nats.Conn) error {
	js, err := store.NewJetStream(nc, s.o.Domain)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, s.o.QueryTimeout)
	defer cancel()
	if s.store, err = store.Open(octx, js); err != nil {
		return fmt.Errorf("inspector: --allow-admin needs the agentlog stream and buckets: %w", err)
	}
	if s.reg, err = projector.NewRegistry(); err != nil {
		return err
	}
	return nil
}

// rebuiltPage is the result page of a rebuild.
type rebuiltPage struct {
	ID, Unit string
	Outcome  string // "rebuilt", "stopped", "empty"
	Elapsed  time.Duration
	View     *client.ProjectionReply // the unit as the query service serves it now (nil: cannot be read)
	Note     string
}

// handleRebuild recomputes the posted unit of the session from its log (projector.Rebuild, next
// to running projectors) and shows the outcome: rebuilt, stopped again by a rule the log breaks
// (with the seq and the rule), or nothing to do (no events). Only with AllowAdmin, a same-origin
// request and the page's CSRF token.
func (s *Server) handleRebuild(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.o.AllowAdmin {
		s.errorPage(w, r, http.StatusForbidden, "Not allowed", "Rebuilding a projection is an operator action: start agentlog ui with --allow-admin to enable it.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !s.csrfOK(r) {
		s.errorPage(w, r, http.StatusForbidden, "Forbidden", "The rebuild request is cross-origin or lacks the page's CSRF token: rebuild from the inspector's own page.")
		return
	}
	unit := r.PostFormValue("unit")
	if _, ok := s.reg.Unit(unit); !ok {
		s.errorPage(w, r, http.StatusBadRequest, "No such unit", fmt.Sprintf("There is no projection unit %q in this inspector (units: %v); nothing was rebuilt for session %q.", unit, s.reg.Keys(), id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), rebuildTimeout)
	defer cancel()
	if _, err := s.c.Header(ctx, id); err != nil { // an unknown or half-removed session: its page's error
		s.fail(w, r, id, err)
		return
	}
	start := time.Now()
	res, err := projector.Rebuild(ctx, s.store, s.reg, unit, []string{id}, nil)
	if err != nil {
		s.log.Error("inspector: rebuild failed", "session", id, "unit", unit, "err", err)
		status := http.StatusServiceUnavailable
		if errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		s.errorPage(w, r, status, "Rebuild failed", fmt.Sprintf("Rebuilding unit %s of session %q failed: %v", unit, id, err))
		return
	}
	p := rebuiltPage{ID: id, Unit: unit, Elapsed: time.Since(start).Round(time.Millisecond), Outcome: "rebuilt"}
	switch {
	case res.Stopped > 0:
		p.Outcome = "stopped"
	case res.Empty > 0:
		p.Outcome = "empty"
	case res.Sessions == 0:
		p.Outcome = "skipped" // being removed meanwhile
	}
	s.log.Info("inspector: rebuilt a projection unit", "session", id, "unit", unit, "outcome", p.Outcome, "remote", r.RemoteAddr)
	qctx, qcancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	defer qcancel()
	if v, err := s.c.Projection(qctx, id, unit); err == nil {
		p.View = &v
	} else if !errors.Is(err, client.ErrStopped) {
		p.Note = "The unit cannot be read back: " + err.Error()
	}
	s.render(w, http.StatusOK, "rebuilt.html", p)
}
