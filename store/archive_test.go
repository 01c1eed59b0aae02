package store

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
)

// readText reads session id and returns its events' JSON, one line each.
func readText(t *testing.T, s *Store, id string) string {
	t.Helper()
	evs, _, err := readAll(testCtx(t), sessionOf(s, id))
	if err != nil {
		t.Fatalf("Read %q: %v", id, err)
	}
	var b strings.Builder
	for _, e := range evs {
		line, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestArchiveRestore archives a session (its hot records and projection keys go, Read serves the
// same events from the archive), restores it (the hot stream holds the same events again), and
// archives it again.
func TestArchiveRestore(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	id := "arch.1 é"
	tok, _ := wire.Token(id)
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := sessionOf(s, id).Append(ctx, 0, evs(0, 3, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, id).Append(ctx, r.StreamSeq, evs(3, 7, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.projections.Put(ctx, "messages."+tok, []byte(`{"stateVersion":1,"asOfSeq":6,"state":{"nodes":[],"replaceGeneration":0,"transcript":[],"openTurn":null}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.projections.Put(ctx, "title."+tok, []byte(`{"stateVersion":1,"asOfSeq":3,"state":{}}`)); err != nil {
		t.Fatal(err)
	}
	want := readText(t, s, id)

	res, err := sessionOf(s, id).Archive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Archived || res.Events != 7 || res.Records != 2 || res.Projections != 1 || res.Parts != 1 {
		t.Fatalf("ArchiveSession = %+v", res)
	}
	loc, err := sessionOf(s, id).Locate(ctx)
	if err != nil || loc.State != StateArchived || loc.NextSeq() != 7 || loc.Hot.LastStreamSeq != 0 {
		t.Fatalf("Locate after archive = %+v, %v", loc, err)
	}
	if got := readText(t, s, id); got != want {
		t.Fatalf("Read of the archived session:\n%s\nwant\n%s", got, want)
	}
	if keys, _ := s.projectionKeys(ctx, tok); len(keys) != 0 {
		t.Fatalf("projection keys after archive: %v", keys)
	}
	a, err := sessionOf(s, id).ReadArchive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Projections["messages"]; !ok || len(a.Projections) != 1 {
		t.Fatalf("archived projections: %v", a.Projections)
	}
	if again, err := sessionOf(s, id).Archive(ctx); err != nil || !again.Already {
		t.Fatalf("archive again = %+v, %v", again, err)
	}

	rr, err := sessionOf(s, id).Restore(ctx)
	if err != nil || !rr.Restored || rr.Events != 7 {
		t.Fatalf("RestoreSession = %+v, %v", rr, err)
	}
	if rr2, err := sessionOf(s, id).Restore(ctx); err != nil || !rr2.Already {
		t.Fatalf("RestoreSession again = %+v, %v", rr2, err)
	}
	loc, err = sessionOf(s, id).Locate(ctx)
	if err != nil || loc.State != StateActive || loc.HotFirstSeq != 0 || loc.ArchiveStale == nil {
		t.Fatalf("Locate after restore = %+v, %v", loc, err)
	}
	if got := readText(t, s, id); got != want {
		t.Fatalf("Read of the restored session:\n%s\nwant\n%s", got, want)
	}
	if _, err := sessionOf(s, id).Append(ctx, loc.Hot.LastStreamSeq, evs(7, 9, "c")); err != nil {
		t.Fatal(err)
	}
	want = readText(t, s, id)
	if res, err := sessionOf(s, id).Archive(ctx); err != nil || !res.Archived || res.Events != 9 {
		t.Fatalf("archive after restore = %+v, %v", res, err)
	}
	if got := readText(t, s, id); got != want {
		t.Fatalf("Read after the second archive:\n%s\nwant\n%s", got, want)
	}

	rm, err := sessionOf(s, id).Remove(ctx)
	if err != nil || rm.Archive == 0 || rm.Events != 9 {
		t.Fatalf("RemoveSession of an archived session = %+v, %v", rm, err)
	}
	if _, found, _ := s.archiveHead(ctx, tok); found {
		t.Fatal("the archive survived rm")
	}
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 2}); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, s, id); got != "" {
		t.Fatalf("a re-created session reads %q", got)
	}
}

// TestArchiveColdPrefix: records appended after an archive's read are kept hot after the
// archived prefix, and a read joins both.
func TestArchiveColdPrefix(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	id := "prefix"
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := sessionOf(s, id).Append(ctx, 0, evs(0, 4, "a"))
	if err != nil {
		t.Fatal(err)
	}
	// An archive of seqs 0..3, then a writer's record, then the commit of the archive (as a
	// writer racing it between its read and its purge would do).
	head, payload := testArchive(t, s, id, 4)
	if err := s.writeArchive(ctx, &head, 0, payload, func(string) {}); err != nil {
		t.Fatal(err)
	}
	r2, err := sessionOf(s, id).Append(ctx, r.StreamSeq, evs(4, 6, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, id).PurgeThrough(ctx, r.StreamSeq); err != nil {
		t.Fatal(err)
	}
	loc, err := sessionOf(s, id).Locate(ctx)
	if err != nil || loc.State != StateActive || loc.HotFirstSeq != 4 || loc.Archive == nil || loc.NextSeq() != 6 {
		t.Fatalf("Locate = %+v, %v", loc, err)
	}
	got := readText(t, s, id)
	if n := strings.Count(got, "\n"); n != 6 {
		t.Fatalf("Read joined %d events:\n%s", n, got)
	}
	// The writer goes on with its guard; a second archive takes the whole log.
	if _, err := sessionOf(s, id).Append(ctx, r2.StreamSeq, evs(6, 7, "c")); err != nil {
		t.Fatal(err)
	}
	want := readText(t, s, id)
	res, err := sessionOf(s, id).Archive(ctx)
	if err != nil || !res.Archived || res.Events != 7 {
		t.Fatalf("ArchiveSession = %+v, %v", res, err)
	}
	if got := readText(t, s, id); got != want {
		t.Fatalf("after the second archive:\n%s\nwant\n%s", got, want)
	}
}

// TestArchiveNewerThanColdPrefix: a read that finds hot records after a cold prefix, while a newer
// archive (which holds those records too) has been committed and has not purged them yet, reads the
// newer archive up to the hot records and goes on with them; once they are purged, it reads the
// whole newer archive (an Open racing an Archive of a session a writer had raced before). An
// Archive in that state finishes it.
func TestArchiveNewerThanColdPrefix(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	id := "newer"
	tok, _ := wire.Token(id)
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := sessionOf(s, id).Append(ctx, 0, evs(0, 4, "a"))
	if err != nil {
		t.Fatal(err)
	}
	head, payload := testArchive(t, s, id, 4)
	if err := s.writeArchive(ctx, &head, 0, payload, func(string) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, id).Append(ctx, r.StreamSeq, evs(4, 7, "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, id).PurgeThrough(ctx, r.StreamSeq); err != nil {
		t.Fatal(err)
	}
	want := readText(t, s, id)
	if n := strings.Count(want, "\n"); n != 7 {
		t.Fatalf("Read joined %d events:\n%s", n, want)
	}
	// The newer archive of all 7 events is committed; the hot records 4..6 are still there.
	m, err := s.leaderGetFrom(ctx, wire.ArchiveStream, map[string]any{"last_by_subj": wire.ArchiveSubject(tok)})
	if err != nil {
		t.Fatal(err)
	}
	head2, payload2 := testArchive(t, s, id, 7)
	head2.ArchiveID = "U" + tok
	if err := s.writeArchive(ctx, &head2, m.Sequence, payload2, func(string) {}); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, s, id); got != want {
		t.Fatalf("Read with a newer archive and the hot records:\n%s\nwant\n%s", got, want)
	}
	loc, err := sessionOf(s, id).Locate(ctx)
	if err != nil || loc.State != StateActive || loc.HotFirstSeq != 4 || loc.NextSeq() != 7 {
		t.Fatalf("Locate = %+v, %v", loc, err)
	}
	// An archive run again finishes it (as after one that stopped between its head and its purge).
	if res, err := sessionOf(s, id).Archive(ctx); err != nil || !res.Archived || res.Events != 7 {
		t.Fatalf("ArchiveSession = %+v, %v", res, err)
	}
	if got := readText(t, s, id); got != want {
		t.Fatalf("Read once the hot records are purged:\n%s\nwant\n%s", got, want)
	}
}

// testArchive builds the archive of session id's first n events as ArchiveSession would.
func testArchive(t *testing.T, s *Store, id string, n int64) (wire.ArchiveHead, []byte) {
	t.Helper()
	ctx := testCtx(t)
	info, err := sessionOf(s, id).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := readAll(ctx, sessionOf(s, id))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := session.WriteJSONL(&b, &info.Header, all[:n], session.WriteOptions{Pack: true}); err != nil {
		t.Fatal(err)
	}
	jsonl := []byte(b.String())
	tok, _ := wire.Token(id)
	head := wire.ArchiveHead{Token: tok, ID: id, Incarnation: info.Incarnation, ArchiveID: "T" + tok, Events: n, JSONLSize: int64(len(jsonl))}
	head.JSONLSHA256 = sha256Sum(jsonl)
	payload := encoder().EncodeAll(append(jsonl, `{}`...), nil)
	head.PayloadBytes, head.ProjectionsSize = int64(len(payload)), 2
	return head, payload
}

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }

// TestReadWhileArchived: a read of a long session whose records are archived (purged from the
// hot stream) while it reads goes on from the archive, and hands out the same events.
func TestReadWhileArchived(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	id := "long"
	if err := s.CreateSession(ctx, session.Header{ID: id, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for k := int64(0); k < 2000; k += 2 {
		r, err := sessionOf(s, id).Append(ctx, last, evs(k, k+2, strings.Repeat("x", 200)))
		if err != nil {
			t.Fatal(err)
		}
		last = r.StreamSeq
	}
	want := readText(t, s, id)
	var b strings.Builder
	n := 0
	archived := make(chan error, 1)
	_, err := sessionOf(s, id).Records(ctx, func(r Record) error {
		evs := r.Events
		if n++; n == 10 {
			_, err := sessionOf(s, id).Archive(ctx)
			archived <- err
		}
		for _, e := range evs {
			line, _ := e.MarshalJSON()
			b.Write(line)
			b.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read while archived: %v", err)
	}
	if err := <-archived; err != nil {
		t.Fatal(err)
	}
	if b.String() != want {
		t.Fatal("the read handed out other events than the log's")
	}
	if loc, _ := sessionOf(s, id).Locate(ctx); loc.State != StateArchived {
		t.Fatalf("state %q", loc.State)
	}
}

// TestRebuildLineage: links lost (or never written) come back from the metadata alone.
func TestRebuildLineage(t *testing.T) {
	s := testStore(t, Config{})
	ctx := testCtx(t)
	if err := s.CreateSession(ctx, session.Header{ID: "p", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	seed := int64(1)
	if err := s.CreateSession(ctx, session.Header{ID: "c", CreatedAt: 1, ParentSession: "p", SeedLength: &seed}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.purge(ctx, wire.ChildrenStream, wire.ChildrenPrefix+".>", 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ChildTokens(ctx, []string{"p"}); len(got["p"]) != 0 {
		t.Fatalf("links after the purge: %v", got)
	}
	if n, err := s.RebuildLineage(ctx); err != nil || n != 1 {
		t.Fatalf("RebuildLineage = %d, %v", n, err)
	}
	if got, _ := s.ChildTokens(ctx, []string{"p"}); len(got["p"]) != 1 || got["p"][0] != "c" {
		t.Fatalf("links after the rebuild: %v", got)
	}
}
