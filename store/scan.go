package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Passes over every session, for listings (client.Sessions, Lineage, Status): batched direct gets,
// which need no consumer (a reader creates none: deploy/SECURITY.md) and which any replica may
// answer (a listing may miss what was stored a moment before it started on R>1).

// SessionEntry is the last entry of one key of agentlog_sessions, as ScanSessions reads it.
type SessionEntry struct {
	Token  string      // the key: the session's subject token (not checked)
	Header nats.Header // the entry's headers (wire.IncarnationHeader, wire.DeletingHeader, ...)
	Value  []byte      // the session's header line; nil when scanned keys only
	// Revision is the entry's revision (its stream seq in the bucket): a session created later
	// has a higher one.
	Revision uint64
}

// ScanSessions calls fn, in stream order, with the last entry of every key of agentlog_sessions
// as the scan starts; the keys' delete and purge markers are left out, entries being removed
// (wire.DeletingHeader) are not. keysOnly reads the entries' headers only (Value nil). sized, when
// not nil, gets the number of entries first (markers included). An error from fn stops the scan
// and is returned as is.
func (s *Store) ScanSessions(ctx context.Context, keysOnly bool, sized func(n uint64), fn func(SessionEntry) error) error {
	if s.js == nil {
		return errors.New("scan sessions: the store is not open (use Provision or Open to get a Store)")
	}
	prefix := wire.KVSubject(wire.SessionsBucket, "")
	// The bucket keeps one revision of each key (history 1): its messages in stream order are the
	// last entry of each key.
	return s.scanDirect(ctx, "KV_"+wire.SessionsBucket, prefix+">", sized, func(m *natsjs.RawStreamMsg) error {
		if kvDeleted(m.Header) {
			return nil
		}
		e := SessionEntry{Token: strings.TrimPrefix(m.Subject, prefix), Header: m.Header}
		if !keysOnly {
			e.Value = m.Data
		}
		e.Revision = m.Sequence
		return fn(e)
	})
}

// ScanTails calls fn with the headers of every session's last record as the scan starts and the
// time the stream stored it (no blob is read), in no particular order. sized, when not nil, gets
// their number first. (The stream leader lists the sessions' subjects, then batched direct gets
// read their last records, lastPerSubject.)
func (s *Store) ScanTails(ctx context.Context, sized func(n uint64), fn func(h nats.Header, stored time.Time) error) error {
	if s.js == nil {
		return errors.New("scan the sessions' last records: the store is not open (use Provision or Open to get a Store)")
	}
	if s.stream == nil {
		return errors.New("scan the sessions' last records: the store is not open (use Provision or Open to get a Store)")
	}
	return s.lastPerSubject(ctx, s.stream, wire.SubjectPrefix+".>", sized, func(m *natsjs.RawStreamMsg) error {
		return fn(m.Header, m.Time)
	})
}

// TailsOf calls fn with the headers and stored time of the last record of each session of
// tokens that has one, read with batched direct gets (a lagging follower may answer one).
func (s *Store) TailsOf(ctx context.Context, tokens []string, fn func(h nats.Header, stored time.Time) error) error {
	if s.js == nil {
		return errors.New("read the sessions' last records: the store is not open (use Provision or Open to get a Store)")
	}
	if len(tokens) == 0 {
		return nil
	}
	subjects := make([]string, len(tokens))
	for i, tok := range tokens {
		subjects[i] = wire.TokenSubject(tok, s.partitions)
	}
	js, err := orbitJS(s.js)
	if err != nil {
		return err
	}
	msgs, err := jetstreamext.GetLastMsgsFor(ctx, js, wire.StreamName, subjects, jetstreamext.GetLastMsgsBatchSize(len(subjects)))
	if err != nil {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return nil
		}
		return err
	}
	for m, merr := range msgs {
		if merr != nil {
			if errors.Is(merr, jetstreamext.ErrNoMessages) {
				return nil
			}
			return merr
		}
		if err := fn(m.Header, m.Time); err != nil {
			return err
		}
	}
	return nil
}

// ErrorReports calls fn with each agent/error report of the session (its messages on
// agentlog.errors.<token> in AGENTLOG_ERRORS, oldest first) stored when the read starts. The data
// is the handler's to keep.
func (ss *Session) ErrorReports(ctx context.Context, fn func(report []byte) error) error {
	if ss.s.js == nil {
		return ss.noStore()
	}
	subject := wire.ErrorsPrefix + "." + ss.tok
	err := ss.s.scanDirect(ctx, wire.ErrorsStream, subject, nil, func(m *natsjs.RawStreamMsg) error {
		return fn(m.Data)
	})
	if err != nil {
		return fmt.Errorf("session %q: read its error reports (stream %s): %w", ss.id, wire.ErrorsStream, err)
	}
	return nil
}

// scanDirect calls fn for each message of stream matching filter, in stream order, read with
// batched direct gets from the stream's first message on until a batch ends before its limits.
// sized, when not nil, first gets the number of messages the stream holds (all subjects: a size
// hint). The data is the handler's to keep.
func (s *Store) scanDirect(ctx context.Context, stream, filter string, sized func(n uint64), fn func(*natsjs.RawStreamMsg) error) error {
	if sized != nil {
		st, err := s.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		sized(st.CachedInfo().State.Msgs)
	}
	seq := uint64(1)
	for {
		msgs, err := s.getDirect(ctx, stream, map[string]any{"seq": seq, "next_by_subj": filter, "batch": directBatch, "max_bytes": directBatchBytes})
		if err != nil {
			return err
		}
		size := 0
		for _, m := range msgs {
			if err := fn(m); err != nil {
				return err
			}
			seq = m.Sequence + 1
			size += len(m.Data) + len(m.Subject) + 256
		}
		if len(msgs) < directBatch && size < directBatchBytes-int(s.maxMsgSize)-(1<<16) {
			return nil // the batch ended before its limits: nothing more
		}
	}
}

// lastPerSubject calls fn with the last message of each subject of st matching filter: the
// stream leader lists the subjects (stream info with a subject filter, paged), then batched direct
// gets (multi_last) read their last messages, lastMsgsBatch subjects at a time; in stream order
// within a batch only. sized, when not nil, first gets the number of subjects.
func (s *Store) lastPerSubject(ctx context.Context, st natsjs.Stream, filter string, sized func(n uint64), fn func(*natsjs.RawStreamMsg) error) error {
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		return err
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	slices.Sort(subjects)
	if sized != nil {
		sized(uint64(len(subjects)))
	}
	for len(subjects) > 0 {
		n := min(len(subjects), lastMsgsBatch)
		msgs, err := s.getDirect(ctx, info.Config.Name, map[string]any{"multi_last": subjects[:n], "batch": directBatch})
		if err != nil {
			return err
		}
		slices.SortFunc(msgs, func(a, b *natsjs.RawStreamMsg) int { return cmp.Compare(a.Sequence, b.Sequence) })
		for _, m := range msgs {
			if err := fn(m); err != nil {
				return err
			}
		}
		subjects = subjects[n:]
	}
	return nil
}
