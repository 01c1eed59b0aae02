package store

import (
	"errors"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Classifying the JetStream API's refusals. The codes are nats.go's (natsjs.JSErrCode*) and
// orbit.go jetstreamext's (its atomic batch codes); nothing here redefines them.

// apiErrorCode is the JetStream API error code err carries (wrapped or not); ok is false for an
// error that is not a JetStream API error.
func apiErrorCode(err error) (code natsjs.ErrorCode, ok bool) {
	var apiErr *natsjs.APIError
	if !errors.As(err, &apiErr) || apiErr == nil {
		return 0, false
	}
	return apiErr.ErrorCode, true
}

// IsWrongLastSequence reports whether err is JetStream's refusal of a guarded publish: the
// subject's last sequence is not the one expected (Nats-Expected-Last-Subject-Sequence, a KV
// revision). The server answers 10071, or, on a replicated stream, 10164 when a publish to the
// subject is still in flight; both mean that the subject moved on and nothing was written.
func IsWrongLastSequence(err error) bool {
	code, ok := apiErrorCode(err)
	return ok && (code == natsjs.JSErrCodeStreamWrongLastSequence || code == natsjs.JSErrCodeStreamWrongLastSequenceConstant)
}

// isBatchDuplicateMsgID reports whether err is the refusal of an atomic batch that holds an
// already stored Nats-Msg-Id (10201).
func isBatchDuplicateMsgID(err error) bool {
	code, ok := apiErrorCode(err)
	return ok && code == jetstreamext.JSErrCodeBatchPublishDuplicateMsgID
}
