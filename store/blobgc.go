package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// recordBlobNames returns the names of the blobs that the stored records of session token tok
// reference, read with a headers-only ordered consumer (no body, no blob is fetched). Records
// stored after the read began may be missed.
func (s *Store) recordBlobNames(ctx context.Context, tok string) (map[string]bool, error) {
	id, err := wire.IDFromToken(tok)
	if err != nil {
		return nil, err
	}
	subject := wire.TokenSubject(tok, s.partitions)
	names := map[string]bool{}
	last, err := s.leaderLastMsg(ctx, subject)
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return names, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session %q: its last record: %w", id, err)
	}
	cons, err := s.stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: true})
	if err != nil {
		return nil, fmt.Errorf("session %q: read its record headers: %w", id, err)
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
		return nil, fmt.Errorf("session %q: read its record headers: %w", id, err)
	}
	defer iter.Stop()
	for {
		msg, err := iter.Next(natsjs.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("session %q: read its record headers: %w", id, err)
		}
		for _, ref := range wire.RecordBlobs(msg.Headers()) {
			names[wire.BlobName(tok, ref)] = true
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("session %q: read its record headers: %w", id, err)
		}
		if meta.Sequence.Stream >= last.Sequence && meta.NumPending == 0 {
			return names, nil
		}
	}
}

// deleteBlobs deletes the named blobs of wire.BlobsBucket (one already gone counts as deleted) and
// returns how many it deleted.
func (s *Store) deleteBlobs(ctx context.Context, names []string) (int, error) {
	n := 0
	for _, name := range names {
		if err := s.blobs.Delete(ctx, name); err != nil && !errors.Is(err, natsjs.ErrObjectNotFound) {
			return n, fmt.Errorf("delete blob %s from %s: %w", name, wire.BlobsBucket, err)
		}
		n++
	}
	return n, nil
}

// removeSessionBlobs deletes the blobs that session token tok's records reference (Session.Remove,
// before it purges the records, so a removal that stops half-way still finds them when run
// again). Blobs without a record (an append that died before its record) are CollectBlobs' job.
func (s *Store) removeSessionBlobs(ctx context.Context, tok string) (int, error) {
	if s.blobs == nil {
		return 0, nil
	}
	names, err := s.recordBlobNames(ctx, tok)
	if err != nil {
		return 0, err
	}
	list := make([]string, 0, len(names))
	for name := range names {
		list = append(list, name)
	}
	sort.Strings(list)
	return s.deleteBlobs(ctx, list)
}

// Collected is what CollectBlobs found and removed.
type Collected struct {
	Blobs    int      `json:"blobs"`    // objects in agentlog_blobs
	Young    int      `json:"young"`    // kept: not older than the grace
	Live     int      `json:"live"`     // kept: of a session with a live writer lease
	Used     int      `json:"used"`     // kept: referenced by a stored record
	Foreign  int      `json:"foreign"`  // kept: a name agentlog does not make
	Removed  []string `json:"removed"`  // names of the orphans deleted
	Sessions int      `json:"sessions"` // sessions whose records were scanned
	// Chunks of puts that stored no object (a failed or killed upload), by object nuid.
	PartialYoung   int      `json:"partialYoung"`   // kept: its last chunk not older than the grace
	PartialRemoved []string `json:"partialRemoved"` // purged
}

// CollectBlobs deletes the orphans of agentlog_blobs: objects older than grace (by the server's
// time of the object) that no stored record references, of sessions without a live writer lease.
// An orphan is left by an append that stopped between its blobs and its record (a killed writer),
// or by a retry whose earlier attempt was stored. A blob is never collected before its record is
// committed as long as grace is well above BlobMaxAgeAtPublish (ARCHITECTURE.md, "Large events");
// `agentlog gc` refuses a grace below MinBlobGrace. It also purges the chunks that no object
// names (a put that failed or was killed before its metadata) once the last of them is older than
// grace. Errors name the session or the blob.
func (s *Store) CollectBlobs(ctx context.Context, grace time.Duration) (Collected, error) {
	c := Collected{Removed: []string{}, PartialRemoved: []string{}}
	if s.blobs == nil {
		return c, nil
	}
	// The chunks first, then the objects: a put that completes in between is seen with its object.
	st, err := s.js.Stream(ctx, blobsStream)
	if err != nil {
		return c, fmt.Errorf("look up the stream of %s: %w", wire.BlobsBucket, err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(blobChunksPrefix+">"))
	if err != nil {
		return c, fmt.Errorf("list the chunks of %s: %w", wire.BlobsBucket, err)
	}
	objs, err := s.blobs.List(ctx)
	if err != nil && !errors.Is(err, natsjs.ErrNoObjectsFound) {
		return c, fmt.Errorf("list %s: %w", wire.BlobsBucket, err)
	}
	c.Blobs = len(objs)
	cutoff := time.Now().Add(-grace)
	named := make(map[string]bool, len(objs))
	for _, o := range objs {
		named[o.NUID] = true
	}
	if err := s.collectPartial(ctx, st, info.State.Subjects, named, cutoff, &c); err != nil {
		return c, err
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
		// A live writer may be between its blobs and its record: leave its session alone.
		if _, _, err := s.getLease(ctx, tok, id); err == nil {
			c.Live += len(names)
			continue
		} else if !errors.Is(err, ErrNoLease) {
			return c, err
		}
		used, err := s.recordBlobNames(ctx, tok)
		if err != nil {
			return c, err
		}
		c.Sessions++
		var orphans []string
		for _, name := range names {
			if used[name] {
				c.Used++
			} else {
				orphans = append(orphans, name)
			}
		}
		sort.Strings(orphans)
		n, err := s.deleteBlobs(ctx, orphans)
		c.Removed = append(c.Removed, orphans[:n]...)
		if err != nil {
			return c, fmt.Errorf("session %q: %w", id, err)
		}
	}
	return c, nil
}

// collectPartial purges the chunk subjects (of subjects, the bucket's chunk subjects) whose nuid
// no object in named has and whose last chunk the server stored before cutoff. A put in progress
// keeps writing chunks, so its last chunk is never that old.
func (s *Store) collectPartial(ctx context.Context, st natsjs.Stream, subjects map[string]uint64, named map[string]bool, cutoff time.Time, c *Collected) error {
	var nuids []string
	for subj := range subjects {
		if n := strings.TrimPrefix(subj, blobChunksPrefix); !named[n] {
			nuids = append(nuids, n)
		}
	}
	sort.Strings(nuids)
	for _, n := range nuids {
		last, err := st.GetLastMsgForSubject(ctx, blobChunksPrefix+n)
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
		if err := st.Purge(ctx, natsjs.WithPurgeSubject(blobChunksPrefix+n)); err != nil {
			return fmt.Errorf("purge the chunks of partial upload %s from %s: %w", n, wire.BlobsBucket, err)
		}
		c.PartialRemoved = append(c.PartialRemoved, n)
	}
	return nil
}
