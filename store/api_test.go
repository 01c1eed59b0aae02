package store

import (
	"context"

	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go/jetstream"
)

// The public signatures: this file stops compiling if one of them changes.
var (
	_ func(context.Context, jetstream.JetStream, Config) (*Store, error)                           = Provision
	_ func(context.Context, jetstream.JetStream) (*Store, error)                                   = Open
	_ func(*Store, string) (*Session, error)                                                       = (*Store).Session
	_ func(*Store, context.Context, session.Header, ...CreateOpt) error                            = (*Store).CreateSession
	_ func(*Session) string                                                                        = (*Session).Subject
	_ func(*Session, context.Context) (Tail, error)                                                = (*Session).Tail
	_ func(*Session, context.Context, uint64, []session.Event, ...AppendOpt) (AppendResult, error) = (*Session).Append
	_ func(*Session, context.Context, func(Record) error, ...ReadOpt) (uint64, error)              = (*Session).Records
	_ func(*Session, context.Context) (SessionInfo, error)                                         = (*Session).Info
	_ func(uint64, int64) ReadOpt                                                                  = AfterStreamSeq
	_ func() ReadOpt                                                                               = Follow
	_ error                                                                                        = ErrConflict
	_ error                                                                                        = ErrSessionExists
	_ error                                                                                        = ErrSessionNotFound
	_                                                                                              = Config{Partitions: 0, Replicas: 0, MaxMsgSize: int32(0), DuplicateWindow: 0}
	_                                                                                              = Tail{LastStreamSeq: uint64(0), NextSeq: int64(0), LastEvents: []session.Event(nil), LastMsgID: ""}
	_                                                                                              = AppendResult{StreamSeq: uint64(0), Duplicate: false}
	_                                                                                              = Record{StreamSeq: uint64(0), Events: []session.Event(nil), Body: []byte(nil)}
	_ func(string) AppendOpt                                                                       = WithMsgID
)
