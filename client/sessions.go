package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
)

// Direct reads: no service owns listing yet, so Sessions, Resolve, Status, Lineage, Header, Events,
// ErrorReports and WatchMessages read the streams and KV buckets through the connection (nats.go
// jetstream).
// Their errors are *Error with an empty Service.

// SessionInfo is one session of a listing. LastSeq is -1 for a session without events; Events is
// LastSeq+1 (seqs are contiguous from 0). CreatedAt is Unix ms; LastActivity is when the stream
// stored the session's last record, Unix ms (0: no events). Children are the ids of the
// sessions whose parentSession is this one, sorted.
type SessionInfo struct {
	ID            string   `json:"id"`
	CreatedAt     int64    `json:"createdAt"`
	LastActivity  int64    `json:"lastActivity,omitempty"`
	LastSeq       int64    `json:"lastSeq"`
	Events        int64    `json:"events"`
	ParentSession string   `json:"parentSession,omitempty"`
	SeedLength    *int64   `json:"seedLength,omitempty"`
	Children      []string `json:"children"`
	// Title, OpenTurn, Stopped (units) and Errored (agent/error reports) are filled with
	// SessionsQuery.Details (or a filter on them).
	Title      string   `json:"title,omitempty"` // cut at 256 bytes, marked "…" (TitleBytes: the whole title's length)
	TitleBytes int      `json:"titleBytes,omitempty"`
	OpenTurn   *int64   `json:"openTurn,omitempty"`
	Stopped    []string `json:"stopped,omitempty"`
	Errored    bool     `json:"errored,omitempty"`
	// State is "active" (its log in the hot stream, or no events) or "archived"; Held is true
	// under a legal hold.
	State string `json:"state"`
	Held  bool   `json:"held,omitempty"`
}

// SessionsQuery selects a listing: ids starting with Prefix, after the cursor After (exclusive;
// the cursor the previous page returned: an id in id order, "c:..." or "a:..." in the others), at most Limit
// (0: all), in the order Sort (SortID, the zero value; SortCreated, newest first; SortActivity,
// last activity first), and only the sessions that pass every filter set.
type SessionsQuery struct {
	Prefix string
	After  string
	Limit  int
	Sort   string

	State         string    // StateActive, StateArchived or StateHeld ("": any)
	Parent        string    // forks of this session only
	Title         string    // a substring of the title (case-insensitive)
	OpenTurn      bool      // sessions whose last turn is open
	Errored       bool      // sessions with agent/error reports (failed writes)
	Stopped       bool      // sessions with a stopped projection unit
	ActiveSince   time.Time // last activity at or after (zero: any)
	CreatedAfter  time.Time // created in this store at or after (zero: any)
	CreatedBefore time.Time // ... before (zero: any)
	// Details fills Title, OpenTurn, Stopped and Errored of each row (the filters on them do too).
	Details bool
}

// perRowLimit is the largest page whose last seqs are read with batched direct gets of the
// sessions' last records; a larger one reads every session's last record headers instead (one
// pass over the stream's last records, store.ScanTails).
const perRowLimit = 512

// Sessions lists the sessions that have metadata in agentlog_sessions (not those being removed:
// an rm stopped part-way), calling fn for each in id order, a page of up to 256 at a time (so
// output can stream). It returns the cursor of the next page (the last id given, "" when the
// listing is complete). An error from fn stops it and is returned as is.
//
// Cost: one pass over agentlog_sessions (ids, createdAt and parents: children need every
// parentSession), then the last record of each listed session: batched direct gets for a page
// of at most 512, else one headers-only pass over every session's last record.
func (c *Client) Sessions(ctx context.Context, q SessionsQuery, fn func(SessionInfo) error) (next string, err error) {
	if err := checkQuery(q); err != nil {
		return "", &Error{Code: CodeBadRequest, Description: err.Error()}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return "", err
	}
	// A small set named by an index (a parent's children, the held sessions), in any order.
	if q.Parent != "" || q.State == StateHeld {
		var toks []string
		if q.Parent != "" {
			ptok, err := wire.Token(q.Parent)
			if err != nil {
				return "", &Error{Code: CodeBadRequest, Session: q.Parent, Description: err.Error()}
			}
			links, err := st.ChildTokens(ctx, []string{ptok})
			if err != nil {
				return "", &Error{Code: CodeInternal, Description: "read the lineage index", Err: err}
			}
			toks, err = currentChildren(ctx, st, ptok, links[ptok])
			if err != nil {
				return "", err
			}
		} else {
			holds, err := st.Holds(ctx)
			if err != nil {
				return "", &Error{Code: CodeInternal, Description: "read the holds", Err: err}
			}
			for t := range holds {
				toks = append(toks, t)
			}
		}
		if q.Sort == SortID && q.After != "" {
			return "", &Error{Code: CodeBadRequest, Description: "sessions: a listing of a parent's forks or of the held sessions continues from a c: cursor"}
		}
		return sessionsFew(ctx, st, q, toks, fn)
	}
	switch q.Sort {
	case SortCreated:
		return sessionsCreated(ctx, st, q, fn)
	case SortActivity:
		return sessionsActivity(ctx, st, q, fn)
	}
	if q.needsDetails() || q.State != "" || !q.ActiveSince.IsZero() || !q.CreatedAfter.IsZero() || !q.CreatedBefore.IsZero() {
		return sessionsByIDFiltered(ctx, st, q, fn)
	}
	type lastSeqs struct {
		m   map[string]lastRecord
		err error
	}
	var pending chan lastSeqs
	if q.Limit == 0 || q.Limit > perRowLimit { // likely a large page: read the last records meanwhile
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		pending = make(chan lastSeqs, 1)
		go func() {
			m, err := scanLastSeqs(sctx, st)
			pending <- lastSeqs{m, err}
		}()
	}
	all, err := scanMeta(ctx, st, false)
	if err != nil {
		return "", err
	}
	children := childrenOf(all)
	rows := selectRows(all, q.Prefix, q.After)
	more := false
	if q.Limit > 0 && len(rows) > q.Limit {
		rows, more = rows[:q.Limit], true
	}
	var lastAll map[string]lastRecord
	if len(rows) > perRowLimit {
		if pending != nil {
			r := <-pending
			lastAll, err = r.m, r.err
		} else {
			lastAll, err = scanLastSeqs(ctx, st)
		}
		if err != nil {
			return "", err
		}
	}
	const page = 256
	for i := 0; i < len(rows); i += page {
		chunk := rows[i:min(i+page, len(rows))]
		last := lastAll
		if last == nil {
			if last, err = getLastSeqs(ctx, st, chunk); err != nil {
				return "", err
			}
		}
		cold, holds, err := coldRows(ctx, st, chunk, last)
		if err != nil {
			return "", err
		}
		for _, m := range chunk {
			lr, ok := last[m.token]
			state := string(store.StateActive)
			if !ok {
				lr.seq = -1
				if h, ok := cold[m.token]; ok {
					lr, state = lastRecord{seq: h.Events - 1, at: h.LastActivity}, string(store.StateArchived)
				}
			}
			m.decode()
			ls := lr.seq
			info := SessionInfo{ID: m.id, CreatedAt: m.createdAt, LastActivity: lr.at, LastSeq: ls, Events: ls + 1,
				ParentSession: m.parent, SeedLength: m.seedLength, Children: children[m.id], State: state}
			_, info.Held = holds[m.token]
			if info.Children == nil {
				info.Children = []string{}
			}
			if err := fn(info); err != nil {
				return "", err
			}
		}
	}
	if more {
		return rows[len(rows)-1].id, nil
	}
	return "", nil
}

// selectRows is the run of all (sorted by id) whose ids start with prefix and sort after after: a
// sub-slice, found by binary search (a listing of 100,000 sessions copies nothing).
func selectRows(all []meta, prefix, after string) []meta {
	cmpID := func(m meta, id string) int { return cmp.Compare(m.id, id) }
	lo, _ := slices.BinarySearchFunc(all, prefix, cmpID)
	a, found := slices.BinarySearchFunc(all, after, cmpID)
	if found {
		a++ // after itself is excluded
	}
	lo = max(lo, a)
	hi := lo
	for hi < len(all) && strings.HasPrefix(all[hi].id, prefix) {
		hi++
	}
	return all[lo:hi]
}

// SessionIDs returns the ids starting with prefix, in byte order, at most limit (0: all), from
// the keys of agentlog_sessions (one headers-only pass).
func (c *Client) SessionIDs(ctx context.Context, prefix string, limit int) ([]string, error) {
	st, err := c.openStore(ctx)
	if err != nil {
		return nil, err
	}
	all, err := scanMeta(ctx, st, true)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range all {
		if strings.HasPrefix(m.id, prefix) {
			if ids = append(ids, m.id); limit > 0 && len(ids) == limit {
				break
			}
		}
	}
	return ids, nil
}

// AmbiguousError is Resolve's error for a prefix that several session ids start with.
type AmbiguousError struct {
	Prefix     string
	Candidates []string // sorted; at most 20
	More       bool     // more candidates than listed
}

func (e *AmbiguousError) Error() string {
	s := fmt.Sprintf("session id prefix %q is ambiguous: %s", e.Prefix, strings.Join(e.Candidates, ", "))
	if e.More {
		s += ", ..."
	}
	return s
}

// Resolve returns the session id that idOrPrefix names: an id with metadata (or records, or
// being removed) wins, else the one id it is a prefix of. Errors: ErrBadRequest for a blank or
// invalid id, ErrNotFound, or an *AmbiguousError.
func (c *Client) Resolve(ctx context.Context, idOrPrefix string) (string, error) {
	if strings.TrimSpace(idOrPrefix) == "" {
		return "", &Error{Code: CodeBadRequest, Session: idOrPrefix, Description: "session id is blank"}
	}
	st, err := c.openStore(ctx)
	if err != nil {
		return "", err
	}
	ss, err := st.Session(idOrPrefix)
	if err != nil {
		return "", &Error{Code: CodeBadRequest, Session: idOrPrefix, Description: err.Error()}
	}
	_, err = ss.Info(ctx)
	if err == nil || errors.Is(err, store.ErrSessionDeleted) || errors.Is(err, store.ErrSessionIncomplete) {
		return idOrPrefix, nil // with metadata, or being removed or created (the command reports it)
	}
	if !errors.Is(err, store.ErrSessionNotFound) {
		return "", &Error{Code: CodeInternal, Session: idOrPrefix, Description: "resolve session id", Err: err}
	}
	if t, err := ss.Tail(ctx); err == nil && t.NextSeq > 0 {
		return idOrPrefix, nil // a log without metadata
	}
	ids, err := c.SessionIDs(ctx, idOrPrefix, 22)
	if err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		return "", &Error{Code: CodeNotFound, Session: idOrPrefix, Description: fmt.Sprintf("session %q not found (no id or id prefix)", idOrPrefix)}
	case 1:
		return ids[0], nil
	}
	return "", &AmbiguousError{Prefix: idOrPrefix, Candidates: ids[:min(len(ids), 20)], More: len(ids) > 20}
}

// openStore attaches to the provisioned agentlog once per Client.
func (c *Client) openStore(ctx context.Context) (*store.Store, error) {
	c.stMu.Lock()
	defer c.stMu.Unlock()
	if c.st != nil {
		return c.st, nil
	}
	js, err := store.NewJetStream(c.nc, c.base.domain)
	if err != nil {
		return nil, &Error{Code: CodeBadRequest, Description: "jetstream", Err: err}
	}
	st, err := store.Open(ctx, js)
	if err != nil {
		code, desc := CodeInternal, "open agentlog"
		switch {
		case errors.Is(err, store.ErrNotProvisioned):
			code = CodeUnavailable
		case errors.Is(err, nats.ErrNoResponders) && c.base.domain != "":
			// A leaf node cut off from its hub, or a domain that is not the hub's.
			code, desc = CodeUnavailable, fmt.Sprintf("open agentlog: no JetStream answered in domain %q (the domain of agentlog's server? through a leaf node: is it linked to the hub?)", c.base.domain)
		case errors.Is(err, nats.ErrNoResponders):
			code, desc = CodeUnavailable, "open agentlog: no JetStream answered (connected to a leaf node? give the hub's JetStream domain: client.Domain, --js-domain)"
		}
		return nil, &Error{Code: code, Description: desc, Err: err}
	}
	c.st = st
	return st, nil
}

// session opens the store and returns session id's handle; an invalid id is ErrBadRequest.
func (c *Client) session(ctx context.Context, id string) (*store.Session, error) {
	st, err := c.openStore(ctx)
	if err != nil {
		return nil, err
	}
	ss, err := st.Session(id)
	if err != nil {
		return nil, &Error{Code: CodeBadRequest, Session: id, Description: err.Error()}
	}
	return ss, nil
}

// notFoundError is ErrNotFound for session id, which has no metadata.
func notFoundError(id string) *Error {
	return &Error{Code: CodeNotFound, Session: id, Description: fmt.Sprintf("session %q not found", id)}
}

// lookup reads session id's metadata, the one check of every direct read of a session: found is
// false when it has none. A session being removed (its entry marked by an agentlog rm that
// stopped part-way, whatever else is left of it) is removingError, so no read serves it; a failed
// read is ErrInternal.
func lookup(ctx context.Context, ss *store.Session) (info store.SessionInfo, found bool, err error) {
	id := ss.ID()
	info, err = ss.Info(ctx)
	switch {
	case errors.Is(err, store.ErrSessionDeleted):
		return info, false, removingError(id)
	case errors.Is(err, store.ErrSessionIncomplete):
		// A fork child whose seed is still being written: not found (its partial log is not
		// read as a log without metadata either).
		return info, false, &Error{Code: CodeNotFound, Session: id, Description: IncompleteText(id)}
	case errors.Is(err, store.ErrSessionNotFound):
		return info, false, nil
	case err != nil:
		return info, false, &Error{Code: CodeInternal, Session: id, Description: "read session", Err: err}
	}
	return info, true, nil
}

// currentChildren keeps of the children linked to parent token ptok those created after the
// parent's metadata: a child created before it is a fork of a removed session of the same id.
func currentChildren(ctx context.Context, st *store.Store, ptok string, children []string) ([]string, error) {
	metas, err := st.SessionEntries(ctx, append([]string{ptok}, children...))
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read the forks' metadata", Err: err}
	}
	p, ok := metas[ptok]
	if !ok {
		return children, nil
	}
	var out []string
	for _, c := range children {
		if m, ok := metas[c]; ok && m.Revision > p.Revision {
			out = append(out, c)
		}
	}
	return out, nil
}

// meta is one session's entry in agentlog_sessions.
type meta struct {
	id, token  string
	rev        uint64 // its metadata revision: a session created later has a higher one
	createdAt  int64
	parent     string
	seedLength *int64
	raw        []byte // the header line, until decode reads createdAt from it (nil: done)
}

// decode reads createdAt from the header line, once (a listing decodes only the rows it shows).
func (e *meta) decode() {
	if e.raw != nil {
		if n, ok := scanInt(e.raw, `"createdAt"`); ok {
			e.createdAt = n
		} else {
			decodeMetaJSON(e.raw, e)
		}
		e.raw = nil
	}
}

// scanMeta reads the last entry of every key of agentlog_sessions (headers only with keysOnly)
// with batched direct gets (store.ScanSessions), drops deleted keys, keys being removed (marked wire.DeletingHeader:
// an rm stopped part-way; not found, as lookup says), fork children being written
// (wire.IncompleteHeader) and keys that are not tokens, and returns
// the sessions sorted by id.
func scanMeta(ctx context.Context, st *store.Store, keysOnly bool) ([]meta, error) {
	var out []meta
	err := st.ScanSessions(ctx, keysOnly, func(n uint64) {
		out = make([]meta, 0, n)
	}, func(se store.SessionEntry) error {
		if se.Header.Get(wire.DeletingHeader) != "" || se.Header.Get(wire.IncompleteHeader) != "" {
			return nil // being removed, or a fork child being written
		}
		id, err := wire.IDFromToken(se.Token)
		if err != nil {
			return nil // not a session key
		}
		e := meta{id: id, token: se.Token, rev: se.Revision}
		if !keysOnly {
			decodeMeta(se.Value, &e)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read KV bucket " + wire.SessionsBucket, Err: err}
	}
	slices.SortFunc(out, func(a, b meta) int { return cmp.Compare(a.id, b.id) })
	return out, nil
}

// decodeMeta reads parentSession and seedLength from a header line, and createdAt too when it
// has a parent. Without "parentSession" in it (most sessions), it only keeps the line: createdAt
// is read by decode, for the rows a listing shows (a listing reads 100,000 of them).
func decodeMeta(b []byte, e *meta) {
	if !bytes.Contains(b, []byte(`"parentSession"`)) {
		e.raw = b
		return
	}
	decodeMetaJSON(b, e)
}

// decodeMetaJSON reads createdAt, parentSession and seedLength with encoding/json.
func decodeMetaJSON(b []byte, e *meta) {
	var v struct {
		CreatedAt     json.Number  `json:"createdAt"`
		ParentSession string       `json:"parentSession"`
		SeedLength    *json.Number `json:"seedLength"`
	}
	if json.Unmarshal(b, &v) != nil {
		return
	}
	e.createdAt = jsonInt(v.CreatedAt)
	e.parent = v.ParentSession
	if v.SeedLength != nil {
		n := jsonInt(*v.SeedLength)
		e.seedLength = &n
	}
}

// scanInt finds the one occurrence of key (quoted) in b and the integer after its colon.
func scanInt(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i <= 0 || b[i-1] == '\\' || bytes.Contains(b[i+1:], []byte(key)) {
		return 0, false
	}
	rest := bytes.TrimLeft(b[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return 0, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	j := 0
	for j < len(rest) && (rest[j] >= '0' && rest[j] <= '9' || j == 0 && rest[j] == '-') {
		j++
	}
	if j < len(rest) && rest[j] != ',' && rest[j] != '}' && rest[j] != ' ' {
		return 0, false // a fraction or an exponent
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return n, err == nil
}

func jsonInt(n json.Number) int64 {
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, _ := n.Float64()
	return int64(f)
}

// childrenOf maps each parent id to its children's ids (sorted, as all is).
func childrenOf(all []meta) map[string][]string {
	revs := make(map[string]uint64, len(all))
	for _, m := range all {
		revs[m.id] = m.rev
	}
	ch := map[string][]string{}
	for _, m := range all {
		// A child created before its parent's metadata is a fork of a removed session of that id.
		if m.parent != "" && m.rev > revs[m.parent] {
			ch[m.parent] = append(ch[m.parent], m.id)
		}
	}
	return ch
}

// lastRecord is what a listing reads of a session's last record: the seq of its last event and
// when the stream stored it (Unix ms).
type lastRecord struct{ seq, at int64 }

// scanLastSeqs reads the headers of every session's last record: token -> last seq and time. (One
// consumer over agentlog.session.>: several over shares of the partitions were two to three
// times slower, the server scanning the stream once per filter.)
func scanLastSeqs(ctx context.Context, st *store.Store) (map[string]lastRecord, error) {
	var out map[string]lastRecord
	err := st.ScanTails(ctx, func(n uint64) {
		out = make(map[string]lastRecord, n)
	}, func(h nats.Header, stored time.Time) error {
		if last, ok := wire.RecordLastSeq(h); ok {
			lr := lastRecord{seq: last}
			if !stored.IsZero() {
				lr.at = stored.UnixMilli()
			}
			out[h.Get(wire.HeaderSession)] = lr
		}
		return nil
	})
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read stream " + wire.StreamName, Err: err}
	}
	return out, nil
}

// getLastSeqs reads the last records of rows with one batched direct get: token -> last seq and
// time.
func getLastSeqs(ctx context.Context, st *store.Store, rows []meta) (map[string]lastRecord, error) {
	out := map[string]lastRecord{}
	tokens := make([]string, 0, len(rows))
	for _, m := range rows {
		tokens = append(tokens, m.token)
	}
	err := st.TailsOf(ctx, tokens, func(h nats.Header, stored time.Time) error {
		if last, ok := wire.RecordLastSeq(h); ok {
			out[h.Get(wire.HeaderSession)] = lastRecord{seq: last, at: stored.UnixMilli()}
		}
		return nil
	})
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read the last records of stream " + wire.StreamName, Err: err}
	}
	return out, nil
}

// coldRows reads the archive heads of the rows without a hot record and the holds of every row
// (two batched direct gets).
func coldRows(ctx context.Context, st *store.Store, rows []meta, hot map[string]lastRecord) (map[string]wire.ArchiveHead, map[string]store.Hold, error) {
	var cold, all []string
	for _, m := range rows {
		all = append(all, m.token)
		if _, ok := hot[m.token]; !ok {
			cold = append(cold, m.token)
		}
	}
	heads, err := st.ArchiveHeads(ctx, cold)
	if err != nil {
		return nil, nil, &Error{Code: CodeInternal, Description: "read the archive heads", Err: err}
	}
	holds, err := st.HoldsFor(ctx, all)
	if err != nil {
		return nil, nil, &Error{Code: CodeInternal, Description: "read the holds", Err: err}
	}
	return heads, holds, nil
}
