package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// RightDeniedError: the credentials are denied Subject, a right that an operation needs (found by
// a probe that changes nothing, before the operation changes anything).
type RightDeniedError struct {
	Op      string // the operation that needs it ("rm"), or ""
	Subject string // the publish right denied, e.g. $JS.API.STREAM.PURGE.AGENTLOG
	Err     error  // the server's permission violation
}

func (e *RightDeniedError) Error() string {
	if e.Op != "" {
		return fmt.Sprintf("%s needs the operator role: %s is denied", e.Op, e.Subject)
	}
	return e.Subject + " is denied"
}
func (e *RightDeniedError) Unwrap() error { return e.Err }

// probeTimeout bounds one probe's wait for its answer (a denied probe is known after one round
// trip: the flush).
const probeTimeout = 5 * time.Second

// probeStream is the stream name a probe publish expects: no stream has it, so a JetStream
// publish that carries it is refused by the stream (10060) and stores nothing.
const probeStream = "agentlog-rights-probe"

// probe sends m, a request that changes nothing, and reports a permission violation of its
// subject as a *RightDeniedError after one round trip: the server writes a denied publish's -ERR
// before the PONG of the flush that follows it, so a denial costs no timeout. An answer (whatever
// it says), or no responders, means the right is granted.
func (s *Store) probe(ctx context.Context, m *nats.Msg) error {
	nc := s.js.Conn()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	m.Reply = nc.NewInbox()
	sub, err := nc.SubscribeSync(m.Reply)
	if err != nil {
		return fmt.Errorf("probe %s: %w", m.Subject, err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishMsg(m); err != nil {
		return fmt.Errorf("probe %s: %w", m.Subject, err)
	}
	ferr := nc.FlushWithContext(ctx)
	// Checked even when the flush failed: a caller may cancel ctx on the violation itself.
	if le := nc.LastError(); le != nil && strings.Contains(le.Error(), fmt.Sprintf("Publish to %q", m.Subject)) {
		return &RightDeniedError{Subject: m.Subject, Err: le}
	}
	if ferr != nil {
		return fmt.Errorf("probe %s: %w", m.Subject, ferr)
	}
	if _, err := sub.NextMsgWithContext(ctx); err != nil {
		return fmt.Errorf("probe %s: no answer: %w", m.Subject, err)
	}
	return nil
}

// probePurge probes STREAM.PURGE of stream with a purge of filter below stream seq 1: it removes
// nothing.
func (s *Store) probePurge(ctx context.Context, stream, filter string) error {
	body, _ := json.Marshal(map[string]any{"filter": filter, "seq": 1})
	return s.probe(ctx, &nats.Msg{Subject: s.api("STREAM.PURGE." + stream), Data: body})
}

// probePublish probes a JetStream publish on subject: the publish expects a stream no stream is,
// so it is refused and stores nothing.
func (s *Store) probePublish(ctx context.Context, subject string) error {
	return s.probe(ctx, &nats.Msg{Subject: subject, Header: nats.Header{natsjs.ExpectedStreamHeader: []string{probeStream}}})
}

// checkRemoveRights probes every right Session.Remove of token tok (subject subject) needs, in
// the order it uses them, changing nothing: the purges of its records, archive, lineage link,
// projections, error reports and blob chunks, and the writes of its metadata, writer lease and
// blob metadata. The first denied is a *RightDeniedError.
func (s *Store) checkRemoveRights(ctx context.Context, tok, subject string) error {
	purges := [][2]string{{wire.StreamName, subject}}
	if s.archive != nil {
		purges = append(purges, [2]string{wire.ArchiveStream, wire.ArchiveSubject(tok)})
	}
	if s.children != nil {
		purges = append(purges, [2]string{wire.ChildrenStream, wire.ChildrenPrefix + ".*." + tok})
	}
	purges = append(purges,
		[2]string{"KV_" + wire.ProjectionsBucket, wire.KVSubject(wire.ProjectionsBucket, wire.ProjectionKeysFilter(tok))},
		[2]string{wire.ErrorsStream, wire.ErrorsPrefix + "." + tok})
	if s.blobStream != nil {
		purges = append(purges, [2]string{wire.BlobStream, wire.BlobSessionFilter(tok)})
	}
	var denied *RightDeniedError
	probe := func(purges [][2]string) error {
		for _, p := range purges {
			if err := s.probePurge(ctx, p[0], p[1]); err != nil {
				if errors.As(err, &denied) {
					denied.Op = "rm"
				}
				return err
			}
		}
		return nil
	}
	if err := probe(purges); err != nil {
		return err
	}
	// The legacy bucket last: a credential that may not even look it up is refused above.
	legacy, err := s.legacyBucket(ctx)
	if err != nil {
		return err
	}
	if legacy != nil {
		if err := probe([][2]string{{"OBJ_" + wire.BlobsBucket, legacyChunks + "*"}}); err != nil {
			return err
		}
	}
	writes := []string{KVPutSubject(s.js, wire.SessionsBucket, tok), KVPutSubject(s.js, wire.WritersBucket, tok)}
	if legacy != nil {
		writes = append(writes, legacyMeta+tok)
	}
	for _, w := range writes {
		if err := s.probePublish(ctx, w); err != nil {
			if errors.As(err, &denied) {
				denied.Op = "rm"
			}
			return err
		}
	}
	return nil
}
