package wire

import (
	"github.com/agentlog/agentlog/session"
	"github.com/nats-io/nats.go"
)

// The public signatures: this file stops compiling if one of them changes.
var (
	_ func(string) (string, error)                          = Token
	_ func(string) (string, error)                          = IDFromToken
	_ func(string, []session.Event) (Header, []byte, error) = EncodeRecord
	_ func(Header, []byte) ([]session.Event, error)         = DecodeRecord
	_                                                       = [9]string{StreamName, SubjectPrefix, SessionsBucket, ProjectionsBucket, WritersBucket, BlobsBucket, ErrorsStream, ErrorsPrefix, ""}
	_ int                                                   = DefaultPartitions
	// A nats.Header is a Header, and back, without a conversion.
	_ Header      = nats.Header{}
	_ nats.Header = Header{}
)
