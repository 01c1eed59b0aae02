package inspector

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// sessionEvent is a session that appeared (or whose header changed) in agentlog_sessions.
type sessionEvent struct {
	ID            string
	CreatedAt     int64
	ParentSession string
	SeedLength    *int64
}

// hub fans the updates of one watch of agentlog_sessions out to the live streams.
type hub struct {
	mu   sync.Mutex
	subs map[chan sessionEvent]struct{}
}

// startHub watches agentlog_sessions for new entries (updates only) until ctx ends; a watch that
// ends is restarted.
func startHub(ctx context.Context, nc *nats.Conn, domain string, log *slog.Logger) (*hub, error) {
	js, err := store.NewJetStream(nc, domain)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, wire.SessionsBucket)
	if err != nil {
		return nil, err
	}
	h := &hub{subs: map[chan sessionEvent]struct{}{}}
	go func() {
		for ctx.Err() == nil {
			w, err := kv.WatchAll(ctx, natsjs.UpdatesOnly(), natsjs.IgnoreDeletes())
			if err != nil {
				log.Warn("inspector: watch of KV bucket "+wire.SessionsBucket+" failed; retrying", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Second):
				}
				continue
			}
			h.pump(ctx, w)
			_ = w.Stop()
		}
	}()
	return h, nil
}

func (h *hub) pump(ctx context.Context, w natsjs.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil || e.Operation() != natsjs.KeyValuePut {
				continue
			}
			id, err := wire.IDFromToken(strings.TrimSpace(e.Key()))
			if err != nil {
				continue
			}
			var v struct {
				CreatedAt     int64  `json:"createdAt"`
				ParentSession string `json:"parentSession"`
				SeedLength    *int64 `json:"seedLength"`
			}
			_ = json.Unmarshal(e.Value(), &v)
			h.publish(sessionEvent{ID: id, CreatedAt: v.CreatedAt, ParentSession: v.ParentSession, SeedLength: v.SeedLength})
		}
	}
}

// publish hands ev to every subscriber that has room (a slow one misses it, never blocks others).
func (h *hub) publish(ev sessionEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// subscribe returns a channel of new sessions and its cancel function.
func (h *hub) subscribe() (<-chan sessionEvent, func()) {
	ch := make(chan sessionEvent, 64)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}
