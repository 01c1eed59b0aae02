package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// blobsUsed is what the stored records of one session reference: blob ids of wire.BlobStream and
// object names of the legacy bucket wire.BlobsBucket.
type blobsUsed struct{ ids, names map[string]bool }

// recordBlobRefs returns the blobs that the stored records of session token tok reference, read
// with a headers-only ordered consumer (no body, no blob is fetched; the operator's GC and
// removal only). Records stored after the read began may be missed.
func (s *Store) recordBlobRefs(ctx context.Context, tok string) (blobsUsed, error) {
	u := blobsUsed{ids: map[string]bool{}, names: map[string]bool{}}
	err := s.scanRecordBlobs(ctx, tok, func(ref wire.BlobRef) {
		if ref.Legacy() {
			u.names[wire.BlobName(tok, ref)] = true
		} else {
			u.ids[ref.ID] = true
		}
	})
	return u, err
}

// scanRecordBlobs gives each blob ref of the stored records of session token tok to f.
func (s *Store) scanRecordBlobs(ctx context.Context, tok string, f func(wire.BlobRef)) error {
	id, err := wire.IDFromToken(tok)
	if err != nil {
		return err
	}
	subject := wire.TokenSubject(tok, s.partitions)
	last, err := s.leaderLastMsg(ctx, subject)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("session %q: its last record: %w", id, err)
	}
	cons, err := s.stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true})
	if err != nil {
		return fmt.Errorf("session %q: read its record headers: %w", id, err)
	}
	if info := cons.CachedInfo(); info != nil && info.Name != "" {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.js.Options().DefaultTimeout)
			_ = s.stream.DeleteConsumer(dctx, info.Name)
			cancel()
		}()
	}
	iter, err := cons.Messages(natsjs.PullMaxMessages(readBatch))
	if err != nil {
		return fmt.Errorf("session %q: read its record headers: %w", id, err)
	}
	defer iter.Stop()
	for {
		msg, err := iter.Next(natsjs.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("session %q: read its record headers: %w", id, err)
		}
		for _, ref := range wire.RecordBlobs(msg.Headers()) {
			f(ref)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("session %q: read its record headers: %w", id, err)
		}
		if meta.Sequence.Stream >= last.Sequence && meta.NumPending == 0 {
			return nil
		}
	}
}

// legacyBucket returns the legacy Object Store bucket wire.BlobsBucket, nil when it does not
// exist (a deployment provisioned after format 3).
func (s *Store) legacyBucket(ctx context.Context) (natsjs.ObjectStore, error) {
	obs, err := s.js.ObjectStore(ctx, wire.BlobsBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) || errors.Is(err, natsjs.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up Object Store bucket %s: %w", wire.BlobsBucket, err)
	}
	return obs, nil
}

// deleteBlobs deletes the named objects of the legacy bucket obs (one already gone counts as
// deleted) and returns how many it deleted.
func deleteBlobs(ctx context.Context, obs natsjs.ObjectStore, names []string) (int, error) {
	n := 0
	for _, name := range names {
		if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, natsjs.ErrObjectNotFound) {
			return n, fmt.Errorf("delete blob %s from %s: %w", name, wire.BlobsBucket, err)
		}
		n++
	}
	return n, nil
}

// purgeBlob purges the chunks of blob id of session token tok from wire.BlobStream (the
// operator's right: a purge's filter is in its payload).
func (s *Store) purgeBlob(ctx context.Context, tok, id string) error {
	if _, err := s.purge(ctx, wire.BlobStream, wire.BlobChunksFilter(tok, id), 0); err != nil {
		return fmt.Errorf("remove blob %s: %w", wire.BlobChunksFilter(tok, id), err)
	}
	return nil
}

// removeUsedBlobs removes the blobs of session token tok that used names (Store.Archive: the
// records it moved) and returns how many.
func (s *Store) removeUsedBlobs(ctx context.Context, tok string, used blobsUsed) (int, error) {
	n := 0
	for _, id := range slices.Sorted(maps.Keys(used.ids)) {
		if err := s.purgeBlob(ctx, tok, id); err != nil {
			return n, err
		}
		n++
	}
	if len(used.names) == 0 {
		return n, nil
	}
	obs, err := s.legacyBucket(ctx)
	if err != nil || obs == nil {
		return n, err
	}
	d, err := deleteBlobs(ctx, obs, slices.Sorted(maps.Keys(used.names)))
	return n + d, err
}

// sessionBlobIDs lists the blob ids wire.BlobStream holds chunks of for session token tok
// (filter "" : every session's), by token, from the stream's subject counts.
func (s *Store) sessionBlobIDs(ctx context.Context, filter string) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	if s.blobStream == nil {
		return out, nil
	}
	info, err := s.blobStream.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("list the blobs of %s (%s): %w", wire.BlobStream, filter, err)
	}
	for subj := range info.State.Subjects {
		tok, id, k, ok := wire.ParseBlobSubject(subj)
		if !ok {
			continue
		}
		if out[tok] == nil {
			out[tok] = map[string]int{}
		}
		out[tok][id] = max(out[tok][id], k+1) // the highest chunk index seen, plus one
	}
	return out, nil
}

// removeSessionBlobs removes every blob of session token tok (Session.Remove, before it purges
// the records, so a removal that stops half-way still finds the legacy ones when run again): a
// purge of agentlog.blob.<tok>.> (blobs with or without a record), and the legacy objects its
// records reference. It returns how many blobs it removed.
func (s *Store) removeSessionBlobs(ctx context.Context, tok string) (int, error) {
	n := 0
	if s.blobStream != nil {
		ids, err := s.sessionBlobIDs(ctx, wire.BlobSessionFilter(tok))
		if err != nil {
			return 0, err
		}
		if len(ids[tok]) > 0 {
			if _, err := s.purge(ctx, wire.BlobStream, wire.BlobSessionFilter(tok), 0); err != nil {
				return 0, fmt.Errorf("remove the blobs %s: %w", wire.BlobSessionFilter(tok), err)
			}
			n = len(ids[tok])
		}
	}
	obs, err := s.legacyBucket(ctx)
	if err != nil || obs == nil {
		return n, err
	}
	used, err := s.recordBlobRefs(ctx, tok)
	if err != nil {
		return n, err
	}
	d, err := deleteBlobs(ctx, obs, slices.Sorted(maps.Keys(used.names)))
	return n + d, err
}

// Collected is what CollectBlobs found and removed.
type Collected struct {
	Blobs    int      `json:"blobs"`    // blobs of AGENTLOG_BLOBS and objects of the legacy agentlog_blobs
	Young    int      `json:"young"`    // kept: not older than the grace
	Live     int      `json:"live"`     // kept: of a session with a live writer lease
	Used     int      `json:"used"`     // kept: referenced by a stored record
	Foreign  int      `json:"foreign"`  // kept: a name agentlog does not make (legacy bucket)
	Removed  []string `json:"removed"`  // the orphans removed: agentlog.blob.<token>.<id>.* filters, legacy object names
	Sessions int      `json:"sessions"` // sessions whose records were scanned
	// Chunks of legacy puts that stored no object (a failed or killed upload), by object nuid.
	PartialYoung   int      `json:"partialYoung"`   // kept: its last chunk not older than the grace
	PartialRemoved []string `json:"partialRemoved"` // purged
}

// CollectBlobs removes the orphan blobs: those older than grace (by the server's time of their
// last chunk, or of a legacy object) that no stored record references, of sessions without a live
// writer lease. An orphan is left by an append that stopped between its blobs and its record (a
// killed writer, a failed upload), by a retry whose earlier attempt was stored, or by a session
// removed by other means than Remove. A blob is never collected before its record is committed
// as long as grace is well above BlobMaxAgeAtPublish (ARCHITECTURE.md, "Large events");
// `agentlog gc` refuses a grace below MinBlobGrace. In the legacy bucket it also purges the
// chunks that no object names once the last of them is older than grace. It needs the
// operator's rights (purges, the record headers, the writer leases). Errors name the session or
// the blob.
func (s *Store) CollectBlobs(ctx context.Context, grace time.Duration) (Collected, error) {
	c := Collected{Removed: []string{}, PartialRemoved: []string{}}
	cutoff := time.Now().Add(-grace)
	byTok, err := s.sessionBlobIDs(ctx, wire.BlobPrefix+".>")
	if err != nil {
		return c, err
	}
	toks := make([]string, 0, len(byTok))
	for tok, ids := range byTok {
		toks = append(toks, tok)
		c.Blobs += len(ids)
	}
	sort.Strings(toks)
	for _, tok := range toks {
		ids := byTok[tok]
		id, _ := wire.IDFromToken(tok)
		// A live writer may be between its blobs and its record: leave its session alone.
		if _, _, err := s.getLease(ctx, tok, id); err == nil {
			c.Live += len(ids)
			continue
		} else if !errors.Is(err, ErrNoLease) {
			return c, err
		}
		used, err := s.recordBlobRefs(ctx, tok)
		if err != nil {
			return c, err
		}
		c.Sessions++
		list := make([]string, 0, len(ids))
		for bid := range ids {
			list = append(list, bid)
		}
		sort.Strings(list)
		for _, bid := range list {
			if used.ids[bid] {
				c.Used++
				continue
			}
			last, err := s.blobStream.GetLastMsgForSubject(ctx, wire.BlobChunkSubject(tok, bid, ids[bid]-1))
			if errors.Is(err, natsjs.ErrMsgNotFound) {
				continue // removed meanwhile
			}
			if err != nil {
				return c, fmt.Errorf("session %q: the last chunk of blob %s: %w", id, wire.BlobChunksFilter(tok, bid), err)
			}
			if !last.Time.Before(cutoff) {
				c.Young++
				continue
			}
			if err := s.purgeBlob(ctx, tok, bid); err != nil {
				return c, fmt.Errorf("session %q: %w", id, err)
			}
			c.Removed = append(c.Removed, wire.BlobChunksFilter(tok, bid))
		}
	}
	obs, err := s.legacyBucket(ctx)
	if err != nil || obs == nil {
		return c, err
	}
	return c, s.collectLegacy(ctx, obs, cutoff, &c)
}

// collectLegacy is CollectBlobs for the legacy bucket obs.
func (s *Store) collectLegacy(ctx context.Context, obs natsjs.ObjectStore, cutoff time.Time, c *Collected) error {
	// The chunks first, then the objects: a put that completes in between is seen with its object.
	st, err := s.js.Stream(ctx, legacyBlobsStream)
	if err != nil {
		return fmt.Errorf("look up the stream of %s: %w", wire.BlobsBucket, err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(legacyChunks+">"))
	if err != nil {
		return fmt.Errorf("list the chunks of %s: %w", wire.BlobsBucket, err)
	}
	objs, err := obs.List(ctx)
	if err != nil && !errors.Is(err, natsjs.ErrNoObjectsFound) {
		return fmt.Errorf("list %s: %w", wire.BlobsBucket, err)
	}
	c.Blobs += len(objs)
	named := make(map[string]bool, len(objs))
	for _, o := range objs {
		named[o.NUID] = true
	}
	if err := s.collectPartial(ctx, st, info.State.Subjects, named, cutoff, c); err != nil {
		return err
	}
	byToken := map[string][]string{}
	for _, o := range objs {
		tok, _, ok := wire.ParseBlobName(o.Name)
		switch {
		case !ok:
			c.Foreign++
		case !o.ModTime.Before(cutoff):
			c.Young++
		default:
			byToken[tok] = append(byToken[tok], o.Name)
		}
	}
	toks := make([]string, 0, len(byToken))
	for tok := range byToken {
		toks = append(toks, tok)
	}
	sort.Strings(toks)
	for _, tok := range toks {
		names := byToken[tok]
		id, _ := wire.IDFromToken(tok)
		if _, _, err := s.getLease(ctx, tok, id); err == nil {
			c.Live += len(names)
			continue
		} else if !errors.Is(err, ErrNoLease) {
			return err
		}
		used, err := s.recordBlobRefs(ctx, tok)
		if err != nil {
			return err
		}
		c.Sessions++
		var orphans []string
		for _, name := range names {
			if used.names[name] {
				c.Used++
			} else {
				orphans = append(orphans, name)
			}
		}
		sort.Strings(orphans)
		n, err := deleteBlobs(ctx, obs, orphans)
		c.Removed = append(c.Removed, orphans[:n]...)
		if err != nil {
			return fmt.Errorf("session %q: %w", id, err)
		}
	}
	return nil
}

// collectPartial purges the chunk subjects (of subjects, the bucket's chunk subjects) whose nuid
// no object in named has and whose last chunk the server stored before cutoff. A put in progress
// keeps writing chunks, so its last chunk is never that old.
func (s *Store) collectPartial(ctx context.Context, st natsjs.Stream, subjects map[string]uint64, named map[string]bool, cutoff time.Time, c *Collected) error {
	var nuids []string
	for subj := range subjects {
		if n := strings.TrimPrefix(subj, legacyChunks); !named[n] {
			nuids = append(nuids, n)
		}
	}
	sort.Strings(nuids)
	for _, n := range nuids {
		last, err := st.GetLastMsgForSubject(ctx, legacyChunks+n)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return fmt.Errorf("the last chunk of partial upload %s in %s: %w", n, wire.BlobsBucket, err)
		}
		if !last.Time.Before(cutoff) {
			c.PartialYoung++
			continue
		}
		if err := st.Purge(ctx, natsjs.WithPurgeSubject(legacyChunks+n)); err != nil {
			return fmt.Errorf("purge the chunks of partial upload %s from %s: %w", n, wire.BlobsBucket, err)
		}
		c.PartialRemoved = append(c.PartialRemoved, n)
	}
	return nil
}

// ListBlobs returns the blobs AGENTLOG_BLOBS holds chunks of, as their chunk filters
// (agentlog.blob.<token>.<id>.*), sorted: an operator's view (STREAM.INFO with subjects).
func (s *Store) ListBlobs(ctx context.Context) ([]string, error) {
	byTok, err := s.sessionBlobIDs(ctx, wire.BlobPrefix+".>")
	if err != nil {
		return nil, err
	}
	var out []string
	for tok, ids := range byTok {
		for id := range ids {
			out = append(out, wire.BlobChunksFilter(tok, id))
		}
	}
	sort.Strings(out)
	return out, nil
}

// RemoveBlob purges the chunks of one blob named by its chunk filter (as ListBlobs gives it): the
// operator's right.
func (s *Store) RemoveBlob(ctx context.Context, filter string) error {
	tok, id, _, ok := wire.ParseBlobSubject(strings.TrimSuffix(filter, "*") + "0")
	if !ok || filter != wire.BlobChunksFilter(tok, id) {
		return fmt.Errorf("blob %q: want a chunk filter agentlog.blob.<token>.<id>.*", filter)
	}
	return s.purgeBlob(ctx, tok, id)
}
