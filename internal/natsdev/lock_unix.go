//go:build unix

package natsdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DataDirLockFile is the file RunServer locks inside its data directory, so that two embedded
// servers never share one JetStream store (each would see only its own writes, and one's
// acknowledged writes would be lost when the other's files win).
const DataDirLockFile = "agentlog.lock"

// lockWait is how long lockDataDir waits for a lock held by someone else.
const lockWait = 2 * time.Second

// lockDataDir takes an exclusive flock (waiting at most lockWait) on dir/agentlog.lock. The lock is released
// when the returned file is closed (or the process exits).
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, DataDirLockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	// A server of this process that has just shut down releases its lock from a goroutine right
	// after WaitForShutdown returns; allow it that moment before calling the directory in use.
	deadline := time.Now().Add(lockWait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("data directory %s is in use by another agentlog server (lock %s held): %w", dir, path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}
