//go:build linux

package projector

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestProcessAliveZombie: a child killed but not yet reaped (a zombie) is not alive; a running
// one is.
func TestProcessAliveZombie(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep:", err)
	}
	defer func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if !processAlive(pid) {
		t.Fatal("a running child is not alive")
	}
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatal("a killed, unreaped child (a zombie) is still alive after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
