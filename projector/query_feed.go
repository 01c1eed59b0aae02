package projector

import (
	"context"
	"sync"
	"time"

	"github.com/agentlog/agentlog/store"
	"github.com/nats-io/nats.go/jetstream"
)

// changeFeed tells the queries waiting for minSeq that their session's messages state changed:
// one watch of every messages key (agentlog_projections "messages.*", headers only: no state is
// sent), shared by every waiting query of the service, in place of a watch (a consumer) created
// and deleted per query. A notice only says "read the key again": the waiter reads the stored
// value, so that a notice lost or late costs time (at most feedRecheck), never a wrong answer.
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

// feedRecheck is how often a waiter reads its key again without a notice (a notice lost while the
// watch was being replaced, say).
const feedRecheck = time.Second

func newChangeFeed(st *store.Store) *changeFeed {
	return &changeFeed{st: st, waiters: map[string]map[*feedWaiter]struct{}{}}
}

// start starts the watch, and keeps it going until ctx ends: a watch that ends (the server
// restarted, the consumer was lost) is replaced after a pause, and every waiter is told to read
// again, since it may have missed a change meanwhile. done is closed when it has stopped.
func (f *changeFeed) start(ctx context.Context) (done <-chan struct{}, err error) {
	w, err := f.open(ctx)
	if err != nil {
		return nil, err
	}
	c := make(chan struct{})
	go func() {
		defer close(c)
		for {
			if w != nil {
				f.watch(ctx, w)
			}
			f.notifyAll()
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			w, _ = f.open(ctx)
		}
	}()
	return c, nil
}

func (f *changeFeed) open(ctx context.Context) (jetstream.KeyWatcher, error) {
	return f.st.WatchUnit(ctx, UnitMessages, jetstream.UpdatesOnly(), jetstream.MetaOnly())
}

// watch reads w until it ends or ctx does.
func (f *changeFeed) watch(ctx context.Context, w jetstream.KeyWatcher) {
	defer func() { _ = w.Stop() }()
	prefix := UnitMessages + "."
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || len(e.Key()) <= len(prefix) {
				continue
			}
			f.notify(e.Key()[len(prefix):])
		}
	}
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

func (f *changeFeed) notifyAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.waiters {
		for w := range m {
			select {
			case w.c <- struct{}{}:
			default:
			}
		}
	}
}
