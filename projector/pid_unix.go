//go:build unix

package projector

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process pid exists on this host (signal 0; EPERM: it exists).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
