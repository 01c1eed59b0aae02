package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Errors of the lifecycle operations.
var (
	// ErrHeld: the session is under a legal hold (Hold): it is neither archived nor deleted.
	ErrHeld = errors.New("session is under a legal hold")
	// ErrNotArchived: the operation needs an archived session (its log in cold storage).
	ErrNotArchived = errors.New("session is not archived")
	// ErrWriterLive: a live writer holds the session's lease: it is not archived under it.
	ErrWriterLive = errors.New("a live writer holds the session's lease")
	// ErrEmptyLog: the session has no events, so it has nothing to archive.
	ErrEmptyLog = errors.New("session has no events")
	// ErrArchiveCorrupt: an archive's payload is missing a part, or its size or SHA-256 differ
	// from its head's: it is never served.
	ErrArchiveCorrupt = errors.New("archive does not match its head")
)

// LogState is where a session's log lives.
type LogState string

const (
	StateNone     LogState = ""         // no events anywhere (created, not written; or unknown)
	StateActive   LogState = "active"   // in the hot stream AGENTLOG (maybe after a cold prefix)
	StateArchived LogState = "archived" // in cold storage only (AGENTLOG_ARCHIVE)
)

// Location is where session's log is: its hot records (Hot, the zero Tail when there is none, and
// HotFirstSeq, the seq of the first hot record) and its archive (nil when none is used: a log
// whose hot records start at seq 0 ignores an archive left by an earlier life).
type Location struct {
	State       LogState
	Hot         Tail
	HotFirstSeq int64 // -1: no hot record
	Archive     *wire.ArchiveHead
	// ArchiveStale is an archive that the log does not use (its hot records start at 0): left by a
	// restore, or by an archive that stopped before its commit. The lifecycle pass removes it.
	ArchiveStale *wire.ArchiveHead
}

// NextSeq is the log's next event seq (its length).
func (l Location) NextSeq() int64 {
	if l.Hot.LastStreamSeq > 0 {
		return l.Hot.NextSeq
	}
	if l.Archive != nil {
		return l.Archive.Events
	}
	return 0
}

// Locate finds where the session's log lives (the one place that decides it, ARCHITECTURE.md
// "Lifecycle"): the hot stream's last and first records of the session (leader gets), then, when
// the hot records do not start at seq 0 or there are none, its archive's head. A cold prefix that
// the hot records do not continue is an error naming the session and both seqs.
func (ss *Session) Locate(ctx context.Context) (Location, error) {
	s, id, tok := ss.s, ss.id, ss.tok
	loc := Location{HotFirstSeq: -1}
	tail, err := ss.TailFromLeader(ctx)
	if err != nil {
		return loc, err
	}
	loc.Hot = tail
	if tail.LastStreamSeq > 0 {
		loc.State = StateActive
		first, err := ss.hotFirstSeq(ctx)
		if err != nil {
			return loc, err
		}
		loc.HotFirstSeq = first
	}
	head, found, err := s.archiveHead(ctx, tok)
	if err != nil {
		return loc, err
	}
	switch {
	case !found:
		if loc.HotFirstSeq > 0 {
			return loc, wire.RecordError(id, 0, 0, session.RuleRecordContinue, "the hot records start at seq %d and no archive holds seqs 0..%d", loc.HotFirstSeq, loc.HotFirstSeq-1)
		}
	case loc.HotFirstSeq == 0:
		loc.ArchiveStale = &head
	case loc.HotFirstSeq > 0 && head.Events < loc.HotFirstSeq:
		// (An archive holding more than the cold prefix is one committed since, which holds the
		// hot records too and has not purged them yet: the log is unchanged.)
		return loc, wire.RecordError(id, loc.HotFirstSeq, 0, session.RuleRecordContinue, "the hot records start at seq %d but the archive %s holds seqs 0..%d", loc.HotFirstSeq, head.ArchiveID, head.Events-1)
	default:
		loc.Archive = &head
		if loc.State == StateNone {
			loc.State = StateArchived
		}
	}
	return loc, nil
}

// Restored reports whether the session's hot log begins with records a Restore wrote (their
// Nats-Msg-Id is RestoreMsgID's), and the stream seq of its first record (0: no hot record). A
// projection folded before the archive names stream seqs below it: those records were written
// again, not lost.
func (ss *Session) Restored(ctx context.Context) (firstStreamSeq uint64, restored bool, err error) {
	m, err := ss.s.leaderNextMsg(ctx, ss.subject, 1)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the first record of session %q: %w", ss.id, err)
	}
	return m.Sequence, strings.HasPrefix(m.Header.Get(natsjs.MsgIDHeader), RestoreMsgID("")), nil
}

// hotFirstSeq is the seq of the session's first hot record, from its headers (-1: none).
func (ss *Session) hotFirstSeq(ctx context.Context) (int64, error) {
	s, id, subject := ss.s, ss.id, ss.subject
	m, err := s.leaderNextMsg(ctx, subject, 1)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("read the first record of session %q: %w", id, err)
	}
	first, err := strconv.ParseInt(m.Header.Get(wire.HeaderFirstSeq), 10, 64)
	if err != nil || first < 0 {
		return -1, wire.RecordError(id, -1, m.Sequence, session.RuleRecordHeader, "header %s is %q", wire.HeaderFirstSeq, m.Header.Get(wire.HeaderFirstSeq))
	}
	return first, nil
}

// archiveHead reads the head of session token's archive from the archive stream's leader; found
// is false when there is none.
func (s *Store) archiveHead(ctx context.Context, tok string) (wire.ArchiveHead, bool, error) {
	if s.archive == nil {
		return wire.ArchiveHead{}, false, nil
	}
	m, err := s.leaderGetFrom(ctx, wire.ArchiveStream, map[string]any{"last_by_subj": wire.ArchiveSubject(tok)})
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return wire.ArchiveHead{}, false, nil
	}
	if err != nil {
		return wire.ArchiveHead{}, false, fmt.Errorf("read the archive head %s: %w", wire.ArchiveSubject(tok), err)
	}
	h, err := wire.ParseArchiveHead(m.Header)
	if err != nil {
		return h, false, fmt.Errorf("%s (stream %s seq %d): %w", wire.ArchiveSubject(tok), wire.ArchiveStream, m.Sequence, err)
	}
	return h, true, nil
}

// Archived is a session's archive as read: its head, its packed JSONL (checked against the head's
// size and SHA-256) and the projection states it holds (unit key -> the stored value).
type Archived struct {
	Head        wire.ArchiveHead
	JSONL       []byte
	Projections map[string]json.RawMessage
}

// Events decodes the archive's events (and its header).
func (a *Archived) Events() (*session.Header, []session.Event, error) {
	return session.ReadJSONL(bytes.NewReader(a.JSONL), a.Head.ID)
}

// ReadArchive reads the session's archive whole: head, parts, both frames; a payload that does not
// match its head is a wrapped ErrArchiveCorrupt naming the session; no archive is a wrapped
// ErrNotArchived.
func (ss *Session) ReadArchive(ctx context.Context) (*Archived, error) {
	s, id, tok := ss.s, ss.id, ss.tok
	head, found, err := s.archiveHead(ctx, tok)
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("session %q: %w (no archive head %s)", id, ErrNotArchived, wire.ArchiveSubject(tok))
	}
	return s.readArchiveAt(ctx, head)
}

// maxArchiveJSONL bounds the packed JSONL an archive read holds in memory, bytes.
const maxArchiveJSONL = 1 << 30

func (s *Store) readArchiveAt(ctx context.Context, head wire.ArchiveHead) (*Archived, error) {
	id := head.ID
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("session %q: archive %s: %w: %s", id, head.ArchiveID, ErrArchiveCorrupt, fmt.Sprintf(format, args...))
	}
	if head.JSONLSize > maxArchiveJSONL {
		return nil, corrupt("its JSONL is %d bytes, above the %d this reader holds", head.JSONLSize, maxArchiveJSONL)
	}
	payload := make([]byte, 0, head.PayloadSize())
	for k := 1; k < head.Parts; k++ {
		subj := wire.ArchivePartSubject(head.Token, head.ArchiveID, k)
		m, err := s.leaderGetFrom(ctx, wire.ArchiveStream, map[string]any{"last_by_subj": subj})
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			return nil, corrupt("part %d of %d (%s) is missing", k, head.Parts, subj)
		}
		if err != nil {
			return nil, fmt.Errorf("session %q: read archive part %s: %w", id, subj, err)
		}
		if m.Header.Get(wire.HeaderArchiveID) != head.ArchiveID || m.Header.Get(wire.HeaderArchivePart) != strconv.Itoa(k) {
			return nil, corrupt("part %s names archive %q part %q", subj, m.Header.Get(wire.HeaderArchiveID), m.Header.Get(wire.HeaderArchivePart))
		}
		payload = append(payload, m.Data...)
	}
	hm, err := s.leaderGetFrom(ctx, wire.ArchiveStream, map[string]any{"last_by_subj": wire.ArchiveSubject(head.Token)})
	if err != nil {
		return nil, fmt.Errorf("session %q: read the archive head: %w", id, err)
	}
	if hm.Header.Get(wire.HeaderArchiveID) != head.ArchiveID {
		return nil, fmt.Errorf("session %q: archived again while it was read (archive %s replaced by %s): %w", id, head.ArchiveID, hm.Header.Get(wire.HeaderArchiveID), ErrLogChanged)
	}
	payload = append(payload, hm.Data...)
	return decodeArchivePayload(head, payload)
}

var (
	zstdDecOnce sync.Once
	zstdDec     *zstd.Decoder
	zstdEncOnce sync.Once
	zstdEnc     *zstd.Encoder
)

func decoder() *zstd.Decoder {
	zstdDecOnce.Do(func() {
		zstdDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(2*maxArchiveJSONL))
	})
	return zstdDec
}

func encoder() *zstd.Encoder {
	zstdEncOnce.Do(func() {
		zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	})
	return zstdEnc
}

// decodeArchivePayload splits and checks an archive's payload.
func decodeArchivePayload(head wire.ArchiveHead, payload []byte) (*Archived, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("session %q: archive %s: %w: %s", head.ID, head.ArchiveID, ErrArchiveCorrupt, fmt.Sprintf(format, args...))
	}
	if int64(len(payload)) != head.PayloadSize() {
		return nil, corrupt("its payload is %d bytes, its head says %d", len(payload), head.PayloadSize())
	}
	all, err := decoder().DecodeAll(payload, make([]byte, 0, head.JSONLSize+head.ProjectionsSize))
	if err != nil {
		return nil, corrupt("its payload does not decompress: %v", err)
	}
	if int64(len(all)) != head.JSONLSize+head.ProjectionsSize {
		return nil, corrupt("its payload holds %d bytes, its head says %d of JSONL and %d of projections", len(all), head.JSONLSize, head.ProjectionsSize)
	}
	jsonl, pj := all[:head.JSONLSize:head.JSONLSize], all[head.JSONLSize:]
	if sha256.Sum256(jsonl) != head.JSONLSHA256 {
		return nil, corrupt("its JSONL's SHA-256 is not its head's")
	}
	a := &Archived{Head: head, JSONL: jsonl, Projections: map[string]json.RawMessage{}}
	if err := json.Unmarshal(pj, &a.Projections); err != nil {
		return nil, corrupt("its projections are not a JSON object: %v", err)
	}
	return a, nil
}

// ArchiveResult is what Session.Archive did.
type ArchiveResult struct {
	Session string `json:"session"`
	// Archived: the archive was written and the hot records purged. Already: the session was
	// archived before (only the leftovers of an archive that stopped part-way were cleared).
	Archived bool `json:"archived"`
	Already  bool `json:"already,omitempty"`
	// Raced: a writer appended while the archive was written; its records stay hot after the
	// archived prefix (the session stays active).
	Raced        bool   `json:"raced,omitempty"`
	ArchiveID    string `json:"archiveId,omitempty"`
	Events       int64  `json:"events"`
	Records      uint64 `json:"records"`      // hot records purged
	JSONLBytes   int64  `json:"jsonlBytes"`   // the packed JSONL archived
	StoredBytes  int64  `json:"storedBytes"`  // the archive's payload (compressed)
	Parts        int    `json:"parts"`        // messages of the payload
	Projections  int    `json:"projections"`  // projection states moved into the archive
	Blobs        int    `json:"blobs"`        // offloaded events removed from AGENTLOG_BLOBS and agentlog_blobs (inline in the archive)
	LastActivity int64  `json:"lastActivity"` // when the last record was stored, Unix ms
}

// ArchiveOpt is an option of Session.Archive.
type ArchiveOpt func(*archiveOpts)

type archiveOpts struct {
	step       func(string) // StepHook
	ignoreHold bool
	pass       bool // a LifecyclePass: it probed the right to purge
	now        func() time.Time
	idleSince  time.Time // zero: archive whatever its last activity
}

// StepHook calls fn with the name of each step of an Session.Archive or Session.Restore as it is
// reached (the fault tests kill their process there): archive "read", "parts", "head",
// "committed", "projections"; restore "read", "written".
func StepHook(fn func(step string)) ArchiveOpt { return func(o *archiveOpts) { o.step = fn } }

func (o *archiveOpts) at(step string) {
	if o.step != nil {
		o.step(step)
	}
}

// ArchiveIdleSince makes Session.Archive archive only a session whose last record was stored before
// t (ErrNotIdle otherwise), checked on the tail it archives.
func ArchiveIdleSince(t time.Time) ArchiveOpt { return func(o *archiveOpts) { o.idleSince = t } }

// ErrNotIdle: ArchiveIdleSince refused a session written since.
var ErrNotIdle = errors.New("session was written since")

// Archive moves the session's log into cold storage (AGENTLOG_ARCHIVE): it reads the whole
// log (a cold prefix included), writes the archive (its packed JSONL, offloaded events inline, and
// the projection states caught up with the log), then purges the hot records it archived (the
// commit), then the projection keys it moved and the blobs those records named. A writer that
// appends meanwhile keeps its records: they stay hot after the archived prefix (Raced). Steps and
// why they are safe: ARCHITECTURE.md, "Lifecycle".
//
// Errors: ErrHeld, ErrWriterLive, ErrEmptyLog, ErrSessionNotFound (no metadata, or being removed), ErrNotIdle,
// ErrRemoveNotStarted (credentials that may not purge: nothing changed), and read or write
// failures naming the session. An archive that stopped part-way is finished by running it again.
func (ss *Session) Archive(ctx context.Context, opts ...ArchiveOpt) (ArchiveResult, error) {
	o := archiveOpts{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	s, id, tok := ss.s, ss.id, ss.tok
	res := ArchiveResult{Session: id}
	if s.archive == nil {
		return res, fmt.Errorf("archive session %q: stream %s is not provisioned (run `agentlog provision`)", id, wire.ArchiveStream)
	}
	subject := ss.subject
	if !o.pass {
		if _, err := s.purge(ctx, wire.StreamName, subject, 1); err != nil {
			return res, fmt.Errorf("archive session %q: %w: %w", id, ErrRemoveNotStarted, err)
		}
	}
	begun := time.Now()
	info, err := ss.Info(ctx)
	if err != nil {
		return res, err
	}
	if !o.pass {
		if l, _, err := ss.Lease(ctx); err == nil {
			return res, fmt.Errorf("archive session %q: %w (writer %q, host %s, pid %d)", id, ErrWriterLive, l.Writer, l.Host, l.PID)
		} else if !errors.Is(err, ErrNoLease) {
			return res, fmt.Errorf("archive session %q: read its writer lease: %w", id, err)
		}
	}
	if !o.ignoreHold {
		if h, err := ss.GetHold(ctx); err == nil {
			return res, fmt.Errorf("archive session %q: %w (%s)", id, ErrHeld, h.Reason)
		} else if !errors.Is(err, ErrNoHold) {
			return res, err
		}
	}
	// The hot records (one batched direct get: a stale answer on R>1 can only leave records that
	// are newer than what is archived hot, after the archived prefix), and the archive head.
	msgs, err := s.subjectMsgs(ctx, subject)
	if err != nil {
		return res, fmt.Errorf("archive session %q: read its records: %w", id, err)
	}
	var head0 *wire.ArchiveHead
	var head0Seq uint64
	if hm, err := s.archive.GetLastMsgForSubject(ctx, wire.ArchiveSubject(tok)); err == nil {
		h, perr := wire.ParseArchiveHead(hm.Header)
		if perr != nil {
			return res, fmt.Errorf("archive session %q: %s: %w", id, wire.ArchiveSubject(tok), perr)
		}
		head0, head0Seq = &h, hm.Sequence
	} else if !errors.Is(err, natsjs.ErrMsgNotFound) {
		return res, fmt.Errorf("archive session %q: read its archive head: %w", id, err)
	}
	if len(msgs) == 0 {
		if head0 == nil {
			return res, fmt.Errorf("archive session %q: %w", id, ErrEmptyLog)
		}
		// Archived already: clear what an archive that stopped after its commit left.
		res.Already, res.ArchiveID, res.Events, res.LastActivity = true, head0.ArchiveID, head0.Events, head0.LastActivity
		n, err := s.purgeProjections(ctx, tok)
		res.Projections = len(n)
		return res, err
	}
	first, err := strconv.ParseInt(msgs[0].Header.Get(wire.HeaderFirstSeq), 10, 64)
	if err != nil || first < 0 {
		return res, wire.RecordError(id, -1, msgs[0].Sequence, session.RuleRecordHeader, "header %s is %q", wire.HeaderFirstSeq, msgs[0].Header.Get(wire.HeaderFirstSeq))
	}
	var prefix, stale *wire.ArchiveHead
	switch {
	case first == 0:
		stale = head0
	case head0 == nil || head0.Events < first:
		return res, wire.RecordError(id, first, msgs[0].Sequence, session.RuleRecordContinue, "the hot records start at seq %d and no archive holds seqs 0..%d", first, first-1)
	default:
		prefix = head0
	}
	if prefix != nil && prefix.Incarnation != info.Incarnation {
		return res, fmt.Errorf("archive session %q: its cold prefix is of incarnation %q, its metadata of %q", id, prefix.Incarnation, info.Incarnation)
	}

	// 1. The log as packed JSONL: the cold prefix, then the hot records.
	var buf bytes.Buffer
	jw := session.NewJSONLWriter(&buf, session.WriteOptions{Pack: true})
	if err := jw.WriteHeader(&info.Header); err != nil {
		return res, fmt.Errorf("archive session %q: write its header: %w", id, err)
	}
	used := blobsUsed{ids: map[string]bool{}, names: map[string]bool{}}
	var lastAt int64
	next := int64(0)
	if prefix != nil {
		prev, err := s.readArchiveAt(ctx, *prefix)
		if err != nil {
			return res, err
		}
		_, evs, err := prev.Events()
		if err != nil {
			return res, fmt.Errorf("archive session %q: its cold prefix: %w", id, err)
		}
		// An archive that stopped between its head and its commit holds the hot records too.
		if int64(len(evs)) > first {
			evs = evs[:first]
		}
		if err := jw.Write(evs...); err != nil {
			return res, err
		}
		next = int64(len(evs))
	}
	var lastStreamSeq uint64
	for _, m := range msgs {
		evs, err := ss.decodeStored(ctx, m.Header, m.Data, m.Sequence, true)
		if err != nil {
			return res, err
		}
		if evs[0].Seq != next {
			return res, wire.RecordError(id, evs[0].Seq, m.Sequence, session.RuleRecordContinue, "record starts at seq %d, want %d", evs[0].Seq, next)
		}
		for _, ref := range wire.RecordBlobs(m.Header) {
			if ref.Legacy() {
				used.names[wire.BlobName(tok, ref)] = true
			} else {
				used.ids[ref.ID] = true
			}
		}
		if err := jw.Write(evs...); err != nil {
			return res, err
		}
		next, lastStreamSeq, lastAt = evs[len(evs)-1].Seq+1, m.Sequence, m.Time.UnixMilli()
		res.Records++
	}
	if err := jw.Flush(); err != nil {
		return res, err
	}
	if !o.idleSince.IsZero() && lastAt >= o.idleSince.UnixMilli() {
		return res, fmt.Errorf("archive session %q: %w (its last record was stored at %s)", id, ErrNotIdle, time.UnixMilli(lastAt).UTC().Format(time.RFC3339))
	}
	res.Events, res.LastActivity = next, lastAt
	o.at("read")

	// 2. The projection states caught up with the log.
	projections, listing, err := s.caughtUpProjections(ctx, tok, res.Events-1)
	if err != nil {
		return res, fmt.Errorf("archive session %q: %w", id, err)
	}
	res.Projections = len(projections)

	// 3. The archive: parts, then the head (guarded on the head it replaces).
	head := wire.ArchiveHead{Token: tok, ID: id, Incarnation: info.Incarnation, ArchiveID: nuid.Next(), Events: res.Events,
		LastActivity: lastAt, ArchivedAt: o.now().UnixMilli(), JSONLSize: int64(buf.Len()), JSONLSHA256: sha256.Sum256(buf.Bytes()), Listing: listing}
	pj, _ := json.Marshal(projections)
	head.ProjectionsSize = int64(len(pj))
	buf.Write(pj)
	payload := encoder().EncodeAll(buf.Bytes(), make([]byte, 0, buf.Len()/3))
	head.PayloadBytes = int64(len(payload))
	if err := s.writeArchive(ctx, &head, head0Seq, payload, o.at); err != nil {
		return res, fmt.Errorf("archive session %q: %w", id, err)
	}
	res.ArchiveID, res.JSONLBytes, res.StoredBytes, res.Parts = head.ArchiveID, head.JSONLSize, int64(len(payload)), head.Parts

	// 4. The commit: purge the hot records archived. Records appended since stay. An archive
	// that took longer than maxArchiveCommitAge (a stalled process) is not committed: the pass
	// may by then take it for the stale archive of a restored session and remove it.
	if time.Since(begun) > maxArchiveCommitAge {
		return res, fmt.Errorf("archive session %q: it took %s, more than %s, so it is not committed (run it again)", id, time.Since(begun).Round(time.Second), maxArchiveCommitAge)
	}
	if _, err := s.purge(ctx, wire.StreamName, subject, lastStreamSeq+1); err != nil {
		return res, fmt.Errorf("archive session %q: purge its hot records through stream seq %d (the archive is written; run the archive again to finish): %w", id, lastStreamSeq, err)
	}
	if _, err := s.stream.GetLastMsgForSubject(ctx, subject); err == nil {
		res.Raced = true // a writer appended meanwhile: its records follow the cold prefix
		return res, nil
	} else if !errors.Is(err, natsjs.ErrMsgNotFound) {
		return res, fmt.Errorf("archive session %q: %w", id, err)
	}
	res.Archived = true
	o.at("committed")

	// 5. What the archive holds now: the projection keys, the blobs, an earlier archive's parts.
	if _, err := s.purge(ctx, "KV_"+wire.ProjectionsBucket, "$KV."+wire.ProjectionsBucket+".*."+tok, 0); err != nil {
		return res, fmt.Errorf("archive session %q: purge its projection keys (it is archived; run the archive again to finish): %w", id, err)
	}
	o.at("projections")
	if res.Blobs, err = s.removeUsedBlobs(ctx, tok, used); err != nil {
		return res, fmt.Errorf("archive session %q (it is archived): %w", id, err)
	}
	for _, old := range []*wire.ArchiveHead{prefix, stale} {
		if old != nil && old.Parts > 1 {
			_, _ = s.purge(ctx, wire.ArchiveStream, wire.ArchivePrefix+"."+tok+"."+old.ArchiveID+".>", 0)
		}
	}
	return res, nil
}

// subjectMsgs reads every message of subject in AGENTLOG with batched direct gets, in order.
func (s *Store) subjectMsgs(ctx context.Context, subject string) ([]*natsjs.RawStreamMsg, error) {
	var out []*natsjs.RawStreamMsg
	seq := uint64(1)
	for {
		msgs, err := s.getDirect(ctx, wire.StreamName, map[string]any{"seq": seq, "next_by_subj": subject, "batch": directBatch, "max_bytes": directBatchBytes})
		if err != nil {
			return nil, err
		}
		n, size := 0, 0
		for _, m := range msgs {
			out = append(out, m)
			seq = m.Sequence + 1
			n, size = n+1, size+len(m.Data)+len(m.Subject)+256
		}
		if n == 0 || (n < directBatch && size < directBatchBytes-int(s.maxMsgSize)-(1<<16)) {
			return out, nil // the batch ended before its limits: nothing more
		}
	}
}

// directBatch and directBatchBytes bound one batched direct get (messages, bytes).
const (
	directBatch      = 1000
	directBatchBytes = 8 << 20
)

// caughtUpProjections reads the stored projection states of session token (every unit) and keeps
// those at asOfSeq lastSeq, or stopped; it also returns what a listing shows of them.
func (s *Store) caughtUpProjections(ctx context.Context, tok string, lastSeq int64) (map[string]json.RawMessage, wire.ArchiveListing, error) {
	out := map[string]json.RawMessage{}
	var l wire.ArchiveListing
	prefix := "$KV." + wire.ProjectionsBucket + "."
	msgs, err := s.lastMsgs(ctx, "KV_"+wire.ProjectionsBucket, []string{prefix + "*." + tok})
	if err != nil {
		return nil, l, fmt.Errorf("read its projection states: %w", err)
	}
	for _, m := range msgs {
		if kvDeleted(m.Header) {
			continue
		}
		unit := m.Subject[len(prefix) : len(m.Subject)-len(tok)-1]
		var v struct {
			AsOfSeq int64           `json:"asOfSeq"`
			State   json.RawMessage `json:"state"`
			Error   *struct {
				Seq int64 `json:"seq"`
			} `json:"error"`
		}
		if json.Unmarshal(m.Data, &v) != nil {
			continue
		}
		if v.Error != nil {
			l.Stopped = append(l.Stopped, unit)
		} else if v.AsOfSeq != lastSeq {
			continue // behind the log: a reader folds the archived events for it
		}
		out[unit] = json.RawMessage(m.Data)
		switch unit {
		case "title":
			var t struct {
				Title string `json:"title"`
			}
			if json.Unmarshal(v.State, &t) == nil {
				l.Title = wire.CutTitle(t.Title)
			}
		case "messages":
			var t struct {
				OpenTurn *int64 `json:"openTurn"`
			}
			if json.Unmarshal(v.State, &t) == nil {
				l.OpenTurn = t.OpenTurn
			}
		}
	}
	slices.Sort(l.Stopped)
	return out, l, nil
}

// archivePartBudget is the largest body of one archive message: the archive stream's max message
// size less room for its headers.
func (s *Store) archivePartBudget() int {
	limit := int(s.maxMsgSize)
	if s.archive != nil {
		if c := s.archive.CachedInfo().Config; c.MaxMsgSize > 0 && int(c.MaxMsgSize) < limit {
			limit = int(c.MaxMsgSize)
		}
	}
	return max(limit-2048, 512)
}

// writeArchive writes head's payload: its parts (head.Parts is set here), then the head, guarded
// on the archive head it replaces, so that two archivers of one session cannot both win.
func (s *Store) writeArchive(ctx context.Context, head *wire.ArchiveHead, prev uint64, payload []byte, at func(string)) error {
	budget := s.archivePartBudget()
	var chunks [][]byte
	for len(payload) > budget {
		chunks, payload = append(chunks, payload[:budget]), payload[budget:]
	}
	head.Parts = len(chunks) + 1
	var futures []natsjs.PubAckFuture
	for k, c := range chunks {
		m := &nats.Msg{Subject: wire.ArchivePartSubject(head.Token, head.ArchiveID, k+1), Data: c,
			Header: nats.Header{wire.HeaderArchiveID: {head.ArchiveID}, wire.HeaderArchivePart: {strconv.Itoa(k + 1)}}}
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("write archive part %d: %w", k+1, err)
		}
		futures = append(futures, f)
	}
	for k, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("write archive part %d: %w", k+1, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	at("parts")
	m := &nats.Msg{Subject: wire.ArchiveSubject(head.Token), Header: nats.Header(head.Header()), Data: payload}
	pctx, cancel := context.WithTimeout(ctx, directBatchTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(pctx, m, natsjs.WithExpectLastSequencePerSubject(prev)); err != nil {
		if IsWrongLastSequence(err) {
			return fmt.Errorf("%w: another archive of the session was written meanwhile", ErrConflict)
		}
		return fmt.Errorf("write the archive head: %w", err)
	}
	at("head")
	return nil
}

// RestoreResult is what Session.Restore did.
type RestoreResult struct {
	Session   string `json:"session"`
	Restored  bool   `json:"restored"`          // the hot stream holds the log again
	Already   bool   `json:"already,omitempty"` // it was not archived (nothing done)
	ArchiveID string `json:"archiveId,omitempty"`
	Events    int64  `json:"events"`
	StreamSeq uint64 `json:"streamSeq,omitempty"` // the last hot record written
}

// RestoreMsgID is the Nats-Msg-Id prefix of the records a restore of archive archiveID writes.
func RestoreMsgID(archiveID string) string { return "restore:" + archiveID }

// Restore brings the archived session's log back to the hot stream (opts: StepHook): the archive's events
// are written as records guarded with expected stream seq 0 (one record, or one atomic batch), so
// a restore is all or nothing, and of two concurrent restores one writes and the other finds its
// records (idempotent). The archive is left in place (a restore needs no right to purge); the
// lifecycle pass removes it. A session that is not archived is left as it is (Already). Errors
// name the session: ErrSessionNotFound, ErrArchiveCorrupt, write failures.
func (ss *Session) Restore(ctx context.Context, opts ...ArchiveOpt) (RestoreResult, error) {
	o := archiveOpts{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	s, id := ss.s, ss.id
	res := RestoreResult{Session: id}
	loc, err := ss.Locate(ctx)
	if err != nil {
		return res, err
	}
	switch loc.State {
	case StateActive:
		res.Already, res.Events = true, loc.NextSeq()
		return res, nil
	case StateNone:
		if _, err := ss.Info(ctx); err != nil {
			return res, err
		}
		res.Already = true
		return res, nil
	}
	a, err := s.readArchiveAt(ctx, *loc.Archive)
	if err != nil {
		return res, err
	}
	if info, err := ss.Info(ctx); err != nil {
		return res, err
	} else if info.Incarnation != a.Head.Incarnation {
		return res, fmt.Errorf("restore session %q: its archive is of incarnation %q, its metadata of %q", id, a.Head.Incarnation, info.Incarnation)
	}
	_, evs, err := a.Events()
	if err != nil {
		return res, fmt.Errorf("restore session %q: the archived log: %w", id, err)
	}
	res.ArchiveID, res.Events = a.Head.ArchiveID, int64(len(evs))
	o.at("read")
	msgID := RestoreMsgID(a.Head.ArchiveID)
	app, err := ss.BeginAppend(0, WithMsgID(msgID))
	if err != nil {
		return res, err
	}
	for i := range evs {
		if err := app.Add(ctx, &evs[i]); err != nil {
			app.Discard()
			return res, fmt.Errorf("restore session %q: %w", id, err)
		}
	}
	r, err := app.Commit(ctx)
	if errors.Is(err, ErrConflict) {
		// Someone wrote first: another restore of this archive (its tail carries our msg id), or a
		// writer whose records follow the archive: either way the log is whole.
		loc2, lerr := ss.Locate(ctx)
		if lerr == nil && loc2.State == StateActive {
			res.Already = true
			return res, nil
		}
	}
	if err != nil {
		return res, fmt.Errorf("restore session %q: %w", id, err)
	}
	res.Restored, res.StreamSeq = true, r.StreamSeq
	o.at("written")
	return res, nil
}

// readArchivedRecords hands fn the archive's events with seqs from..to-1 (to < 0: to its end), in
// chunks, as records at stream seq 0 (they are in no stream), and returns the seq after the last
// it handed. The whole archive is checked against its head either way.
func (s *Store) readArchivedRecords(ctx context.Context, head wire.ArchiveHead, from, to int64, fn func(Record) error) (int64, error) {
	a, err := s.readArchiveAt(ctx, head)
	if err != nil {
		return 0, err
	}
	jr := session.NewJSONLReader(bytes.NewReader(a.JSONL), head.ID)
	const chunk = 256
	batch := make([]session.Event, 0, chunk)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		var body []byte
		for i := range batch {
			if i > 0 {
				body = append(body, '\n')
			}
			var err error
			if body, err = batch[i].AppendJSON(body); err != nil {
				return err
			}
		}
		err := fn(Record{Events: batch, Body: body})
		batch = make([]session.Event, 0, chunk)
		return err
	}
	next := int64(0)
	for {
		ev, err := jr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("session %q: archive %s: %w", head.ID, head.ArchiveID, err)
		}
		next = ev.Seq + 1
		if ev.Seq < from || (to >= 0 && ev.Seq >= to) {
			continue
		}
		if batch = append(batch, ev); len(batch) == chunk {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if next != head.Events {
		return 0, fmt.Errorf("session %q: archive %s: %w: it holds %d events, its head says %d", head.ID, head.ArchiveID, ErrArchiveCorrupt, next, head.Events)
	}
	if to >= 0 && to < next {
		next = to
	}
	return next, flush()
}

// ArchiveHeads reads the archive heads of the sessions whose tokens are toks (batched direct
// gets): token -> head, for those that have one. A head says the session is archived only when it
// has no hot record (Locate decides for one session).
func (s *Store) ArchiveHeads(ctx context.Context, toks []string) (map[string]wire.ArchiveHead, error) {
	out := map[string]wire.ArchiveHead{}
	if s.archive == nil || len(toks) == 0 {
		return out, nil
	}
	subjects := make([]string, len(toks))
	for i, t := range toks {
		subjects[i] = wire.ArchiveSubject(t)
	}
	msgs, err := s.lastMsgs(ctx, wire.ArchiveStream, subjects)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if h, err := wire.ParseArchiveHead(m.Header); err == nil {
			out[h.Token] = h
		}
	}
	return out, nil
}
