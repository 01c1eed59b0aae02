//go:build linux

package process

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/agentlog/agentlog/internal/checkfor"
)

// TestAliveZombie: a child killed but not yet reaped (a zombie) is not alive; a running
// one is.
func TestAliveZombie(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatal("a running child is not alive")
	}
	if !Alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 5*time.Second, 10*time.Millisecond, checkfor.Holds("a killed, unreaped child (a zombie) not alive", func() bool { return !Alive(pid) }))
}

// TestGone: a running child that started before the lease is not gone; its pid once it is dead
// is; so is this process's own pid for a lease taken before it started, and a pid whose process
// started after the lease was taken (a pid reused).
func TestGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	now := time.Now()
	if Gone(pid, now) {
		t.Fatal("a running child, its lease taken after it started, is gone")
	}
	if !Gone(pid, now.Add(-time.Hour)) {
		t.Fatal("a pid whose process started after the lease was taken is not gone")
	}
	if Gone(os.Getpid(), now) {
		t.Fatal("this process, for a lease it took, is gone")
	}
	if !Gone(os.Getpid(), selfStart.Add(-time.Minute)) {
		t.Fatal("this process's pid, for a lease taken before it started, is not gone")
	}
	if Gone(0, now) || Gone(-1, now) {
		t.Fatal("pid <= 0 is gone")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	checkfor.Check(t, 5*time.Second, 10*time.Millisecond, checkfor.Holds("a killed child gone", func() bool { return Gone(pid, now) }))
}
