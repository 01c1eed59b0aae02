package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/natsdev"
	"github.com/agentlog/agentlog/session"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go"
)

// The helper process of TestKillBetweenBlobAndRecord: with AGENTLOG_TEST_KILL_URL set, it holds a
// writer lease of session "killed" (TTL 1 s) as a writer does, and appends a window with an
// offloaded event; once the blob is stored it writes the file AGENTLOG_TEST_KILL_MARK and waits
// there, before the record, to be killed.
func TestHelperAppendKilledAfterBlob(t *testing.T) {
	url := os.Getenv("AGENTLOG_TEST_KILL_URL")
	if url == "" {
		t.Skip("helper process of TestKillBetweenBlobAndRecord")
	}
	_, js, err := natsdev.Connect(url, nats.Name("killed-writer"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	s, err := Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionOf(s, "killed").AcquireLease(ctx, Lease{Writer: "helper", PID: os.Getpid()}, MinLeaseTTL, false); err != nil {
		t.Fatal(err)
	}
	testHookBlobsWritten = func(string, []wire.BlobRef) {
		if err := os.WriteFile(os.Getenv("AGENTLOG_TEST_KILL_MARK"), nil, 0o600); err != nil {
			t.Error(err)
		}
		select {} // killed here
	}
	_, err = sessionOf(s, "killed").Append(ctx, 0, killWindow(t), WithMsgID("helper.killed.0"))
	t.Fatalf("Append returned (%v); the process should have been killed before the record", err)
}

// killWindow is the window the helper appends: small events and one of 200 KB (records of 4 KiB).
func killWindow(t testing.TB) []session.Event {
	return append(evs(0, 2, "small"), sizedEvent(t, 2, 200_000))
}

// TestKillBetweenBlobAndRecord: a writer killed (SIGKILL) after storing an event's blob and before
// its record leaves nothing half-visible: the session has no record, its blob is an orphan, which
// CollectBlobs keeps while the writer's lease is live and removes once it has expired. The same
// window appended again is stored whole.
func TestKillBetweenBlobAndRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a helper process")
	}
	dir := t.TempDir()
	srv, err := natsdev.RunServer(natsdev.ServerOptions{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	_, js, err := natsdev.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	s, err := Provision(ctx, js, Config{MaxMsgSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(dir, "blob-written")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppendKilledAfterBlob$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTLOG_TEST_KILL_URL="+srv.ClientURL(), "AGENTLOG_TEST_KILL_MARK="+mark)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // when the test fails before its kill
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	checkfor.Check(t, time.Minute, 10*time.Millisecond, func() error {
		_, err := os.Stat(mark)
		if err != nil {
			select {
			case err := <-exited:
				t.Fatalf("the helper exited before storing the blob: %v", err)
			default:
			}
		}
		return err
	})
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-exited

	// Nothing half-visible: no record, no events; the blob is there, unreferenced.
	got, last, err := readAll(ctx, sessionOf(s, "killed"))
	if err != nil || len(got) != 0 || last != 0 {
		t.Fatalf("after the kill: %d events, last %d, %v; want none", len(got), last, err)
	}
	objs := blobList(t, s)
	if len(objs) != 1 {
		t.Fatalf("after the kill: %d blobs (%v), want the orphan", len(objs), objs)
	}
	// Kept while the killed writer's lease is live (it might have been only slow), collected after.
	if c, err := s.CollectBlobs(ctx, 0); err != nil || c.Live != 1 || len(c.Removed) != 0 {
		t.Fatalf("CollectBlobs with the writer's lease live: %+v, %v", c, err)
	}
	checkfor.Check(t, time.Minute, 100*time.Millisecond, func() error {
		if _, _, err := sessionOf(s, "killed").Lease(ctx); !errors.Is(err, ErrNoLease) {
			return fmt.Errorf("the killed writer's lease did not expire: %v", err)
		}
		return nil
	})
	if c, err := s.CollectBlobs(ctx, 0); err != nil || len(c.Removed) != 1 || c.Removed[0] != objs[0] {
		t.Fatalf("CollectBlobs after the lease expired: %+v, %v", c, err)
	}
	// A new writer appends the same window: stored whole, read back exactly.
	window := killWindow(t)
	if _, err := sessionOf(s, "killed").Append(ctx, 0, window, WithMsgID("w2.killed.0")); err != nil {
		t.Fatal(err)
	}
	got, _, err = readAll(ctx, sessionOf(s, "killed"))
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, got, window)
}
