package client

import "context"

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
// Errors: ErrBadRequest (invalid id), ErrNotFound (no metadata; ErrRemoving too for a session
// being removed, which is left out of every tree), ErrInternal.
func (c *Client) Lineage(ctx context.Context, id string) (Lineage, error) {
	ss, err := c.session(ctx, id)
	if err != nil {
		return Lineage{}, err
	}
	all, err := scanMeta(ctx, ss.Store(), false)
	if err != nil {
		return Lineage{}, err
	}
	byID := make(map[string]meta, len(all))
	for _, m := range all {
		byID[m.id] = m
	}
	if _, ok := byID[id]; !ok {
		if _, _, err := lookup(ctx, ss); err != nil { // being removed: say so
			return Lineage{}, err
		}
		return Lineage{}, notFoundError(id)
	}
	var l Lineage
	path := []string{id}
	seen := map[string]bool{id: true}
	for cur := byID[id]; cur.parent != ""; {
		p, ok := byID[cur.parent]
		if !ok || p.rev > cur.rev { // none, or one created after its child: another session
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
		m.decode() // createdAt of a session that is not a fork (scanMeta leaves it in the line)
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
