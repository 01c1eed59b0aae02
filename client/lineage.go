package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	ajs "github.com/agentlog/agentlog/jetstream"
	"github.com/agentlog/agentlog/session"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// LineageNode is one session of a fork tree: its id, createdAt (Unix ms), parent ("" for the
// root), seedLength (nil: not a fork) and its children, sorted by id.
type LineageNode struct {
	ID            string         `json:"id"`
	CreatedAt     int64          `json:"createdAt"`
	ParentSession string         `json:"parentSession,omitempty"`
	SeedLength    *int64         `json:"seedLength,omitempty"`
	Children      []*LineageNode `json:"children"`
}

// Lineage is the fork tree a session belongs to. Root is its topmost ancestor that has metadata;
// Path the ids from Root down to the session. MissingParent is the parentSession of Root when that
// session has no metadata (removed). The tree holds at most MaxLineageNodes sessions; Truncated
// says that descendants were left out.
type Lineage struct {
	Root          *LineageNode `json:"root"`
	Path          []string     `json:"path"`
	MissingParent string       `json:"missingParent,omitempty"`
	Truncated     bool         `json:"truncated,omitempty"`
}

// MaxLineageNodes bounds the sessions of one Lineage tree.
const MaxLineageNodes = 1000

// Lineage returns the fork tree of session id: its ancestors up to the first without a parent
// (or whose parent has no metadata), and every descendant of that root, breadth first up to
// MaxLineageNodes. Cost: one pass over agentlog_sessions (every header's parentSession).
// Errors: ErrBadRequest (invalid id), ErrNotFound (no metadata), ErrInternal.
func (c *Client) Lineage(ctx context.Context, id string) (Lineage, error) {
	if _, err := ajs.Token(id); err != nil {
		return Lineage{}, &Error{Code: CodeBadRequest, Session: id, Description: err.Error()}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return Lineage{}, err
	}
	all, err := scanMeta(ctx, st, false)
	if err != nil {
		return Lineage{}, err
	}
	byID := make(map[string]meta, len(all))
	for _, m := range all {
		byID[m.id] = m
	}
	if _, ok := byID[id]; !ok {
		return Lineage{}, &Error{Code: CodeNotFound, Session: id, Description: fmt.Sprintf("session %q not found", id)}
	}
	var l Lineage
	path := []string{id}
	seen := map[string]bool{id: true}
	for cur := byID[id]; cur.parent != ""; {
		p, ok := byID[cur.parent]
		if !ok {
			l.MissingParent = cur.parent
			break
		}
		if seen[p.id] { // a cycle cannot be written by a fork; stop rather than loop
			break
		}
		seen[p.id] = true
		path = append([]string{p.id}, path...)
		cur = p
	}
	l.Path = path
	children := childrenOf(all)
	node := func(m meta) *LineageNode {
		return &LineageNode{ID: m.id, CreatedAt: m.createdAt, ParentSession: m.parent, SeedLength: m.seedLength, Children: []*LineageNode{}}
	}
	l.Root = node(byID[path[0]])
	queue, n := []*LineageNode{l.Root}, 1
	inTree := map[string]bool{l.Root.ID: true}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, cid := range children[cur.ID] {
			if inTree[cid] {
				continue
			}
			if n >= MaxLineageNodes {
				l.Truncated = true
				return l, nil
			}
			ch := node(byID[cid])
			inTree[cid] = true
			cur.Children = append(cur.Children, ch)
			queue = append(queue, ch)
			n++
		}
	}
	return l, nil
}

// Header returns session id's header as stored in agentlog_sessions (Raw keeps its bytes, so a
// JSONL written from it carries every field). Errors: ErrBadRequest, ErrNotFound, ErrInternal.
func (c *Client) Header(ctx context.Context, id string) (session.Header, error) {
	if _, err := ajs.Token(id); err != nil {
		return session.Header{}, &Error{Code: CodeBadRequest, Session: id, Description: err.Error()}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return session.Header{}, err
	}
	h, err := st.GetSession(ctx, id)
	if errors.Is(err, ajs.ErrSessionNotFound) {
		return session.Header{}, &Error{Code: CodeNotFound, Session: id, Description: fmt.Sprintf("session %q not found", id)}
	}
	if err != nil {
		return session.Header{}, &Error{Code: CodeInternal, Session: id, Description: "read session", Err: err}
	}
	return h, nil
}

// ErrorReports returns the last n (n > 0) agent/error reports of session id, oldest first, as
// stored in the AGENTLOG_ERRORS stream: JSON objects of publisher.ErrorReport ({type, session,
// firstSeq, lastSeq, error, time, writerId, fenced?, lost?}). A failed write is reported there,
// never written as a session event. Errors: ErrBadRequest, ErrInternal.
func (c *Client) ErrorReports(ctx context.Context, id string, n int) ([]json.RawMessage, error) {
	subject, err := ajs.ErrorsSubject(id)
	if err != nil || n <= 0 {
		if err == nil {
			err = fmt.Errorf("error reports: n %d, want > 0", n)
		}
		return nil, &Error{Code: CodeBadRequest, Session: id, Description: err.Error()}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return nil, err
	}
	var out []json.RawMessage
	err = scanStream(ctx, st.JS, ajs.ErrorsStream, subject, natsjs.DeliverAllPolicy, false, nil, func(m streamMsg) error {
		if len(out) == n {
			out = append(out[:0], out[1:]...)
		}
		out = append(out, append(json.RawMessage(nil), m.Data()...))
		return nil
	})
	if err != nil {
		return nil, &Error{Code: CodeInternal, Session: id, Description: "read stream " + ajs.ErrorsStream, Err: err}
	}
	return out, nil
}

// LastSeq returns the seq of session id's last event (-1: none), from its last record's headers
// (a direct get, which on a replicated stream may read a lagging follower). Errors:
// ErrBadRequest, ErrInternal.
func (c *Client) LastSeq(ctx context.Context, id string) (int64, error) {
	if _, err := ajs.Token(id); err != nil {
		return 0, &Error{Code: CodeBadRequest, Session: id, Description: err.Error()}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return 0, err
	}
	t, err := st.GetTail(ctx, id)
	if err != nil {
		return 0, &Error{Code: CodeInternal, Session: id, Description: "read the log's tail", Err: err}
	}
	return t.NextSeq - 1, nil
}
