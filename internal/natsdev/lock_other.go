//go:build !unix

package natsdev

import "os"

// DataDirLockFile is the file RunServer would lock inside its data directory; on this platform
// the data directory is not locked.
const DataDirLockFile = "agentlog.lock"

func lockDataDir(dir string) (*os.File, error) { return nil, nil }
