package process

import (
	"os"
	"time"
)

// selfStart is when this process started (its package initialisation: within milliseconds).
var selfStart = time.Now()

// startSlack is how far apart two start times must be to tell two processes apart: /proc gives a
// process's start to the clock tick, the boot time to the second.
const startSlack = 2 * time.Second

// Host returns the host name leases carry ("" when unknown).
func Host() string {
	h, _ := os.Hostname()
	return h
}

// Gone reports whether process pid of this host, which took a lease at since, has ended: there is
// no such process (or it is a zombie), pid is now another process's (one that started after
// since), or pid is this process's own but this process started after since (a restart that got
// the same pid, as pid 1 in a container). A pid ≤ 0 is never gone; a process that cannot be told
// apart (no /proc outside Linux: only signal 0) is taken as alive.
func Gone(pid int, since time.Time) bool {
	switch {
	case pid <= 0:
		return false
	case pid == os.Getpid():
		return selfStart.Sub(since) > startSlack
	case !Alive(pid):
		return true
	}
	start, ok := startTime(pid)
	return ok && start.Sub(since) > startSlack
}
