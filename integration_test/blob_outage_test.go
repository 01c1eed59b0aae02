package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/publisher"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
)

// TestBlobUploadAcrossServerRestart: an event larger than a record is being uploaded (as a blob)
// when the server goes down; it comes back a moment later. The upload is retried within the same
// retry budget as a record, so Flush returns nil, and what it says is what landed: the event is
// in the log when Flush returns (not only after a later Close).
func TestBlobUploadAcrossServerRestart(t *testing.T) {
	srv := startOwnServer(t)
	_, st := connectStore(t, srv.URL(), &store.Config{})
	proxy := newFaultProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.port))
	proxy.SetDelay(2 * time.Millisecond) // an upload of 8 MiB takes about half a second
	ncA, stA := connectStore(t, proxy.URL(), nil)
	pa := newPublisher(t, stA, ncA, publisher.Options{WriterID: "A", Logger: quietLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "blob-outage"
	wa, err := pa.Create(ctx, session.Header{ID: id, CreatedAt: 1785000000000})
	if err != nil {
		t.Fatal(err)
	}
	evs := chunkEvents("A", 0, 3)
	evs[2].Data = []byte(fmt.Sprintf(`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"%s"}}`, strings.Repeat("x", 8<<20)))
	for _, ev := range evs {
		if err := wa.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	flushed := make(chan error, 1)
	go func() { flushed <- wa.Flush(ctx) }()
	checkfor.Check(t, 60*time.Second, 10*time.Millisecond, checkfor.Holds("the upload started", func() bool {
		s, err := st.JetStream().Stream(ctx, wire.BlobStream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs > 0
	}))
	srv.stop()
	srv.start()
	err = <-flushed
	got, _, rerr := storetest.ReadAll(ctx, storetest.Session(st, id))
	if rerr != nil && err == nil {
		t.Fatalf("Flush returned nil but the log does not read: %v", rerr)
	}
	if err != nil {
		t.Fatalf("Flush across a server restart during a blob upload: %v (%d events stored now)", err, len(got))
	}
	if len(got) != 3 || len(got[2].Data) != len(evs[2].Data) {
		t.Fatalf("Flush returned nil with %d events stored, want 3 with the large one", len(got))
	}
	if err := wa.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
