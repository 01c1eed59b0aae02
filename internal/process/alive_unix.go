//go:build unix

package process

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Alive reports whether a process pid exists on this host and is not a zombie (signal 0; EPERM:
// it exists). A process killed but not yet reaped by its parent still answers signal 0; where
// /proc tells its state (Linux), a zombie (Z) or dead (X) process counts as gone, so that a
// process restarted at once after a kill -9 takes its lease over without waiting.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, rerr := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if rerr != nil {
		return true // no /proc: signal 0 is all there is
	}
	// "pid (comm) S ...": comm may hold any byte, the state follows the last ')'.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		switch stat[i+2] {
		case 'Z', 'X', 'x':
			return false
		}
	}
	return true
}

// startTime returns when process pid started, from /proc (Linux): its start in clock ticks since
// boot (field 22 of /proc/<pid>/stat, at 100 ticks a second) plus the boot time (btime of
// /proc/stat). ok is false where /proc does not tell.
func startTime(pid int) (time.Time, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return time.Time{}, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, false
	}
	fields := strings.Fields(string(stat[i+1:])) // from field 3, the state
	if len(fields) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	boot, ok := bootTime()
	if !ok {
		return time.Time{}, false
	}
	return boot.Add(time.Duration(ticks) * (time.Second / clockTicks)), true
}

// clockTicks is USER_HZ, the unit of /proc's process times: 100 on Linux's architectures.
const clockTicks = 100

// bootTime is the host's boot time (btime in /proc/stat, in seconds).
func bootTime() (time.Time, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.Unix(sec, 0), true
		}
	}
	return time.Time{}, false
}
