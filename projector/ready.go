package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
)

// Ready reports why the instance cannot serve (nil: it can): not started or stopped, not
// connected to NATS, its member lease not held, or a consumer of an owned partition unreadable.
func (p *Projector) Ready(ctx context.Context) error {
	p.mu.Lock()
	started, stopped := p.started, p.stopped
	p.mu.Unlock()
	switch {
	case !started:
		return errors.New("projector not started")
	case stopped:
		return errors.New("projector stopped")
	case p.nc.Status() != nats.CONNECTED:
		return fmt.Errorf("not connected to NATS (%s)", p.nc.Status())
	}
	e, err := p.members.Get(ctx, p.memberKey)
	if err != nil {
		return fmt.Errorf("member lease %s in %s: %w", p.memberKey, MembersBucket, err)
	}
	var m MemberValue
	if json.Unmarshal(e.Value(), &m) != nil || m.StartedAt != p.startedAt.UnixMilli() {
		return fmt.Errorf("member lease %s in %s is held by another process", p.memberKey, MembersBucket)
	}
	for _, part := range p.Owned() {
		if _, err := p.store.JetStream().Consumer(ctx, wire.StreamName, PartitionConsumer(part)); err != nil {
			return fmt.Errorf("partition %d: consumer %s: %w", part, PartitionConsumer(part), err)
		}
	}
	return nil
}
