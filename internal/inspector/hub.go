package inspector

import (
	"context"
	"encoding/json"
	"errors"
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

// hub fans the new entries of agentlog_sessions (one core subscription) out to the live streams.
type hub struct {
	mu   sync.Mutex
	subs map[chan sessionEvent]struct{}
}

// startHub follows agentlog_sessions for new entries until ctx ends: a core subscription on the
// bucket's key subjects wakes it (no consumer is created), and the stored entry is read with a
// get (the published one when a replica behind has none yet; delete markers are left out).
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
	keys := make(chan *nats.Msg, 256)
	prefix := wire.KVSubject(wire.SessionsBucket, "")
	sub, err := nc.Subscribe(prefix+"*", func(m *nats.Msg) {
		select {
		case keys <- m:
		default: // a burst: a live list misses a row, as a slow subscriber does
		}
	})
	if err != nil {
		return nil, err
	}
	go func() {
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-keys:
				switch m.Header.Get("KV-Operation") {
				case "DEL", "PURGE":
					continue
				}
				key := strings.TrimPrefix(m.Subject, prefix)
				value := m.Data
				gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				e, err := kv.Get(gctx, key)
				cancel()
				switch {
				case err == nil:
					value = e.Value()
				case errors.Is(err, natsjs.ErrKeyNotFound):
				default:
					log.Warn("inspector: read of a new session's metadata failed", "key", key, "err", err)
				}
				h.add(key, value)
			}
		}
	}()
	return h, nil
}

// add publishes the session of key with its header line value.
func (h *hub) add(key string, value []byte) {
	id, err := wire.IDFromToken(strings.TrimSpace(key))
	if err != nil {
		return
	}
	var v struct {
		CreatedAt     int64  `json:"createdAt"`
		ParentSession string `json:"parentSession"`
		SeedLength    *int64 `json:"seedLength"`
	}
	_ = json.Unmarshal(value, &v)
	h.publish(sessionEvent{ID: id, CreatedAt: v.CreatedAt, ParentSession: v.ParentSession, SeedLength: v.SeedLength})
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
