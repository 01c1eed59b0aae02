package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The layouts of offloaded events: the write-once stream wire.BlobStream (what is written), and
// the legacy Object Store bucket wire.BlobsBucket (ADR-20; read, and removed by the operator).
const (
	legacyBlobsStream = "OBJ_" + wire.BlobsBucket
	legacyChunks      = "$O." + wire.BlobsBucket + ".C." // + the object's nuid: its chunks
	legacyMeta        = "$O." + wire.BlobsBucket + ".M." // + base64url(name): the object's metadata

	// BlobMaxAgeAtPublish: an append publishes its record only while the blobs it wrote are younger
	// than this; an attempt that took longer (a paused process) writes them again first. With
	// CollectBlobs' grace far above it, a blob is never collected before its record is committed.
	BlobMaxAgeAtPublish = 5 * time.Minute
	// DefaultBlobGrace is how old an unreferenced blob must be before CollectBlobs removes it
	// (ARCHITECTURE.md, "Large events").
	DefaultBlobGrace = time.Hour
	// MinBlobGrace is the smallest grace `agentlog gc` accepts.
	MinBlobGrace = 2 * BlobMaxAgeAtPublish
)

// testHookBlobsWritten, when set (tests only), runs after an append's blobs are stored and before
// its record is published.
var testHookBlobsWritten func(id string, refs []wire.BlobRef)

// offload stores lines[i] for each i in idx as new blobs of session id (token tok) and returns
// their refs, in idx's order, and when the first was written. Its caller (offloadLarge) checked
// the cap of every line first, so nothing is stored for an append that is refused.
func (s *Store) offload(ctx context.Context, id, tok string, events []session.Event, lines [][]byte, idx []int) ([]wire.BlobLine, time.Time, error) {
	if s.blobStream == nil {
		i := idx[0]
		return nil, time.Time{}, fmt.Errorf("session %q seq %d: %w: the event is %d bytes encoded, more than one record holds (max message size %d bytes), and the store has no %s stream to offload it to",
			id, events[i].Seq, ErrEventTooLarge, len(lines[i]), s.maxMsgSize, wire.BlobStream)
	}
	start := time.Now()
	out := make([]wire.BlobLine, len(idx))
	for k, i := range idx {
		ref := wire.BlobRef{Seq: events[i].Seq, Size: int64(len(lines[i])), ID: wire.NewBlobID(), SHA256: sha256.Sum256(lines[i])}
		n, err := s.putBlob(ctx, tok, ref.ID, lines[i])
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("session %q seq %d: store the event's %d bytes as blob %s in %s: %w", id, ref.Seq, ref.Size, ref.ID, wire.BlobStream, err)
		}
		ref.Chunks = n
		out[k] = wire.BlobLine{Index: i, Ref: ref}
	}
	if testHookBlobsWritten != nil {
		refs := make([]wire.BlobRef, len(out))
		for k, b := range out {
			refs[k] = b.Ref
		}
		testHookBlobsWritten(id, refs)
	}
	return out, start, nil
}

// putWindow is how many chunks of one blob putBlob has in flight at once.
const putWindow = 32

// putChunkTries is how often putBlob sends one chunk whose ack does not come (a lost ack, no
// responders during a leader change) before the error goes to the append's caller.
const putChunkTries = 3

// ErrBlobChunkTaken is returned (wrapped) when a chunk subject of a blob being written already
// holds other bytes: the write-once stream refuses to overwrite it.
var ErrBlobChunkTaken = errors.New("blob chunk subject already holds other bytes")

// putBlob stores data as blob id of session token tok in wire.BlobStream: chunk k on
// wire.BlobChunkSubject(tok, id, k), each publish guarded with expected last subject sequence 0,
// so it only ever creates a subject (the stream's one message per subject, discard new per
// subject, refuses any second message too). A chunk whose ack is lost is sent again; one that
// the server refuses as already stored counts as written when the stored bytes are the same, and
// is ErrBlobChunkTaken otherwise. It returns the chunk count. Nothing is purged on failure (no
// writer holds a purge right): CollectBlobs removes the chunks of a failed upload. Other errors
// are the server's or ctx's, unwrapped.
func (s *Store) putBlob(ctx context.Context, tok, id string, data []byte) (int, error) {
	var opts []natsjs.JetStreamOpt
	if _, ok := ctx.Deadline(); !ok {
		opts = append(opts, natsjs.WithPublishAsyncTimeout(s.js.Options().DefaultTimeout))
	}
	js, err := likeJS(s.js, opts...)
	if err != nil {
		return 0, err
	}
	defer js.CleanupPublisher()
	chunk := int(s.blobChunkSize())
	type sent struct {
		f    natsjs.PubAckFuture
		msg  *nats.Msg
		part []byte
	}
	var inflight []sent
	// settle waits for one chunk's ack, sending it again (synchronously) when the ack is lost.
	settle := func(c sent) error {
		var err error
		select {
		case <-c.f.Ok():
			return nil
		case err = <-c.f.Err():
		case <-ctx.Done():
			return ctx.Err()
		}
		for try := 1; ; try++ {
			if isWrongLastSeq(err) {
				return s.sameChunk(ctx, c.msg.Subject, c.part)
			}
			if try == putChunkTries || !lostAck(err) || ctx.Err() != nil {
				return err
			}
			_, err = js.PublishMsg(ctx, chunkMsg(c.msg.Subject, c.part))
			if err == nil {
				return nil
			}
		}
	}
	chunks := 0
	for off := 0; off < len(data); off += chunk {
		part := data[off:min(off+chunk, len(data))]
		if len(inflight) == putWindow {
			if err := settle(inflight[0]); err != nil {
				return 0, err
			}
			inflight = inflight[1:]
		}
		m := chunkMsg(wire.BlobChunkSubject(tok, id, chunks), part)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return 0, err
		}
		inflight = append(inflight, sent{f, m, part})
		chunks++
	}
	for _, c := range inflight {
		if err := settle(c); err != nil {
			return 0, err
		}
	}
	return chunks, nil
}

// chunkMsg is a chunk's publish: create-only (expected last subject sequence 0).
func chunkMsg(subject string, part []byte) *nats.Msg {
	return &nats.Msg{Subject: subject, Data: part, Header: nats.Header{natsjs.ExpectedLastSubjSeqHeader: []string{"0"}}}
}

// isWrongLastSeq: the server refused a publish guarded with an expected last subject sequence.
func isWrongLastSeq(err error) bool {
	var ae *natsjs.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence || ae.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant)
}

// lostAck: a publish whose outcome is unknown (no ack in time, no responders).
func lostAck(err error) bool {
	return errors.Is(err, natsjs.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, natsjs.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders)
}

// sameChunk checks that subject of wire.BlobStream holds part (a chunk sent again whose first
// send was stored): nil when it does, ErrBlobChunkTaken (wrapped) when it holds other bytes.
func (s *Store) sameChunk(ctx context.Context, subject string, part []byte) error {
	m, found, err := s.directLast(ctx, wire.BlobStream, subject)
	if err != nil {
		return fmt.Errorf("read back chunk %s: %w", subject, err)
	}
	if !found || !bytes.Equal(m.Data, part) {
		return fmt.Errorf("%w: %s", ErrBlobChunkTaken, subject)
	}
	return nil
}

// directLast is a direct get of the last message of subject in stream, the subject in the
// request's subject (DIRECT.GET.<stream>.<subject>: a right a role can be given per subject).
// found is false when the stream has none.
func (s *Store) directLast(ctx context.Context, stream, subject string) (*natsjs.RawStreamMsg, bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderGetTimeout)
		defer cancel()
	}
	msg, err := s.js.Conn().RequestWithContext(ctx, s.api("DIRECT.GET."+stream+"."+subject), nil)
	if err != nil {
		return nil, false, err
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") != "" {
		if msg.Header.Get("Status") == "404" {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("direct get of %s from stream %s: status %s %s", subject, stream, msg.Header.Get("Status"), msg.Header.Get("Description"))
	}
	m, err := rawFromDirect(msg)
	return m, err == nil, err
}

// blobChunkSize is the chunk size of the blobs written: 128 KiB, less on a server whose max
// payload is smaller (a chunk is one message).
func (s *Store) blobChunkSize() uint32 {
	const def = 128 << 10
	if s.js == nil || s.js.Conn() == nil {
		return def
	}
	return uint32(max(min(int64(def), s.js.Conn().MaxPayload()-1024), 512))
}

// readChunks reads the chunks of filter from stream by batched direct gets (next_by_subj, in
// stream order) and gives each to put, until none is left or want were read. It returns how many
// it read.
func (s *Store) readChunks(ctx context.Context, stream, filter string, want int, put func(m *natsjs.RawStreamMsg) error) (int, error) {
	n := 0
	for seq := uint64(1); n < want; {
		msgs, err := s.MsgsFrom(ctx, stream, seq, want-n, filter)
		if err != nil {
			return n, err
		}
		if len(msgs) == 0 {
			return n, nil
		}
		for _, m := range msgs {
			if err := put(m); err != nil {
				return n, err
			}
			n++
			seq = m.Sequence + 1
		}
	}
	return n, nil
}

// fetchBlob reads ref's line and checks its size and digest. A blob that is missing or differs is
// a *session.Error (rule record-blob) naming the session, the seq and the stream seq; a failure to
// reach the stream is a plain error (transient).
func (s *Store) fetchBlob(ctx context.Context, id, tok string, ref wire.BlobRef, streamSeq uint64) ([]byte, error) {
	if ref.Legacy() {
		return s.fetchLegacyBlob(ctx, id, tok, ref, streamSeq)
	}
	name := wire.BlobChunksFilter(tok, ref.ID)
	bad := func(format string, args ...any) error {
		return wire.RecordError(id, ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s in %s: %s", name, wire.BlobStream, fmt.Sprintf(format, args...))
	}
	if s.blobStream == nil {
		return nil, bad("the store has no %s stream", wire.BlobStream)
	}
	parts := make([][]byte, ref.Chunks)
	size := int64(0)
	_, err := s.readChunks(ctx, wire.BlobStream, name, ref.Chunks, func(m *natsjs.RawStreamMsg) error {
		_, _, k, ok := wire.ParseBlobSubject(m.Subject)
		if !ok || k >= ref.Chunks {
			return bad("it has chunk %s, beyond the %d its record names", m.Subject, ref.Chunks)
		}
		if parts[k] == nil {
			parts[k] = m.Data
			size += int64(len(m.Data))
		}
		return nil
	})
	if err != nil {
		var se *session.Error
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, fmt.Errorf("session %q seq %d: read blob %s from %s: %w", id, ref.Seq, name, wire.BlobStream, err)
	}
	for k, p := range parts {
		if p == nil {
			return nil, bad("chunk %d of %d is missing", k, ref.Chunks)
		}
	}
	if size != ref.Size {
		return nil, bad("its chunks hold %d bytes, its record names %d", size, ref.Size)
	}
	b := bytes.Join(parts, nil)
	if sha256.Sum256(b) != ref.SHA256 {
		return nil, bad("its %d bytes have another SHA-256 than its record names", size)
	}
	return b, nil
}

// fetchLegacyBlob reads a legacy ref's line from the Object Store bucket wire.BlobsBucket with
// direct gets only (the metadata by subject, the chunks in batches by subject; no consumer).
func (s *Store) fetchLegacyBlob(ctx context.Context, id, tok string, ref wire.BlobRef, streamSeq uint64) ([]byte, error) {
	name := wire.BlobName(tok, ref)
	bad := func(format string, args ...any) error {
		return wire.RecordError(id, ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s in %s: %s", name, wire.BlobsBucket, fmt.Sprintf(format, args...))
	}
	transient := func(err error) error {
		return fmt.Errorf("session %q seq %d: read blob %s from %s: %w", id, ref.Seq, name, wire.BlobsBucket, err)
	}
	m, found, err := s.directLast(ctx, legacyBlobsStream, legacyMeta+base64.URLEncoding.EncodeToString([]byte(name)))
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, bad("the bucket does not exist")
	}
	if err != nil {
		return nil, transient(err)
	}
	var info natsjs.ObjectInfo
	if !found {
		return nil, bad("it is missing")
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return nil, bad("its metadata is not an object's: %v", err)
	}
	if info.Deleted || info.NUID == "" {
		return nil, bad("it is missing (deleted)")
	}
	var b []byte
	n, err := s.readChunks(ctx, legacyBlobsStream, legacyChunks+info.NUID, int(info.Chunks), func(m *natsjs.RawStreamMsg) error {
		b = append(b, m.Data...)
		return nil
	})
	if err != nil {
		return nil, transient(err)
	}
	if n != int(info.Chunks) || int64(len(b)) != ref.Size || sha256.Sum256(b) != ref.SHA256 {
		return nil, bad("it is %d bytes in %d of %d chunks with another digest than its record names (%d bytes)", len(b), n, info.Chunks, ref.Size)
	}
	return b, nil
}

// resolve fills in the offloaded events of a decoded record of session id from their blobs.
func (s *Store) resolve(ctx context.Context, id string, h nats.Header, evs []session.Event, blobs []wire.BlobLine, streamSeq uint64) error {
	return s.resolveLines(ctx, id, h, blobs, streamSeq, func(b wire.BlobLine, line []byte) (*session.Event, error) {
		ev, err := session.DecodeEventLine(line, id)
		evs[b.Index] = ev
		return &evs[b.Index], err
	})
}

// resolveLines fetches the line of each offloaded event of blobs and decodes it with decode,
// which stores the event and returns it; an event that is not the one its blob names is an error
// (rule record-blob).
func (s *Store) resolveLines(ctx context.Context, id string, h nats.Header, blobs []wire.BlobLine, streamSeq uint64, decode func(b wire.BlobLine, line []byte) (*session.Event, error)) error {
	tok := h.Get(wire.HeaderSession)
	for _, b := range blobs {
		line, err := s.fetchBlob(ctx, id, tok, b.Ref, streamSeq)
		if err != nil {
			return err
		}
		ev, err := decode(b, line)
		if err != nil || ev.Type == "" || ev.Time == "" || ev.Seq != b.Ref.Seq || bytes.IndexByte(line, '\n') >= 0 {
			why := "lacks one of type, seq, time, data, or has another seq"
			if err != nil {
				why = err.Error()
			}
			return wire.RecordError(id, b.Ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s is not the event: %s", blobLabel(tok, b.Ref), why)
		}
	}
	return nil
}

// blobLabel names ref in errors: its chunk filter, or a legacy ref's object name.
func blobLabel(tok string, ref wire.BlobRef) string {
	if ref.Legacy() {
		return wire.BlobName(tok, ref)
	}
	return wire.BlobChunksFilter(tok, ref.ID)
}

// DecodeRecord is wire.DecodeRecord that also reads a record's offloaded events from
// wire.BlobStream, or a legacy record's from wire.BlobsBucket (checking each one's size and SHA-256). Errors: wire.DecodeRecord's, a *session.Error
// (rule record-blob) for a blob that is missing or differs, a plain error when the bucket cannot be
// reached (transient: try again).
func (s *Store) DecodeRecord(ctx context.Context, h nats.Header, body []byte) ([]session.Event, error) {
	rec, err := wire.DecodeRecordAt(h, body, 0)
	if err != nil || len(rec.Blobs) == 0 {
		return rec.Events, err
	}
	if err := s.resolve(ctx, rec.ID, h, rec.Events, rec.Blobs, 0); err != nil {
		return nil, err
	}
	return rec.Events, nil
}

// ScanRecord is DecodeRecord giving the events in the shared form, each scanned once
// (wire.ScanRecord); they alias body, which the caller must not change while it uses them.
func (s *Store) ScanRecord(ctx context.Context, h nats.Header, body []byte) ([]session.Scanned, error) {
	rec, err := s.scanRecord(ctx, h, body, 0)
	return rec.Events, err
}

// scanRecord is ScanRecord for the record at streamSeq (0: unknown), giving its id too.
func (s *Store) scanRecord(ctx context.Context, h nats.Header, body []byte, streamSeq uint64) (wire.ScannedRecord, error) {
	rec, err := wire.ScanRecordAt(h, body, streamSeq)
	if err != nil || len(rec.Blobs) == 0 {
		return rec, err
	}
	var ls session.LineScanner
	err = s.resolveLines(ctx, rec.ID, h, rec.Blobs, streamSeq, func(b wire.BlobLine, line []byte) (*session.Event, error) {
		sc, err := ls.Scan(line, rec.ID)
		rec.Events[b.Index] = sc
		return &rec.Events[b.Index].Event, err
	})
	if err != nil {
		return wire.ScannedRecord{}, err
	}
	return rec, nil
}

// blobStreamConfig is wire.BlobStream's: subjects agentlog.blob.>, one message per subject with
// discard new per subject (a subject, once written, can never be written again: write-once),
// direct get, no limits, file storage, deny delete (only a purge, the operator's, removes a blob),
// the session stream's replicas and compression.
func blobStreamConfig(replicas int, compression natsjs.StoreCompression) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name:                 wire.BlobStream,
		Description:          "agentlog offloaded events: agentlog.blob.<token>.<blob id>.<chunk>, write-once chunks of events larger than one record",
		Subjects:             []string{wire.BlobPrefix + ".>"},
		Retention:            natsjs.LimitsPolicy,
		MaxConsumers:         -1,
		MaxMsgs:              -1,
		MaxBytes:             -1,
		MaxMsgsPerSubject:    1,
		Discard:              natsjs.DiscardNew,
		DiscardNewPerSubject: true,
		Storage:              natsjs.FileStorage,
		Replicas:             replicas,
		Compression:          compression,
		AllowDirect:          true,
		DenyDelete:           true,
	}
}

// checkBlobStream refuses a wire.BlobStream agentlog cannot use: one whose subjects can be written
// twice (not one message per subject with discard new per subject), that expires or limits
// blobs, is not file storage, has no direct get, or is sealed or a mirror.
func checkBlobStream(c natsjs.StreamConfig) error {
	what := "stream " + wire.BlobStream
	want := []string{wire.BlobPrefix + ".>"}
	switch {
	case !slices.Equal(c.Subjects, want):
		return incompatible(what, "subjects", c.Subjects, want)
	case c.MaxMsgsPerSubject != 1:
		return incompatible(what, "max_msgs_per_subject (write-once chunks)", c.MaxMsgsPerSubject, 1)
	case c.Discard != natsjs.DiscardNew || !c.DiscardNewPerSubject:
		return incompatible(what, "discard (write-once chunks)", fmt.Sprintf("%s, discard_new_per_subject %v", c.Discard, c.DiscardNewPerSubject), "new, discard_new_per_subject true")
	case c.MaxAge != 0 || c.MaxBytes > 0 || c.MaxMsgs > 0:
		return incompatible(what, "limits (would drop or refuse offloaded events)", fmt.Sprintf("max_age %s, max_bytes %d, max_msgs %d", c.MaxAge, c.MaxBytes, c.MaxMsgs), "none")
	case c.Storage != natsjs.FileStorage:
		return incompatible(what, "storage", c.Storage, natsjs.FileStorage)
	case !c.AllowDirect:
		return incompatible(what, "allow_direct (readers use direct gets)", false, true)
	case c.Sealed || c.DenyPurge:
		return incompatible(what, "sealed or deny_purge", true, false)
	case c.Mirror != nil:
		return incompatible(what, "mirror", c.Mirror.Name, "none")
	}
	return nil
}
