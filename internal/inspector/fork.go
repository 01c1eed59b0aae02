package inspector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/session"
)

// maxEditBytes bounds the replacement user message of an edit-then-fork.
const maxEditBytes = 256 << 10

// forkRefused is the page of a refused fork.
type forkRefused struct {
	ID, Code, Text string
	Status         int
}

// handleFork forks the session at the posted boundary ("" or absent: the last event) into the
// posted child id ("": a fresh one) and redirects to the confirmation page of the child. With
// edit=1 the posted message is a user message the child gets after its seed, in the same write
// (edit-then-fork). Only with AllowFork, a same-origin request and the page's CSRF token.
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.o.AllowFork {
		s.errorPage(w, r, http.StatusForbidden, "Read-only", "This inspector is read-only: start it with --allow-fork to fork sessions.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxEditBytes+64<<10)
	if !s.csrfOK(r) {
		s.errorPage(w, r, http.StatusForbidden, "Forbidden", "The fork request is cross-origin or lacks the page's CSRF token: fork from the inspector's own page.")
		return
	}
	req := client.ForkRequest{Source: id, Child: strings.TrimSpace(r.PostFormValue("child"))}
	if v := strings.TrimSpace(r.PostFormValue("boundary")); v != "" {
		b, err := strconv.ParseInt(v, 10, 64)
		if err != nil || b < 0 {
			s.errorPage(w, r, http.StatusBadRequest, "Bad fork boundary", fmt.Sprintf("fork boundary %q: want a seq (an integer >= 0)", v))
			return
		}
		req.Boundary = &b
	}
	var then []json.RawMessage
	if r.PostFormValue("edit") == "1" {
		text := strings.ReplaceAll(r.PostFormValue("message"), "\r\n", "\n")
		switch {
		case req.Boundary == nil:
			s.errorPage(w, r, http.StatusBadRequest, "No fork boundary", "An edit-then-fork needs the boundary it forks at (the turn end before the message it replaces).")
			return
		case strings.TrimSpace(text) == "":
			s.errorPage(w, r, http.StatusBadRequest, "Empty message", fmt.Sprintf("The replacement user message for a fork of session %q at seq %d is empty: nothing was forked.", id, *req.Boundary))
			return
		case len(text) > maxEditBytes:
			s.errorPage(w, r, http.StatusRequestEntityTooLarge, "Message too large", fmt.Sprintf("The replacement user message is %s, more than the %s an edit takes: nothing was forked.", byteSize(len(text)), byteSize(maxEditBytes)))
			return
		}
		then = []json.RawMessage{replacementMessage(text)}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var res client.ForkResult
	var err error
	if then != nil {
		res, err = forkThen(ctx, s.c, req, then)
	} else {
		res, err = s.c.Fork(ctx, req)
	}
	if err != nil {
		fr := forkRefused{ID: id, Text: err.Error(), Status: http.StatusServiceUnavailable}
		var ce *client.Error
		if errors.As(err, &ce) {
			fr.Code, fr.Text = string(ce.Code), ce.Description
			switch ce.Code {
			case client.CodeOpenTurn, client.CodeInvalidBoundary, client.CodeSessionNotFound, client.CodeSessionExists, client.CodeInvalidSeed, client.CodeBadRequest, client.CodeBadSource:
				fr.Status = http.StatusConflict
			}
		} else if errors.Is(err, errEditUnavailable) {
			fr.Code, fr.Status = "UNAVAILABLE", http.StatusNotImplemented
		}
		s.log.Warn("inspector: fork refused", "session", id, "err", err)
		s.render(w, fr.Status, "forkrefused.html", fr)
		return
	}
	s.log.Info("inspector: forked", "session", id, "child", res.Child, "seedLength", res.SeedLength, "then", len(then))
	http.Redirect(w, r, sessURL(res.Child)+"/forked", http.StatusSeeOther)
}

// replacementMessage is the user/message event an edit-then-fork appends after the seed (seq
// and time are the fork's): a text block, source user. The child ends at a turn boundary, so
// that resuming it needs no crash repair and its model view ends with this message.
func replacementMessage(text string) json.RawMessage {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	data, _ := json.Marshal(map[string]any{
		"id":      "edit-" + hex.EncodeToString(b),
		"role":    "user",
		"content": []map[string]string{{"type": "text", "text": text}},
		"source":  map[string]string{"kind": "user"},
	})
	ev, _ := json.Marshal(map[string]any{"type": "user/message", "surfaceOp": "append", "data": json.RawMessage(data)})
	return ev
}

// errEditUnavailable: this build's fork service client cannot send events after the seed.
var errEditUnavailable = errors.New("edit-then-fork is not available: the fork service client of this build cannot append events after the seed")

// forkThen forks req with then written after the child's seed, atomically (refused whole).
var forkThen = func(ctx context.Context, c *client.Client, req client.ForkRequest, then []json.RawMessage) (client.ForkResult, error) {
	return client.ForkResult{}, errEditUnavailable
}

// forkedPage is the confirmation page of a fork: the child, its parent and seed, and the events
// it got after its seed.
type forkedPage struct {
	ID, Parent string
	SeedLength int64
	Boundary   int64
	CreatedAt  int64
	After      []forkedEvent // the end-seed marker and what follows it
	Note       string
}

type forkedEvent struct {
	Seq        int64
	Type, Text string
}

// handleForked is the confirmation page after "fork from here": what was created (the child, its
// seed, the events after it) with links to the child and back to the parent at the boundary.
func (s *Server) handleForked(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), s.o.QueryTimeout)
	defer cancel()
	h, err := s.c.Header(ctx, id)
	if err != nil {
		s.fail(w, r, id, err)
		return
	}
	if h.ParentSession == "" || h.SeedLength == nil {
		s.errorPage(w, r, http.StatusNotFound, "Not a fork", fmt.Sprintf("Session %q is not a fork (its metadata names no parent): see %s.", id, sessURL(id)))
		return
	}
	p := forkedPage{ID: id, Parent: h.ParentSession, SeedLength: *h.SeedLength, Boundary: *h.SeedLength - 1, CreatedAt: h.CreatedAt}
	err = s.c.Events(ctx, id, client.EventsQuery{FromSeq: p.SeedLength}, func(ev session.Event) error {
		if len(p.After) >= 20 {
			return errStop
		}
		fe := forkedEvent{Seq: ev.Seq, Type: ev.Type}
		switch ev.Type {
		case "user/message":
			fe.Text = cut(userText(ev.Data), 400)
		case "session/end-seed":
			fe.Text = "end of the seed"
		}
		p.After = append(p.After, fe)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		p.Note = "The child's events cannot be read: " + err.Error()
	}
	s.render(w, http.StatusOK, "forked.html", p)
}

// parentAt is the URL of the parent's timeline at seq.
func parentAt(parent string, seq int64) string {
	return sessURL(parent) + "?seq=" + url.QueryEscape(strconv.FormatInt(seq, 10)) + "#seq-" + strconv.FormatInt(seq, 10)
}
