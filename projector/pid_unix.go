//go:build unix

package projector

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// processAlive reports whether a process pid exists on this host and is not a zombie (signal 0;
// EPERM: it exists). A process killed but not yet reaped by its parent still answers signal 0;
// where /proc tells its state (Linux), a zombie (Z) or dead (X) process counts as gone, so that
// an instance restarted at once after a kill -9 takes its lease over without waiting.
func processAlive(pid int) bool {
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
