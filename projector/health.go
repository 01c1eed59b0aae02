package projector

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// health logs the failures of a long-running loop once per change of state: the first failure of
// an operation at warn level, its recovery at info level, nothing in between.
type health struct {
	mu      sync.Mutex
	failing map[string]time.Time // operation -> when it started failing
}

// fail records a failure of op; it logs msg only when op was not failing already.
func (h *health) fail(logger *slog.Logger, op, msg string, err error, attrs ...any) {
	h.mu.Lock()
	if h.failing == nil {
		h.failing = map[string]time.Time{}
	}
	_, already := h.failing[op]
	if !already {
		h.failing[op] = time.Now()
	}
	h.mu.Unlock()
	if !already {
		logger.Warn(msg+"; retrying (logged once until it recovers)", append(attrs, "err", err)...)
	}
}

// ok records a success of op; it logs the recovery when op was failing.
func (h *health) ok(logger *slog.Logger, op, msg string, attrs ...any) {
	h.mu.Lock()
	since, was := h.failing[op]
	delete(h.failing, op)
	h.mu.Unlock()
	if was {
		logger.Info(msg, append(attrs, "after", time.Since(since).Round(time.Millisecond))...)
	}
}

// isMissing reports whether err says a stream, bucket or consumer does not exist (lost with a
// server's state, or deleted), as opposed to a server that cannot be reached.
func isMissing(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
}
