//go:build !unix

package process

import "time"

// Alive cannot tell here: the process is taken as alive (its lease is waited for).
func Alive(int) bool { return true }

// startTime cannot tell here.
func startTime(int) (time.Time, bool) { return time.Time{}, false }
