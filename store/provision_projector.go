package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/agentlog/agentlog/wire"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// What Provision creates for the projectors (package projector uses the same names and settings):
// a durable consumer per partition and the members bucket. A projector only uses them (info, pull,
// unpin, ack, its lease); it creates none, so that its credential needs no right to create a
// consumer or a stream (deploy/SECURITY.md).
const (
	ProjectorConsumerPrefix = "agentlog-projector"         // partition p's consumer is <prefix>-<p>
	ProjectorPriorityGroup  = "projector"                  // the pinned priority group of the partition consumers
	ProjectorMembersBucket  = "agentlog_projector_members" // instance leases
	ProjectorMemberTTL      = 3 * time.Second              // the members bucket's max age: an instance's lease
	ProjectorAckWait        = 4 * time.Second              // redelivery of a dead instance's unacked records
	ProjectorPinnedTTL      = 4 * time.Second              // a dead pinned client loses its pin after this
	ProjectorMaxAckPending  = 8000                         // records in flight per partition
)

// ErrProjectorNotProvisioned is returned (wrapped) by CheckProjector when a partition consumer or
// the members bucket is missing or is not what Provision makes.
var ErrProjectorNotProvisioned = errors.New("the projector's consumers and members bucket are not provisioned (run `agentlog provision`)")

// ProjectorConsumer is the name of the projectors' durable consumer of partition p.
func ProjectorConsumer(p int) string { return ProjectorConsumerPrefix + "-" + strconv.Itoa(p) }

// ProjectorConsumerConfig is the config of partition p's consumer on a stream of partitions
// partitions.
func ProjectorConsumerConfig(p, partitions int) natsjs.ConsumerConfig {
	return natsjs.ConsumerConfig{
		Durable:        ProjectorConsumer(p),
		Description:    fmt.Sprintf("agentlog projector: partition %d of %d", p, partitions),
		FilterSubject:  wire.PartitionSubject(p),
		AckPolicy:      natsjs.AckExplicitPolicy,
		DeliverPolicy:  natsjs.DeliverAllPolicy,
		AckWait:        ProjectorAckWait,
		MaxAckPending:  ProjectorMaxAckPending,
		PriorityPolicy: natsjs.PriorityPolicyPinned,
		PriorityGroups: []string{ProjectorPriorityGroup},
		PinnedTTL:      ProjectorPinnedTTL,
	}
}

// ensureProjector creates (or updates) the partition consumers and creates the members bucket
// (file storage, the stream's replicas; one of an older version in memory storage is replaced).
func (s *Store) ensureProjector(ctx context.Context, replicas int) error {
	for p := range s.partitions {
		cfg := ProjectorConsumerConfig(p, s.partitions)
		if _, err := s.js.CreateOrUpdateConsumer(ctx, wire.StreamName, cfg); err != nil {
			return fmt.Errorf("create the projector's consumer %s on stream %s: %w", cfg.Durable, wire.StreamName, err)
		}
	}
	cfg := natsjs.KeyValueConfig{
		Bucket:      ProjectorMembersBucket,
		Description: "agentlog projector instances (leases; partitions are divided among the live ones)",
		History:     1,
		TTL:         ProjectorMemberTTL,
		Storage:     natsjs.FileStorage,
		Replicas:    max(replicas, 1),
	}
	if st, err := s.js.Stream(ctx, "KV_"+ProjectorMembersBucket); err == nil && st.CachedInfo().Config.Storage == natsjs.MemoryStorage {
		// Leases are rewritten every MemberTTL/4 by every live instance: nothing is lost.
		if err := s.js.DeleteKeyValue(ctx, ProjectorMembersBucket); err != nil && !errors.Is(err, natsjs.ErrBucketNotFound) {
			return fmt.Errorf("replace the memory-storage KV bucket %s: %w", ProjectorMembersBucket, err)
		}
	}
	_, err := ensureKV(ctx, s.js, cfg, func(c natsjs.StreamConfig) error {
		if c.MaxAge != ProjectorMemberTTL {
			return incompatible("KV bucket "+ProjectorMembersBucket, "ttl (the member lease)", c.MaxAge, ProjectorMemberTTL)
		}
		return nil
	})
	return err
}

// CheckProjector checks that partition p's consumer exists with the settings Provision gives it,
// and returns it (a CONSUMER.INFO request). Missing or different: a wrapped
// ErrProjectorNotProvisioned saying to run `agentlog provision` (missing: natsjs.ErrConsumerNotFound too).
func (s *Store) CheckProjector(ctx context.Context, p int) (natsjs.Consumer, error) {
	name := ProjectorConsumer(p)
	cons, err := s.js.Consumer(ctx, wire.StreamName, name)
	if errors.Is(err, natsjs.ErrConsumerNotFound) {
		return nil, fmt.Errorf("%w: consumer %s of stream %s does not exist (%w)", ErrProjectorNotProvisioned, name, wire.StreamName, natsjs.ErrConsumerNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("look up the projector's consumer %s on stream %s: %w", name, wire.StreamName, err)
	}
	c := cons.CachedInfo().Config
	want := ProjectorConsumerConfig(p, s.partitions)
	if c.FilterSubject != want.FilterSubject || c.AckPolicy != want.AckPolicy || c.PriorityPolicy != want.PriorityPolicy ||
		len(c.PriorityGroups) != 1 || c.PriorityGroups[0] != ProjectorPriorityGroup {
		return nil, fmt.Errorf("%w: consumer %s of stream %s has filter %q, ack policy %s, priority %v %v; want %q, %s, %v [%s]", ErrProjectorNotProvisioned,
			name, wire.StreamName, c.FilterSubject, c.AckPolicy, c.PriorityPolicy, c.PriorityGroups, want.FilterSubject, want.AckPolicy, want.PriorityPolicy, ProjectorPriorityGroup)
	}
	return cons, nil
}

// ProjectorMembers opens the members bucket (a STREAM.INFO request). Missing: a wrapped
// ErrProjectorNotProvisioned saying to run `agentlog provision`, and natsjs.ErrBucketNotFound.
func (s *Store) ProjectorMembers(ctx context.Context) (natsjs.KeyValue, error) {
	kv, err := s.js.KeyValue(ctx, ProjectorMembersBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: KV bucket %s does not exist (%w)", ErrProjectorNotProvisioned, ProjectorMembersBucket, natsjs.ErrBucketNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s: %w", ProjectorMembersBucket, err)
	}
	return kv, nil
}

// ProjectorMemberKeys lists the keys of the members bucket's live entries (one batched direct
// get, multi_last: no consumer), sorted.
func (s *Store) ProjectorMemberKeys(ctx context.Context) ([]string, error) {
	prefix := wire.KVSubject(ProjectorMembersBucket, "")
	msgs, err := s.lastMsgs(ctx, "KV_"+ProjectorMembersBucket, []string{prefix + ">"})
	if err != nil {
		return nil, fmt.Errorf("list the keys of KV bucket %s: %w", ProjectorMembersBucket, err)
	}
	keys := make([]string, 0, len(msgs))
	for _, m := range msgs {
		if !kvDeleted(m.Header) {
			keys = append(keys, m.Subject[len(prefix):])
		}
	}
	slices.Sort(keys)
	return keys, nil
}
