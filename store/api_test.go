package store

import (
	"context"

	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go/jetstream"
)

// The public signatures: this file stops compiling if one of them changes.
var (
	_ func(context.Context, jetstream.JetStream, Config) (*Store, error)                                 = Provision
	_ func(context.Context, jetstream.JetStream) (*Store, error)                                         = Open
	_ func(*Store, string) (string, error)                                                               = (*Store).Subject
	_ func(*Store, context.Context, string) (Tail, error)                                                = (*Store).GetTail
	_ func(*Store, context.Context, string, uint64, []session.Event, ...AppendOpt) (AppendResult, error) = (*Store).Append
	_ func(*Store, context.Context, string) ([]session.Event, uint64, error)                             = (*Store).Read
	_ func(*Store, context.Context, session.Header, ...CreateOpt) error                                  = (*Store).CreateSession
	_ func(*Store, context.Context, string) (session.Header, error)                                      = (*Store).GetSession
	_ error                                                                                              = ErrConflict
	_ error                                                                                              = ErrSessionExists
	_ error                                                                                              = ErrSessionNotFound
	_                                                                                                    = Store{JS: jetstream.JetStream(nil), Stream: jetstream.Stream(nil), Sessions: jetstream.KeyValue(nil), Projections: jetstream.KeyValue(nil), Partitions: 0, MaxMsgSize: int32(0)}
	_                                                                                                    = Config{Partitions: 0, Replicas: 0, MaxMsgSize: int32(0), DuplicateWindow: 0}
	_                                                                                                    = Tail{LastStreamSeq: uint64(0), NextSeq: int64(0), LastEvents: []session.Event(nil), LastMsgID: ""}
	_                                                                                                    = AppendResult{StreamSeq: uint64(0), Duplicate: false}
	_ func(string) AppendOpt                                                                             = WithMsgID
)
