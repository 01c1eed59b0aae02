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
	sub, err := f.st.SubscribeUnit(UnitMessages, f.published)
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

// feedEchoes are the delays after a wake-up at which its waiters are told again: the wake-up is the
// publish, which a waiter may see before the bucket has stored it (or before the replica that
// answers its get has), so a read right at the wake-up can still find the old value.
var feedEchoes = []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond}

// published is the subscription's callback: it tells token's waiters now and at each feedEchoes
// delay (none when nobody waits for token).
func (f *changeFeed) published(token string) {
	if !f.notify(token) {
		return
	}
	for _, d := range feedEchoes {
		time.AfterFunc(d, func() { f.notify(token) })
	}
}

// notify tells token's waiters to read their key again; it reports whether there were any.
func (f *changeFeed) notify(token string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.waiters[token] {
		select {
		case w.c <- struct{}{}:
		default:
		}
	}
	return len(f.waiters[token]) > 0
}
