//go:build !unix

package raftlog

import (
	"os"
	"time"
)

// lockFile is a no-op where flock does not exist.
func lockFile(*os.File, time.Duration) (bool, error) { return true, nil }
