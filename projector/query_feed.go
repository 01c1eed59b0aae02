package projector

import (
	"context"
	"sync"
	"time"

	"github.com/agentlog/agentlog/store"
)

// changeFeed tells the queries waiting for minSeq that their session's messages state changed:
// one core subscription on the KV subjects of every messages key (agentlog_projections
// "messages.*"), shared by every waiting query of the service; no consumer is created. A notice
// only says "read the key again": the waiter reads the stored value, so that a notice lost or late
// costs time (at most feedRecheck), never a wrong answer.
type changeFeed struct {
	st *store.Store

	mu      sync.Mutex
	waiters map[string]map[*feedWaiter]struct{} // by session token
}

// feedWaiter is one waiting query; its channel holds at most one notice.
type feedWaiter struct {
	token string
	c     chan struct{}
}

// feedRecheck is how often a waiter reads its key again without a notice (one lost: a slow
// subscriber's, or during a reconnect).
const feedRecheck = time.Second

func newChangeFeed(st *store.Store) *changeFeed {
	return &changeFeed{st: st, waiters: map[string]map[*feedWaiter]struct{}{}}
}

// start subscribes, until ctx ends (the connection resubscribes by itself after a reconnect).
// done is closed when it has stopped.
func (f *changeFeed) start(ctx context.Context) (done <-chan struct{}, err error) {
	sub, err := f.st.SubscribeUnit(UnitMessages, f.notify)
	if err != nil {
		return nil, err
	}
	c := make(chan struct{})
	go func() {
		defer close(c)
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return c, nil
}

// add registers a waiter for session token; remove it when done.
func (f *changeFeed) add(token string) *feedWaiter {
	w := &feedWaiter{token: token, c: make(chan struct{}, 1)}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.waiters[token]
	if m == nil {
		m = map[*feedWaiter]struct{}{}
		f.waiters[token] = m
	}
	m[w] = struct{}{}
	return w
}

func (f *changeFeed) remove(w *feedWaiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.waiters[w.token]; m != nil {
		delete(m, w)
		if len(m) == 0 {
			delete(f.waiters, w.token)
		}
	}
}

func (f *changeFeed) notify(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.waiters[token] {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
}
