package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrSessionDeleted is returned (wrapped) when a session was removed (Session.Remove), or is being
// removed, under a writer: its metadata is gone, marked for removal, or another incarnation's.
var ErrSessionDeleted = errors.New("session deleted")

// removeLeaseTTL is the TTL of the writer lease Session.Remove holds while it runs.
const removeLeaseTTL = time.Minute

// removeWriterID is the writer id of the lease Session.Remove holds.
const removeWriterID = "agentlog-rm"

// ErrRemoveNotStarted: Session.Remove stopped before it changed anything (its probes of the
// rights it needs, which change nothing, failed: a right denied, a *RightDeniedError, or NATS
// unreachable).
var ErrRemoveNotStarted = errors.New("nothing was changed")

// Removed is what Session.Remove removed.
type Removed struct {
	Session     string `json:"session"`
	Incarnation string `json:"incarnation,omitempty"` // of the removed metadata ("" without one)
	Metadata    bool   `json:"metadata"`              // the agentlog_sessions entry
	Records     uint64 `json:"records"`               // AGENTLOG messages purged
	Events      int64  `json:"events"`                // events those records held (the log's length)
	// Projections lists the agentlog_projections keys removed (<unit>.<token>).
	Projections []string `json:"projections"`
	// Lease is the live writer lease found (and removed); that writer is fenced.
	Lease        *Lease `json:"lease,omitempty"`
	ErrorReports uint64 `json:"errorReports"` // AGENTLOG_ERRORS messages purged
	Blobs        int    `json:"blobs"`        // its blobs removed (AGENTLOG_BLOBS, and legacy agentlog_blobs objects its records named)
	// Archive counts the AGENTLOG_ARCHIVE messages purged (its archive's head and parts).
	Archive uint64 `json:"archive"`
}

// RemoveOpt is an option of Session.Remove.
type RemoveOpt func(*removeOpts)

type removeOpts struct {
	ignoreHold bool
	step       func(string)
}

// RemoveStepHook calls fn with the name of each step of a Session.Remove as it is reached (the
// fault tests kill their process there): "marked", "records", "archive", "projections".
func RemoveStepHook(fn func(step string)) RemoveOpt { return func(o *removeOpts) { o.step = fn } }

func (o *removeOpts) at(step string) {
	if o.step != nil {
		o.step(step)
	}
}

// Remove deletes the session: its records (AGENTLOG subject) and the blobs they reference
// (AGENTLOG_BLOBS, legacy agentlog_blobs), its metadata
// (agentlog_sessions), its projection states (every <unit>.<token> key of agentlog_projections),
// its writer lease (agentlog_writers) and its error reports (agentlog.errors.<token>).
//
// Order (ARCHITECTURE.md, "Deleting a session"): probes of every right it needs, which change
// nothing (credentials that lack one fail there: ErrRemoveNotStarted and a *RightDeniedError), mark the metadata (from then on the session is
// not found, and its id cannot be created again), take the writer lease over, purge the records,
// the projections and the reports, delete the metadata, release the lease. A live writer is
// fenced; a fork of the session either read it whole before the mark or fails SESSION_NOT_FOUND.
// An rm that stopped half-way is finished by running it again.
//
// A session with nothing stored is a wrapped ErrSessionNotFound naming it. A stream with
// DenyPurge is refused before anything changes. A held session is refused (ErrHeld). Options:
// RemoveStepHook.
func (ss *Session) Remove(ctx context.Context, opts ...RemoveOpt) (Removed, error) {
	var o removeOpts
	for _, opt := range opts {
		opt(&o)
	}
	s, id, tok, subject := ss.s, ss.id, ss.tok, ss.subject
	if s.stream == nil {
		return Removed{}, ss.noStore()
	}
	var err error
	rm := Removed{Session: id, Projections: []string{}}
	if s.stream.CachedInfo().Config.DenyPurge {
		return rm, fmt.Errorf("remove session %q: stream %s denies purges (deny_purge)", id, wire.StreamName)
	}
	fail := func(what string, err error) (Removed, error) {
		return rm, fmt.Errorf("remove session %q: %s: %w (run the removal again to finish it)", id, what, err)
	}
	// 0. A probe of every right the removal needs, changing nothing (purges below stream seq 1,
	// publishes no stream takes): credentials that lack one are refused here, before anything is
	// changed, instead of stopping part-way (a *RightDeniedError naming the right).
	if err := s.checkRemoveRights(ctx, tok, subject); err != nil {
		return rm, fmt.Errorf("remove session %q: %w: %w", id, ErrRemoveNotStarted, err)
	}

	// A session under a legal hold is never deleted.
	if !o.ignoreHold {
		if h, err := s.getHold(ctx, tok, id); err == nil {
			return rm, fmt.Errorf("remove session %q: %w (since %s: %s): release it first (agentlog hold --release)", id, ErrHeld,
				time.UnixMilli(h.Since).UTC().Format(time.RFC3339), h.Reason)
		} else if !errors.Is(err, ErrNoHold) {
			return rm, fmt.Errorf("remove session %q: %w: %w", id, ErrRemoveNotStarted, err)
		}
	}

	// 1. Mark the metadata.
	metaSubj := wire.KVSubject(wire.SessionsBucket, tok)
	var markRev uint64
	for try := 0; ; try++ {
		e, err := s.leaderGetFrom(ctx, "KV_"+wire.SessionsBucket, map[string]any{"last_by_subj": metaSubj})
		if errors.Is(err, natsjs.ErrMsgNotFound) || (err == nil && kvDeleted(e.Header)) {
			break
		}
		if err != nil {
			return fail("read the metadata", err)
		}
		rm.Incarnation = e.Header.Get(wire.IncarnationHeader)
		if e.Header.Get(wire.DeletingHeader) != "" {
			markRev = e.Sequence // an earlier removal stopped half-way
			break
		}
		if markRev, err = s.markDeleting(ctx, tok, e.Data, e.Sequence, rm.Incarnation); err == nil {
			break
		}
		if try < 3 && IsWrongLastSequence(err) {
			continue // changed meanwhile: read it again
		}
		return rm, fmt.Errorf("remove session %q: mark the metadata (key %s in KV bucket %s): %w", id, tok, wire.SessionsBucket, err)
	}

	if markRev == 0 {
		found, err := ss.anythingStored(ctx)
		if err != nil {
			return fail("look for what is stored", err)
		}
		if !found {
			return rm, &notFoundError{id: id, detail: "nothing is stored under it"}
		}
	}

	o.at("marked")
	// 2. Take the writer lease over: a live writer is fenced at its next renewal, and Create/Open
	// of the id are refused while the removal runs.
	if l, _, err := ss.Lease(ctx); err == nil && l.Writer != removeWriterID {
		rm.Lease = &l
	}
	lease := NewLease(removeWriterID)
	lease.Since = time.Now().UnixMilli()
	leaseRev, err := ss.AcquireLease(ctx, lease, removeLeaseTTL, true)
	if err != nil {
		return fail("take the writer lease", err)
	}

	// 3. The blobs its records reference (before the records, so that a removal run again after
	// stopping half-way still finds them), then the records.
	if rm.Blobs, err = s.removeSessionBlobs(ctx, tok); err != nil {
		return fail("delete the blobs", err)
	}
	rm.Events = s.lastSeqFromHeaders(ctx, subject) + 1
	if head, found, err := s.archiveHead(ctx, tok); err == nil && found && rm.Events == 0 {
		rm.Events = head.Events
	}
	if rm.Records, err = s.purge(ctx, wire.StreamName, subject, 0); err != nil {
		return fail("purge the records", err)
	}
	o.at("records")
	// Its archive: the parts, then the head (found again by a removal run again).
	if s.archive != nil {
		n, err := s.purge(ctx, wire.ArchiveStream, wire.ArchivePartsFilter(tok), 0)
		if err != nil {
			return fail("purge the archive's parts", err)
		}
		m, err := s.purge(ctx, wire.ArchiveStream, wire.ArchiveSubject(tok), 0)
		if err != nil {
			return fail("purge the archive", err)
		}
		rm.Archive = n + m
		o.at("archive")
	}
	if s.children != nil {
		if _, err := s.purge(ctx, wire.ChildrenStream, wire.ChildrenPrefix+".*."+tok, 0); err != nil {
			return fail("purge its lineage link", err)
		}
	}

	// 4. The projections, twice: a fold in flight during the purge may have written one since.
	for range 2 {
		keys, err := s.purgeProjections(ctx, tok)
		if err != nil {
			return fail("purge the projections", err)
		}
		for _, k := range keys {
			if !slices.Contains(rm.Projections, k) {
				rm.Projections = append(rm.Projections, k)
			}
		}
	}

	o.at("projections")
	// 5. The error reports.
	if rm.ErrorReports, err = s.purge(ctx, wire.ErrorsStream, wire.ErrorsPrefix+"."+tok, 0); err != nil {
		return fail("purge the error reports", err)
	}

	// 6. The metadata (only the entry marked in step 1).
	if markRev != 0 {
		if err := s.sessions.Delete(ctx, tok, natsjs.LastRevision(markRev)); err != nil {
			return fail("delete the metadata", err)
		}
		rm.Metadata = true
	}

	// 7. The lease.
	if err := ss.ReleaseLease(ctx, leaseRev); err != nil {
		return fail("release the writer lease", err)
	}
	return rm, nil
}

// markDeleting rewrites the metadata entry of token tok at revision rev with wire.DeletingHeader, and
// returns its new revision.
func (s *Store) markDeleting(ctx context.Context, tok string, value []byte, rev uint64, inc string) (uint64, error) {
	h := nats.Header{wire.DeletingHeader: []string{strconv.FormatInt(time.Now().UnixMilli(), 10)}}
	if inc != "" {
		h.Set(wire.IncarnationHeader, inc)
	}
	m := &nats.Msg{Subject: KVPutSubject(s.js, wire.SessionsBucket, tok), Header: h, Data: value}
	ack, err := s.js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// PurgeThrough removes the session's records stored at stream seqs up to lastStreamSeq. A writer
// whose first record (guard 0) landed after the session was removed undoes it with this: since the
// subject was empty, those records are its own. It returns the records removed.
func (ss *Session) PurgeThrough(ctx context.Context, lastStreamSeq uint64) (uint64, error) {
	if ss.s.js == nil {
		return 0, ss.noStore()
	}
	// A probe first: credentials without the right learn it after one round trip (a
	// *RightDeniedError), not after the purge's timeout.
	if err := ss.s.probePurge(ctx, wire.StreamName, ss.subject); err != nil {
		return 0, fmt.Errorf("session %q: purge its records through stream seq %d: %w", ss.id, lastStreamSeq, err)
	}
	n, err := ss.s.purge(ctx, wire.StreamName, ss.subject, lastStreamSeq+1)
	if err != nil {
		return 0, fmt.Errorf("session %q: purge its records through stream seq %d: %w", ss.id, lastStreamSeq, err)
	}
	return n, nil
}

// LeaveRemoving marks the session "being removed" (its agentlog_sessions entry rewritten with
// wire.DeletingHeader, or created so when there is none) after a writer stored a record into it
// that it may not take back: a fork's seed, stored after the child was removed meanwhile, by a
// forker that holds no purge right. From then on no read serves the record, the listing leaves it
// out, the id cannot be created again, and `agentlog rm` (the operator) finishes the removal,
// record included. h is the metadata to leave (the writer's header; an entry already marked
// keeps its own) and inc its incarnation. A running rm that marked the entry is refused
// at its last step (run it again). Metadata of another incarnation (the id was created again) is
// left alone: ErrSessionDeleted naming it.
func (ss *Session) LeaveRemoving(ctx context.Context, h session.Header, inc string) error {
	s, id, tok := ss.s, ss.id, ss.tok
	if s.js == nil {
		return ss.noStore()
	}
	header, err := headerValue(h)
	if err != nil {
		return fmt.Errorf("session %q: encode header: %w", id, err)
	}
	metaSubj := wire.KVSubject(wire.SessionsBucket, tok)
	for try := 0; ; try++ {
		e, err := s.leaderGetFrom(ctx, "KV_"+wire.SessionsBucket, map[string]any{"last_by_subj": metaSubj})
		var rev uint64
		value, minc := header, inc
		switch {
		case errors.Is(err, natsjs.ErrMsgNotFound):
		case err != nil:
			return fmt.Errorf("session %q: read the metadata to mark it removed: %w", id, err)
		case kvDeleted(e.Header):
			rev = e.Sequence
		case e.Header.Get(wire.DeletingHeader) != "":
			rev, value, minc = e.Sequence, e.Data, e.Header.Get(wire.IncarnationHeader)
		default:
			if got := e.Header.Get(wire.IncarnationHeader); got != inc {
				return fmt.Errorf("%w: session %q is now incarnation %q, not %q: its metadata is left as is", ErrSessionDeleted, id, got, inc)
			}
			return nil // its own metadata, live: nothing to mark
		}
		if _, err = s.markDeleting(ctx, tok, value, rev, minc); err == nil {
			return nil
		}
		if try < 3 && IsWrongLastSequence(err) {
			continue
		}
		return fmt.Errorf("session %q: mark the metadata removed (key %s in KV bucket %s): %w", id, tok, wire.SessionsBucket, err)
	}
}

// CheckCurrent returns nil when the session's metadata exists, is not being removed and holds
// incarnation inc (read from the leader); a wrapped ErrSessionDeleted otherwise.
func (ss *Session) CheckCurrent(ctx context.Context, inc string) error {
	id := ss.id
	info, err := ss.Info(ctx)
	switch {
	case errors.Is(err, ErrSessionNotFound):
		return fmt.Errorf("%w: session %q has no metadata any more", ErrSessionDeleted, id)
	case err != nil:
		return err
	case info.Incarnation != inc:
		return fmt.Errorf("%w: session %q is now incarnation %q, not %q", ErrSessionDeleted, id, info.Incarnation, inc)
	}
	return nil
}

// DeleteProjections removes every agentlog_projections key of the session (<unit>.<token>), one
// KV delete each (a publish on the key's own subject, which leaves a delete marker that replaces
// the value: no stream purge, whose filter would be the caller's to choose, and no KV purge, whose
// rollup header the bucket refuses), and returns the keys it found. A projector calls
// it for a session it finds removed (no metadata, no records), so that no state of it is kept.
func (ss *Session) DeleteProjections(ctx context.Context) ([]string, error) {
	if ss.s.projections == nil {
		return nil, ss.noStore()
	}
	keys, err := ss.s.projectionKeys(ctx, ss.tok)
	if err != nil {
		return nil, fmt.Errorf("session %q: list its projections: %w", ss.id, err)
	}
	for _, k := range keys {
		if err := ss.s.projections.Delete(ctx, k); err != nil {
			return nil, fmt.Errorf("session %q: delete its projection key %s: %w", ss.id, k, err)
		}
	}
	return keys, nil
}

// ProjectionMarker returns the revision of the delete or purge marker that key <unit>.<token>
// ends with (DeleteProjections leaves one), 0 when it ends with a value or has nothing: a write
// that creates the key expects that revision. Errors: the read's, a bad unit name.
func (ss *Session) ProjectionMarker(ctx context.Context, unit string) (uint64, error) {
	if err := ss.checkProjections(unit); err != nil {
		return 0, err
	}
	st, err := ss.s.js.Stream(ctx, "KV_"+wire.ProjectionsBucket)
	if err != nil {
		return 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, wire.KVSubject(wire.ProjectionsBucket, wire.ProjectionKey(unit, ss.tok)))
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if kvDeleted(m.Header) {
		return m.Sequence, nil
	}
	return 0, nil
}

// purgeProjections lists and purges the agentlog_projections keys of token tok (no delete markers
// are left: a projector then finds the key new).
func (s *Store) purgeProjections(ctx context.Context, tok string) ([]string, error) {
	keys, err := s.projectionKeys(ctx, tok)
	if err != nil {
		return nil, err
	}
	if _, err := s.purge(ctx, "KV_"+wire.ProjectionsBucket, wire.KVSubject(wire.ProjectionsBucket, wire.ProjectionKeysFilter(tok)), 0); err != nil {
		return nil, err
	}
	return keys, nil
}

// purge sends one STREAM.PURGE of subject filter (below stream seq upTo when not 0) to stream and
// returns the number of messages purged.
func (s *Store) purge(ctx context.Context, stream, filter string, upTo uint64) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderGetTimeout)
		defer cancel()
	}
	req := map[string]any{"filter": filter}
	if upTo > 0 {
		req["seq"] = upTo
	}
	body, _ := json.Marshal(req)
	reply, err := s.js.Conn().RequestWithContext(ctx, s.api("STREAM.PURGE."+stream), body)
	if err != nil {
		return 0, fmt.Errorf("purge %s of stream %s: %w", filter, stream, err)
	}
	var resp struct {
		Success bool             `json:"success"`
		Purged  uint64           `json:"purged"`
		Error   *natsjs.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge %s of stream %s: decode the reply: %w", filter, stream, err)
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("purge %s of stream %s: %w", filter, stream, resp.Error)
	}
	if !resp.Success {
		return 0, fmt.Errorf("purge %s of stream %s: not successful", filter, stream)
	}
	return resp.Purged, nil
}

// anythingStored reports whether the session, without metadata, still has records, projection
// keys, a live writer lease or error reports (left by a removal that stopped half-way, or a write
// that raced one).
func (ss *Session) anythingStored(ctx context.Context) (bool, error) {
	s, tok := ss.s, ss.tok
	if t, err := ss.TailFromLeader(ctx); err != nil || t.LastStreamSeq > 0 {
		return true, nil // a record, even one that does not decode
	}
	if _, found, err := s.archiveHead(ctx, tok); err != nil || found {
		return true, nil
	}
	if _, _, err := ss.Lease(ctx); err == nil {
		return true, nil
	}
	if keys, err := s.projectionKeys(ctx, tok); err != nil || len(keys) > 0 {
		return true, err
	}
	_, err := s.leaderGetFrom(ctx, wire.ErrorsStream, map[string]any{"last_by_subj": wire.ErrorsPrefix + "." + tok})
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// projectionKeys lists the agentlog_projections keys of token tok (one batched direct get,
// multi_last: no consumer).
func (s *Store) projectionKeys(ctx context.Context, tok string) ([]string, error) {
	prefix := wire.KVSubject(wire.ProjectionsBucket, "")
	msgs, err := s.lastMsgs(ctx, "KV_"+wire.ProjectionsBucket, []string{prefix + wire.ProjectionKeysFilter(tok)})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, m := range msgs {
		if !kvDeleted(m.Header) {
			keys = append(keys, strings.TrimPrefix(m.Subject, prefix))
		}
	}
	return keys, nil
}

// lastSeqFromHeaders is the last event seq of the subject's last record, from its headers
// (Agentlog-First-Seq + Agentlog-Count - 1) without decoding its body or fetching its blobs; -1
// when there is no record or its headers are malformed.
func (s *Store) lastSeqFromHeaders(ctx context.Context, subject string) int64 {
	m, err := s.leaderLastMsg(ctx, subject)
	if err != nil {
		return -1
	}
	last, ok := wire.RecordLastSeq(m.Header)
	if !ok {
		return -1
	}
	return last
}

// notFoundError is ErrSessionNotFound naming the session once: `session "x" not found (detail)`.
type notFoundError struct{ id, detail string }

func (e *notFoundError) Error() string {
	return fmt.Sprintf("session %s not found (%s)", wire.QuoteID(e.id), e.detail)
}
func (e *notFoundError) Unwrap() error { return ErrSessionNotFound }
