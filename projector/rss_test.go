package projector

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/storetest"
	"github.com/agentlog/agentlog/wire"
)

// TestRSSManySessions measures the resident memory of one projector process that has folded N
// sessions (AGENTLOG_RSS_SESSIONS=N; skipped without it). Each session is one record of 3 events.
// The process keeps at most DefaultCacheSessions session states in memory; the rest lives in KV.
//
//	AGENTLOG_RSS_SESSIONS=100000 go test -run TestRSSManySessions -v -timeout 30m ./projector
func TestRSSManySessions(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AGENTLOG_RSS_SESSIONS"))
	if n <= 0 {
		t.Skip("set AGENTLOG_RSS_SESSIONS=N to measure the projector's RSS with N sessions")
	}
	e := newEnvP(t, 16)
	events := toolSession()[0:3]
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if _, err := storetest.Session(e.store, fmt.Sprintf("rss-%06d", i)).Append(context.Background(), 0, events); err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("wrote %d sessions in %v", n, time.Since(start).Round(time.Millisecond))
	cmd := e.startProcess("rss")
	start = time.Now()
	checkfor.Check(t, 90*time.Second, 500*time.Millisecond, func() error {
		for part := 0; part < e.store.Partitions(); part++ {
			cons, err := e.store.JetStream().Consumer(ctx(t), wire.StreamName, PartitionConsumer(part))
			if err != nil {
				return err
			}
			ci, err := cons.Info(ctx(t))
			if err != nil {
				return err
			}
			if ci.NumPending != 0 || ci.NumAckPending != 0 || ci.Delivered.Consumer == 0 {
				return fmt.Errorf("partition %d: %d pending, %d ack pending, %d delivered", part, ci.NumPending, ci.NumAckPending, ci.Delivered.Consumer)
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var rss, hwm string
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwm = strings.TrimSpace(v)
		}
	}
	t.Logf("projector process folded %d sessions (%d events, 7 units each) in %v (%.0f events/s); RSS %s, peak RSS %s",
		n, 3*n, elapsed.Round(time.Millisecond), float64(3*n)/elapsed.Seconds(), rss, hwm)
	// Every session is projected (spot check across the range).
	for _, i := range []int{0, n / 2, n - 1} {
		if _, err := queryMessages(ctx(t), e.nc, fmt.Sprintf("rss-%06d", i), 2); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
}
