package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// The Object Store layout of wire.BlobsBucket (ADR-20), and the timing of offloaded events.
const (
	blobsStream      = "OBJ_" + wire.BlobsBucket
	blobChunksPrefix = "$O." + wire.BlobsBucket + ".C." // + the object's nuid: its chunks

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
	if s.blobs == nil {
		i := idx[0]
		return nil, time.Time{}, fmt.Errorf("session %q seq %d: %w: the event is %d bytes encoded, more than one record holds (max message size %d bytes), and the store has no %s bucket to offload it to",
			id, events[i].Seq, ErrEventTooLarge, len(lines[i]), s.maxMsgSize, wire.BlobsBucket)
	}
	start := time.Now()
	out := make([]wire.BlobLine, len(idx))
	for k, i := range idx {
		ref := wire.BlobRef{Seq: events[i].Seq, Size: int64(len(lines[i])), ID: nuid.Next()}
		name := wire.BlobName(tok, ref)
		sum, err := s.putBlob(ctx, name, lines[i])
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("session %q seq %d: store the event's %d bytes as blob %s in %s: %w", id, ref.Seq, ref.Size, name, wire.BlobsBucket, err)
		}
		ref.SHA256 = sum
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

// putBlob stores data as object name of wire.BlobsBucket, written as the Object Store's Put writes an
// object (ADR-20: the chunks on $O.<bucket>.C.<nuid>, then the object's metadata as a rollup on
// $O.<bucket>.M.<base64url name>), and returns its SHA-256. Unlike Put, a put that fails does not
// purge the chunks it stored: that needs STREAM.PURGE on the bucket, whose subject filter is in the
// payload, so the right would let an agent purge every session's blobs (deploy/SECURITY.md).
// CollectBlobs removes such chunks. Its own JetStream context (as Put's) keeps its acks apart
// and drops them when it returns. Errors are the server's or ctx's, unwrapped.
func (s *Store) putBlob(ctx context.Context, name string, data []byte) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	var opts []natsjs.JetStreamOpt
	if _, ok := ctx.Deadline(); !ok {
		opts = append(opts, natsjs.WithPublishAsyncTimeout(s.js.Options().DefaultTimeout))
	}
	js, err := likeJS(s.js, opts...)
	if err != nil {
		return sum, err
	}
	defer js.CleanupPublisher()
	chunk := int(s.blobChunkSize())
	obj := nuid.Next()
	subj := blobChunksPrefix + obj
	h := sha256.New()
	var inflight []natsjs.PubAckFuture
	wait := func(f natsjs.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	chunks := 0
	for off := 0; off < len(data); off += chunk {
		part := data[off:min(off+chunk, len(data))]
		h.Write(part)
		if len(inflight) == putWindow {
			if err := wait(inflight[0]); err != nil {
				return sum, err
			}
			inflight = inflight[1:]
		}
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: part})
		if err != nil {
			return sum, err
		}
		inflight = append(inflight, f)
		chunks++
	}
	for _, f := range inflight {
		if err := wait(f); err != nil {
			return sum, err
		}
	}
	h.Sum(sum[:0])
	info := natsjs.ObjectInfo{
		ObjectMeta: natsjs.ObjectMeta{Name: name, Opts: &natsjs.ObjectMetaOptions{ChunkSize: uint32(chunk)}},
		Bucket:     wire.BlobsBucket, NUID: obj, Size: uint64(len(data)), Chunks: uint32(chunks), ModTime: time.Now().UTC(), // as Put writes it; readers take the server's time
		Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:]),
	}
	body, err := json.Marshal(info)
	if err != nil {
		return sum, err
	}
	m := &nats.Msg{Subject: "$O." + wire.BlobsBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name)), Header: nats.Header{}, Data: body}
	m.Header.Set(natsjs.MsgRollup, natsjs.MsgRollupSubject)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return sum, err
	}
	return sum, nil
}

// blobChunkSize is the chunk size of the blobs written: the Object Store's default 128 KiB, less
// on a server whose max payload is smaller (a chunk is one message).
func (s *Store) blobChunkSize() uint32 {
	const def = 128 << 10
	if s.js == nil || s.js.Conn() == nil {
		return def
	}
	return uint32(max(min(int64(def), s.js.Conn().MaxPayload()-1024), 512))
}

// fetchBlob reads ref's line and checks its size and digest. A blob that is missing or differs is
// a *session.Error (rule record-blob) naming the session, the seq and the stream seq; a failure to
// reach the bucket is a plain error (transient).
func (s *Store) fetchBlob(ctx context.Context, id, tok string, ref wire.BlobRef, streamSeq uint64) ([]byte, error) {
	name := wire.BlobName(tok, ref)
	if s.blobs == nil {
		return nil, wire.RecordError(id, ref.Seq, streamSeq, session.RuleRecordBlob, "the event is offloaded to blob %s, but the store has no %s bucket", name, wire.BlobsBucket)
	}
	b, err := s.blobs.GetBytes(ctx, name)
	switch {
	case errors.Is(err, natsjs.ErrObjectNotFound):
		return nil, wire.RecordError(id, ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s is missing from %s", name, wire.BlobsBucket)
	case errors.Is(err, natsjs.ErrDigestMismatch):
		return nil, wire.RecordError(id, ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s in %s is corrupt (its chunks do not match its digest)", name, wire.BlobsBucket)
	case err != nil:
		return nil, fmt.Errorf("session %q seq %d: read blob %s from %s: %w", id, ref.Seq, name, wire.BlobsBucket, err)
	}
	if int64(len(b)) != ref.Size || sha256.Sum256(b) != ref.SHA256 {
		return nil, wire.RecordError(id, ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s in %s is %d bytes with another digest than its record names (%d bytes)", name, wire.BlobsBucket, len(b), ref.Size)
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
			return wire.RecordError(id, b.Ref.Seq, streamSeq, session.RuleRecordBlob, "the event's blob %s is not the event: %s", wire.BlobName(tok, b.Ref), why)
		}
	}
	return nil
}

// DecodeRecord is wire.DecodeRecord that also reads a record's offloaded events from
// wire.BlobsBucket (checking each one's size and SHA-256). Errors: wire.DecodeRecord's, a *session.Error
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

// ensureBlobsBucket returns the Object Store bucket agentlog_blobs, creating it when missing (file
// storage, S2 compression, the stream's replicas, no TTL or size limit). An existing one is checked,
// never changed: file storage, no TTL (it would expire events), not sealed.
func ensureBlobsBucket(ctx context.Context, js natsjs.JetStream, replicas int) (natsjs.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, wire.BlobsBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{
			Bucket:      wire.BlobsBucket,
			Description: "agentlog offloaded events: <token>/<seq>/<sha256>, the event's line, for events larger than one record",
			Storage:     natsjs.FileStorage,
			Replicas:    replicas,
			Compression: true,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			obs, err = js.ObjectStore(ctx, wire.BlobsBucket)
		}
		if err != nil {
			return nil, fmt.Errorf("create Object Store bucket %s: %w", wire.BlobsBucket, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("look up Object Store bucket %s: %w", wire.BlobsBucket, err)
	}
	st, err := js.Stream(ctx, blobsStream)
	if err != nil {
		return nil, fmt.Errorf("look up the stream of Object Store bucket %s: %w", wire.BlobsBucket, err)
	}
	what := "Object Store bucket " + wire.BlobsBucket
	switch c := st.CachedInfo().Config; {
	case c.Storage != natsjs.FileStorage:
		return nil, incompatible(what, "storage", c.Storage, natsjs.FileStorage)
	case c.MaxAge != 0:
		return nil, incompatible(what, "ttl (would expire offloaded events)", c.MaxAge, "0 (none)")
	case c.Sealed:
		return nil, incompatible(what, "sealed", true, false)
	}
	return obs, nil
}
