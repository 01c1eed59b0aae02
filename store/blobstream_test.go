package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestBlobStreamWriteOnce: a chunk subject of AGENTLOG_BLOBS, once written, refuses a second
// message, guarded (expected last subject sequence 0) or not; putBlob sent again with the same
// bytes counts its chunks as written, with other bytes fails with ErrBlobChunkTaken, and the
// stored blob reads back unchanged.
func TestBlobStreamWriteOnce(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	ctx := testCtx(t)
	ev := sizedEvent(t, 0, 300_000)
	if _, err := sessionOf(s, "w").Append(ctx, 0, []session.Event{ev}); err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token("w")
	ref := wire.RecordBlobs(rawRecords(t, s, "w")[0].Header)[0]
	if ref.Legacy() || ref.Chunks != 3 || len(ref.ID) != wire.BlobIDBytes {
		t.Fatalf("ref %+v: want a format 3 ref of 3 chunks", ref)
	}
	subj := wire.BlobChunkSubject(tok, ref.ID, 1)
	for _, h := range []nats.Header{nil, {natsjs.ExpectedLastSubjSeqHeader: []string{"0"}}} {
		_, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: []byte("overwrite")})
		if err == nil {
			t.Fatalf("a second message on %s (headers %v) was stored", subj, h)
		}
	}
	// Appending a chunk past the last is possible (a new subject), but the record names 3: not read.
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: wire.BlobChunkSubject(tok, ref.ID, 3), Data: []byte("appended")}); err != nil {
		t.Fatal(err)
	}
	line := lineOf(t, ev)
	if n, err := s.putBlob(ctx, tok, ref.ID, line); err != nil || n != 3 {
		t.Fatalf("putBlob again with the same bytes: %d, %v; want its 3 chunks counted as written", n, err)
	}
	other := bytes.Repeat([]byte{'q'}, len(line))
	if _, err := s.putBlob(ctx, tok, ref.ID, other); !errors.Is(err, ErrBlobChunkTaken) {
		t.Fatalf("putBlob with other bytes on taken subjects: %v, want ErrBlobChunkTaken", err)
	}
	got, _, err := readAll(ctx, sessionOf(s, "w"))
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, got, []session.Event{ev})
}

// TestLegacyBlobRead: a record of format 2 whose event is an object of the legacy Object Store
// bucket agentlog_blobs (written the old way, with the Object Store's put) reads back, by direct
// gets only; a deleted object is rule record-blob; Remove deletes the object and CollectBlobs
// removes an orphan one.
func TestLegacyBlobRead(t *testing.T) {
	s := testStore(t, Config{MaxMsgSize: 4096})
	ctx := testCtx(t)
	obs, err := s.js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{Bucket: wire.BlobsBucket, Storage: natsjs.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := wire.Token("old")
	write := func(id string, seq int64) session.Event {
		t.Helper()
		ev := sizedEvent(t, seq, 300_000)
		line := lineOf(t, ev)
		tok, _ := wire.Token(id)
		ref := wire.BlobRef{Seq: seq, Size: int64(len(line)), SHA256: sha256.Sum256(line), ID: "NUID" + id}
		if _, err := obs.PutBytes(ctx, wire.BlobName(tok, ref), line); err != nil {
			t.Fatal(err)
		}
		subject, _ := wire.SessionSubject(id, s.partitions)
		h := nats.Header{}
		h.Set(wire.HeaderSession, tok)
		h.Set(wire.HeaderFirstSeq, "0")
		h.Set(wire.HeaderCount, "1")
		h.Set(wire.HeaderFormat, wire.RecordFormatBlobs)
		h.Set(wire.HeaderBlob, ref.HeaderValue())
		if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h}); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	ev := write("old", 0)
	got, _, err := readAll(ctx, sessionOf(s, "old"))
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, got, []session.Event{ev})

	write("gone", 0)
	goneTok, _ := wire.Token("gone")
	if err := obs.Delete(ctx, goneTok+"/0/NUIDgone"); err != nil {
		t.Fatal(err)
	}
	_, _, err = readAll(ctx, sessionOf(s, "gone"))
	var se *session.Error
	if !errors.As(err, &se) || se.Rule != session.RuleRecordBlob || se.Session != "gone" || se.Seq != 0 || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a deleted legacy blob: %v, want rule record-blob", err)
	}

	// An orphan (no record names it) is collected; the used one is kept.
	if _, err := obs.PutBytes(ctx, tok+"/9/NUIDorphan", []byte("x")); err != nil {
		t.Fatal(err)
	}
	c, err := s.CollectBlobs(ctx, 0)
	if err != nil || len(c.Removed) != 1 || c.Removed[0] != tok+"/9/NUIDorphan" || c.Used != 1 {
		t.Fatalf("CollectBlobs over the legacy bucket: %+v, %v", c, err)
	}
	rm, err := sessionOf(s, "old").Remove(ctx)
	if err != nil || rm.Blobs != 1 {
		t.Fatalf("Remove: %+v, %v", rm, err)
	}
	if objs, _ := obs.List(ctx); len(objs) != 0 {
		t.Fatalf("%d legacy objects left", len(objs))
	}
}

// TestBlobStreamMustBeWriteOnce: an AGENTLOG_BLOBS that would let a chunk be written twice (no
// per-subject limit, or discard old) is refused (ErrIncompatible naming the setting), never used.
func TestBlobStreamMustBeWriteOnce(t *testing.T) {
	for _, bad := range []func(*natsjs.StreamConfig){
		func(c *natsjs.StreamConfig) { c.MaxMsgsPerSubject, c.DiscardNewPerSubject = -1, false },
		func(c *natsjs.StreamConfig) { c.Discard, c.DiscardNewPerSubject = natsjs.DiscardOld, false },
		func(c *natsjs.StreamConfig) { c.MaxMsgsPerSubject = 2 },
	} {
		js := testJetStream(t, natsdev.ServerOptions{})
		cfg := blobStreamConfig(1, natsjs.S2Compression)
		bad(&cfg)
		if _, err := js.CreateStream(testCtx(t), cfg); err != nil {
			t.Fatal(err)
		}
		_, err := Provision(testCtx(t), js, Config{})
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), wire.BlobStream) {
			t.Fatalf("Provision over a stream %s that is not write-once (%+v): %v", wire.BlobStream, cfg, err)
		}
	}
}
