package projector

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// recordFeed is a partition's stream of records, as a worker reads it: the next record within a
// wait (nats.ErrTimeout when none came), Stop, and Drain (hand out what is buffered, then end
// with jetstream.ErrMsgIteratorClosed).
//
// It is built on jetstream's Consume (a callback on a subscription with nats.go's own pending
// limits), not on Messages: Messages buffers records in a channel of the pull's batch size, which
// a fold slower than the server fills, and the pull's status messages (heartbeats, request
// ends) then overflow it as "slow consumer" drops, which stall the pull or lose records until
// they are redelivered after AckWait (seconds). Here the callback hands records over through a
// channel and blocks while the worker is busy, and Consume pulls more only once the callback has
// returned, so what is buffered stays bounded (the batch, and its bytes) and nothing is dropped.
type recordFeed struct {
	nc    *nats.Conn
	cc    jetstream.ConsumeContext
	msgs  chan jetstream.Msg
	errs  chan error
	quit  chan struct{} // closed by Stop: a callback blocked on msgs gives up
	once  sync.Once
	timer *time.Timer
}

// feedBuffer is how many records a recordFeed hands over ahead of the worker.
const feedBuffer = 512

// consumeFeed starts consuming cons with opts into a recordFeed.
func consumeFeed(nc *nats.Conn, cons jetstream.Consumer, opts ...jetstream.PullConsumeOpt) (*recordFeed, error) {
	f := &recordFeed{nc: nc, msgs: make(chan jetstream.Msg, feedBuffer), errs: make(chan error, 16), quit: make(chan struct{})}
	opts = append(opts, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		select {
		case f.errs <- err:
		default: // the worker has errors to handle already
		}
	}))
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case f.msgs <- m:
		case <-f.quit:
		}
	}, opts...)
	if err != nil {
		return nil, err
	}
	f.cc = cc
	return f, nil
}

// next returns the next record, waiting at most wait: nats.ErrTimeout when none came, an error
// Consume reported, or jetstream.ErrMsgIteratorClosed (nats.ErrConnectionClosed when the
// connection is closed) once the feed is stopped or drained and empty.
func (f *recordFeed) next(wait time.Duration) (jetstream.Msg, error) {
	select {
	case m := <-f.msgs: // what is buffered first
		return m, nil
	default:
	}
	if f.timer == nil {
		f.timer = time.NewTimer(wait)
	} else {
		f.timer.Reset(wait)
	}
	defer f.timer.Stop()
	select {
	case m := <-f.msgs:
		return m, nil
	case err := <-f.errs:
		return nil, err
	case <-f.cc.Closed():
		select {
		case m := <-f.msgs:
			return m, nil
		default:
		}
		if f.nc.IsClosed() {
			return nil, nats.ErrConnectionClosed
		}
		return nil, jetstream.ErrMsgIteratorClosed
	case <-f.quit: // stopped: the consume context may close only later (its server gone)
		return nil, jetstream.ErrMsgIteratorClosed
	case <-f.timer.C:
		return nil, nats.ErrTimeout
	}
}

// Stop ends the feed at once (what is buffered is dropped, and redelivered to the next owner).
func (f *recordFeed) Stop() {
	f.once.Do(func() { close(f.quit) })
	f.cc.Stop()
}

// Drain stops pulling; next hands out what was delivered, then ends.
func (f *recordFeed) Drain() { f.cc.Drain() }
