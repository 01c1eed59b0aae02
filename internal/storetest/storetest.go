// Package storetest is test support over a store.Store: the handle of an id a test knows valid, a
// session's whole log, and the buckets a test inspects or corrupts directly. It is imported by
// tests only.
package storetest

import (
	"context"
	"fmt"
	"time"

	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Session is st.Session(id) for an id the test knows valid: a bad one panics (the test is wrong,
// not the code under test). A test of id refusals calls st.Session itself.
func Session(st *store.Store, id string) *store.Session {
	ss, err := st.Session(id)
	if err != nil {
		panic(fmt.Sprintf("storetest: session %q: %v", id, err))
	}
	return ss
}

// ReadAll returns every event of the session in order and the stream seq of its last record (0
// when there is none), as ss.Records reads them.
func ReadAll(ctx context.Context, ss *store.Session) ([]session.Event, uint64, error) {
	var events []session.Event
	last, err := ss.Records(ctx, store.Collect(&events))
	if err != nil {
		return nil, 0, err
	}
	return events, last, nil
}

// Header is the header of a session's metadata, as ss.Info reads it: Header(ss.Info(ctx)).
func Header(info store.SessionInfo, err error) (session.Header, error) { return info.Header, err }

// lookupTimeout bounds the look-up of a bucket.
const lookupTimeout = 10 * time.Second

// SessionsKV is the agentlog_sessions bucket of st. A failure to look it up panics.
func SessionsKV(st *store.Store) jetstream.KeyValue { return kv(st, wire.SessionsBucket) }

// ProjectionsKV is the agentlog_projections bucket of st. A failure to look it up panics.
func ProjectionsKV(st *store.Store) jetstream.KeyValue { return kv(st, wire.ProjectionsBucket) }

// WritersKV is the agentlog_writers bucket of st. A failure to look it up panics.
func WritersKV(st *store.Store) jetstream.KeyValue { return kv(st, wire.WritersBucket) }

// Blobs lists the blobs of AGENTLOG_BLOBS of st (store.Store.ListBlobs). A failure panics.
func Blobs(st *store.Store) []string {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	out, err := st.ListBlobs(ctx)
	if err != nil {
		panic(fmt.Sprintf("storetest: the blobs of %s: %v", wire.BlobStream, err))
	}
	return out
}

func kv(st *store.Store, bucket string) jetstream.KeyValue {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	kv, err := st.JetStream().KeyValue(ctx, bucket)
	if err != nil {
		panic(fmt.Sprintf("storetest: KV bucket %s: %v", bucket, err))
	}
	return kv
}
