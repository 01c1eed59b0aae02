package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrNoPurgeRight: the credentials may not purge the stream (STREAM.PURGE): a lifecycle pass needs
// the right (the operator's role, or the lifecycle role, deploy/SECURITY.md).
var ErrNoPurgeRight = errors.New("the credentials may not purge AGENTLOG (a lifecycle pass needs the operator's or the lifecycle role)")

// PassOptions are the options of LifecyclePass.
type PassOptions struct {
	// DryRun lists what the pass would do, and changes nothing.
	DryRun bool
	// Workers archive this many sessions at once (0: 32).
	Workers int
	// Now is the pass's clock (nil: time.Now).
	Now func() time.Time
	// Limit stops the pass after this many archives and deletions (0: none).
	Limit int
	// StepHook is given to every archive (StepHook) and deletion (RemoveStepHook) of the pass.
	StepHook func(step string)
}

// PassAction is one thing a pass did (or, dry, would do), and why.
type PassAction struct {
	Session      string `json:"session"`
	Action       string `json:"action"` // archive, delete, drop-stale-archive
	Reason       string `json:"reason"`
	LastActivity int64  `json:"lastActivity"` // Unix ms
	Error        string `json:"error,omitempty"`
	Bytes        int64  `json:"bytes,omitempty"` // archive: the payload stored
	Raced        bool   `json:"raced,omitempty"` // archive: a writer appended meanwhile (kept hot)
}

// PassResult is what a lifecycle pass did.
type PassResult struct {
	Policy        Policy       `json:"-"`
	ArchiveAfter  string       `json:"archiveAfter"`
	RetainFor     string       `json:"retainFor"`
	DryRun        bool         `json:"dryRun"`
	HotSessions   int          `json:"hotSessions"`   // sessions with records in AGENTLOG
	Archived      int          `json:"archived"`      // sessions archived
	ArchivedBytes int64        `json:"archivedBytes"` // their payloads
	Deleted       int          `json:"deleted"`       // sessions deleted by retention
	Held          int          `json:"held"`          // candidates skipped: under a legal hold
	Live          int          `json:"live"`          // candidates skipped: a live writer lease
	Errors        int          `json:"errors"`
	StaleArchives int          `json:"staleArchives"` // archives of restored sessions removed
	ElapsedMs     float64      `json:"elapsedMs"`
	Actions       []PassAction `json:"actions"`
	// Blobs is what `agentlog lifecycle run` collected after the pass (CollectBlobs with
	// DefaultBlobGrace; nil on a dry run). LifecyclePass itself leaves it nil.
	Blobs *Collected `json:"blobs,omitempty"`
}

// staleArchiveAge: an archive the log does not use (a restored session's) is removed once it is
// this old. An archive older than maxArchiveCommitAge is never committed (Session.Archive checks),
// so the one removed cannot be an archive still on its way to its commit.
const (
	// passSessionTimeout bounds a pass's archive or deletion of one session.
	passSessionTimeout  = 30 * time.Second
	staleArchiveAge     = time.Hour
	maxArchiveCommitAge = 30 * time.Minute
)

// LifecyclePass applies policy once: it archives the sessions whose last record is older than
// ArchiveAfter (not held, without a live writer lease), deletes (as Session.Remove) the sessions
// whose last activity is older than RetainFor, hot or archived, and removes the archives that
// restored sessions left behind. It needs the right to purge AGENTLOG: credentials without it
// are ErrNoPurgeRight before anything is read. The errors of single sessions are counted and
// listed in the result, not returned.
func (s *Store) LifecyclePass(ctx context.Context, policy Policy, o PassOptions) (PassResult, error) {
	start := time.Now()
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	res := PassResult{Policy: policy, ArchiveAfter: FormatPolicyDuration(policy.ArchiveAfter), RetainFor: FormatPolicyDuration(policy.RetainFor),
		DryRun: o.DryRun, Actions: []PassAction{}}
	workers := o.Workers
	if workers <= 0 {
		workers = 32
	}
	if _, err := s.purge(ctx, wire.StreamName, wire.SubjectPrefix+".0.-", 1); err != nil {
		return res, fmt.Errorf("%w: %w", ErrNoPurgeRight, err)
	}
	holds, err := s.Holds(ctx)
	if err != nil {
		return res, err
	}
	tails, err := s.HotTails(ctx)
	if err != nil {
		return res, err
	}
	res.HotSessions = len(tails)
	t0 := now()
	var archiveCut, retainCut int64
	if policy.ArchiveAfter > 0 {
		archiveCut = t0.Add(-policy.ArchiveAfter).UnixMilli()
	}
	if policy.RetainFor > 0 {
		retainCut = t0.Add(-policy.RetainFor).UnixMilli()
	}
	var deletes, archives []HotTail
	for _, t := range tails {
		switch {
		case retainCut > 0 && t.LastActivity < retainCut:
			deletes = append(deletes, t)
		case archiveCut > 0 && t.LastActivity < archiveCut:
			archives = append(archives, t)
		}
	}
	var mu sync.Mutex
	add := func(a PassAction) {
		mu.Lock()
		defer mu.Unlock()
		res.Actions = append(res.Actions, a)
		if a.Error != "" {
			res.Errors++
		}
	}
	budget := func(n int) int {
		if o.Limit > 0 {
			return min(n, max(o.Limit-len(res.Actions), 0))
		}
		return n
	}

	// Retention: hot sessions, then archived ones (their heads carry their last activity).
	if retainCut > 0 {
		heads, err := s.archiveHeads(ctx)
		if err != nil {
			return res, err
		}
		for _, h := range heads {
			if _, hot := tails[h.Token]; !hot && h.LastActivity < retainCut {
				deletes = append(deletes, HotTail{Token: h.Token, ID: h.ID, LastActivity: h.LastActivity})
			}
		}
	}
	slices.SortFunc(deletes, func(a, b HotTail) int { return cmpInt(a.LastActivity, b.LastActivity) })
	deletes = deletes[:budget(len(deletes))]
	for _, t := range deletes {
		if _, held := holds[t.Token]; held {
			res.Held++
			continue
		}
		a := PassAction{Session: t.ID, Action: "delete", LastActivity: t.LastActivity,
			Reason: fmt.Sprintf("last activity %s, older than retain-for %s", time.UnixMilli(t.LastActivity).UTC().Format(time.RFC3339), res.RetainFor)}
		if !o.DryRun {
			ss, err := s.Session(t.ID)
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, passSessionTimeout)
				_, err = ss.Remove(sctx, RemoveStepHook(o.StepHook))
				cancel()
			}
			if err != nil {
				a.Error = err.Error()
			} else {
				res.Deleted++
			}
		}
		add(a)
	}

	// Archive.
	slices.SortFunc(archives, func(a, b HotTail) int { return cmpInt(a.LastActivity, b.LastActivity) })
	var todo []HotTail
	for _, t := range archives {
		if _, held := holds[t.Token]; held {
			res.Held++
			continue
		}
		todo = append(todo, t)
	}
	live, err := s.liveLeases(ctx, todo)
	if err != nil {
		return res, err
	}
	kept := todo[:0]
	for _, t := range todo {
		if live[t.Token] {
			res.Live++
			continue
		}
		kept = append(kept, t)
	}
	todo = kept[:budget(len(kept))]
	reason := "no append for more than archive-after " + res.ArchiveAfter
	if o.DryRun {
		for _, t := range todo {
			add(PassAction{Session: t.ID, Action: "archive", LastActivity: t.LastActivity,
				Reason: fmt.Sprintf("%s (last record %s)", reason, time.UnixMilli(t.LastActivity).UTC().Format(time.RFC3339))})
		}
	} else {
		next := make(chan HotTail)
		var wg sync.WaitGroup
		for range min(workers, len(todo)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for t := range next {
					a := PassAction{Session: t.ID, Action: "archive", LastActivity: t.LastActivity, Reason: reason}
					var r ArchiveResult
					ss, err := s.Session(t.ID)
					if err == nil {
						// Each archive is bounded: a reply lost to a server restart must not hold
						// the pass for its whole ctx.
						sctx, cancel := context.WithTimeout(ctx, passSessionTimeout)
						r, err = ss.Archive(sctx, ArchiveIdleSince(time.UnixMilli(archiveCut)), archivePass(), StepHook(o.StepHook))
						cancel()
					}
					switch {
					case errors.Is(err, ErrNotIdle) || errors.Is(err, ErrSessionNotFound):
						continue // written or removed since the scan
					case err != nil:
						a.Error = err.Error()
					}
					a.Bytes, a.Raced = r.StoredBytes, r.Raced
					mu.Lock()
					if r.Archived {
						res.Archived++
						res.ArchivedBytes += r.StoredBytes
					}
					mu.Unlock()
					add(a)
				}
			}()
		}
		for _, t := range todo {
			if ctx.Err() != nil {
				break
			}
			next <- t
		}
		close(next)
		wg.Wait()
	}

	// Archives left by restores: their sessions' hot logs start at seq 0.
	if !o.DryRun {
		if n, err := s.dropStaleArchives(ctx, tails, now()); err != nil {
			add(PassAction{Action: "drop-stale-archive", Error: err.Error()})
		} else {
			res.StaleArchives = n
		}
	}
	res.ElapsedMs = float64(time.Since(start).Microseconds()) / 1000
	return res, ctx.Err()
}

// ArchiveChecked is the option of an Session.Archive whose caller checked the right to purge and
// the session's hold itself (a lifecycle pass, a benchmark): it saves two requests a session.
func ArchiveChecked() ArchiveOpt { return archivePass() }

// archivePass marks an Session.Archive made by a pass: the pass checked the right to purge and the
// holds itself.
func archivePass() ArchiveOpt { return func(o *archiveOpts) { o.ignoreHold, o.pass = true, true } }

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// HotTail is a session with records in AGENTLOG: its token and id, and when its last record was
// stored (Unix ms).
type HotTail struct {
	Token, ID    string
	LastActivity int64
	LastSeq      int64
}

// HotTails reads the last record's headers of every session with records in AGENTLOG (one
// headers-only pass over the stream's last message per subject: its cost grows with the sessions
// in the hot stream, not with the archived ones), by token.
func (s *Store) HotTails(ctx context.Context) (map[string]HotTail, error) {
	out := map[string]HotTail{}
	err := s.lastPerSubject(ctx, s.stream, wire.SubjectPrefix+".>", nil, func(m *natsjs.RawStreamMsg) error {
		tok := m.Header.Get(wire.HeaderSession)
		id, err := wire.IDFromToken(tok)
		if err != nil {
			return nil
		}
		last, _ := wire.RecordLastSeq(m.Header)
		out[tok] = HotTail{Token: tok, ID: id, LastActivity: m.Time.UnixMilli(), LastSeq: last}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the last records of stream %s: %w", wire.StreamName, err)
	}
	return out, nil
}

// AllArchiveHeads reads every archive head's headers (one headers-only pass over the heads: its
// cost grows with the archived sessions).
func (s *Store) AllArchiveHeads(ctx context.Context) ([]wire.ArchiveHead, error) {
	return s.archiveHeads(ctx)
}

// archiveHeads reads every archive head's headers (one headers-only pass over the heads).
func (s *Store) archiveHeads(ctx context.Context) ([]wire.ArchiveHead, error) {
	var out []wire.ArchiveHead
	if s.archive == nil {
		return nil, nil
	}
	err := s.lastPerSubject(ctx, s.archive, wire.ArchivePrefix+".*", nil, func(m *natsjs.RawStreamMsg) error {
		if h, err := wire.ParseArchiveHead(m.Header); err == nil {
			out = append(out, h)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the archive heads of stream %s: %w", wire.ArchiveStream, err)
	}
	return out, nil
}

// liveLeases reports which of ts have a live writer lease (one batched read of agentlog_writers).
func (s *Store) liveLeases(ctx context.Context, ts []HotTail) (map[string]bool, error) {
	out := map[string]bool{}
	if s.writers == nil || len(ts) == 0 {
		return out, nil
	}
	subjects := make([]string, len(ts))
	for i, t := range ts {
		subjects[i] = "$KV." + wire.WritersBucket + "." + t.Token
	}
	msgs, err := s.lastMsgs(ctx, "KV_"+wire.WritersBucket, subjects)
	if err != nil {
		return nil, fmt.Errorf("read the writer leases: %w", err)
	}
	for _, m := range msgs {
		if !kvDeleted(m.Header) && !leaseExpired(m) {
			out[m.Subject[len("$KV."+wire.WritersBucket+"."):]] = true
		}
	}
	return out, nil
}

// leaseExpired reports whether a lease entry's TTL (Nats-TTL) has passed by its stored time (the
// server removes it shortly after).
func leaseExpired(m *natsjs.RawStreamMsg) bool {
	ttl, err := time.ParseDuration(m.Header.Get("Nats-TTL"))
	if err != nil {
		if secs, err2 := strconv.Atoi(m.Header.Get("Nats-TTL")); err2 == nil {
			ttl = time.Duration(secs) * time.Second
		} else {
			return false
		}
	}
	return time.Since(m.Time) > ttl
}

// dropStaleArchives removes the archives that no log uses any more: those of sessions whose hot
// records start at seq 0 (restored), once older than staleArchiveAge.
func (s *Store) dropStaleArchives(ctx context.Context, tails map[string]HotTail, now time.Time) (int, error) {
	if s.archive == nil || len(tails) == 0 {
		return 0, nil
	}
	subjects := make([]string, 0, len(tails))
	for tok := range tails {
		subjects = append(subjects, wire.ArchiveSubject(tok))
	}
	slices.Sort(subjects)
	msgs, err := s.lastMsgs(ctx, wire.ArchiveStream, subjects)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range msgs {
		h, err := wire.ParseArchiveHead(m.Header)
		if err != nil || now.Sub(m.Time) < staleArchiveAge {
			continue
		}
		ss, err := s.Session(h.ID)
		if err != nil {
			continue
		}
		first, err := ss.hotFirstSeq(ctx)
		if err != nil || first != 0 {
			continue
		}
		if _, err := s.purge(ctx, wire.ArchiveStream, wire.ArchivePartsFilter(h.Token), 0); err != nil {
			return n, err
		}
		if _, err := s.purgeHead(ctx, h.Token, m.Sequence); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// purgeHead purges session token's archive head if it is still the message at stream seq seq.
func (s *Store) purgeHead(ctx context.Context, tok string, seq uint64) (uint64, error) {
	return s.purge(ctx, wire.ArchiveStream, wire.ArchiveSubject(tok), seq+1)
}
