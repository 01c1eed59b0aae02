package projector

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
)

// TestStartNeedsProvisionedConsumers: a projector creates neither its partition consumers nor
// its members bucket. With one of them missing it fails at start, saying to run
// `agentlog provision`; after a provision it starts.
func TestStartNeedsProvisionedConsumers(t *testing.T) {
	e := newEnv(t)
	js := e.store.JetStream()
	start := func() error {
		nc, js, err := natsdev.Connect(e.url, nats.Name("unprovisioned"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st, err := store.Open(ctx(t), js)
		if err != nil {
			t.Fatal(err)
		}
		p := mustNew(t, st, nc, Options{Name: "unprovisioned", Logger: quietLogger()})
		err = p.Start(ctx(t))
		if err == nil {
			_ = p.Stop()
		}
		return err
	}
	if err := js.DeleteConsumer(ctx(t), wire.StreamName, PartitionConsumer(2)); err != nil {
		t.Fatal(err)
	}
	err := start()
	if !errors.Is(err, store.ErrProjectorNotProvisioned) || !strings.Contains(err.Error(), "agentlog provision") || !strings.Contains(err.Error(), PartitionConsumer(2)) {
		t.Fatalf("start without consumer %s: %v, want ErrProjectorNotProvisioned naming it and `agentlog provision`", PartitionConsumer(2), err)
	}
	if _, err := js.Consumer(ctx(t), wire.StreamName, PartitionConsumer(2)); err == nil {
		t.Fatalf("the projector created consumer %s", PartitionConsumer(2))
	}
	if _, err := store.Provision(ctx(t), js, store.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx(t), MembersBucket); err != nil {
		t.Fatal(err)
	}
	if err := start(); !errors.Is(err, store.ErrProjectorNotProvisioned) || !strings.Contains(err.Error(), MembersBucket) {
		t.Fatalf("start without the members bucket: %v, want ErrProjectorNotProvisioned naming %s", err, MembersBucket)
	}
	if _, err := js.KeyValue(ctx(t), MembersBucket); err == nil {
		t.Fatal("the projector created the members bucket")
	}
	if _, err := store.Provision(ctx(t), js, store.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := start(); err != nil {
		t.Fatalf("start after provision: %v", err)
	}
}
