package forker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agentlog/agentlog/client"
	"github.com/agentlog/agentlog/internal/shellquote"
	"github.com/agentlog/agentlog/internal/tracing"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nuid"
)

// ChildSuffix separates the source id from the unique part of a default child id:
// "<source>~fork~<nuid>" (the source cut at a UTF-8 boundary so the id stays within
// wire.MaxSessionIDBytes bytes).
const ChildSuffix = "~fork~"

// exists reports whether session ss has metadata (an incomplete fork child's included: info then
// has CompleteAt > 0) or events, and its log's tail as the stream leader has it. Its errors name
// the session.
func (f *Forker) exists(ctx context.Context, ss *store.Session) (hdr *session.Header, info store.SessionInfo, tail store.Tail, err error) {
	info, err = ss.InfoAny(ctx)
	switch {
	case err == nil:
		hdr = &info.Header
	case errors.Is(err, store.ErrSessionNotFound):
	default:
		return nil, info, tail, fmt.Errorf("reading the metadata: %w", err)
	}
	tail, err = ss.TailFromLeader(ctx)
	if err != nil {
		return nil, info, tail, fmt.Errorf("reading the log tail: %w", err)
	}
	return hdr, info, tail, nil
}

// seedHoldBytes bounds the seed a fork holds in memory until it is validated, then writes as
// records outside an atomic batch with the child marked incomplete (wire.IncompleteHeader); a
// longer seed is staged as an ADR-50 atomic batch as it is read (ARCHITECTURE.md, "A fork").
const seedHoldBytes = 16 << 20

// resumeState is an abandoned incomplete child a fork resumes: its claim and its log's tail.
type resumeState struct {
	info store.SessionInfo
	tail store.Tail
}

// checkSource applies the id rules to a fork's source (as the CLI and the child's check do): an id
// that breaks one is a bad request naming the rule, not SESSION_NOT_FOUND. The error bounds the id.
func checkSource(id string) error {
	_, err := wire.Token(id)
	return err
}

// DefaultChildID returns a fresh child id for source: "<source>~fork~<nuid>", with source cut at a
// UTF-8 boundary so that the id is at most wire.MaxSessionIDBytes (256) bytes.
func DefaultChildID(source string) string {
	u := nuid.Next()
	keep := wire.MaxSessionIDBytes - len(ChildSuffix) - len(u)
	if len(source) > keep {
		source = source[:keep]
		for len(source) > 0 && !utf8.ValidString(source) {
			source = source[:len(source)-1]
		}
	}
	return source + ChildSuffix + u
}

// Fork performs a fork in-process (the service handler calls it; it does not need Start): the
// same checks, order, codes and texts as the service. Refusals are *session.ForkError; a
// malformed request is an error naming the field; a source log that cannot be read back is an
// error naming the session, the seq and the rule; anything else is a failure to read or write the
// store.
func (f *Forker) Fork(ctx context.Context, req client.ForkRequest) (client.ForkResult, error) {
	if req.Source == "" {
		return client.ForkResult{}, &requestError{"bad request: \"source\" is required"}
	}
	src, err := f.store.Session(req.Source)
	if err != nil {
		return client.ForkResult{}, &requestError{fmt.Sprintf("bad request: source: %v", err)}
	}
	var ch *store.Session // the child
	var resume *resumeState
	if req.Child != "" {
		if ch, err = f.store.Session(req.Child); err != nil {
			return client.ForkResult{}, &requestError{fmt.Sprintf("bad request: child: %v", err)}
		}
		hdr, info, ctail, err := f.exists(ctx, ch)
		if err != nil {
			return client.ForkResult{}, fmt.Errorf("forker: the child: %w", err)
		}
		evs := ctail.LastStreamSeq > 0
		if hdr != nil && info.CompleteAt > 0 && evs {
			// A fork that wrote part of the child's seed outside an atomic batch and stopped
			// (ARCHITECTURE.md, "A fork"): complete already (its mark not cleared), resumed
			// when it is an abandoned fork of this source, else the child exists.
			switch {
			case ctail.NextSeq >= info.CompleteAt:
				if err := ch.MarkComplete(ctx, info); err != nil {
					f.logger.Warn("fork: cannot clear the incomplete mark of a complete child", "child", req.Child, "err", err)
				}
			case f.abandoned(*hdr, req.Source) && ctail.NextSeq <= *hdr.SeedLength:
				resume = &resumeState{info: info, tail: ctail}
				f.logger.Warn("fork: resuming an incomplete earlier fork", "source", req.Source, "child", req.Child,
					"createdAt", hdr.CreatedAt, "written", ctail.NextSeq, "of", info.CompleteAt)
			}
			if resume == nil {
				return client.ForkResult{}, alreadyExists(req.Child)
			}
			hdr, evs = nil, false
		}
		if hdr != nil && !evs && f.abandoned(*hdr, req.Source) {
			// An earlier fork of this source onto this child claimed the id and died before its
			// record (a crash between steps 4 and 5): undo its claim and fork again.
			if rerr := f.rollback(ctx, ch, *hdr); rerr != nil {
				// Another retry of the same fork may have cleared (and re-claimed) it first: look
				// again. Another claim or events mean the child exists; nothing means go on, and
				// the KV create below settles any race; the same claim still there means the
				// rollback itself failed (retry the fork).
				abandonedAt := hdr.CreatedAt
				if hdr, _, ctail, err = f.exists(ctx, ch); err != nil {
					return client.ForkResult{}, fmt.Errorf("forker: clearing an incomplete earlier fork of %q: %v; then: %w", req.Child, rerr, err)
				}
				evs = ctail.LastStreamSeq > 0
				if hdr != nil && !evs && hdr.CreatedAt == abandonedAt && f.abandoned(*hdr, req.Source) {
					return client.ForkResult{}, fmt.Errorf("forker: clearing an incomplete earlier fork of %q: %w", req.Child, rerr)
				}
			} else {
				f.logger.Warn("fork: cleared the metadata of an incomplete earlier fork", "source", req.Source, "child", req.Child,
					"createdAt", hdr.CreatedAt)
				hdr = nil
			}
		}
		if hdr != nil || evs {
			return client.ForkResult{}, alreadyExists(req.Child)
		}
	}
	var srcHdr *session.Header
	srcInfo, err := src.Info(ctx)
	if err == nil {
		srcHdr = &srcInfo.Header
	} else if errors.Is(err, store.ErrSessionDeleted) {
		// Marked by a removal that stopped half-way: not found, although its records remain
		// (a log without any metadata is still forked).
		return client.ForkResult{}, notFound(req.Source)
	} else if !errors.Is(err, store.ErrSessionNotFound) {
		return client.ForkResult{}, fmt.Errorf("forker: reading the source's metadata: %w", err)
	}
	// The log is read up to its last record as the stream leader has it now (or up to the
	// boundary), streaming: the seed goes into the child's records as it is read and validated,
	// so no fork holds a whole log (ARCHITECTURE.md, "A fork").
	// Its log may live in cold storage, wholly or its prefix (archived): Locate says where, and
	// Records reads it from there; a fork never restores its source.
	loc, err := src.Locate(ctx)
	if err != nil {
		return client.ForkResult{}, readSourceErr(err)
	}
	tail := loc.Hot
	last := loc.NextSeq() - 1 // -1: no events
	if srcHdr == nil && last < 0 {
		return client.ForkResult{}, notFound(req.Source)
	}
	if ch == nil {
		if ch, err = f.store.Session(DefaultChildID(req.Source)); err != nil {
			return client.ForkResult{}, fmt.Errorf("forker: the default child id: %w", err) // cannot be: the id is cut to fit
		}
	}
	child := ch.ID()
	msgID := "fork:" + nuid.Next()
	// The seed is held until it is validated and written as records outside an atomic batch, the
	// child marked incomplete meanwhile; a seed longer than seedHoldBytes is an atomic batch.
	var after uint64
	var skip int64 // events the child holds already (resumed)
	if resume != nil {
		after, skip = resume.tail.LastStreamSeq, resume.tail.NextSeq
	}
	appOpts := append(tracing.RecordOpts(ctx, msgID), store.HoldRecords(seedHoldBytes))
	if f.seedRecordStored != nil {
		appOpts = append(appOpts, store.OnStored(func(n int) error { return f.seedRecordStored(child, n) }))
	}
	app, err := ch.BeginAppend(after, appOpts...)
	if err != nil {
		return client.ForkResult{}, fmt.Errorf("forker: writing the child's record: %w", err)
	}
	defer app.Discard()
	seed, seedLookup, ferr, err := f.streamSeed(ctx, src, req.Boundary, last, tail.LastStreamSeq, app, skip)
	if err != nil {
		return client.ForkResult{}, err
	}
	if f.afterSourceRead != nil {
		f.afterSourceRead(req.Source)
	}
	// A removal (store.Session.Remove) marks the metadata before it purges the records: the
	// metadata unchanged after the read means the read saw the whole log.
	if gone, err := f.sourceGone(ctx, src, srcHdr != nil, srcInfo, tail.LastStreamSeq); err != nil {
		return client.ForkResult{}, err
	} else if gone {
		return client.ForkResult{}, notFound(req.Source)
	}
	if ferr != nil {
		return client.ForkResult{}, ferr
	}
	if resume != nil && int64(seed.Len()) < skip {
		return client.ForkResult{}, fmt.Errorf("forker: child session %q holds the first %d events of an incomplete earlier fork, more than this fork's seed of %d: remove it (agentlog rm %s) and fork again: %w",
			child, skip, seed.Len(), shellquote.Quote(child), alreadyExists(child))
	}
	nowMs := f.now().UnixMilli()
	events := seed.Len()
	end, hasEnd := seed.EndSeed(nowMs)
	// The then-events are checked against the child's log as it will be (seed, end-seed) before
	// anything of the child is written; they go into the same record or atomic batch.
	then, thenRes, err := checkThen(child, seed, end, hasEnd, req.Then, nowMs, seedLookup)
	if err != nil {
		return client.ForkResult{}, err
	}
	if hasEnd {
		if err := app.Add(ctx, &end); err != nil {
			return client.ForkResult{}, fmt.Errorf("forker: writing the child's record: %w", err)
		}
		events++
	}
	for i := range then {
		if err := app.Add(ctx, &then[i]); err != nil {
			return client.ForkResult{}, fmt.Errorf("forker: writing the child's record: %w", err)
		}
		events++
	}
	seedLength := int64(seed.Len())
	hdr := session.Header{Version: 0, ID: child, CreatedAt: nowMs, ParentSession: req.Source, SeedLength: &seedLength}
	var cwdDropped string
	if srcHdr != nil && srcHdr.Cwd != "" {
		if session.CwdRestorable(srcHdr.Cwd) {
			hdr.Cwd = srcHdr.Cwd
		} else {
			// dsh could not restore a child with a relative cwd (the recorded sessions'
			// "{{cwd}}/workspace"): the child has none, and the result says so.
			cwdDropped = srcHdr.Cwd
		}
	}

	// Step 4: the KV create claims the child id; marked incomplete when its records are not one
	// atomic write (several, outside a batch), so that no reader serves a partial seed.
	inc := wire.NewIncarnation()
	records, batched := app.Pending()
	marked := resume != nil || (records > 1 && !batched)
	completeAt := int64(events) // the child's events from seq 0, a resumed one's too
	if resume != nil {
		inc = resume.info.Incarnation
		if _, err := ch.Reclaim(ctx, resume.info, hdr, completeAt); err != nil {
			if store.IsWrongLastSequence(err) {
				return client.ForkResult{}, alreadyExists(child) // another retry took it first
			}
			return client.ForkResult{}, fmt.Errorf("forker: claiming the incomplete child again: %w", err)
		}
	} else {
		opts := []store.CreateOpt{store.WithIncarnation(inc)}
		if marked {
			opts = append(opts, store.WithIncomplete(completeAt))
		}
		if err := f.store.CreateSession(ctx, hdr, opts...); err != nil {
			if errors.Is(err, store.ErrSessionExists) {
				return client.ForkResult{}, alreadyExists(child)
			}
			return client.ForkResult{}, fmt.Errorf("forker: creating the child's metadata: %w", err)
		}
	}
	if f.beforeRecord != nil {
		f.beforeRecord(child)
	}
	// Step 5: the record (or the atomic batch of records) guarded with expected last subject
	// sequence 0. A write whose outcome is unknown is retried or looked for by Commit (same msg
	// id) until the answer is definite; only a definite "not stored" lets the metadata be rolled
	// back.
	res, err := app.Commit(ctx)
	if err == nil && marked {
		f.markComplete(ctx, ch, inc, completeAt)
	}
	if err == nil {
		if err := f.childRemoved(ctx, req.Source, ch, hdr, inc, res.StreamSeq); err != nil {
			return client.ForkResult{}, err
		}
		f.logger.Info("forked", "source", req.Source, "child", child, "seedLength", seed.Len(), "events", events, "then", len(then))
		return client.ForkResult{Child: child, SeedLength: seed.Len(), ParentSession: req.Source, Then: thenRes, CwdDropped: cwdDropped}, nil
	}
	if errors.Is(err, store.ErrOutcomeUnknown) {
		f.logger.Error("fork: the child's record may or may not be stored", "child", child, "err", err)
		return client.ForkResult{}, &childLeftError{child, fmt.Errorf("forker: the outcome of writing the record of child session %q is unknown: %w",
			child, err)}
	}
	if marked && (resume != nil || app.Stored() > 0) {
		// Records of the child are stored: its claim stays, marked incomplete (no reader serves
		// it), for a retry of this fork to resume or agentlog rm to remove.
		f.logger.Error("fork: the child's seed is partly written; left incomplete", "child", child, "stored", app.Stored(), "err", err)
		return client.ForkResult{}, &childLeftError{child, fmt.Errorf("forker: writing the records of child session %q stopped after %d; it is left incomplete (no reader serves it): retry the fork to resume it, or agentlog rm %s: %w",
			child, app.Stored(), shellquote.Quote(child), err)}
	}
	if rerr := f.rollback(context.WithoutCancel(ctx), ch, hdr); rerr != nil {
		f.logger.Error("fork: child metadata left without events (incomplete fork)", "child", child, "err", rerr)
	}
	if errors.Is(err, store.ErrConflict) {
		return client.ForkResult{}, alreadyExists(child)
	}
	return client.ForkResult{}, fmt.Errorf("forker: writing the child's record: %w", err)
}

// keptResultBytes bounds the tool results a fork keeps for the seed validation's lookups.
const keptResultBytes = 8 << 20

// errSeedRead stops streamSeed's read of the source at the boundary.
var errSeedRead = errors.New("read up to the fork boundary")

// streamSeed reads the source's log up to the fork boundary (nil: its last event, seq last, in the
// record at stream seq lastStreamSeq) and passes each seed event, validated, to app. ferr is the
// refusal of the boundary or of the seed (the read goes on to the boundary after a seed refusal,
// since OPEN_TURN comes first); err a failure to read the source or to write the child.
func (f *Forker) streamSeed(ctx context.Context, src *store.Session, boundary *int64, last int64, lastStreamSeq uint64, app *store.StreamAppend, skip int64) (seed *session.SeedStream, lookupSeed session.Lookup, ferr *session.ForkError, err error) {
	source := src.ID()
	// Where each record of the source starts, for the rare lookup of a tool/result replace's
	// target (one entry per record, not per event).
	var firsts []int64
	var streamSeqs []uint64
	// The tool results of the seed, the only lookup targets, are kept while they fit in
	// keptResultBytes: most lookups then read nothing (each read back is a leader get).
	kept := map[int64]session.Event{}
	keptBytes := 0
	lookup := func(seq int64) (session.Event, error) {
		if ev, ok := kept[seq]; ok {
			return ev, nil
		}
		i, _ := slices.BinarySearch(firsts, seq+1)
		if i == 0 {
			return session.Event{}, fmt.Errorf("seq %d is not in the seed", seq)
		}
		rec, found, err := src.RecordFromLeader(ctx, streamSeqs[i-1])
		if err != nil || !found {
			return session.Event{}, fmt.Errorf("reading seq %d of the source again: found %v: %v", seq, found, err)
		}
		for _, ev := range rec.LastEvents {
			if ev.Seq == seq {
				return ev, nil
			}
		}
		return session.Event{}, fmt.Errorf("seq %d is not in its record", seq)
	}
	seed, ferr = session.NewSeedStream(source, boundary, last, lookup)
	if ferr != nil {
		return nil, nil, ferr, nil
	}
	b := seed.Boundary()
	if b < 0 {
		return seed, lookup, seed.Finish(), nil
	}
	var werr error // a failure to write the child
	_, err = src.Records(ctx, func(r store.Record) error {
		streamSeq, evs, body := r.StreamSeq, r.Events, r.Body
		firsts, streamSeqs = append(firsts, evs[0].Seq), append(streamSeqs, streamSeq)
		for i := range evs {
			line := body
			if j := bytes.IndexByte(body, '\n'); j >= 0 {
				line, body = body[:j], body[j+1:]
			}
			if evs[i].Seq > b {
				return errSeedRead
			}
			keep, err := seed.AddScanned(&r.Scanned[i]) // the decoder's scan: no second parse
			if err != nil {
				return err
			}
			// An archived record (stream seq 0) cannot be read again by its stream seq: its tool
			// results are all kept.
			if keep && evs[i].Type == "tool/result" && (streamSeq == 0 || keptBytes+len(evs[i].Data) <= keptResultBytes) {
				own := evs[i] // a copy of its fields, so that keeping it does not keep its record's body
				own.Data, own.SurfaceOp, own.SourceEventSeqs = bytes.Clone(own.Data), bytes.Clone(own.SurfaceOp), bytes.Clone(own.SourceEventSeqs)
				kept[own.Seq], keptBytes = own, keptBytes+len(own.Data)
			}
			if keep && evs[i].Seq >= skip { // skip: the events a resumed child holds already
				// The stored line as is: it decodes to evs[i], which was just validated. (An
				// event stored elsewhere than in its line is encoded again.)
				if len(line) > 0 {
					werr = app.AddLine(ctx, evs[i].Seq, line)
				} else {
					werr = app.Add(ctx, &evs[i])
				}
				if werr != nil {
					return errSeedRead
				}
			}
		}
		if evs[len(evs)-1].Seq >= b {
			return errSeedRead
		}
		return nil
	}, store.Scanned())
	switch {
	case werr != nil:
		return nil, nil, nil, fmt.Errorf("forker: writing the child's record: %w", werr)
	case err != nil && !errors.Is(err, errSeedRead):
		return nil, nil, nil, readSourceErr(err)
	}
	return seed, lookup, seed.Finish(), nil
}

// MaxThenEvents bounds the then-events of one fork request (edit-then-fork: typically one
// replacement user message; the request's size is bounded by the connection's max payload too).
const MaxThenEvents = 10000

// checkThen decodes a fork's then-events (raw event objects; seq and time may be left out) as the
// events after the child's seed and end-seed marker (end, when hasEnd), and checks each with the
// log's rules (session.Surface.Apply, the publisher's), against the seed's fold. A refusal is a
// bad request naming the child, the seq and the rule; nothing has been written then.
func checkThen(child string, seed *session.SeedStream, end session.Event, hasEnd bool, raw []json.RawMessage, nowMs int64, seedLookup session.Lookup) ([]session.Event, *client.ThenResult, error) {
	if len(raw) == 0 {
		return nil, nil, nil
	}
	if len(raw) > MaxThenEvents {
		return nil, nil, &requestError{fmt.Sprintf("bad request: %d then-events, at most %d", len(raw), MaxThenEvents)}
	}
	surf := seed.Surface()
	next := int64(seed.Len())
	if hasEnd {
		if err := surf.Apply(child, end, nil); err != nil {
			return nil, nil, fmt.Errorf("forker: the child's end-seed marker: %w", err)
		}
		next++
	}
	evs := make([]session.Event, 0, len(raw))
	byNode := map[int64]int{} // then-event seq -> index, for a tool/result replace of one of them
	lookup := func(seq int64) (session.Event, error) {
		if i, ok := byNode[seq]; ok {
			return evs[i], nil
		}
		if seq < int64(seed.Len()) && seedLookup != nil {
			return seedLookup(seq)
		}
		return session.Event{}, fmt.Errorf("seq %d is not a surface node of the child", seq)
	}
	for i, r := range raw {
		ev, err := session.DecodeNextEvent(r, child, next, nowMs)
		if err == nil {
			err = surf.Apply(child, ev, lookup)
		}
		if err != nil {
			return nil, nil, &requestError{fmt.Sprintf("bad request: then-event %d of %d refused, nothing was written: %v", i+1, len(raw), err)}
		}
		byNode[ev.Seq] = len(evs)
		evs = append(evs, ev)
		next++
	}
	return evs, &client.ThenResult{Events: len(evs), FirstSeq: evs[0].Seq, LastSeq: evs[len(evs)-1].Seq}, nil
}

// readSourceErr maps a failure to read the source's log: a record that breaks a rule is a
// badSourceError (422), anything else a store failure.
func readSourceErr(err error) error {
	var se *session.Error
	if errors.As(err, &se) {
		return &badSourceError{fmt.Sprintf("forker: the source log cannot be read back: %v", err)}
	}
	return fmt.Errorf("forker: reading the source log: %w", err)
}

func alreadyExists(id string) *session.ForkError {
	return &session.ForkError{Code: session.CodeSessionAlreadyExists, Msg: fmt.Sprintf("session %q already exists", id)}
}

func notFound(id string) *session.ForkError {
	return &session.ForkError{Code: session.CodeSessionNotFound, Msg: fmt.Sprintf("session %q not found", id)}
}

// AbandonedForkAge is how old the metadata of a fork child without events must be before a new
// fork of the same source onto the same child takes it for an incomplete fork (one that died
// between claiming the child and writing its record) and replaces it. A fork in progress writes its
// record within seconds, and gives up after its 30 s retry window. The age is read from the claim's
// createdAt against this forker's clock, so forkers' clocks must agree to well within it.
const AbandonedForkAge = 2 * time.Minute

// abandoned reports whether hdr, the metadata of a child without events, is an incomplete fork of
// source: written by a fork (parentSession source, a seedLength) at least AbandonedForkAge ago.
func (f *Forker) abandoned(hdr session.Header, source string) bool {
	return hdr.ParentSession == source && hdr.SeedLength != nil &&
		f.now().UnixMilli()-hdr.CreatedAt >= AbandonedForkAge.Milliseconds()
}

// rollback removes the child metadata this fork created (step 4) after its record could not be
// written: a delete guarded by the revision read (store.Session.DeleteMetadata), and only when the
// stored header is still the one this fork wrote (same parentSession, seedLength and createdAt).
// Its errors leave naming the child to the caller.
func (f *Forker) rollback(ctx context.Context, ch *store.Session, hdr session.Header) error {
	info, err := ch.InfoAny(ctx)
	if err != nil {
		return fmt.Errorf("reading the metadata to roll back: %w", err)
	}
	got := info.Header
	if got.ID != hdr.ID || got.ParentSession != hdr.ParentSession || got.CreatedAt != hdr.CreatedAt ||
		got.SeedLength == nil || *got.SeedLength != *hdr.SeedLength {
		return errors.New("the metadata is no longer the one this fork created; left as is")
	}
	if err := ch.DeleteMetadata(ctx, info.Revision); err != nil {
		return fmt.Errorf("deleting the metadata: %w", err)
	}
	return nil
}

// sourceGone reports whether the source was removed (or is being removed) since it was read:
// its metadata is no longer the entry read (info), or, without metadata, its last record is no
// longer lastStreamSeq.
func (f *Forker) sourceGone(ctx context.Context, src *store.Session, hadMeta bool, info store.SessionInfo, lastStreamSeq uint64) (bool, error) {
	source := src.ID()
	if hadMeta {
		now, err := src.Info(ctx)
		if errors.Is(err, store.ErrSessionNotFound) {
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("fork of session %q: reading its metadata again: %w", source, err)
		}
		return now.Revision != info.Revision, nil
	}
	tail, err := src.TailFromLeader(ctx)
	if err != nil {
		return false, fmt.Errorf("fork of session %q: reading the log tail again: %w", source, err)
	}
	return tail.LastStreamSeq != lastStreamSeq, nil
}

// childRemoved checks, after the child's record was stored at streamSeq, that the child was not
// removed meanwhile; if it was, the fork fails with an error saying so and naming the child. The
// forker holds no purge right (a purge's filter is in its payload: the right would empty every
// session of the tenant), so the record stays: the child is left "being removed" (its metadata
// marked, store.Session.LeaveRemoving), which no read serves and `agentlog rm CHILD` finishes.
func (f *Forker) childRemoved(ctx context.Context, source string, ch *store.Session, hdr session.Header, inc string, streamSeq uint64) error {
	child := ch.ID()
	err := ch.CheckCurrent(ctx, inc)
	if err == nil {
		return nil
	}
	if !errors.Is(err, store.ErrSessionDeleted) {
		f.logger.Warn("fork: cannot check the child's metadata after its record", "child", child, "err", err)
		return nil
	}
	f.logger.Error("fork: the child was removed during the fork; its record is left to agentlog rm", "child", child, "streamSeq", streamSeq)
	if merr := ch.LeaveRemoving(context.WithoutCancel(ctx), hdr, inc); merr != nil {
		return &childLeftError{child, fmt.Errorf("fork of session %q onto %q: the child was removed during the fork, and its record (stream seq %d) is left; marking it removed failed (%v): run agentlog rm %s as the operator: %w",
			source, child, streamSeq, merr, shellquote.Quote(child), err)}
	}
	return &childLeftError{child, fmt.Errorf("fork of session %q onto %q: the child was removed during the fork; its record (stream seq %d) is left marked removed: run agentlog rm %s as the operator to clear it: %w",
		source, child, streamSeq, shellquote.Quote(child), err)}
}

// markComplete clears the incomplete mark (wire.IncompleteHeader) of child ch, incarnation inc,
// once its n events are stored. A failure only logs: a reader takes a marked child whose log holds
// its n events for complete, and a retried fork clears the mark.
func (f *Forker) markComplete(ctx context.Context, ch *store.Session, inc string, n int64) {
	ctx = context.WithoutCancel(ctx)
	info, err := ch.InfoAny(ctx)
	if err == nil && (info.Incarnation != inc || info.CompleteAt != n) {
		return // rewritten since (removed, or resumed by another fork): not this fork's mark
	}
	if err == nil {
		err = ch.MarkComplete(ctx, info)
	}
	if err != nil {
		f.logger.Warn("fork: cannot clear the child's incomplete mark (readers take it for complete all the same)", "child", ch.ID(), "err", err)
	}
}
