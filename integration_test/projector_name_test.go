package integration_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
	"github.com/agentlog/agentlog/internal/process"
)

// TestProjectorRestartTakesLeaseAtOnce: a projector killed (kill -9) and restarted 0.5 s later
// under its name on the same host takes its lease over at once, even while the killed process is
// not yet reaped by its parent (a zombie), rather than waiting for the lease to expire.
func TestProjectorRestartTakesLeaseAtOnce(t *testing.T) {
	d := startOwnDev(t)
	start := func() (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(binPath, "--nats", d.url, "projector", "--name", "it-restart")
		var stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &stderr
	}
	waitFor := func(out *syncBuffer, want string, within time.Duration) bool {
		return checkfor.Err(within, 20*time.Millisecond, checkfor.Holds(want, func() bool { return strings.Contains(out.String(), want) })) == nil
	}
	first, out1 := start()
	if !waitFor(out1, "partitions assigned", 30*time.Second) {
		_ = first.Process.Kill()
		_ = first.Wait()
		t.Fatalf("the first projector assigned no partitions within 30s:\n%s", out1.String())
	}
	if err := first.Process.Kill(); err != nil { // not reaped until the end: a zombie meanwhile
		t.Fatal(err)
	}
	defer func() { _ = first.Wait() }()
	checkfor.Check(t, 10*time.Second, 10*time.Millisecond, checkfor.Holds("the first projector dead", func() bool { return !process.Alive(first.Process.Pid) }))
	began := time.Now()
	second, out2 := start()
	defer func() {
		_ = second.Process.Signal(os.Interrupt)
		_ = second.Wait()
	}()
	if !waitFor(out2, "took over the lease of a dead process", 10*time.Second) {
		t.Fatalf("the restarted projector did not take over the dead process's lease:\n%s", out2.String())
	}
	if took := time.Since(began); strings.Contains(out2.String(), "lease is held") || took > 1200*time.Millisecond {
		t.Fatalf("the restarted projector waited (%s) for its own dead process's lease:\n%s", took, out2.String())
	}
}
