package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Orders of a listing (SessionsQuery.Sort). What each costs at a million sessions: ARCHITECTURE.md,
// "Listing and search".
const (
	// SortID is byte order of the ids (the zero value): one pass over every header.
	SortID = "id"
	// SortCreated is newest first, by when the session was created in this store (the order of
	// agentlog_sessions' stream): a page reads only its rows.
	SortCreated = "created"
	// SortActivity is by last activity, newest first: the sessions with records in the hot stream
	// (one headers-only pass over their last records: its cost grows with the hot sessions), then
	// the archived ones by when they were archived (a page reads only its rows). Sessions without
	// events have no activity and are not listed.
	SortActivity = "activity"
)

// States a listing filters on (SessionsQuery.State).
const (
	StateActive   = "active"
	StateArchived = "archived"
	StateHeld     = "held"
)

// needsDetails reports whether q filters on what the projections or the error reports hold.
func (q SessionsQuery) needsDetails() bool {
	return q.Details || q.OpenTurn || q.Stopped || q.Errored || q.Title != ""
}

// hasFilter reports whether q filters rows at all.
func (q SessionsQuery) hasFilter() bool {
	return q.needsDetails() || q.State != "" || q.Parent != "" || !q.ActiveSince.IsZero() || !q.CreatedAfter.IsZero() || !q.CreatedBefore.IsZero() || q.Prefix != ""
}

// checkQuery refuses a query it cannot answer.
func checkQuery(q SessionsQuery) error {
	switch q.Sort {
	case "", SortID, SortCreated, SortActivity:
	default:
		return fmt.Errorf("sessions: sort %q, want id, created or activity", q.Sort)
	}
	switch q.State {
	case "", StateActive, StateArchived, StateHeld:
	default:
		return fmt.Errorf("sessions: state %q, want active, archived or held", q.State)
	}
	if q.Limit < 0 {
		return fmt.Errorf("sessions: limit %d, want >= 0", q.Limit)
	}
	if q.After != "" && (q.Sort == SortCreated || q.Parent != "" || q.State == StateHeld) && !strings.HasPrefix(q.After, "c:") ||
		q.After != "" && q.Sort == SortActivity && !strings.HasPrefix(q.After, "a:") {
		return fmt.Errorf("sessions: after %q: this listing continues from the cursor its previous page gave", q.After)
	}
	return nil
}

// row is one session of an indexed listing being resolved.
type row struct {
	meta
	seq  uint64 // its entry's stream seq in agentlog_sessions (creation order)
	info SessionInfo
	ok   bool
}

// resolve fills rows' SessionInfo (last seq and activity, state, hold; with details the title,
// open turn, stopped units and error reports) with batched direct gets, and reports for each
// whether it passes q's filters. Children are not filled (emit does, for the rows it gives).
func resolve(ctx context.Context, st *store.Store, q SessionsQuery, rows []*row) error {
	if len(rows) == 0 {
		return nil
	}
	toks := make([]string, len(rows))
	subjects := make([]string, len(rows))
	for i, r := range rows {
		toks[i] = r.token
		subjects[i] = wire.SubjectPrefix + "." + strconv.Itoa(wire.Partition(r.token, st.Partitions())) + "." + r.token
	}
	hot := map[string]lastRecord{}
	msgs, err := st.LastMsgs(ctx, wire.StreamName, subjects)
	if err != nil {
		return &Error{Code: CodeInternal, Description: "read the last records of stream " + wire.StreamName, Err: err}
	}
	for _, m := range msgs {
		if last, ok := wire.RecordLastSeq(m.Header); ok {
			hot[m.Header.Get(wire.HeaderSession)] = lastRecord{seq: last, at: m.Time.UnixMilli()}
		}
	}
	var cold []string
	for _, t := range toks {
		if _, ok := hot[t]; !ok {
			cold = append(cold, t)
		}
	}
	heads, err := st.ArchiveHeads(ctx, cold)
	if err != nil {
		return &Error{Code: CodeInternal, Description: "read the archive heads", Err: err}
	}
	holds, err := st.HoldsFor(ctx, toks)
	if err != nil {
		return &Error{Code: CodeInternal, Description: "read the holds", Err: err}
	}
	var details map[string]rowDetails
	if q.needsDetails() {
		if details, err = readDetails(ctx, st, toks, heads); err != nil {
			return err
		}
	}
	for _, r := range rows {
		r.decode()
		lr, isHot := hot[r.token]
		state := StateActive
		if !isHot {
			lr.seq = -1
			if h, ok := heads[r.token]; ok {
				lr, state = lastRecord{seq: h.Events - 1, at: h.LastActivity}, StateArchived
			}
		}
		r.info = SessionInfo{ID: r.id, CreatedAt: r.createdAt, LastActivity: lr.at, LastSeq: lr.seq, Events: lr.seq + 1,
			ParentSession: r.parent, SeedLength: r.seedLength, Children: []string{}, State: state}
		_, r.info.Held = holds[r.token]
		if d, ok := details[r.token]; ok {
			r.info.Title, r.info.OpenTurn, r.info.Stopped, r.info.Errored = d.title, d.openTurn, d.stopped, d.errored
			if d.bytes > len(d.title) {
				r.info.TitleBytes = d.bytes
			}
		}
		r.ok = keep(q, r.info)
	}
	return nil
}

// keep reports whether info passes q's filters.
func keep(q SessionsQuery, info SessionInfo) bool {
	switch {
	case q.Prefix != "" && !strings.HasPrefix(info.ID, q.Prefix):
	case q.State == StateActive && info.State != StateActive, q.State == StateArchived && info.State != StateArchived, q.State == StateHeld && !info.Held:
	case q.Parent != "" && info.ParentSession != q.Parent:
	case !q.ActiveSince.IsZero() && info.LastActivity < q.ActiveSince.UnixMilli():
	case q.OpenTurn && info.OpenTurn == nil:
	case q.Stopped && len(info.Stopped) == 0:
	case q.Errored && !info.Errored:
	case q.Title != "" && !strings.Contains(strings.ToLower(info.Title), strings.ToLower(q.Title)):
	default:
		return true
	}
	return false
}

// rowDetails is what a listing shows of a session's projections and error reports.
type rowDetails struct {
	title    string
	bytes    int // the whole title's length
	openTurn *int64
	stopped  []string
	errored  bool
}

// readDetails reads the projection states (hot sessions) or archive heads (archived ones) and the
// error reports of toks: three batched direct gets.
func readDetails(ctx context.Context, st *store.Store, toks []string, heads map[string]wire.ArchiveHead) (map[string]rowDetails, error) {
	out := map[string]rowDetails{}
	prefix := "$KV." + wire.ProjectionsBucket + "."
	var filters, errs []string
	for _, t := range toks {
		if h, ok := heads[t]; ok {
			out[t] = rowDetails{title: h.Listing.Title, openTurn: h.Listing.OpenTurn, stopped: h.Listing.Stopped}
		} else {
			filters = append(filters, prefix+"*."+t)
		}
		errs = append(errs, wire.ErrorsPrefix+"."+t)
	}
	msgs, err := st.LastMsgs(ctx, "KV_"+wire.ProjectionsBucket, filters)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read the projection states", Err: err}
	}
	for _, m := range msgs {
		if kvMarker(m.Header) {
			continue
		}
		rest := strings.TrimPrefix(m.Subject, prefix)
		unit, tok, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		var v struct {
			State json.RawMessage  `json:"state"`
			Error *ProjectionError `json:"error"`
		}
		if json.Unmarshal(m.Data, &v) != nil {
			continue
		}
		d := out[tok]
		if v.Error != nil {
			d.stopped = append(d.stopped, unit)
			slices.Sort(d.stopped)
		}
		switch unit {
		case "title":
			var t struct {
				Title *string `json:"title"`
			}
			if json.Unmarshal(v.State, &t) == nil && t.Title != nil {
				d.title, d.bytes = wire.CutTitle(*t.Title), len(*t.Title)
			}
		case "messages":
			var s State
			if json.Unmarshal(v.State, &s) == nil {
				d.openTurn = s.OpenTurn
			}
		}
		out[tok] = d
	}
	em, err := st.LastMsgs(ctx, wire.ErrorsStream, errs)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read stream " + wire.ErrorsStream, Err: err}
	}
	for _, m := range em {
		tok := strings.TrimPrefix(m.Subject, wire.ErrorsPrefix+".")
		d := out[tok]
		d.errored = true
		out[tok] = d
	}
	return out, nil
}

// emit gives rows that passed to fn (their children read in one batch), at most limit in all
// (0: no limit); it returns how many it gave.
func emit(ctx context.Context, st *store.Store, rows []*row, limit, given int, fn func(SessionInfo) error) (int, *row, error) {
	var kept []*row
	for _, r := range rows {
		if r.ok && (limit == 0 || given+len(kept) < limit) {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return 0, nil, nil
	}
	ids := make([]string, len(kept))
	for i, r := range kept {
		ids[i] = r.id
	}
	children, err := childrenIndexed(ctx, st, ids)
	if err != nil {
		return 0, nil, err
	}
	for _, r := range kept {
		if cs := children[r.id]; cs != nil {
			r.info.Children = cs
		}
		if err := fn(r.info); err != nil {
			return 0, nil, err
		}
	}
	return len(kept), kept[len(kept)-1], nil
}

// sessionsCreated lists newest first by creation: windows of agentlog_sessions' stream read
// backwards from the cursor (c:<stream seq>, exclusive) or its end, each resolved in one batch.
func sessionsCreated(ctx context.Context, st *store.Store, q SessionsQuery, fn func(SessionInfo) error) (string, error) {
	kv, err := st.JetStream().Stream(ctx, "KV_"+wire.SessionsBucket)
	if err != nil {
		return "", &Error{Code: CodeInternal, Description: "look up KV bucket " + wire.SessionsBucket, Err: err}
	}
	state := kv.CachedInfo().State
	if state.Msgs == 0 {
		return "", nil
	}
	hi, lo := state.LastSeq, state.FirstSeq
	if q.After != "" {
		n, err := strconv.ParseUint(q.After[2:], 10, 64)
		if err != nil || n == 0 {
			return "", &Error{Code: CodeBadRequest, Description: fmt.Sprintf("sessions: cursor %q is not one a listing gave", q.After)}
		}
		hi = min(hi, n-1)
	}
	if !q.CreatedBefore.IsZero() {
		if m, err := st.MsgsSince(ctx, "KV_"+wire.SessionsBucket, q.CreatedBefore, 1, ""); err == nil && len(m) > 0 {
			hi = min(hi, m[0].Sequence-1)
		} else if err != nil {
			return "", &Error{Code: CodeInternal, Description: "seek KV bucket " + wire.SessionsBucket, Err: err}
		}
	}
	if !q.CreatedAfter.IsZero() {
		m, err := st.MsgsSince(ctx, "KV_"+wire.SessionsBucket, q.CreatedAfter, 1, "")
		if err != nil {
			return "", &Error{Code: CodeInternal, Description: "seek KV bucket " + wire.SessionsBucket, Err: err}
		}
		if len(m) == 0 {
			return "", nil
		}
		lo = max(lo, m[0].Sequence)
	}
	window := uint64(max(q.Limit, 64))
	if q.hasFilter() {
		window = 512
	}
	given := 0
	for hi >= lo && hi > 0 {
		from := lo
		if hi >= lo+window {
			from = hi - window + 1
		}
		msgs, err := st.MsgsFrom(ctx, "KV_"+wire.SessionsBucket, from, int(hi-from+1), "")
		if err != nil {
			return "", &Error{Code: CodeInternal, Description: "read KV bucket " + wire.SessionsBucket, Err: err}
		}
		var rows []*row
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			if m.Sequence > hi {
				continue
			}
			if r, ok := rowOf(m); ok {
				rows = append(rows, r)
			}
		}
		if err := resolve(ctx, st, q, rows); err != nil {
			return "", err
		}
		n, last, err := emit(ctx, st, rows, q.Limit, given, fn)
		if err != nil {
			return "", err
		}
		given += n
		if q.Limit > 0 && given >= q.Limit {
			if last.seq > lo {
				return "c:" + strconv.FormatUint(last.seq, 10), nil
			}
			return "", nil
		}
		hi = from - 1
		window = min(window*2, 4096)
	}
	return "", nil
}

// rowOf is a listing row of an agentlog_sessions entry (ok false: deleted, being removed, or not
// a session key).
func rowOf(m *natsjs.RawStreamMsg) (*row, bool) {
	if kvMarker(m.Header) || m.Header.Get(wire.DeletingHeader) != "" || m.Header.Get(wire.IncompleteHeader) != "" {
		return nil, false
	}
	tok := strings.TrimPrefix(m.Subject, sessionsKeys)
	id, err := wire.IDFromToken(tok)
	if err != nil {
		return nil, false
	}
	r := &row{meta: meta{id: id, token: tok}, seq: m.Sequence}
	decodeMeta(m.Data, &r.meta)
	return r, true
}

// sessionsFew lists a small set of sessions named by tokens (a parent's children, the held ones)
// newest first, from the cursor on.
func sessionsFew(ctx context.Context, st *store.Store, q SessionsQuery, toks []string, fn func(SessionInfo) error) (string, error) {
	entries, err := st.SessionEntries(ctx, toks)
	if err != nil {
		return "", &Error{Code: CodeInternal, Description: "read KV bucket " + wire.SessionsBucket, Err: err}
	}
	var after uint64
	if q.After != "" {
		if after, err = strconv.ParseUint(q.After[2:], 10, 64); err != nil {
			return "", &Error{Code: CodeBadRequest, Description: fmt.Sprintf("sessions: cursor %q is not one a listing gave", q.After)}
		}
	}
	var rows []*row
	for tok, e := range entries {
		if after > 0 && e.Revision >= after {
			continue
		}
		r := &row{meta: meta{id: e.Header.ID, token: tok, raw: e.Header.Raw, parent: e.Header.ParentSession, seedLength: e.Header.SeedLength}, seq: e.Revision}
		if !q.CreatedAfter.IsZero() && e.Header.CreatedAt < q.CreatedAfter.UnixMilli() || !q.CreatedBefore.IsZero() && e.Header.CreatedAt >= q.CreatedBefore.UnixMilli() {
			continue
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b *row) int { return cmp.Compare(b.seq, a.seq) })
	if q.Sort == SortID {
		slices.SortFunc(rows, func(a, b *row) int { return cmp.Compare(a.id, b.id) })
	}
	if err := resolve(ctx, st, q, rows); err != nil {
		return "", err
	}
	n, last, err := emit(ctx, st, rows, q.Limit, 0, fn)
	if err != nil || last == nil || q.Limit == 0 || n < q.Limit {
		return "", err
	}
	return "c:" + strconv.FormatUint(last.seq, 10), nil
}

// sessionsActivity lists by last activity, newest first: the hot sessions (sorted exactly), then
// the archived ones in the order they were archived, newest first (windows of the archive heads
// read backwards, as sessionsCreated reads agentlog_sessions). The cursor is a:<last activity
// ms>:<token> in the hot part, a:r:<archive stream seq> in the archived part.
func sessionsActivity(ctx context.Context, st *store.Store, q SessionsQuery, fn func(SessionInfo) error) (string, error) {
	type act struct {
		tok string
		at  int64
	}
	order := func(a, b act) int {
		if c := cmp.Compare(b.at, a.at); c != 0 {
			return c
		}
		return cmp.Compare(a.tok, b.tok)
	}
	bad := &Error{Code: CodeBadRequest, Description: fmt.Sprintf("sessions: cursor %q is not one a listing gave", q.After)}
	tails, err := st.HotTails(ctx)
	if err != nil {
		return "", &Error{Code: CodeInternal, Description: "read stream " + wire.StreamName, Err: err}
	}
	given := 0
	coldFrom := uint64(0) // the archived part's cursor (0: from its end)
	if strings.HasPrefix(q.After, "a:r:") {
		if coldFrom, err = strconv.ParseUint(q.After[4:], 10, 64); err != nil || coldFrom == 0 {
			return "", bad
		}
	} else {
		var hot []act
		for tok, t := range tails {
			hot = append(hot, act{tok, t.LastActivity})
		}
		slices.SortFunc(hot, order)
		start := 0
		if q.After != "" {
			at, tok, ok := strings.Cut(q.After[2:], ":")
			ms, err := strconv.ParseInt(at, 10, 64)
			if !ok || err != nil {
				return "", bad
			}
			start, _ = slices.BinarySearchFunc(hot, act{tok, ms}, order)
			if start < len(hot) && hot[start].tok == tok {
				start++
			}
		}
		const window = 256
		for i := start; i < len(hot); i += window {
			part := hot[i:min(i+window, len(hot))]
			if !q.ActiveSince.IsZero() && part[0].at < q.ActiveSince.UnixMilli() {
				return "", nil
			}
			toks := make([]string, len(part))
			for k, a := range part {
				toks[k] = a.tok
			}
			rows, err := rowsOf(ctx, st, toks)
			if err != nil {
				return "", err
			}
			if err := resolve(ctx, st, q, rows); err != nil {
				return "", err
			}
			n, last, err := emit(ctx, st, rows, q.Limit, given, fn)
			if err != nil {
				return "", err
			}
			given += n
			if q.Limit > 0 && given >= q.Limit {
				return "a:" + strconv.FormatInt(last.info.LastActivity, 10) + ":" + last.token, nil
			}
		}
	}
	// The archived sessions: last activity is at the latest when they were archived.
	if st.Archive() == nil {
		return "", nil
	}
	ai, err := st.Archive().Info(ctx)
	if err != nil {
		return "", &Error{Code: CodeInternal, Description: "read stream " + wire.ArchiveStream, Err: err}
	}
	hi, lo := ai.State.LastSeq, ai.State.FirstSeq
	if coldFrom > 0 {
		hi = min(hi, coldFrom-1)
	}
	window := uint64(max(q.Limit, 64))
	for hi >= lo && hi > 0 && ai.State.Msgs > 0 {
		from := lo
		if hi >= lo+window {
			from = hi - window + 1
		}
		msgs, err := st.MsgsFrom(ctx, wire.ArchiveStream, from, int(hi-from+1), wire.ArchivePrefix+".*")
		if err != nil {
			return "", &Error{Code: CodeInternal, Description: "read stream " + wire.ArchiveStream, Err: err}
		}
		var toks []string
		seqOf := map[string]uint64{}
		for i := len(msgs) - 1; i >= 0; i-- {
			m := msgs[i]
			h, err := wire.ParseArchiveHead(m.Header)
			if m.Sequence > hi || err != nil {
				continue
			}
			if _, hot := tails[h.Token]; hot {
				continue // listed in the hot part (a restored session's stale archive)
			}
			if !q.ActiveSince.IsZero() && h.ArchivedAt < q.ActiveSince.UnixMilli() {
				break
			}
			toks = append(toks, h.Token)
			seqOf[h.Token] = m.Sequence
		}
		rows, err := rowsOf(ctx, st, toks)
		if err != nil {
			return "", err
		}
		if err := resolve(ctx, st, q, rows); err != nil {
			return "", err
		}
		n, last, err := emit(ctx, st, rows, q.Limit, given, fn)
		if err != nil {
			return "", err
		}
		given += n
		if q.Limit > 0 && given >= q.Limit {
			return "a:r:" + strconv.FormatUint(seqOf[last.token], 10), nil
		}
		hi = from - 1
		window = min(window*2, 4096)
	}
	return "", nil
}

// rowsOf reads the metadata of toks (one batched get) as listing rows, in toks' order; a token
// without metadata (a log without it) is left out.
func rowsOf(ctx context.Context, st *store.Store, toks []string) ([]*row, error) {
	entries, err := st.SessionEntries(ctx, toks)
	if err != nil {
		return nil, &Error{Code: CodeInternal, Description: "read KV bucket " + wire.SessionsBucket, Err: err}
	}
	var rows []*row
	for _, t := range toks {
		if e, ok := entries[t]; ok {
			rows = append(rows, &row{meta: meta{id: e.Header.ID, token: t, raw: e.Header.Raw, parent: e.Header.ParentSession, seedLength: e.Header.SeedLength}, seq: e.Revision})
		}
	}
	return rows, nil
}

// sessionsByIDFiltered is an id-order listing with filters: the pass over every header, then the
// rows resolved in batches and filtered.
func sessionsByIDFiltered(ctx context.Context, st *store.Store, q SessionsQuery, fn func(SessionInfo) error) (string, error) {
	all, err := scanMeta(ctx, st, false)
	if err != nil {
		return "", err
	}
	sel := selectRows(all, q.Prefix, q.After)
	given := 0
	const window = 256
	for i := 0; i < len(sel); i += window {
		part := sel[i:min(i+window, len(sel))]
		rows := make([]*row, len(part))
		for k := range part {
			rows[k] = &row{meta: part[k]}
		}
		rows = slices.DeleteFunc(rows, func(r *row) bool {
			r.decode()
			return !q.CreatedAfter.IsZero() && r.createdAt < q.CreatedAfter.UnixMilli() || !q.CreatedBefore.IsZero() && r.createdAt >= q.CreatedBefore.UnixMilli()
		})
		if err := resolve(ctx, st, q, rows); err != nil {
			return "", err
		}
		n, last, err := emit(ctx, st, rows, q.Limit, given, fn)
		if err != nil {
			return "", err
		}
		given += n
		if q.Limit > 0 && given >= q.Limit {
			return last.id, nil
		}
	}
	return "", nil
}

// sessionsKeys is the subject prefix of agentlog_sessions' keys.
const sessionsKeys = "$KV." + wire.SessionsBucket + "."

// kvMarker reports whether a KV entry's headers make it a delete or purge marker.
func kvMarker(h nats.Header) bool {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(natsjs.MarkerReasonHeader) != ""
}
